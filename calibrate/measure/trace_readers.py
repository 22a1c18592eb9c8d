"""Trace exports read into :class:`Span` s: OTLP JSON, Jaeger's JSON and Zipkin v2 JSON, told apart by content.

- OTLP: the OpenTelemetry collector's file exporter, one ``{"resourceSpans": [...]}`` object per line (a single
  object over several lines is read too; so is Jaeger v2's query API v3 answer, that object under ``result``). A last line cut short (the collector stopped mid-write) is dropped and
  reported; any other bad line is an error naming the file and the line.
- Jaeger: the UI's / API's export, ``{"data": [{"traceID", "spans": [...], "processes": {...}}]}``.
- Zipkin v2: a list of spans. A server span sharing its client's id (``shared: true``, Envoy's default) gets an
  id of its own under that client span, so both halves of the call stay in the tree.

Every problem is a one-line ModelError naming the file (and the span or line), or a repair counted in the result.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from meshsim.calibrate.measure.trace_spans import Span, make_span, normal_id
from meshsim.errors import ModelError
from meshsim.yamlio import input_file_problem

MAX_TRACE_FILE_BYTES = 1024 * 1024 * 1024  # a day of a busy collector's file export is far less
NS, US = 1e-9, 1e-6


@dataclass(frozen=True)
class TraceFile:
    """The spans of one file, its format and what had to be repaired while reading it."""

    path: str
    format: str
    spans: tuple[Span, ...]
    repairs: tuple[str, ...] = ()


def _need(item: Any, key: str, where: str) -> Any:
    if not isinstance(item, Mapping) or key not in item:
        raise ModelError(f"{where}: missing {key!r}")
    return item[key]


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ModelError(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def _optional(value: Any) -> Mapping[str, Any]:
    """An optional mapping (tags, endpoints): anything else counts as absent."""
    return value if isinstance(value, Mapping) else {}


def _number(value: Any, where: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise ModelError(f"{where}: not a number: {value!r}") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise ModelError(f"{where}: not a finite number: {value!r}")
    return number


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ModelError(f"{where}: expected a list, got {type(value).__name__}")
    return value


# --- OTLP --------------------------------------------------------------------------------------------------------

def _otlp_value(value: Any) -> object:
    if not isinstance(value, Mapping) or not value:
        return None
    return next(iter(value.values()))  # {"stringValue": "x"}, {"intValue": "12"}, ...


def _otlp_tags(attributes: Any) -> dict[str, object]:
    if not isinstance(attributes, list):
        return {}
    return {str(a.get("key")): _otlp_value(a.get("value")) for a in attributes if isinstance(a, Mapping)}


def _otlp_spans(document: Any, path: str, where: str) -> list[Span]:
    spans = []
    for r, resource in enumerate(_list(_need(document, "resourceSpans", where), f"{where} resourceSpans")):
        here = f"{where} resourceSpans[{r}]"
        resource = _mapping(resource, here)
        tags = _otlp_tags(_optional(resource.get("resource")).get("attributes"))
        service = str(tags.get("service.name") or "")
        scopes = resource.get("scopeSpans", resource.get("instrumentationLibrarySpans", []))
        for s, scope in enumerate(_list(scopes, f"{here} scopeSpans")):
            for i, raw in enumerate(_list(_need(scope, "spans", f"{here} scopeSpans[{s}]"), f"{here} spans")):
                at = f"{here} scopeSpans[{s}] spans[{i}]"
                raw = _mapping(raw, at)
                span_tags = {**tags, **_otlp_tags(raw.get("attributes"))}
                times = (_number(_need(raw, "startTimeUnixNano", at), at) * NS,
                         _number(_need(raw, "endTimeUnixNano", at), at) * NS)
                ids = (_need(raw, "traceId", at), _need(raw, "spanId", at), raw.get("parentSpanId"))
                spans.append(make_span(path, ids, service or "unknown", str(raw.get("name", "")), raw.get("kind"),
                                       times, span_tags))
    return spans


def read_otlp(text: str, path: str) -> TraceFile:
    """One OTLP export object per line; a last line cut short is dropped and said."""
    lines = text.splitlines()
    spans: list[Span] = []
    repairs: list[str] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            document = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines) and not text.endswith("\n") and number > 1:
                repairs.append(f"{path}: last line cut short (truncated export), dropped")
                break
            raise ModelError(f"{path}: line {number}: not valid JSON ({exc.msg}, column {exc.colno})") from None
        if not isinstance(document, Mapping) or "resourceSpans" not in document:
            raise ModelError(f"{path}: line {number}: not an OTLP export line (mixed formats in one file?)")
        spans += _otlp_spans(document, path, f"{path}: line {number}:")
    return TraceFile(path, "otlp", tuple(spans), tuple(repairs))


# --- Jaeger ------------------------------------------------------------------------------------------------------

def _jaeger_tags(tags: Any) -> dict[str, object]:
    if not isinstance(tags, list):
        return {}
    return {str(t.get("key")): t.get("value") for t in tags if isinstance(t, Mapping)}


def _jaeger_parent(raw: Mapping[str, Any]) -> object:
    refs = raw.get("references")
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, Mapping) and ref.get("refType", "CHILD_OF") in ("CHILD_OF", "FOLLOWS_FROM"):
            return ref.get("spanID")
    return raw.get("parentSpanID")


def _jaeger_trace(trace: Any, path: str, where: str) -> list[Span]:
    processes = _need(trace, "processes", where)
    spans = []
    for i, raw in enumerate(_list(_need(trace, "spans", where), f"{where} spans")):
        at = f"{where} spans[{i}]"
        raw = _mapping(raw, at)
        process = _optional(processes).get(str(_need(raw, "processID", at)))
        if not isinstance(process, Mapping):
            raise ModelError(f"{at}: processID {raw.get('processID')!r} not in the trace's processes")
        tags = {**_jaeger_tags(process.get("tags")), **_jaeger_tags(raw.get("tags"))}
        start = _number(_need(raw, "startTime", at), at)
        times = (start * US, (start + _number(_need(raw, "duration", at), at)) * US)
        ids = (_need(raw, "traceID", at), _need(raw, "spanID", at), _jaeger_parent(raw))
        spans.append(make_span(path, ids, str(process.get("serviceName") or "unknown"),
                               str(raw.get("operationName", "")), tags.get("span.kind"), times, tags))
    return spans


def read_jaeger(document: Any, path: str) -> TraceFile:
    spans: list[Span] = []
    for t, trace in enumerate(_list(document["data"], f"{path}: data")):
        spans += _jaeger_trace(trace, path, f"{path}: data[{t}]")
    return TraceFile(path, "jaeger", tuple(spans))


# --- Zipkin v2 ---------------------------------------------------------------------------------------------------

def _zipkin_span(raw: Any, path: str, at: str) -> Span:
    start = _number(_need(raw, "timestamp", at), at)  # microseconds: summed before scaling, so that equal
    times = (start * US, (start + _number(_need(raw, "duration", at), at)) * US)  # instants stay equal floats
    tags = _optional(raw.get("tags"))
    service = str(_optional(raw.get("localEndpoint")).get("serviceName") or "unknown")
    ids = (_need(raw, "traceId", at), _need(raw, "id", at), raw.get("parentId"))
    return make_span(path, ids, service, str(raw.get("name", "")), raw.get("kind"), times, tags)


def read_zipkin(document: list[Any], path: str) -> TraceFile:
    spans = [_zipkin_span(raw, path, f"{path}: span {i}") for i, raw in enumerate(document)]
    shared = {(s.trace_id, s.span_id) for s, raw in zip(spans, document) if not raw.get("shared")}
    out = []
    for span, raw in zip(spans, document):
        if raw.get("shared") and (span.trace_id, span.span_id) in shared:  # the server half of a shared span
            span = _with_ids(span, span.span_id + "-server", span.span_id)
        out.append(span)
    return TraceFile(path, "zipkin", tuple(out))


def _with_ids(span: Span, span_id: str, parent_id: str) -> Span:
    return replace(span, span_id=span_id, parent_id=normal_id(parent_id, 16))


# --- detection ---------------------------------------------------------------------------------------------------

def _read_text(path: Path) -> str:
    problem = input_file_problem(path)
    if problem:
        raise ModelError(f"{path}: {problem}")
    if path.stat().st_size > MAX_TRACE_FILE_BYTES:
        raise ModelError(f"{path}: larger than {MAX_TRACE_FILE_BYTES >> 20} MiB; split the export")
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ModelError(f"{path}: not UTF-8 text (byte {exc.start}); a trace export is JSON") from None
    except OSError as exc:
        raise ModelError(f"{path}: cannot read ({exc.strerror or exc})") from None


def _whole_document(document: Any, path: str) -> TraceFile:
    if isinstance(document, list):
        if document and not all(isinstance(s, Mapping) and "traceId" in s for s in document):
            raise ModelError(f"{path}: a JSON list, but not of Zipkin v2 spans (each needs traceId)")
        return read_zipkin(document, path)
    if isinstance(document, Mapping):
        if isinstance(document.get("result"), Mapping) and "resourceSpans" in document["result"]:
            document = document["result"]  # Jaeger v2's query API v3 (/api/v3/traces) wraps its OTLP answer
        if "resourceSpans" in document:
            return TraceFile(path, "otlp", tuple(_otlp_spans(document, path, f"{path}:")))
        if "data" in document:
            return read_jaeger(document, path)
    keys = ", ".join(map(str, list(document)[:5])) if isinstance(document, Mapping) else type(document).__name__
    raise ModelError(f"{path}: not an OTLP, Jaeger or Zipkin v2 export (top level: {keys})")


def read_trace_file(path: str | Path) -> TraceFile:
    """The spans of one export, its format found from its content."""
    path = Path(path)
    text = _read_text(path)
    if not text.strip():
        raise ModelError(f"{path}: empty file, no spans")
    try:
        return _whole_document(json.loads(text), str(path))
    except json.JSONDecodeError as exc:
        if text.lstrip().startswith("{") and exc.lineno > 1 or exc.msg == "Extra data":
            return read_otlp(text, str(path))  # JSON lines: the collector's file exporter
        raise ModelError(f"{path}: not valid JSON, truncated? ({exc.msg} at line {exc.lineno} column {exc.colno})") \
            from None
