"""Statistics over independent replications: point estimates, Student-t confidence intervals (plain, or with a
control variate), pooled quantiles."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p999": 99.9}
LATENCY_KEYS = ("p50", "p90", "p99", "p999", "max", "mean")
LARGE_DF = 1000  # above it t_quantile uses Fisher's expansion (error far below 1e-9), below it the exact series
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
    half = t_quantile(0.5 + confidence / 2, arr.size - 1) * float(arr.std(ddof=1)) / math.sqrt(arr.size)
    return Estimate(mean, mean - half, mean + half)


MIN_CONTROLLED = 10  # replications before a control variate is used: its coefficient is estimated from them


def controlled_interval(values: Sequence[float], controls: Sequence[float], expected: float,
                        confidence: float = 0.95) -> Estimate:
    """Mean of per-replication estimates with a control variate regressed out, and its Student-t interval.

    A control is a per-replication quantity whose expectation is known (the arrivals a Poisson load starts in the
    window: its rate times the window): a replication that drew more arrivals than expected ran busier, so part of
    its deviation is explained and removed, Y - b (C - E[C]) with b fitted over the replications (Lavenberg & Welch
    1981; Law & Kelton, section 11.3). The estimate stays consistent whatever b is; its variance falls by the
    squared correlation of Y and C, and the interval (the regression's prediction at C = E[C], n - 2 degrees of
    freedom) accounts for b being estimated. Below MIN_CONTROLLED replications, or with a control that does not
    vary, it is the plain t_interval."""
    y, c = np.asarray(values, dtype=float), np.asarray(controls, dtype=float)
    y, c = y[np.isfinite(y)], c[np.isfinite(y)]
    if y.size < MIN_CONTROLLED:
        return t_interval(values, confidence)
    dc = c - c.mean()
    sxx = float(dc @ dc)
    if sxx <= 0.0:
        return t_interval(values, confidence)
    dy = y - y.mean()
    slope = float(dc @ dy) / sxx
    value = float(y.mean() - slope * (c.mean() - expected))
    residual = dy - slope * dc
    spread = float(residual @ residual) / (y.size - 2) * (1.0 / y.size + (c.mean() - expected) ** 2 / sxx)
    half = t_quantile(0.5 + confidence / 2, y.size - 2) * math.sqrt(spread)
    return Estimate(value, value - half, value + half)


def sectioned(per_section: Estimate, section_mean: float, pooled: float, sections: int,
              confidence: float = 0.95) -> Estimate:
    """A quantile of the pooled output of independent replications (the sections), with the interval of the
    sectioning method (Asmussen & Glynn 2007, III.5; Nakayama 2014): ``per_section`` is the interval made from the
    sections' own quantiles (plain or with a control variate), ``section_mean`` their mean. The mean of the
    sections' quantiles is biased by the sections' length (a short run's quantile falls short of the long-run one
    where its samples are correlated: M/M/1 at rho 0.8, p99 of 1 s runs 17.6 ms against 23.0 in theory); the pooled
    quantile is not. Its interval is the sections' one moved onto it and widened by their spread around it:
    S^2 = sum (q_r - pooled)^2 / (R - 1) = s^2 + R / (R - 1) (mean - pooled)^2."""
    shift = pooled - section_mean
    if sections < 2 or not math.isfinite(per_section.half_width):
        return Estimate(per_section.value + shift, float("nan"), float("nan"))
    extra = t_quantile(0.5 + confidence / 2, sections - 1) * abs(shift) / math.sqrt(sections - 1)
    half = math.hypot(per_section.half_width, extra)
    value = per_section.value + shift
    return Estimate(value, value - half, value + half)


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile for an integer number of degrees of freedom, to machine precision, without scipy (whose
    import is a quarter of a second of every fresh `meshsim predict`): bisection on the angle of the exact finite
    series for the t distribution function (Abramowitz & Stegun 26.7.3-4)."""
    if not 0.0 < p < 1.0 or df < 1:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df >= 1, got p={p}, df={df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    if df > LARGE_DF:
        return _t_quantile_expansion(p, df)
    target, lo, hi = 2.0 * p - 1.0, 0.0, math.pi / 2  # P(|T| <= t) at t = sqrt(df) tan(theta)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        lo, hi = (mid, hi) if _t_central(mid, df) < target else (lo, mid)
    return math.sqrt(df) * math.tan(0.5 * (lo + hi))


def _t_quantile_expansion(p: float, df: int) -> float:
    """Fisher's expansion of the t quantile around the normal one (Abramowitz & Stegun 26.7.5), for many degrees
    of freedom, where the exact series would take df / 2 terms per step: its error is O(df^-5)."""
    from statistics import NormalDist

    z, v = NormalDist().inv_cdf(p), float(df)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / v + g2 / v**2 + g3 / v**3 + g4 / v**4


def _t_central(theta: float, df: int) -> float:
    """P(|T| <= sqrt(df) tan(theta)) for T with ``df`` degrees of freedom (A&S 26.7.3 for odd df, 26.7.4 even)."""
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2 == 0:
        term = total = 1.0
        for k in range(1, df // 2):  # (1*3*..*(2k-1)) / (2*4*..*2k) cos^2k
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        return s * total
    if df == 1:
        return 2.0 * theta / math.pi
    term = total = math.cos(theta)
    for k in range(1, (df - 1) // 2):  # (2*4*..*2k) / (3*5*..*(2k+1)) cos^(2k+1)
        term *= c2 * (2 * k) / (2 * k + 1)
        total += term
    return 2.0 / math.pi * (theta + s * total)


def pooled_cdf(samples: Sequence[np.ndarray]) -> tuple[list[float], list[float]]:
    """Quantile levels and pooled latency quantiles (seconds) for CDF plots."""
    present = [s for s in samples if s.size]
    pooled = np.concatenate(present) if present else np.empty(0)  # an overloaded run may complete nothing
    if pooled.size == 0:
        return list(CDF_LEVELS), [float("nan")] * len(CDF_LEVELS)
    return list(CDF_LEVELS), np.quantile(pooled, CDF_LEVELS).tolist()
