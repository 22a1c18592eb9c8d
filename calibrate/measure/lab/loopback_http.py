"""The lab's small HTTP services (span counter, process exporter) serve on 127.0.0.1 until they are stopped."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def serve_on_loopback(port: int, handler: type[BaseHTTPRequestHandler]) -> None:
    """Serve ``handler`` on 127.0.0.1:``port`` until SIGINT (SIGTERM, the supervisor's stop, ends the process)."""
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
