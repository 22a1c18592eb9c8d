"""Which fitted candidates may enter a model: a fit that is best by AIC can still be a failure.

An optimiser may run off to a degenerate corner (a gamma with shape 3e-5 and scale 13 s has a sensible mean but
puts nearly all mass at zero) or the family may not describe the data at all (KS 0.66). Such a candidate is
rejected and the next one by AIC is taken; when none is acceptable the fit fails with one line naming the
component and its runs, so a nonsense model is never written.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from meshsim.distributions import Distribution, Gamma, LogNormal, Mixture, Shifted, Weibull
from meshsim.errors import MeshsimError

KS_MAX = 0.1  # largest KS distance (data vs fitted CDF) accepted outright
KS_HARD = 0.3  # up to this, the best non-degenerate candidate is kept with a warning when none meets KS_MAX:
# short lab runs on a shared machine are noisier than any family; beyond it the family does not describe the data
SHAPE_MIN = 0.05  # gamma / Weibull shape below this: all mass at zero plus a tail reaching far past the data
SIGMA_MAX = 4.0  # lognormal sigma above this: the same degeneracy on a log scale
SCALE_FACTOR = 10.0  # scale (or lognormal median) more than this many times the data's largest value
MIN_WEIGHT = 1e-3  # mixture components lighter than this cannot distort the model and are not judged
UNSEEN_MEAN_MAX = 0.25  # share of a candidate's mean above the data's largest value: beyond it the model's CPU and
# throughput rest on durations no run showed (a mixture's lognormal tail with sigma 3.8 and median 0.37 us put 56 % of
# a lab sidecar pass's mean beyond the run's 8.7 ms maximum and booked 2.7x its CPU; a lognormal with sigma 2
# has 14 % of its mean beyond its own 99.9th percentile)
MIN_SCALE_S = 1e-15  # a scale or median below a femtosecond: the optimiser ran off to zero (mu -> -inf); a model file
# cannot even hold it (a median that underflows to 0 is refused when read back)


def _collapsed(dist: Distribution) -> str:
    """A scale or median run off to zero, whatever the component's weight (the file could not hold it)."""
    if isinstance(dist, Shifted):
        return _collapsed(dist.base)
    if isinstance(dist, (Gamma, Weibull)) and not dist.scale >= MIN_SCALE_S:
        return f"scale {dist.scale:.3g} s collapsed to zero"
    if isinstance(dist, LogNormal) and not dist.quantile(0.5) >= MIN_SCALE_S:
        return f"median {dist.quantile(0.5):.3g} s collapsed to zero"
    return ""


def _degenerate(dist: Distribution, data_max_s: float) -> str:
    return _degenerate_part(dist, data_max_s) or _unseen_mean(dist, data_max_s)


def _unseen_mean(dist: Distribution, data_max_s: float) -> str:
    """The share of the mean above the data's maximum M: 1 - E[X; X <= M] / E[X], with E[X; X <= M] =
    M F(M) - integral of F over [0, M] (any distribution with a CDF)."""
    mean = dist.mean
    if not (mean > 0 and math.isfinite(mean) and data_max_s > 0):
        return ""
    x = np.linspace(0.0, data_max_s, 20_001)
    cdf = np.asarray(dist.cdf(x), dtype=float)
    unseen = 1.0 - (data_max_s * cdf[-1] - float(np.trapezoid(cdf, x))) / mean
    if unseen > UNSEEN_MEAN_MAX:
        return (f"{unseen:.0%} of its mean ({mean * 1e3:.3g} ms) beyond the data's largest value "
                f"({data_max_s * 1e3:.3g} ms)")
    return ""


def _degenerate_part(dist: Distribution, data_max_s: float) -> str:
    if isinstance(dist, Shifted):
        return _degenerate_part(dist.base, data_max_s)
    if isinstance(dist, Mixture):
        for w, comp in zip(dist.weights, dist.components):
            why = _degenerate_part(comp, data_max_s) if w >= MIN_WEIGHT else _collapsed(comp)
            if why:
                return why
        return ""
    limit = SCALE_FACTOR * data_max_s
    if _collapsed(dist):
        return _collapsed(dist)
    if isinstance(dist, (Gamma, Weibull)):
        if dist.shape < SHAPE_MIN:
            return f"degenerate shape {dist.shape:.3g} < {SHAPE_MIN}"
        if dist.scale > limit:
            return f"scale {dist.scale * 1e3:.4g} ms beyond {SCALE_FACTOR:g}x the data's maximum"
    if isinstance(dist, LogNormal):
        if dist.sigma > SIGMA_MAX:
            return f"degenerate sigma {dist.sigma:.3g} > {SIGMA_MAX}"
        if dist.quantile(0.5) > limit:
            return f"median {dist.quantile(0.5) * 1e3:.4g} ms beyond {SCALE_FACTOR:g}x the data's maximum"
    return ""


def problem(dist: Distribution, ks: float, data_max_s: float) -> str:
    """Why a fitted candidate is not acceptable ('' when it is)."""
    if not ks <= KS_MAX:  # also catches NaN
        return f"KS {ks:.3g} > {KS_MAX}"
    return _degenerate(dist, data_max_s)


class FitRefused(MeshsimError):
    """No candidate distribution reproduces the runs a component is fitted from (their noise swamps it)."""

    def __init__(self, message: str, component: str, runs: Sequence[str]) -> None:
        super().__init__(message)
        self.component = component
        self.runs = tuple(runs)


def choose(names: Sequence[str], dists: Sequence[Distribution], ks: Sequence[float], data_max_s: float,
           component: str, runs: Sequence[str]) -> tuple[int, list[str]]:
    """Index of the first acceptable candidate (candidates in AIC order) and the reasons for those rejected."""
    rejected = []
    for i, (name, dist, k) in enumerate(zip(names, dists, ks)):
        why = problem(dist, k, data_max_s)
        if not why:
            return i, rejected
        rejected.append(f"{name}: {why}")
    for i, (name, dist, k) in enumerate(zip(names, dists, ks)):
        if k <= KS_HARD and not _degenerate(dist, data_max_s):
            return i, rejected + [f"kept {name} despite KS {k:.3g} > {KS_MAX}: no candidate fits better (a poor fit)"]
    raise FitRefused(f"fit of {component} from runs {', '.join(runs)} failed: no acceptable candidate "
                     f"({'; '.join(rejected)}); check these runs (noise larger than the component?) or leave "
                     "them out", component, runs)
