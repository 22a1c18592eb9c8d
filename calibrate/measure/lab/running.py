"""A running lab: starts the planned processes under a Supervisor, waits until they listen, and records its state.

``LabState`` is what a probe needs (entry port, pids of every component, command lines, versions); it round-trips
through ``state.json`` in the lab directory so a daemonised lab (``meshsim lab up``) can be probed and stopped by
later commands. ``Lab`` is also a context manager: leaving the block (normally, on error or Ctrl-C) stops everything.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from meshsim.errors import RunFailed
from meshsim.calibrate.measure.lab.binaries import find_binary

from meshsim.calibrate.measure.lab.garbage_collections import go_trace_env
from meshsim.calibrate.measure.lab.cpulimit import find_cpu_limiter
from meshsim.calibrate.measure.lab.ledger import Ledger
from meshsim.calibrate.measure.lab.proc_exporter import Watched, exporter_argv
from meshsim.calibrate.measure.lab.processes import LabPlan, plan_lab
from meshsim.calibrate.measure.lab.spec import LabSpec
from meshsim.calibrate.measure.lab.supervisor import (
    Supervisor,
    free_port,
    pid_alive,
    pid_start_ticks,
    port_clash,
    wait_for_port,
)

STATE_FILE = "state.json"
STATE_SCHEMA = "meshsim/lab-state/v1"
READY_TIMEOUT_S = 20.0
START_ATTEMPTS = 3
EXPORTER = "exporter"  # the process exporter's name among the supervisor's processes


@dataclass(frozen=True)
class ProcessState:
    name: str
    kind: str
    pid: int
    start_ticks: int | None
    command: list[str]
    log: str
    admin_port: int | None = None
    cgroup: str | None = None

    def alive(self) -> bool:
        """Alive and still the same process (pid not reused)."""
        return pid_alive(self.pid) and (self.start_ticks is None or pid_start_ticks(self.pid) == self.start_ticks)


@dataclass(frozen=True)
class LabState:
    spec: LabSpec
    entry_port: int
    processes: tuple[ProcessState, ...]
    collector_port: int | None
    versions: dict[str, str]
    started_at: str
    lab_dir: str
    status: str = "ready"  # starting | ready | failed | stopped
    error: str = ""
    daemon_pid: int | None = None
    daemon_start_ticks: int | None = None
    cpu_limit_backend: str = ""
    trace_query_port: int | None = None  # Jaeger's query API (trace backend jaeger)
    # the processes' CPU and memory for Prometheus (proc_exporter; ``meshsim lab up``): an observer of the lab, not
    # one of its components, so a probe neither measures nor checks it
    exporter: ProcessState | None = None
    exporter_port: int | None = None

    @property
    def entry_url(self) -> str:
        return f"http://127.0.0.1:{self.entry_port}"

    def process(self, name: str) -> ProcessState:
        for proc in self.processes:
            if proc.name == name:
                return proc
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["spec"] = self.spec.to_dict()
        return {"schema": STATE_SCHEMA, **data}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LabState":
        body = {k: v for k, v in data.items() if k != "schema"}
        body["spec"] = LabSpec.from_dict(body["spec"])
        body["processes"] = tuple(ProcessState(**p) for p in body["processes"])
        if body.get("exporter"):
            body["exporter"] = ProcessState(**body["exporter"])
        return cls(**body)


def write_state(lab_dir: Path, data: dict[str, Any]) -> None:
    """Atomic write of state.json (a reader never sees half a file)."""
    lab_dir.mkdir(parents=True, exist_ok=True)
    tmp = lab_dir / f".{STATE_FILE}.{os.getpid()}"
    tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
    os.replace(tmp, lab_dir / STATE_FILE)


def read_state_data(lab_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((lab_dir / STATE_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise RunFailed(f"{lab_dir / STATE_FILE}: unreadable lab state ({exc})") from None


def _version(argv: list[str], pattern: str) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    match = re.search(pattern, out.stdout + out.stderr)
    return match.group(1) if match else "unknown"


def component_versions(fortio: Path, envoy: Path) -> dict[str, str]:
    return {
        "fortio": _version([str(fortio), "version"], r"([0-9]+\.[0-9]+\.[0-9]+)"),
        "envoy": _version([str(envoy), "--version"], r"/([0-9]+\.[0-9]+\.[0-9]+)/"),
    }


def envoy_ready(admin_port: int, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/ready", timeout=1) as resp:  # noqa: S310
                if resp.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


@dataclass
class Lab:
    """Starts and holds one lab's processes; use as a context manager or call ``up``/``down``."""

    spec: LabSpec
    lab_dir: Path
    supervisor: Supervisor | None = None
    state: LabState | None = None
    plan: LabPlan | None = field(default=None, repr=False)
    ledger: Ledger | None = None  # where every started pid is recorded (see ledger.py)
    exporter: bool = False  # also start the exporter of the processes' CPU and memory for Prometheus
    exporter_port: int | None = field(default=None, init=False)

    def up(self) -> LabState:
        fortio = find_binary("fortio")
        envoy = find_binary("envoy") if self.spec.has_proxies else Path("envoy")
        versions = component_versions(fortio, envoy) if self.spec.has_proxies else {
            "fortio": component_versions(fortio, fortio)["fortio"]}
        limiter = find_cpu_limiter(f"{os.getpid()}-{int(time.time())}") if self.spec.cpu_limit is not None else None
        self.lab_dir.mkdir(parents=True, exist_ok=True)
        self.supervisor = Supervisor(self.lab_dir / "logs", limiter, ledger=self.ledger)
        started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                self._start(fortio, envoy)
                break
            except RunFailed as exc:
                self.down()
                if attempt == START_ATTEMPTS or not port_clash(str(exc)):
                    raise
                # Another process bound a planned port between planning and start: plan new ports.
                self.supervisor = Supervisor(self.lab_dir / "logs", limiter, ledger=self.ledger)
            except BaseException:
                self.down()
                raise
        assert self.plan is not None
        procs = []
        for planned, managed in zip(self.plan.processes, self.supervisor.processes):
            procs.append(ProcessState(managed.name, planned.kind, managed.pid, managed.start_ticks, managed.argv,
                                      str(managed.log), planned.admin_port,
                                      str(managed.cgroup) if managed.cgroup else None))
        self.state = LabState(self.spec, self.plan.entry_port, tuple(procs), self.plan.collector_port, versions,
                              started_at, str(self.lab_dir), daemon_pid=os.getpid(),
                              daemon_start_ticks=pid_start_ticks(os.getpid()),
                              cpu_limit_backend=(f"cgroup v{limiter.version} "
                                                 f"{'cpu.max' if limiter.version == 2 else 'cpu.cfs_quota_us'}, "
                                                 f"CFS period 100 ms" if limiter else ""),
                              trace_query_port=self.plan.trace_query_port, **self._exporter_state())
        return self.state

    def _exporter_state(self) -> dict[str, Any]:
        if not self.exporter:
            return {}
        assert self.supervisor is not None
        managed = self.supervisor.by_name(EXPORTER)
        return {"exporter": ProcessState(managed.name, "exporter", managed.pid, managed.start_ticks, managed.argv,
                                         str(managed.log)), "exporter_port": self.exporter_port}

    def _start_exporter(self) -> None:
        """The exporter, watching every process started so far (it is the last one), on a free loopback port."""
        assert self.supervisor is not None
        watched = [Watched(m.name, m.pid, m.start_ticks) for m in self.supervisor.processes]
        self.exporter_port = free_port()
        self.supervisor.start(EXPORTER, exporter_argv(watched, self.exporter_port))
        wait_for_port(self.exporter_port, READY_TIMEOUT_S, self.supervisor, "the lab's process exporter")

    def _start(self, fortio: Path, envoy: Path) -> None:
        assert self.supervisor is not None
        self.plan = plan_lab(self.spec, self.lab_dir, fortio, envoy)
        for proc in self.plan.processes:
            self.supervisor.start(proc.name, proc.argv,
                                  cpus=self.spec.cpus if proc.proxy else None,
                                  cpu_limit=self.spec.cpu_limit if proc.proxy else None,
                                  env=go_trace_env(os.environ) if proc.kind == "app" else None)
        for proc in self.plan.processes:
            for port in proc.ports:
                wait_for_port(port, READY_TIMEOUT_S, self.supervisor, f"{proc.name} ({Path(proc.argv[0]).name})")
            if proc.admin_port is not None and not envoy_ready(proc.admin_port):
                self.supervisor.check_alive()
                raise RunFailed(f"lab: {proc.name} admin /ready not LIVE on 127.0.0.1:{proc.admin_port}")
        if self.exporter:
            self._start_exporter()
        self.supervisor.check_alive()

    def down(self) -> list[int]:
        """Stop every process by pid; return pids still alive afterwards (empty unless something is badly wrong)."""
        if self.supervisor is None:
            return []
        left = self.supervisor.stop_all()
        if left:
            raise RunFailed(f"lab: processes still alive after down: {left}")
        return left

    def __enter__(self) -> LabState:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()
