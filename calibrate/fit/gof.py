"""Goodness of fit of a model CDF to an observation: KS distance on the binned CDF and a pooled chi-square."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import stats

from meshsim.calibrate.fit.observations import Observation

Cdf = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class GoodnessOfFit:
    ks: float  # max |empirical CDF - model CDF| at bucket edges (or all samples when raw)
    chi2: float
    dof: int
    chi2_p: float
    n: int

    def to_dict(self) -> dict[str, float | int]:
        return {"ks": round(self.ks, 5), "chi2": round(self.chi2, 1), "dof": self.dof,
                "chi2_p": float(f"{self.chi2_p:.3g}"), "n": self.n}


def cell_probabilities(cdf_lo: np.ndarray, cdf_hi: np.ndarray) -> np.ndarray:
    """Probability of each listed bucket; the first is open below and the last open above (fortio's min/max)."""
    lo = cdf_lo.copy()
    hi = cdf_hi.copy()
    lo[0] = 0.0
    hi[-1] = 1.0
    return np.clip(hi - lo, 0.0, 1.0)


def binned_loglik(obs: Observation, cdf: Cdf) -> float:
    p = cell_probabilities(cdf(obs.lo), cdf(obs.hi))
    with np.errstate(divide="ignore"):
        ll = obs.counts * np.log(np.maximum(p, 1e-300))
    return float(ll.sum())


def goodness_of_fit(obs: Observation, cdf: Cdf, n_params: int) -> GoodnessOfFit:
    data = obs.binned() if obs.raw else obs
    if obs.raw:
        x = np.sort(obs.samples)
        f = cdf(x)
        n = x.size
        ks = float(max(np.max(np.arange(1, n + 1) / n - f), np.max(f - np.arange(n) / n)))
    else:
        edges, ecdf = data.ecdf_at_edges()
        ks = float(np.max(np.abs(ecdf[:-1] - cdf(edges[:-1])))) if edges.size > 1 else 0.0
    expected = data.counts.sum() * cell_probabilities(cdf(data.lo), cdf(data.hi))
    observed = data.counts
    # Pool neighbouring cells until each expects at least 5 requests (chi-square validity).
    pooled_o, pooled_e, acc_o, acc_e = [], [], 0.0, 0.0
    for o, e in zip(observed, expected):
        acc_o += o
        acc_e += e
        if acc_e >= 5:
            pooled_o.append(acc_o)
            pooled_e.append(acc_e)
            acc_o = acc_e = 0.0
    if pooled_e:
        pooled_o[-1] += acc_o
        pooled_e[-1] += acc_e
    # The zero-count gaps fortio omits hold the remaining expected mass.
    missing = data.counts.sum() - sum(pooled_e)
    if missing > 5:
        pooled_o.append(0.0)
        pooled_e.append(missing)
    o_arr, e_arr = np.asarray(pooled_o), np.maximum(np.asarray(pooled_e), 1e-9)
    chi2 = float(np.sum((o_arr - e_arr) ** 2 / e_arr))
    dof = max(len(o_arr) - 1 - n_params, 1)
    return GoodnessOfFit(ks, chi2, dof, float(stats.chi2.sf(chi2, dof)), obs.n)
