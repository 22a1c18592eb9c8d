"""Statistics over independent replications: point estimates, Student-t confidence intervals, pooled quantiles."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p999": 99.9}
LATENCY_KEYS = ("p50", "p90", "p99", "p999", "max", "mean")
CDF_LEVELS = tuple(np.round(np.concatenate([np.linspace(0.0, 0.99, 100), np.linspace(0.991, 0.999, 9),
                                            [0.9995, 1.0]]), 6).tolist())


@dataclass(frozen=True)
class Estimate:
    value: float
    lo: float
    hi: float

    @property
    def half_width(self) -> float:
        return 0.5 * (self.hi - self.lo)

    def at_least(self, floor: float) -> "Estimate":
        """The interval with its lower end raised to ``floor`` (a latency or a rate is never negative, but a
        Student-t interval over a few replications can reach below 0). For reporting: precision targets use the
        symmetric interval."""
        return Estimate(self.value, max(self.lo, floor), self.hi) if self.lo < floor else self


def latency_summary(latencies: np.ndarray) -> dict[str, float]:
    """p50/p90/p99/p99.9/max/mean of one replication's latencies (seconds)."""
    if latencies.size == 0:
        return {k: float("nan") for k in LATENCY_KEYS}
    qs = np.percentile(latencies, list(PERCENTILES.values()))
    out = dict(zip(PERCENTILES, (float(q) for q in qs)))
    out["max"] = float(latencies.max())
    out["mean"] = float(latencies.mean())
    return out


def t_interval(values: Sequence[float], confidence: float = 0.95) -> Estimate:
    """Mean of per-replication estimates with a Student-t interval (independent replications)."""
    arr = np.asarray([v for v in values if math.isfinite(v)], dtype=float)
    if arr.size == 0:
        return Estimate(float("nan"), float("nan"), float("nan"))
    mean = float(arr.mean())
    if arr.size < 2:
        return Estimate(mean, float("nan"), float("nan"))
    from scipy.special import stdtrit  # Student-t quantile; scipy.stats would cost seconds of import per process

    half = float(stdtrit(arr.size - 1, 0.5 + confidence / 2) * arr.std(ddof=1) / math.sqrt(arr.size))
    return Estimate(mean, mean - half, mean + half)


def pooled_cdf(samples: Sequence[np.ndarray]) -> tuple[list[float], list[float]]:
    """Quantile levels and pooled latency quantiles (seconds) for CDF plots."""
    present = [s for s in samples if s.size]
    pooled = np.concatenate(present) if present else np.empty(0)  # an overloaded run may complete nothing
    if pooled.size == 0:
        return list(CDF_LEVELS), [float("nan")] * len(CDF_LEVELS)
    return list(CDF_LEVELS), np.quantile(pooled, CDF_LEVELS).tolist()
