"""How long a proxy worker keeps running after its work before it sleeps (``wakeup.linger_us``), fitted from how
often the real workers slept.

A lab run that counts its workers' sleeps (``manifest.sleeps``: voluntary context switches of Envoy's worker
threads, ``thread_sleeps``) says how many of the model's wakes from idle were real: the model's replay of the same
run (``wake_gaps``) wakes a worker on every pass that finds it idle, however short the gap; a worker that lingers
``L`` after its work wakes only on gaps longer than ``L``. The linger is the ``L`` whose count of gaps past it per
request matches the measured sleeps per request over every run that counted them (least squares on the log of the
ratio, each run and sidecar one point). The wake-up fit then sees only the time the worker slept, and the CPU the
linger burned is a known part of each run's CPU per request (the simulator books it as the process's CPU).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Sequence

import numpy as np

from meshsim.calibrate.load.cold_wake import WakePoint
from meshsim.calibrate.load.wake_gaps import RunGaps
from meshsim.calibrate.measure.dataset import Run

LINGER_GRID_S = np.concatenate([[0.0], np.geomspace(1e-6, 5e-3, 600)])  # 1 us .. 5 ms, 2 % steps
NOT_IDENTIFIED = ("linger not identified: no run counts its workers' sleeps (manifest sleeps: the lab probe's "
                  "voluntary context switches of the worker threads); the workers sleep the moment they go idle")


@dataclass(frozen=True, eq=False)  # holds arrays
class SleepPoint:
    """One run and sidecar: measured sleeps per request, and the model's idle gaps of its passes."""

    run_id: str
    component: str
    measured: float
    gaps_s: np.ndarray
    requests: int

    def wakes(self, linger_s: float) -> float:
        """The model's wakes per request when its worker lingers ``linger_s``."""
        return float(np.count_nonzero(self.gaps_s > linger_s)) / self.requests

    def describe(self, linger_s: float) -> str:
        return (f"{self.run_id} {self.component}: {self.measured:.3f} sleeps per request, model "
                f"{self.wakes(0.0):.3f} wakes without a linger, {self.wakes(linger_s):.3f} with it")


@dataclass(frozen=True)
class LingerFit:
    linger_s: float
    note: str

    def block_keys(self) -> dict[str, object]:
        """The wakeup block's keys: linger_us and where it came from."""
        return {"linger_us": round(self.linger_s * 1e6, 2), "linger_source": self.note}


def sleep_points(runs: Sequence[Run], gaps: Mapping[str, RunGaps]) -> list[SleepPoint]:
    """Every run that counted its sidecars' sleeps and that the model replayed, per sidecar."""
    points = []
    for run in runs:
        seen = gaps.get(run.id)
        if seen is None:
            continue
        for key in sorted(run.manifest.sleeps):
            measured = run.sleeps_per_request(key)
            if key in seen.gaps and measured is not None:
                points.append(SleepPoint(run.id, key, measured, seen.gaps[key], seen.requests))
    return points


def fit_linger(points: Sequence[SleepPoint]) -> LingerFit | None:
    """The linger matching the measured sleeps best (None: no run counted them)."""
    usable = [p for p in points if p.measured > 0 and p.wakes(0.0) > 0]
    if not usable:
        return None
    measured = np.log([p.measured for p in usable])

    def loss(linger: float) -> float:
        model = np.log([max(p.wakes(linger), 0.5 / p.requests) for p in usable])
        return float(np.sum((model - measured) ** 2))

    best = min(LINGER_GRID_S, key=loss)
    how = "; ".join(p.describe(best) for p in usable)
    return LingerFit(float(best), f"fitted by meshsim fit: the linger whose wakes per request in the model's replay "
                                  f"match the workers' measured sleeps (least squares on log ratios): {how}")


def lingering(point: WakePoint, linger_s: float, cpu: bool) -> WakePoint:
    """``point`` as the wake-up fit sees it with a linger: only the time slept counts as a gap, and (``cpu``) the
    CPU burned lingering, a known part, is taken off the value."""
    if linger_s <= 0.0:
        return point
    gaps = point.gaps_s
    burned = float(np.sum(np.minimum(gaps, linger_s))) / point.requests if cpu else 0.0
    return replace(point, gaps_s=np.where(gaps > linger_s, gaps - linger_s, 0.0), value_s=point.value_s - burned)
