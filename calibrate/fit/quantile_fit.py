"""Fitting a distribution to published percentiles only (no histogram): least squares on log-quantiles.

Model: (shifted) lognormal, log q(p) = log(shift + exp(mu + sigma z_p)). With repetitions the points are pooled;
the reported uncertainty is both the Gauss-Newton standard error from the residual scatter and the spread of the
per-repetition fits. The maximum (p100) is not used: it depends on the unknown number of requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import optimize, special

from meshsim.distributions import Distribution, LogNormal, Shifted


@dataclass(frozen=True)
class QuantileFit:
    distribution: Distribution
    median_s: float
    sigma: float
    shift_s: float
    se_log_median: float  # standard error of log(median) (Gauss-Newton, residual-scaled)
    se_sigma: float
    rms_log_residual: float
    rep_spread_median_s: float  # std of the median over per-repetition fits (nan with one repetition)
    rep_spread_sigma: float
    n_points: int

    def spec(self, source: str) -> dict:
        spec = self.distribution.to_spec()
        spec["source"] = source
        spec["fit"] = {
            "method": "least squares on log-quantiles (p50/p90/p99)",
            "se_log_median": round(self.se_log_median, 4), "se_sigma": round(self.se_sigma, 4),
            "rms_log_residual": round(self.rms_log_residual, 4), "n_points": self.n_points,
            "repetition_sd_median_ms": round(self.rep_spread_median_s * 1e3, 4),
            "repetition_sd_sigma": round(self.rep_spread_sigma, 4),
        }
        return spec


def _solve(p: np.ndarray, q: np.ndarray, shifted: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    z = special.ndtri(p)
    logq = np.log(q)

    def resid(x: np.ndarray) -> np.ndarray:
        mu, log_sigma = x[0], x[1]
        shift = q.min() * special.expit(x[2]) if shifted else 0.0
        return np.log(shift + np.exp(mu + math.exp(log_sigma) * z)) - logq

    slope, icpt = np.polyfit(z, logq, 1) if np.ptp(z) > 0 else (0.5, logq.mean())
    x0 = np.array([icpt, math.log(max(slope, 1e-3))] + ([-2.0] if shifted else []))
    res = optimize.least_squares(resid, x0)
    return res.x, res.fun, res.jac


def fit_quantiles(
    probs: Sequence[float], values_s: Sequence[float], reps: Sequence[int] | None = None, shifted: bool = False
) -> QuantileFit:
    """Fit to (probability, quantile seconds) points; ``reps`` labels repetitions for the spread estimate."""
    p = np.asarray(probs, float)
    q = np.asarray(values_s, float)
    keep = (p > 0) & (p < 1) & (q > 0)
    p, q = p[keep], q[keep]
    if p.size < 2 or np.unique(p).size < 2:
        raise ValueError("need at least two distinct percentiles below 100")
    x, resid, jac = _solve(p, q, shifted)
    dof = max(p.size - x.size, 1)
    s2 = float(resid @ resid) / dof
    try:
        cov = np.linalg.inv(jac.T @ jac) * s2
        se = np.sqrt(np.maximum(np.diag(cov), 0.0))
    except np.linalg.LinAlgError:
        se = np.full(x.size, np.nan)
    mu, sigma = float(x[0]), math.exp(float(x[1]))
    shift = float(q.min() * special.expit(x[2])) if shifted else 0.0
    spread_m, spread_s = float("nan"), float("nan")
    if reps is not None:
        r = np.asarray(reps)[keep]
        per = [_solve(p[r == k], q[r == k], False)[0] for k in np.unique(r) if np.unique(p[r == k]).size >= 2]
        if len(per) > 1:
            spread_m = float(np.std([math.exp(v[0]) for v in per], ddof=1))
            spread_s = float(np.std([math.exp(v[1]) for v in per], ddof=1))
    base = LogNormal(mu, sigma)
    dist: Distribution = Shifted(base, shift) if shift > 0 else base
    return QuantileFit(dist, math.exp(mu), sigma, shift, float(se[0]), float(se[1] * sigma),
                       math.sqrt(float(resid @ resid) / p.size), spread_m, spread_s, int(p.size))
