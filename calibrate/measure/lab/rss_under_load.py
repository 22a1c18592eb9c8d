"""Resident memory of the lab's Envoy sidecars under load: connections x rate x mode, each point on a fresh lab.

Envoy's allocator keeps freed memory (RSS does not fall back when the load ends), so one long-lived lab would show
the largest earlier load in every later point. Each probe therefore starts its own lab (``single`` topology: fortio
client -> client Envoy -> server Envoy -> fortio echo server), reads the sidecars' idle RSS, runs the probe (which
samples VmRSS every 0.25 s during the load and stores the median of the second half) and stops the lab.

Requests held in a proxy (Little's law): a sidecar holds a request's stream from its first byte in to its last
byte out, about the whole call for both sidecars of the ``single`` topology (the app hops are loopback), so the
mean number in flight in each is about achieved rps x mean latency (``in_flight``; an upper bound).
"""

from __future__ import annotations

import csv
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from meshsim.calibrate.measure.lab.probe import ProbeSettings, probe
from meshsim.calibrate.measure.lab.running import Lab
from meshsim.calibrate.measure.lab.spec import LabSpec
from meshsim.calibrate.measure.lab.supervisor import rss_mb_of

SETTLE_S = 1.0  # after the lab is ready, before the idle reading (Envoy finishes its start-up allocations)


@dataclass(frozen=True)
class MemoryRow:
    """One probe on a fresh lab: its setup, the sidecars' idle RSS before the load and steady RSS during it."""

    mode: str
    rps: float
    connections: int
    repeat: int
    duration_s: float
    achieved_rps: float
    mean_latency_ms: float
    in_flight: float  # achieved rps x mean latency: requests held in each sidecar on average (Little's law)
    client_sidecar_idle_mb: float
    server_sidecar_idle_mb: float
    client_sidecar_mb: float
    server_sidecar_mb: float
    run_id: str
    payload_bytes: int = 0  # the response body fortio's echo server returns (its ?size=)


def _idle(state) -> dict[str, float]:
    time.sleep(SETTLE_S)
    return {p.name: rss_mb_of(p.pid) or float("nan") for p in state.processes}


def _one(mode: str, settings: ProbeSettings, repeat: int, out_dir: Path, lab_dir: Path) -> MemoryRow:
    spec = LabSpec(topology="single", mode=mode)
    with Lab(spec, lab_dir) as state:
        idle = _idle(state)
        names = {p.name.split("#", 1)[0]: p.name for p in state.processes}
        result = probe(state, settings, out_dir)
    hist = result.result["DurationHistogram"]
    achieved = float(result.result.get("ActualQPS") or 0.0)
    mean_s = float(hist["Avg"])
    mem = result.manifest.memory_mb
    return MemoryRow(mode, settings.rps, settings.connections, repeat, settings.duration_s, round(achieved, 2),
                     round(mean_s * 1e3, 4), round(achieved * mean_s, 4),
                     round(idle[names["client/sidecar"]], 2), round(idle[names["server/sidecar"]], 2),
                     mem["client/sidecar"], mem["server/sidecar"], result.manifest.id, settings.payload_bytes)


def measure(modes: Sequence[str], rates: Sequence[float], connections: Sequence[int], repeats: int,
            duration_s: float, out_dir: Path, lab_dir: Path, payload_bytes: int = 0) -> list[MemoryRow]:
    """Every (mode, rate, connections) point ``repeats`` times, each on a fresh lab; the repeats are interleaved
    (the whole grid, then again) so a drift of the shared machine shows as spread, not as an effect."""
    rows: list[MemoryRow] = []
    for repeat in range(1, repeats + 1):
        for mode in modes:
            for rps in rates:
                for c in connections:
                    settings = ProbeSettings(rps=rps, connections=c, duration_s=duration_s, payload_bytes=payload_bytes)
                    folder = lab_dir / f"{mode}-q{rps:g}-c{c}-b{payload_bytes}-{repeat}"
                    rows.append(_one(mode, settings, repeat, out_dir, folder))
    return rows


def write_rows(rows: Sequence[MemoryRow], path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(MemoryRow.__dataclass_fields__))
        writer.writeheader()
        for row in rows:
            writer.writerow(asdict(row))


def read_rows(path: Path) -> list[MemoryRow]:
    types = {name: f.type for name, f in MemoryRow.__dataclass_fields__.items()}
    with open(path, newline="", encoding="utf-8") as handle:
        return [MemoryRow(**{k: (int(v) if types[k] == "int" else float(v) if types[k] == "float" else v)
                             for k, v in raw.items()}) for raw in csv.DictReader(handle)]
