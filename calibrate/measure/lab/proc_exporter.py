"""A tiny loopback exporter of the lab processes' CPU and memory under cAdvisor's metric names, so a Prometheus
scraping the lab reads them as it reads a Kubernetes node's containers:

- ``container_cpu_usage_seconds_total{container="s1/sidecar",pod="s1/sidecar"}``: CPU seconds, from the process's
  CPU clock as the lab's own CPU readings take it (``supervisor.cpu_seconds_of``);
- ``container_memory_working_set_bytes{...}``: its resident set (VmRSS), the nearest a process has to a
  container's working set.

``container`` is the lab component (replicas ``server#2`` share ``server``), ``pod`` the process. A process that is
gone is left out (as cAdvisor drops a removed container). Served on 127.0.0.1 only, at ``/metrics``, by a process of
its own that ``meshsim lab up`` starts beside the lab's (``python -m meshsim.calibrate.measure.lab.proc_exporter
--port P --watch NAME=PID:START_TICKS ...``).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Sequence

from meshsim.calibrate.measure.lab.loopback_http import serve_on_loopback
from meshsim.calibrate.measure.lab.processes import component_of
from meshsim.calibrate.measure.lab.supervisor import cpu_seconds_of, rss_mb_of
from meshsim.calibrate.measure.process_identity import pid_start_ticks

CPU_METRIC = "container_cpu_usage_seconds_total"
MEMORY_METRIC = "container_memory_working_set_bytes"


@dataclass(frozen=True)
class Watched:
    name: str  # the lab process's name (``s1/sidecar``, ``server#2``)
    pid: int
    start_ticks: int | None = None  # when known, a pid that now runs another process is left out

    def here(self) -> bool:
        return self.start_ticks is None or pid_start_ticks(self.pid) == self.start_ticks


def _labels(proc: Watched) -> str:
    return f'container="{component_of(proc.name)}",pod="{proc.name}"'


def exposition(processes: Sequence[Watched]) -> str:
    """The text exposition format (version 0.0.4) of the processes' CPU and memory now."""
    cpu, memory = [], []
    for proc in filter(Watched.here, processes):
        seconds, rss_mb = cpu_seconds_of(proc.pid), rss_mb_of(proc.pid)
        if seconds is not None:
            cpu.append(f"{CPU_METRIC}{{{_labels(proc)}}} {seconds:.9f}")
        if rss_mb is not None:
            memory.append(f"{MEMORY_METRIC}{{{_labels(proc)}}} {int(rss_mb * 1024) * 1024}")
    return "\n".join([f"# HELP {CPU_METRIC} CPU seconds of the lab process (user + system, every thread).",
                      f"# TYPE {CPU_METRIC} counter", *cpu,
                      f"# HELP {MEMORY_METRIC} Resident set of the lab process (VmRSS), in bytes.",
                      f"# TYPE {MEMORY_METRIC} gauge", *memory, ""])


def _handler(watched: Sequence[Watched]) -> type[BaseHTTPRequestHandler]:
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

        def log_message(self, *args: object) -> None:  # one line per scrape would flood the lab's log
            pass

    return Handler


def exporter_argv(processes: Sequence[Watched], port: int) -> list[str]:
    """The command line of the exporter as a lab process of its own (``Lab`` with ``exporter=True``)."""
    watch = [f"{p.name}={p.pid}:{'' if p.start_ticks is None else p.start_ticks}" for p in processes]
    return [sys.executable, "-m", "meshsim.calibrate.measure.lab.proc_exporter", "--port", str(port),
            *(arg for item in watch for arg in ("--watch", item))]


def _watched(text: str) -> Watched:
    """``NAME=PID:START_TICKS`` (the ticks may be empty: not checked)."""
    try:
        name, rest = text.rsplit("=", 1)
        pid, ticks = rest.split(":", 1)
        return Watched(name, int(pid), int(ticks) if ticks else None)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NAME=PID:START_TICKS, got {text!r}") from None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="meshsim lab exporter of the lab processes' CPU and memory "
                                                 "(cAdvisor's names; 127.0.0.1 only)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--watch", type=_watched, action="append", default=[], metavar="NAME=PID:START_TICKS")
    args = parser.parse_args(argv)
    serve_on_loopback(args.port, _handler(tuple(args.watch)))


if __name__ == "__main__":
    main()
