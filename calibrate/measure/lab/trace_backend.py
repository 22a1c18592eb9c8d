"""A real trace backend for the lab's tracing mode: Jaeger v2 (built by tools/install/jaeger.sh).

Jaeger takes the Envoys' Zipkin v2 JSON spans on its Zipkin receiver and keeps them in memory; its query API serves
whole traces as Jaeger JSON (``/api/traces``) and as OTLP JSON (``/api/v3/traces``), the two formats
``meshsim topology from-traces`` reads besides Zipkin's. Every port is on 127.0.0.1; its own telemetry is off (it
would bind a metrics port of its own).

The lab's apps join the spans of one request into one trace: ``fortio proxies -M`` mirrors the incoming request
(``-multi-mirror-origin``, on by default) and copies all its headers, Envoy's ``x-b3-*`` and ``x-request-id``
among them, to every call it makes (fortio's ``fhttp.makeMirrorRequest`` / ``CopyHeaders(req, r, true)``).
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from meshsim.calibrate.measure.lab.supervisor import free_port
from meshsim.errors import RunFailed

MAX_TRACES = 200_000  # in-memory store bound; a lab probe at 1000 rps for 60 s makes 60 000 traces
QUERY_LIMIT = 100_000  # traces per query (Jaeger's own default is 20)


@dataclass(frozen=True)
class JaegerPlan:
    """Where one Jaeger listens and the config it runs with."""

    zipkin_port: int  # the Envoys' collector: POST /api/v2/spans
    query_port: int  # HTTP query API (and the UI)
    grpc_port: int  # gRPC query API (bound to loopback too, so it does not take its 0.0.0.0 default)
    config: Path

    def argv(self, jaeger: Path) -> tuple[str, ...]:
        return (str(jaeger), "--config", str(self.config))

    @property
    def ports(self) -> tuple[int, ...]:
        return (self.zipkin_port, self.query_port)


def jaeger_config(zipkin_port: int, query_port: int, grpc_port: int) -> dict[str, Any]:
    """Jaeger v2's (an OpenTelemetry collector's) config: Zipkin in, memory store, query API out."""
    return {
        "service": {
            "extensions": ["jaeger_storage", "jaeger_query"],
            "pipelines": {"traces": {"receivers": ["zipkin"], "processors": [],
                                     "exporters": ["jaeger_storage_exporter"]}},
            "telemetry": {"metrics": {"level": "none"}, "logs": {"level": "warn"}},
        },
        "extensions": {
            "jaeger_storage": {"backends": {"lab_memory": {"memory": {"max_traces": MAX_TRACES}}}},
            "jaeger_query": {"storage": {"traces": "lab_memory"},
                             "http": {"endpoint": f"127.0.0.1:{query_port}"},
                             "grpc": {"endpoint": f"127.0.0.1:{grpc_port}"}},
        },
        "receivers": {"zipkin": {"endpoint": f"127.0.0.1:{zipkin_port}"}},
        "exporters": {"jaeger_storage_exporter": {"trace_storage": "lab_memory"}},
    }


def plan_jaeger(config_dir: Path) -> JaegerPlan:
    """Allocate Jaeger's ports and write its config (JSON, which its YAML loader reads) under ``config_dir``."""
    zipkin_port, query_port, grpc_port = free_port(), free_port(), free_port()
    config_dir.mkdir(parents=True, exist_ok=True)
    config = config_dir / "jaeger.json"
    config.write_text(json.dumps(jaeger_config(zipkin_port, query_port, grpc_port), indent=1), encoding="utf-8")
    return JaegerPlan(zipkin_port, query_port, grpc_port, config)


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as resp:  # noqa: S310 - loopback only
        return json.load(resp)


def jaeger_json(query_port: int, service: str, start_s: float, end_s: float) -> dict[str, Any]:
    """Every trace through ``service`` that started between ``start_s`` and ``end_s`` (epoch seconds), as the
    query API's Jaeger JSON (``{"data": [{"traceID", "spans", "processes"}]}``)."""
    query = urllib.parse.urlencode({"service": service, "start": int(start_s * 1e6), "end": int(end_s * 1e6),
                                    "limit": QUERY_LIMIT})
    return _get_json(f"http://127.0.0.1:{query_port}/api/traces?{query}")


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def otlp_json(query_port: int, service: str, start_s: float, end_s: float) -> dict[str, Any]:
    """The same traces as the API v3's OTLP JSON, ``{"result": {"resourceSpans": [...]}}`` (read as it is)."""
    query = urllib.parse.urlencode({"query.service_name": service, "query.start_time_min": _rfc3339(start_s),
                                    "query.start_time_max": _rfc3339(end_s), "query.num_traces": QUERY_LIMIT})
    return _get_json(f"http://127.0.0.1:{query_port}/api/v3/traces?{query}")


def span_count(traces: dict[str, Any]) -> int:
    return sum(len(t.get("spans", ())) for t in traces.get("data") or ())


def settled_jaeger_json(query_port: int, service: str, start_s: float, end_s: float, spans_expected: int,
                        limit_s: float = 30.0) -> dict[str, Any]:
    """The traces once Jaeger holds ``spans_expected`` spans of them (Envoy flushes spans every 0.5 s), polled until
    ``limit_s``; RunFailed saying how many arrived when they do not."""
    deadline = time.monotonic() + limit_s
    while True:
        traces = jaeger_json(query_port, service, start_s, end_s)
        got = span_count(traces)
        if got >= spans_expected:
            return traces
        if time.monotonic() > deadline:
            raise RunFailed(f"jaeger on 127.0.0.1:{query_port}: {got} of {spans_expected} spans of {service}'s "
                            f"traces arrived within {limit_s:g} s")
        time.sleep(0.25)
