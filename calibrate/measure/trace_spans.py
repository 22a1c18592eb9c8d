"""One span, whatever format it was exported in (OTLP JSON, Jaeger JSON, Zipkin v2), and what its tags say.

The readers (:mod:`meshsim.calibrate.measure.trace_readers`) turn each format's span into a :class:`Span`; the
rest of meshsim never sees a format. Times are seconds since the epoch; ids are lower-case hex (trace ids padded to
32 digits, so Zipkin's 16-digit ids and OTLP's 32-digit ones of the same trace meet).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

KINDS = ("server", "client", "internal", "producer", "consumer")
# Payload sizes: OTel's current semantic conventions, the older ones, and Envoy's tags.
REQUEST_BYTES_KEYS = ("http.request.body.size", "http.request_content_length", "request_size")
RESPONSE_BYTES_KEYS = ("http.response.body.size", "http.response_content_length", "response_size")
# Sidecars: Envoy tags its spans component=proxy and names the upstream cluster; Istio's node ids start with
# sidecar~; Linkerd's proxy reports itself as service linkerd-proxy.
PROXY_SERVICE_NAMES = ("istio-proxy", "linkerd-proxy", "linkerd2-proxy", "envoy")
PROXY_SERVICE_SUFFIXES = ("-sidecar", "-envoy")
PROXY_TAGS = ("upstream_cluster", "upstream_cluster.name")


@dataclass(frozen=True)
class Span:
    """A span reduced to what the call graph needs."""

    file: str
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root
    service: str
    name: str
    kind: str  # one of KINDS, or "" when the exporter did not say
    start: float  # seconds
    end: float
    request_bytes: int | None = None
    response_bytes: int | None = None
    fronts: str = ""  # a sidecar's span: the service it fronts ("" for an app's span)

    @property
    def sidecar(self) -> bool:
        return bool(self.fronts)

    @property
    def duration(self) -> float:
        return self.end - self.start


def normal_id(value: object, width: int) -> str:
    """Lower-case hex id, left-padded to ``width`` digits ("" for a missing or all-zero id)."""
    text = str(value or "").strip().lower()
    return "" if not text.strip("0") else text.rjust(width, "0")


def span_kind(value: object) -> str:
    """'server' from SERVER, SPAN_KIND_SERVER, 2 (OTLP's enum) or span.kind=server."""
    if isinstance(value, int) and not isinstance(value, bool):
        return {1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}.get(value, "")
    text = str(value or "").lower().removeprefix("span_kind_")
    return text if text in KINDS else ""


def byte_count(tags: Mapping[str, object], keys: tuple[str, ...]) -> int | None:
    """The first of ``keys`` holding a non-negative whole number of bytes (strings of digits count)."""
    for key in keys:
        value = tags.get(key)
        try:
            count = int(str(value))
        except ValueError:
            continue
        if count >= 0:
            return count
    return None


def is_sidecar(service: str, tags: Mapping[str, object]) -> bool:
    name = service.lower()
    return (str(tags.get("component", "")).lower() == "proxy" or any(k in tags for k in PROXY_TAGS)
            or str(tags.get("node_id", "")).startswith("sidecar~") or name in PROXY_SERVICE_NAMES
            or name.endswith(PROXY_SERVICE_SUFFIXES))


def app_of_sidecar(service: str, tags: Mapping[str, object]) -> str:
    """The service a sidecar fronts: Istio names the workload (reviews-v2.default: namespace dropped) or tags it."""
    named = tags.get("istio.canonical_service")
    if named:
        return str(named)
    name = service
    for suffix in PROXY_SERVICE_SUFFIXES:
        name = name.removesuffix(suffix)
    return name.partition(".")[0] or service


def make_span(file: str, ids: tuple[object, object, object], service: str, name: str, kind: object,
              times: tuple[float, float], tags: Mapping[str, object]) -> Span:
    """A Span from one format's fields; ``ids`` = (trace, span, parent), ``times`` = (start, end) in seconds."""
    trace_id, span_id, parent_id = ids
    return Span(file, normal_id(trace_id, 32), normal_id(span_id, 16), normal_id(parent_id, 16), service, name,
                span_kind(kind) or span_kind(tags.get("span.kind")), times[0], times[1],
                byte_count(tags, REQUEST_BYTES_KEYS), byte_count(tags, RESPONSE_BYTES_KEYS),
                app_of_sidecar(service, tags) if is_sidecar(service, tags) else "")
