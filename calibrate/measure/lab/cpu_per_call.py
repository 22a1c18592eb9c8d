"""CPU per call of every lab process (fortio client, fortio echo server, each Envoy) and the kernel's share.

One lab probe gives each process's CPU time (user + system) over the load (``manifest.cpu_seconds``; the fortio
client from its rusage). Around the probe this module also reads the whole host's busy time from ``/proc/stat``
(user + nice + system + irq + softirq, steal excluded: it is not ours). What the host spent beyond the lab's
processes and this Python process is the kernel's work not charged to any of them (softirq network receive, loopback
transfer) plus whatever else ran on the machine. Over many probes, least squares splits the kernel's interrupt time
(irq + softirq, where the loopback receive path is accounted) into a cost per network hop, per KB moved over a hop
and per second of wall time (the background, other users of a shared machine):

    softirq_s = per_hop_s * hops + per_kb_s * kb_over_hops + background * window_s

Every process's own CPU is fitted the same way (per call, per KB of payload, per second idle).
"""

from __future__ import annotations

import csv
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from meshsim.calibrate.measure.lab.host_load import host_seconds
from meshsim.calibrate.measure.lab.probe import ProbeSettings, probe
from meshsim.calibrate.measure.lab.running import Lab
from meshsim.calibrate.measure.lab.spec import LabSpec

REQUEST_BYTES = 100  # fortio's GET with its headers, about 100 B
# one-way hops of one call in the single topology: client -> server and back; with sidecars each direction goes
# client -> client sidecar -> server sidecar -> server (all loopback on the lab's one host)
HOPS_PER_CALL = {"baseline": 2, "sidecar": 6}


def own_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


@dataclass(frozen=True)
class CpuRow:
    """One probe: its setup, its call count and the CPU seconds of each consumer over its window."""

    mode: str
    rps: float
    connections: int
    payload_bytes: int
    repeat: int
    calls: int  # fortio's timed calls plus its one warm-up call per connection
    achieved_rps: float
    window_s: float
    hops: int
    kb_over_hops: float
    host_busy_s: float
    client_app_s: float
    server_app_s: float
    client_sidecar_s: float
    server_sidecar_s: float
    rest_s: float  # host busy minus every lab process and this Python process: kernel work + the background
    softirq_s: float  # the host's irq + softirq time: the kernel's network receive work (+ the background's)
    run_id: str


def _row(spec: LabSpec, settings: ProbeSettings, repeat: int, out_dir: Path, lab_state) -> CpuRow:
    (host0, irq0), own0, t0 = host_seconds(), own_cpu_seconds(), time.monotonic()
    result = probe(lab_state, settings, out_dir)
    (host1, irq1), own1, t1 = host_seconds(), own_cpu_seconds(), time.monotonic()
    cpu = result.manifest.cpu_seconds
    calls = int(result.result["DurationHistogram"]["Count"]) + settings.connections
    hops = HOPS_PER_CALL[spec.mode] * calls
    per_call_kb = (REQUEST_BYTES + settings.payload_bytes) / 1024.0  # request one way, payload back
    kb = HOPS_PER_CALL[spec.mode] / 2 * per_call_kb * calls
    procs = sum(cpu.values())
    return CpuRow(spec.mode, settings.rps, settings.connections, settings.payload_bytes, repeat, calls,
                  float(result.result.get("ActualQPS") or 0.0), t1 - t0, hops, kb, host1 - host0,
                  cpu.get("client/app", 0.0), cpu.get("server/app", 0.0), cpu.get("client/sidecar", 0.0),
                  cpu.get("server/sidecar", 0.0), (host1 - host0) - procs - (own1 - own0), irq1 - irq0,
                  result.manifest.id)


def measure(modes: Sequence[str], rates: Sequence[float], connections: Sequence[int], payloads: Sequence[int],
            repeats: int, duration_s: float, out_dir: Path, lab_dir: Path) -> list[CpuRow]:
    """Every (rate, connections, payload) probe ``repeats`` times per mode on the lab's ``single`` topology."""
    rows: list[CpuRow] = []
    for mode in modes:
        spec = LabSpec(topology="single", mode=mode)
        with Lab(spec, lab_dir / mode) as state:
            for repeat in range(1, repeats + 1):
                for rps in rates:
                    for c in connections:
                        for size in payloads:
                            settings = ProbeSettings(rps=rps, connections=c, duration_s=duration_s,
                                                     payload_bytes=size)
                            rows.append(_row(spec, settings, repeat, out_dir, state))
    return rows


@dataclass(frozen=True)
class LinearFit:
    """CPU seconds = sum(coefficient x regressor); standard errors from the residuals."""

    names: tuple[str, ...]
    coefficients: tuple[float, ...]
    std_errors: tuple[float, ...]
    rows: int

    def get(self, name: str) -> tuple[float, float]:
        i = self.names.index(name)
        return self.coefficients[i], self.std_errors[i]


def least_squares(y: Sequence[float], columns: dict[str, Sequence[float]]) -> LinearFit:
    """Ordinary least squares without an intercept (every regressor is zero when nothing ran)."""
    names = tuple(columns)
    x = np.column_stack([np.asarray(columns[n], dtype=float) for n in names])
    target = np.asarray(y, dtype=float)
    coef, *_ = np.linalg.lstsq(x, target, rcond=None)
    dof = max(len(target) - len(names), 1)
    sigma2 = float(np.sum((target - x @ coef) ** 2)) / dof
    cov = sigma2 * np.linalg.pinv(x.T @ x)
    return LinearFit(names, tuple(float(c) for c in coef), tuple(float(np.sqrt(max(v, 0.0))) for v in np.diag(cov)),
                     len(target))


def fit_process(rows: Iterable[CpuRow], column: str) -> LinearFit:
    """A process's CPU = per call x calls + per KB of payload x KB + per second x window (its idle housekeeping)."""
    rows = [r for r in rows if getattr(r, column) > 0]
    return least_squares([getattr(r, column) for r in rows], {
        "per_call_s": [r.calls for r in rows],
        "per_kb_s": [r.calls * r.payload_bytes / 1024.0 for r in rows],
        "per_window_s": [r.window_s for r in rows]})


def fit_kernel(rows: Sequence[CpuRow], column: str = "softirq_s") -> LinearFit:
    """The kernel's CPU outside processes = per hop x hops + per KB x KB over hops + background x window.

    ``softirq_s`` by default: ``rest_s`` (host busy minus the processes) is only identified on an otherwise idle
    host; on a saturated shared host the lab's work displaces other users' and the fit comes out negative."""
    return least_squares([getattr(r, column) for r in rows], {
        "per_hop_s": [r.hops for r in rows],
        "per_kb_s": [r.kb_over_hops for r in rows],
        "per_window_s": [r.window_s for r in rows]})


def write_rows(rows: Sequence[CpuRow], path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(CpuRow.__dataclass_fields__))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(row).items()})


def read_rows(path: Path) -> list[CpuRow]:
    types = {name: f.type for name, f in CpuRow.__dataclass_fields__.items()}
    out = []
    with open(path, newline="", encoding="utf-8") as handle:
        for raw in csv.DictReader(handle):
            out.append(CpuRow(**{k: (int(v) if types[k] == "int" else float(v) if types[k] == "float" else v)
                                 for k, v in raw.items()}))
    return out
