"""Maximum-likelihood fit of the candidate families to one observation, chosen by AIC.

Binned data: interval-censored likelihood, sum_i n_i log(F(hi_i) - F(lo_i)). Raw samples: sum log f(x).
The same optimiser serves the deconvolution (:mod:`meshsim.calibrate.fit.deconvolution`), which passes its own CDF.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from scipy import optimize

from meshsim.calibrate.fit.acceptance import choose
from meshsim.calibrate.fit.families import Family, candidates
from meshsim.calibrate.fit.gof import GoodnessOfFit, binned_loglik, goodness_of_fit
from meshsim.calibrate.fit.observations import Observation
from meshsim.distributions import Distribution


@dataclass(frozen=True)
class FitResult:
    """One family fitted to one component."""

    family: Family
    theta: np.ndarray
    distribution: Distribution
    loglik: float
    n: int
    gof: GoodnessOfFit | None = None

    @property
    def aic(self) -> float:
        return 2 * self.family.k - 2 * self.loglik

    def summary(self) -> dict[str, object]:
        out: dict[str, object] = {"family": self.family.name, "aic": round(self.aic, 1), "n": self.n,
                                  "loglik": round(self.loglik, 1)}
        if self.gof is not None:
            out.update(self.gof.to_dict())
        return out


def maximise(objective: Callable[[np.ndarray], float], starts: Sequence[np.ndarray], max_evals: int) -> np.ndarray:
    """Minimise a negative log-likelihood from several starts (Nelder-Mead, then a Powell polish)."""
    best_x, best_f = None, np.inf
    for x0 in starts:
        res = optimize.minimize(objective, x0, method="Nelder-Mead",
                                options={"maxfev": max_evals, "xatol": 1e-5, "fatol": 1e-4, "adaptive": True})
        if res.fun < best_f:
            best_x, best_f = res.x, res.fun
    assert best_x is not None
    polish = optimize.minimize(objective, best_x, method="Powell", options={"maxfev": max_evals, "xtol": 1e-5})
    return polish.x if polish.fun <= best_f else best_x


RAW_LIMIT = 50_000


def _cells(obs: Observation) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    b = obs.binned(2000)
    return b.lo, b.hi, b.counts


def finite_or_worst(f: Callable[[np.ndarray], float]) -> Callable[[np.ndarray], float]:
    """``f`` with numpy warnings off and a non-finite value read as the worst (1e300): what the optimiser minimises."""
    def wrapped(theta: np.ndarray) -> float:
        with np.errstate(all="ignore"):
            v = f(theta)
        return v if np.isfinite(v) else 1e300

    return wrapped


def fit_family(obs: Observation, family: Family, max_evals: int = 1500) -> FitResult:
    """Fit one family directly to an observation."""
    max_shift = obs.min * 0.999
    if obs.raw and obs.n > RAW_LIMIT:
        # plain likelihood over hundreds of thousands of samples is slow; 2000 equal-probability cells lose nothing
        obs = Observation(obs.label, *_cells(obs), None)
    if obs.raw:
        x = obs.samples

        def nll(theta: np.ndarray) -> float:
            return -float(np.sum(family.logpdf(theta, x, max_shift)))
    else:

        def nll(theta: np.ndarray) -> float:
            return -binned_loglik(obs, lambda v: family.cdf(theta, v, max_shift))

    starts = family.starts(obs.quantile, obs.min, max_shift)
    theta = maximise(finite_or_worst(nll), starts, max_evals)
    ll = -nll(theta)
    gof = goodness_of_fit(obs, lambda v: family.cdf(theta, v, max_shift), family.k)
    return FitResult(family, theta, family.distribution(theta, max_shift), ll, obs.n, gof)


def fit_best(
    obs: Observation, families: Sequence[Family] | None = None, max_evals: int = 1500, component: str = "",
    rejected: list[str] | None = None,
) -> tuple[FitResult, list[FitResult]]:
    """Fit every candidate and return (best acceptable by AIC, all fits sorted by AIC).

    Candidates failing :mod:`meshsim.calibrate.fit.acceptance` are skipped (their reasons appended to ``rejected``);
    none acceptable raises MeshsimError naming ``component`` and the run.
    """
    fits = [fit_family(obs, f, max_evals) for f in (families or candidates())]
    fits.sort(key=lambda r: r.aic)
    i, why = choose([f.family.name for f in fits], [f.distribution for f in fits],
                    [f.gof.ks if f.gof else float("nan") for f in fits], obs.max, component or obs.label, [obs.label])
    if rejected is not None:
        rejected.extend(why)
    return fits[i], fits
