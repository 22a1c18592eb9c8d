"""A cAdvisor-shaped exporter for tests against a real Prometheus: container CPU counters growing at known rates, a
working set per container and one Istio request counter and histogram, served on 127.0.0.1 from a thread."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

# cores per (pod, container); "" is cAdvisor's pod-level total and "POD" the pause container: both left out
RATES = {("reviews-v1-545db77b95-7xk2p", "istio-proxy"): 0.10, ("reviews-v1-545db77b95-7xk2p", "reviews"): 0.20,
         ("reviews-v1-545db77b95-q9zz4", "istio-proxy"): 0.15, ("reviews-v1-545db77b95-q9zz4", "reviews"): 0.25,
         ("reviews-v1-545db77b95-q9zz4", ""): 0.40, ("reviews-v1-545db77b95-q9zz4", "POD"): 0.01,
         ("ratings-0", "istio-proxy"): 0.05, ("debug", "shell"): 0.02}


def _cadvisor_exposition(t0: float) -> str:
    """cAdvisor-shaped counters growing at RATES since ``t0``, a working set per container, and one Istio request
    counter and histogram (the window needs traffic), in the text exposition format."""
    elapsed = time.time() - t0
    lines = ["# TYPE container_cpu_usage_seconds_total counter"]
    lines += [f'container_cpu_usage_seconds_total{{namespace="default",pod="{pod}",container="{container}"}} '
              f"{rate * elapsed:.6f}" for (pod, container), rate in RATES.items()]
    lines += ["# TYPE container_memory_working_set_bytes gauge"]
    lines += [f'container_memory_working_set_bytes{{namespace="default",pod="{pod}",container="{container}"}} '
              f"{int(rate * 1e9)}" for (pod, container), rate in RATES.items()]
    traffic = 'reporter="source",source_workload="productpage-v1",destination_workload="reviews-v1"'
    lines += ["# TYPE istio_requests_total counter", f"istio_requests_total{{{traffic}}} {100 * elapsed:.3f}",
              "# TYPE istio_request_duration_milliseconds histogram"]
    lines += [f'istio_request_duration_milliseconds_bucket{{{traffic},le="{le}"}} {share * 100 * elapsed:.3f}'
              for le, share in (("1", 0.5), ("5", 0.9), ("+Inf", 1.0))]
    return "\n".join(lines) + "\n"


class CadvisorExporter:
    """The exposition above on 127.0.0.1 (a free port) from a thread, until ``close``."""

    def __init__(self) -> None:
        t0 = time.time()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                body = _cadvisor_exposition(t0).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def scrape_config(self, path: Path) -> Path:
        """A Prometheus configuration scraping this exporter every second, written to ``path``."""
        path.write_text(json.dumps({"global": {"scrape_interval": "1s", "scrape_timeout": "1s"}, "scrape_configs": [
            {"job_name": "kubelet", "static_configs": [{"targets": [f"127.0.0.1:{self.server.server_port}"]}]}]}))
        return path
