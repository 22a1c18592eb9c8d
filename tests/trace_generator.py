"""Traces of a known call graph, written as OTLP JSON lines, Jaeger JSON or Zipkin v2 JSON (for the trace tests).

Each service spends a lognormal own time, split before and after its calls; calls go out in stages (a stage of
several callees runs them at once); a ``choose`` stage calls one of its callees at random. Every call has a client
span on the caller and a server span on the callee, a random one-way network delay apart; optional Envoy sidecar spans
(outbound on the caller, inbound on the callee) sit between them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

HOP_S, HOP_SIGMA = 0.0002, 0.3  # one-way network delay of a call: lognormal median and sigma


@dataclass(frozen=True)
class GenService:
    median_ms: float
    sigma: float
    stages: tuple[tuple[str, ...], ...] = ()  # callees, one tuple per stage (several: parallel)
    choose: frozenset[int] = frozenset()  # indices of stages that pick one callee at random
    request_bytes: int = 300
    response_bytes: int = 900


@dataclass
class _Trace:
    rng: np.random.Generator
    trace_id: str
    sidecars: bool
    spans: list[dict[str, Any]] = field(default_factory=list)

    def span(self, service: str, kind: str, parent: str, start: float, end: float, tags: dict[str, Any]) -> str:
        span_id = f"{len(self.spans) + 1:016x}"
        self.spans.append({"trace": self.trace_id, "id": span_id, "parent": parent, "service": service,
                           "kind": kind, "start": start, "end": end, "tags": tags})
        return span_id


def _serve(graph: dict[str, GenService], trace: _Trace, name: str, parent: str, start: float) -> float:
    """The server span of ``name`` starting at ``start`` with everything below it; returns its end."""
    svc = graph[name]
    own = float(trace.rng.lognormal(np.log(svc.median_ms * 1e-3), svc.sigma))
    server = trace.span(name, "server", parent, start, 0.0, {"http.request.body.size": svc.request_bytes,
                                                             "http.response.body.size": svc.response_bytes})
    t = start + own / 2
    for i, stage in enumerate(svc.stages):
        callees = (stage[int(trace.rng.integers(len(stage)))],) if i in svc.choose else stage
        t = max(_call(graph, trace, name, callee, server, t) for callee in callees)
    end = t + own / 2
    trace.spans[int(server, 16) - 1]["end"] = end
    return end


def _call(graph: dict[str, GenService], trace: _Trace, caller: str, callee: str, parent: str, start: float) -> float:
    hop = float(trace.rng.lognormal(np.log(HOP_S), HOP_SIGMA))
    client = trace.span(caller, "client", parent, start, 0.0, {})
    opened, below = [client], client
    if trace.sidecars:  # Envoy: outbound on the caller's pod, inbound on the callee's
        outbound = trace.span(f"{caller}.default", "client", client, start, 0.0, {"component": "proxy"})
        below = trace.span(f"{callee}.default", "server", outbound, start + hop, 0.0,
                           {"component": "proxy", "upstream_cluster": f"inbound|9080||{callee}"})
        opened += [outbound, below]
    served = _serve(graph, trace, callee, below, start + hop)
    end = served + hop
    for span_id, stop in zip(opened, (end, end, served)):
        trace.spans[int(span_id, 16) - 1]["end"] = stop
    return end


def generate(graph: dict[str, GenService], entry: str, traces: int, rps: float, seed: int,
             sidecars: bool = False) -> list[list[dict[str, Any]]]:
    """``traces`` traces arriving as a Poisson stream of rate ``rps``, each a list of neutral span records."""
    rng = np.random.default_rng(seed)
    t, out = 1.7e9, []
    for i in range(traces):
        t += float(rng.exponential(1 / rps))
        trace = _Trace(rng, f"{i + 1:032x}", sidecars)
        _serve(graph, trace, entry, "", t)
        out.append(trace.spans)
    return out


# --- writers -------------------------------------------------------------------------------------------------------

def _ns(seconds: float) -> str:
    return str(int(round(seconds * 1e9)))


def _us(seconds: float) -> int:
    return int(round(seconds * 1e6))


def _otlp_attr(key: str, value: Any) -> dict[str, Any]:
    typed = {"intValue": str(value)} if isinstance(value, int) else {"stringValue": str(value)}
    return {"key": key, "value": typed}


def otlp_line(trace: list[dict[str, Any]]) -> str:
    kinds = {"server": 2, "client": 3}
    by_service: dict[str, list[dict[str, Any]]] = {}
    for s in trace:
        by_service.setdefault(s["service"], []).append({
            "traceId": s["trace"], "spanId": s["id"], "parentSpanId": s["parent"], "name": f"{s['kind']} op",
            "kind": kinds[s["kind"]], "startTimeUnixNano": _ns(s["start"]), "endTimeUnixNano": _ns(s["end"]),
            "attributes": [_otlp_attr(k, v) for k, v in s["tags"].items()]})
    return json.dumps({"resourceSpans": [
        {"resource": {"attributes": [_otlp_attr("service.name", name)]}, "scopeSpans": [{"scope": {}, "spans": spans}]}
        for name, spans in by_service.items()]})


def jaeger_document(traces: list[list[dict[str, Any]]]) -> dict[str, Any]:
    data = []
    for trace in traces:
        processes = {f"p{i}": {"serviceName": n, "tags": []}
                     for i, n in enumerate(sorted({s["service"] for s in trace}))}
        pid = {p["serviceName"]: k for k, p in processes.items()}
        spans = [{"traceID": s["trace"], "spanID": s["id"], "operationName": "op", "processID": pid[s["service"]],
                  "references": [{"refType": "CHILD_OF", "traceID": s["trace"], "spanID": s["parent"]}]
                  if s["parent"] else [], "startTime": _us(s["start"]), "duration": _us(s["end"]) - _us(s["start"]),
                  "tags": [{"key": "span.kind", "type": "string", "value": s["kind"]}]
                  + [{"key": k, "type": "int64", "value": v} for k, v in s["tags"].items()]} for s in trace]
        data.append({"traceID": trace[0]["trace"], "spans": spans, "processes": processes})
    return {"data": data}


def zipkin_document(traces: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [{"traceId": s["trace"], "id": s["id"], **({"parentId": s["parent"]} if s["parent"] else {}),
             "name": "op", "kind": s["kind"].upper(), "timestamp": _us(s["start"]),
             "duration": _us(s["end"]) - _us(s["start"]), "localEndpoint": {"serviceName": s["service"]},
             "tags": {k: str(v) for k, v in s["tags"].items()}} for trace in traces for s in trace]


def write(traces: list[list[dict[str, Any]]], fmt: str, path: Path) -> Path:
    if fmt == "otlp":
        path.write_text("".join(otlp_line(t) + "\n" for t in traces))
    elif fmt == "jaeger":
        path.write_text(json.dumps(jaeger_document(traces)))
    else:
        path.write_text(json.dumps(zipkin_document(traces)))
    return path
