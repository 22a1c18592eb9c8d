"""CPU per request of a proxy from CPU measured at several rates: cores = idle + rate x cost (least squares).

The slope is the CPU time one request costs the proxy (both passes). It is compared with the fitted mean service
time of the passes: if the CPU cost is clearly smaller, part of the latency is waiting (wake-up, scheduling, I/O)
and the queueing model should use the CPU cost as the service demand that loads the worker; if they agree, either
serves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class CpuFit:
    component: str
    idle_cores: float
    cost_s: float  # CPU seconds per request
    cost_se_s: float
    r2: float
    n_points: int
    rates: tuple[float, ...]

    def cross_check(self, service_time_s: float) -> dict[str, object]:
        """Compare the CPU cost per request with the fitted latency cost (sum of the proxy's passes)."""
        ratio = self.cost_s / service_time_s if service_time_s > 0 else math.nan
        if ratio < 0.7:
            use = "cpu_cost: the latency cost includes waiting that does not load the worker"
        elif ratio > 1.3:
            use = "cpu_cost: the proxy burns CPU outside the request path (post-response work)"
        else:
            use = "either: CPU cost and fitted service time agree within 30%"
        return {"cpu_cost_ms": round(self.cost_s * 1e3, 4), "service_time_ms": round(service_time_s * 1e3, 4),
                "ratio": round(ratio, 3), "service_demand": use}

    def to_dict(self) -> dict[str, object]:
        return {"component": self.component, "idle_cores": round(self.idle_cores, 5),
                "cpu_ms_per_request": round(self.cost_s * 1e3, 4), "se_ms": round(self.cost_se_s * 1e3, 4),
                "r2": round(self.r2, 4), "rates": list(self.rates)}


def fit_cpu(component: str, rates: Sequence[float], cores: Sequence[float]) -> CpuFit:
    """Linear fit of average cores against request rate; needs at least two distinct rates."""
    r = np.asarray(rates, float)
    c = np.asarray(cores, float)
    if np.unique(r).size < 2:
        raise ValueError(f"{component}: CPU at a single rate cannot separate idle from per-request cost")
    A = np.column_stack([np.ones_like(r), r])
    coef, *_ = np.linalg.lstsq(A, c, rcond=None)
    resid = c - A @ coef
    dof = max(r.size - 2, 1)
    s2 = float(resid @ resid) / dof
    cov = np.linalg.inv(A.T @ A) * s2
    ss_tot = float(np.sum((c - c.mean()) ** 2))
    r2 = 1.0 - float(resid @ resid) / ss_tot if ss_tot > 0 else 1.0
    return CpuFit(component, float(coef[0]), float(coef[1]), float(math.sqrt(max(cov[1, 1], 0.0))), r2, int(r.size),
                  tuple(sorted(set(float(x) for x in r))))
