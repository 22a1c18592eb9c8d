"""Load dependence of a proxy pass: cost(g) = base + max x (1 - exp(-g / tau)), g = the worker's idle gap.

This is the mesh schema's ``wakeup`` block: a worker idle for g pays extra before serving (scheduler and C-state
wake-up), so the per-hop cost falls as the rate rises. Points are (idle gap, mean added time per pass) from runs at
several rates. Three parameters need three distinct gaps; with two, tau is fixed at ``tau_prior`` and the result is
marked as such.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import optimize


@dataclass(frozen=True)
class WakeupFit:
    base_s: float
    max_s: float
    tau_s: float
    tau_fixed: bool
    rms_s: float
    points: tuple[tuple[float, float], ...]

    def block(self, source: str) -> dict[str, object]:
        note = " (tau fixed: only two rates)" if self.tau_fixed else ""
        return {"max_ms": round(self.max_s * 1e3, 4), "tau_ms": round(self.tau_s * 1e3, 4),
                "source": source + note}

    def predict(self, gap_s: float) -> float:
        return self.base_s + self.max_s * (1 - math.exp(-gap_s / self.tau_s))


def idle_gap(qps: float, connections: int, workers: int, busy_s: float) -> float:
    """Mean idle time of a worker between requests: each busy worker sees qps / min(c, W) requests per second."""
    per_worker = qps / max(min(connections, workers), 1)
    return max(1.0 / per_worker - busy_s, 0.0)


def fit_wakeup(gaps_s: Sequence[float], added_s: Sequence[float], tau_prior_s: float = 1e-3) -> WakeupFit:
    g = np.asarray(gaps_s, float)
    a = np.asarray(added_s, float)
    if np.unique(g).size < 2:
        raise ValueError("load dependence needs runs at two or more rates")
    fixed = np.unique(g).size < 3

    def model(x: np.ndarray) -> np.ndarray:
        tau = tau_prior_s if fixed else math.exp(x[2])
        return x[0] + x[1] * -np.expm1(-g / tau)

    x0 = [float(a.min()) * 0.8, float(np.ptp(a)) + 1e-6] + ([] if fixed else [math.log(float(np.median(g)) + 1e-6)])
    lower = [0.0, 0.0] + ([] if fixed else [math.log(1e-6)])
    upper = [np.inf, np.inf] + ([] if fixed else [math.log(10.0)])
    res = optimize.least_squares(lambda x: model(x) - a, x0, bounds=(lower, upper))
    tau = tau_prior_s if fixed else math.exp(res.x[2])
    rms = math.sqrt(float(np.mean(res.fun**2)))
    return WakeupFit(float(res.x[0]), float(res.x[1]), tau, fixed, rms, tuple(zip(g.tolist(), a.tolist())))
