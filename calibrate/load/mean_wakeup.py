"""Mean load dependence: cost(g) = base + max x (1 - exp(-g / tau)), g = the idle gap before a request.

Used for the baseline's own rate dependence (``calibration.baseline_wakeup``, recorded, not simulated); the proxy's
``wakeup`` block is fitted by ``cold_wake``. Points are (idle gap, mean time) from runs at several rates, each with
its standard error. Three parameters need three distinct gaps; with two, tau is fixed at ``tau_prior`` and the
result is marked as such.

Identification: runs only see gaps between 1/rate values, so when the cost is still rising at the largest gap only
max/tau is identified and the optimum runs to a bound. Hence tau is bounded by a few times the largest gap seen,
max by a few times the pass mean, and a fit whose optimum sits on a bound -- or whose improvement over "no
wake-up" (a constant) is not significant by a likelihood-ratio (chi-square) test -- is reported, not used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import optimize, stats

TAU_MIN_S = 1e-6
TAU_GAP_FACTOR = 5.0  # tau may reach this many times the largest idle gap observed
SIGNIFICANCE = 0.05  # likelihood-ratio test level of wake-up vs constant
RUN_TO_RUN = 0.05  # relative run-to-run spread of a mean on a shared machine, added to each point's standard error
ABS_NOISE_S = 5e-6  # timer and bucket resolution floor of a mean difference


@dataclass(frozen=True)
class WakeupFit:
    base_s: float
    max_s: float
    tau_s: float
    tau_fixed: bool
    rms_s: float
    points: tuple[tuple[float, float], ...]
    tau_max_s: float = math.inf
    max_max_s: float = math.inf
    chi2_gain: float = math.nan  # chi-square(constant) - chi-square(wake-up)
    p_value: float = math.nan  # of that gain under "no wake-up"

    @property
    def on_bound(self) -> str:
        """Which parameter's optimum sits on its bound ('' when none): then only a ratio is identified."""
        hits = []
        if self.tau_s >= self.tau_max_s * (1 - 1e-3):
            what = "fixed tau clipped to" if self.tau_fixed else "tau at"
            hits.append(f"{what} its upper bound {self.tau_max_s * 1e3:.3g} ms")
        if not self.tau_fixed and self.tau_s <= TAU_MIN_S * (1 + 1e-3):
            hits.append("tau at its lower bound")
        if self.max_s >= self.max_max_s * (1 - 1e-3):
            hits.append(f"max at its upper bound {self.max_max_s * 1e3:.3g} ms")
        return "; ".join(hits)

    @property
    def significant(self) -> bool:
        return self.max_s > 0 and bool(self.p_value < SIGNIFICANCE)

    @property
    def accepted(self) -> bool:
        return self.significant and not self.on_bound

    def verdict(self) -> str:
        """One phrase: why the fit is (not) used."""
        fit = f"max {self.max_s * 1e3:.4g} ms, tau {self.tau_s * 1e3:.4g} ms{' (tau fixed)' if self.tau_fixed else ''}"
        if not self.significant:
            return f"not significant ({fit}: improvement over no wake-up p = {self.p_value:.2g})"
        if self.on_bound:
            return f"not identified ({fit}: {self.on_bound}; only max/tau is determined by these gaps)"
        return f"{fit}, improvement over no wake-up p = {self.p_value:.2g}"

    def block(self, source: str) -> dict[str, object]:
        note = " (tau fixed: only two rates)" if self.tau_fixed else ""
        return {"max_ms": round(self.max_s * 1e3, 4), "tau_ms": round(self.tau_s * 1e3, 4),
                "source": source + note}

    def predict(self, gap_s: float) -> float:
        return self.base_s + self.max_s * (1 - math.exp(-gap_s / self.tau_s))


def idle_gap(rps: float, connections: int, workers: int, busy_s: float) -> float:
    """Mean idle time of a worker between requests: each busy worker sees rps / min(c, W) requests per second."""
    return max(arrival_gap(rps, connections, workers) - busy_s, 0.0)


def arrival_gap(rps: float, connections: int, workers: int) -> float:
    """Mean time between requests reaching one worker: 1 / (rate per worker)."""
    return max(min(connections, workers), 1) / rps


def fit_wakeup(
    gaps_s: Sequence[float],
    added_s: Sequence[float],
    tau_prior_s: float = 1e-3,
    *,
    sigma_s: Sequence[float] | None = None,
    tau_max_s: float | None = None,
    max_max_s: float | None = None,
) -> WakeupFit:
    """Weighted least squares of ``added = base + max (1 - exp(-gap / tau))``.

    ``sigma_s``: standard error of each point (default: RUN_TO_RUN of the mean added, at least ABS_NOISE_S).
    ``tau_max_s``: default TAU_GAP_FACTOR x the largest gap. ``max_max_s``: upper bound of max (default none).
    """
    g = np.asarray(gaps_s, float)
    a = np.asarray(added_s, float)
    if np.unique(g).size < 2:
        raise ValueError("load dependence needs runs at two or more rates")
    if sigma_s is None:
        sig = np.full(a.size, max(RUN_TO_RUN * float(np.mean(np.abs(a))), ABS_NOISE_S))
    else:
        sig = np.maximum(np.asarray(sigma_s, float), 1e-12)
    tau_hi = float(tau_max_s) if tau_max_s is not None else TAU_GAP_FACTOR * float(g.max())
    tau_hi = max(tau_hi, TAU_MIN_S * 10)
    max_hi = float(max_max_s) if max_max_s is not None else np.inf
    fixed = np.unique(g).size < 3
    tau_fixed_value = min(tau_prior_s, tau_hi)

    def model(x: np.ndarray) -> np.ndarray:
        tau = tau_fixed_value if fixed else math.exp(x[2])
        return x[0] + x[1] * -np.expm1(-g / tau)

    def resid(x: np.ndarray) -> np.ndarray:
        return (model(x) - a) / sig

    lower = [0.0, 0.0] + ([] if fixed else [math.log(TAU_MIN_S)])
    upper = [np.inf, max_hi] + ([] if fixed else [math.log(tau_hi)])
    amp0 = min(float(np.ptp(a)) + 1e-6, max_hi * 0.9 if np.isfinite(max_hi) else np.inf)
    tau_starts = [None] if fixed else np.geomspace(max(float(g[g > 0].min()) if np.any(g > 0) else 1e-5, 2e-6),
                                                   tau_hi * 0.9, 4)
    best = None
    for t0 in tau_starts:
        x0 = [max(float(a.min()) * 0.8, 0.0), amp0] + ([] if t0 is None else [math.log(t0)])
        x0 = list(np.clip(x0, np.array(lower) + 1e-12, np.array(upper) - 1e-12))
        res = optimize.least_squares(resid, x0, bounds=(lower, upper))
        if best is None or res.cost < best.cost:
            best = res
    assert best is not None
    x = best.x
    tau = tau_fixed_value if fixed else math.exp(x[2])
    chi2_wake = float(np.sum(resid(x) ** 2))
    w = 1 / sig**2
    const = float(np.sum(w * a) / np.sum(w))
    chi2_const = float(np.sum(((a - const) / sig) ** 2))
    gain = max(chi2_const - chi2_wake, 0.0)
    dof = 1 if fixed else 2
    rms = math.sqrt(float(np.mean((model(x) - a) ** 2)))
    return WakeupFit(float(x[0]), float(x[1]), tau, fixed, rms, tuple(zip(g.tolist(), a.tolist())),
                     tau_max_s=tau_hi, max_max_s=max_hi, chi2_gain=gain, p_value=float(stats.chi2.sf(gain, dof)))
