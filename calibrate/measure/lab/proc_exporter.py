"""A tiny loopback exporter of the lab processes' CPU and memory under cAdvisor's metric names, so a Prometheus
scraping the lab reads them as it reads a Kubernetes node's containers:

- ``container_cpu_usage_seconds_total{container="s1/sidecar",pod="s1/sidecar"}``: CPU seconds, from the process's
  CPU clock as the lab's own CPU readings take it (``supervisor.cpu_seconds_of``);
- ``container_memory_working_set_bytes{...}``: its resident set (VmRSS), the nearest a process has to a
  container's working set.

``container`` is the lab component (replicas ``server#2`` share ``server``), ``pod`` the process. A process that is
gone is left out (as cAdvisor drops a removed container). Served on 127.0.0.1 only, at ``/metrics``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Sequence

from meshsim.calibrate.measure.lab.processes import component_of
from meshsim.calibrate.measure.lab.supervisor import cpu_seconds_of, rss_mb_of

CPU_METRIC = "container_cpu_usage_seconds_total"
MEMORY_METRIC = "container_memory_working_set_bytes"


@dataclass(frozen=True)
class Watched:
    name: str  # the lab process's name (``s1/sidecar``, ``server#2``)
    pid: int


def _labels(proc: Watched) -> str:
    return f'container="{component_of(proc.name)}",pod="{proc.name}"'


def exposition(processes: Sequence[Watched]) -> str:
    """The text exposition format (version 0.0.4) of the processes' CPU and memory now."""
    cpu, memory = [], []
    for proc in processes:
        seconds, rss_mb = cpu_seconds_of(proc.pid), rss_mb_of(proc.pid)
        if seconds is not None:
            cpu.append(f"{CPU_METRIC}{{{_labels(proc)}}} {seconds:.9f}")
        if rss_mb is not None:
            memory.append(f"{MEMORY_METRIC}{{{_labels(proc)}}} {int(rss_mb * 1024) * 1024}")
    return "\n".join([f"# HELP {CPU_METRIC} CPU seconds of the lab process (user + system, every thread).",
                      f"# TYPE {CPU_METRIC} counter", *cpu,
                      f"# HELP {MEMORY_METRIC} Resident set of the lab process (VmRSS), in bytes.",
                      f"# TYPE {MEMORY_METRIC} gauge", *memory, ""])


class ProcessExporter:
    """Serves ``exposition(processes)`` on 127.0.0.1:``port`` (0: a free one) from a daemon thread until ``close``."""

    def __init__(self, processes: Sequence[Watched], port: int = 0) -> None:
        watched = tuple(processes)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the http.server name)
                if self.path.split("?", 1)[0] != "/metrics":
                    self.send_error(404)
                    return
                body = exposition(watched).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):  # the scraper gave up (its timeout): its next scrape
                    pass

            def log_message(self, *args: object) -> None:  # one line per scrape would flood the lab's stderr
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name="lab-proc-exporter", daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

    def __enter__(self) -> "ProcessExporter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
