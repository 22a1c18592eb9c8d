"""How far the lab host moved between a calibration and its held-out runs.

A model fitted on a shared machine carries the machine's speed at the minute of its calibration. When the host
slows down or speeds up before the held-out runs (another tenant's load comes or goes), every held-out error moves
with it, and no model could do better: the repeats of the held-out runs, minutes apart from each other, do not see
it. So the lab loop measures some of the calibration's setups once more after the held-out runs, and this module
compares each with the calibration's own run of the same setup, rate and connections (2026-11-28: the loop's p50
median error was 42.6, 8.2 and 37.3 % in three runs within 20 minutes; the third's sidecar setup ran 15 % slower at
its calibration than after its held-out runs).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from meshsim.calibrate.measure.dataset import Run, load_run
from meshsim.calibrate.validation.compare import measured_latency

DRIFT_KEYS = ("p50", "p99", "rps", "cpu")  # cpu: both sidecars' CPU per request (what a CPU quota buys requests with)
SIDECARS = ("client/sidecar", "server/sidecar")


@dataclass(frozen=True)
class DriftPair:
    """One calibration setup measured twice: by the calibration, and again after the held-out runs."""

    setup: str
    calibration: Mapping[str, float]  # p50 and p99 in ms, achieved rps
    again: Mapping[str, float]

    def change(self, key: str) -> float:
        """|again - calibration| relative to their mean (the repeatability's measure)."""
        a, b = self.calibration.get(key, 0.0), self.again.get(key, 0.0)
        return abs(a - b) / ((a + b) / 2) if a + b > 0 else 0.0


@dataclass(frozen=True)
class HostDrift:
    pairs: tuple[DriftPair, ...]

    def median_abs(self, key: str) -> float:
        """The median relative change of ``key`` over the pairs (0 without pairs: nothing was re-measured)."""
        return statistics.median(p.change(key) for p in self.pairs) if self.pairs else 0.0

    def line(self) -> str:
        if not self.pairs:
            return "host drift: no calibration setup was measured again"
        parts = ", ".join(f"{k} {self.median_abs(k):.1%}" for k in DRIFT_KEYS)
        return (f"host drift ({len(self.pairs)} calibration setup(s) measured again after the held-out runs), "
                f"median |difference|: {parts}")

    def to_dict(self) -> dict[str, object]:
        return {"pairs": [{"setup": p.setup, "calibration": dict(p.calibration), "again": dict(p.again)}
                          for p in self.pairs],
                "median_abs_difference": {k: round(self.median_abs(k), 4) for k in DRIFT_KEYS}}


def _key(run: Run) -> tuple[object, ...]:
    s = run.manifest.setup
    return (s.topology, s.path, tuple(s.features), s.proxy_cpu_limit, s.proxy_workers, s.payload_bytes,
            run.rps, run.result.num_threads)


def _label(run: Run) -> str:
    s = run.manifest.setup
    return f"{s.topology} {s.path} {run.rps or 0:g} rps c{run.result.num_threads}"


def _readings(run: Run) -> dict[str, float]:
    latency, _ = measured_latency(run)
    cpu = [run.cpu_per_request(key) for key in SIDECARS]
    return {"p50": latency["p50"], "p99": latency["p99"], "rps": run.result.actual_rps,
            **({"cpu": sum(cpu) * 1e3} if all(c is not None for c in cpu) else {})}


def host_drift(calibration_runs: Iterable[str | Path], again_runs: Sequence[str | Path]) -> HostDrift:
    """Pair every re-measured run with the calibration's run of the same setup, rate and connections."""
    by_key = {_key(run): run for run in map(load_run, calibration_runs)}
    pairs = []
    for run in map(load_run, again_runs):
        first = by_key.get(_key(run))
        if first is not None:
            pairs.append(DriftPair(_label(run), _readings(first), _readings(run)))
    return HostDrift(tuple(pairs))
