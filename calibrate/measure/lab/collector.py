"""A tiny Zipkin-compatible span collector for the lab's tracing mode: it parses and counts what Envoy sends.

``POST /api/v2/spans`` takes Zipkin v2 JSON (a list of spans) and counts them per service and span kind;
``GET /stats`` returns the counts as JSON. It runs as its own process (component ``collector``) so its CPU is
measured like any other lab process, and binds 127.0.0.1 only.

Run: ``python -m meshsim.calibrate.measure.lab.collector --port PORT``.
"""

from __future__ import annotations

import argparse
import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler
from typing import Any

from meshsim.calibrate.measure.lab.loopback_http import serve_on_loopback


class SpanCounts:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spans = 0
        self.posts = 0
        self.by_service: Counter[str] = Counter()
        self.by_kind: Counter[str] = Counter()
        self.bad = 0

    def add(self, spans: list[Any]) -> None:
        with self.lock:
            self.posts += 1
            for span in spans:
                self.spans += 1
                service = ((span.get("localEndpoint") or {}).get("serviceName")) if isinstance(span, dict) else None
                self.by_service[str(service)] += 1
                self.by_kind[str(span.get("kind") if isinstance(span, dict) else None)] += 1

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {"spans": self.spans, "posts": self.posts, "bad_posts": self.bad,
                    "by_service": dict(self.by_service), "by_kind": dict(self.by_kind)}


def make_handler(counts: SpanCounts) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: Envoy reuses its connection to the collector

        def _reply(self, code: int, body: bytes = b"", content_type: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if body:
                self.wfile.write(body)

        def _body(self) -> bytes:
            if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                parts = []  # Envoy's Zipkin reporter streams the span list chunked
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass  # trailers
                        return b"".join(parts)
                    parts.append(self.rfile.read(size))
                    self.rfile.readline()
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def do_POST(self) -> None:  # noqa: N802 - http.server API
            body = self._body()
            if self.path.split("?")[0] != "/api/v2/spans":
                self._reply(404)
                return
            try:
                spans = json.loads(body)
                if not isinstance(spans, list):
                    raise ValueError("not a list")
            except ValueError:
                with counts.lock:
                    counts.bad += 1
                self._reply(400)
                return
            counts.add(spans)
            self._reply(202)

        def do_GET(self) -> None:  # noqa: N802 - http.server API
            if self.path.split("?")[0] == "/stats":
                self._reply(200, json.dumps(counts.snapshot()).encode())
            else:
                self._reply(404)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence per-request logging
            return

    return Handler


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="meshsim lab Zipkin span counter (127.0.0.1 only)")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    serve_on_loopback(args.port, make_handler(SpanCounts()))


if __name__ == "__main__":
    main()
