"""Deconvolution by likelihood: fit one hidden component so that known parts plus k copies of it reproduce a mode.

Example: a server-sidecar run is baseline (network + app, taken empirically from the baseline run) plus the inbound
proxy's request pass plus its response pass. With the two passes independent and identically distributed, the
per-pass distribution P is the one maximising the interval-censored likelihood of the server-sidecar histogram under
``baseline * P * P`` (``*`` = convolution, computed on a grid by FFT). No percentiles are subtracted: the start
values only come from quantile differences.

Several (observation, known part, k) terms may share the component; their log-likelihoods add.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from meshsim.calibrate.fit.acceptance import FitRefused, choose
from meshsim.calibrate.fit.convolution import Grid, GridPmf, from_cdf, power
from meshsim.calibrate.fit.families import Family, candidates, widened
from meshsim.calibrate.fit.gof import GoodnessOfFit, binned_loglik, goodness_of_fit
from meshsim.calibrate.fit.mle import FitResult, finite_or_worst, maximise
from meshsim.calibrate.fit.observations import Observation
from meshsim.interrupts import interrupts_deferred
from meshsim.parent_death import Parent, start_worker
from meshsim.progress import Progress
from meshsim.sim.experiments.replication_workers import stop_workers


@dataclass(frozen=True)
class Term:
    """``obs`` is modelled as ``known`` plus ``k`` independent copies of the component."""

    obs: Observation
    known: GridPmf
    k: int


@dataclass(frozen=True)
class ComponentFit:
    name: str
    best: FitResult
    fits: tuple[FitResult, ...]
    gof: tuple[GoodnessOfFit, ...]  # of each term's observation under the fitted convolution
    terms: tuple[Term, ...]
    rejected: tuple[str, ...] = ()  # better-AIC candidates refused by the acceptance rules, with the reason

    def model_cdf(self, i: int = 0) -> Callable[[np.ndarray], np.ndarray]:
        """CDF of term i's mode under the fitted component (for reports)."""
        term = self.terms[i]
        fam, theta, shift = self.best.family, self.best.theta, _max_shift(self.terms)
        comp = from_cdf(term.known.grid, lambda x: fam.cdf(theta, x, shift))
        return term.known.plus(power(comp, term.k)).cdf


def _known_min(pmf: GridPmf) -> float:
    idx = int(np.argmax(np.cumsum(pmf.mass) > 1e-4))
    return (idx + pmf.terms / 2 - 0.5) * pmf.grid.dt


def _max_shift(terms: Sequence[Term]) -> float:
    room = [(t.obs.min - _known_min(t.known)) / t.k for t in terms]
    return max(min(room), 2e-6)


def fit_component(
    name: str,
    terms: Sequence[Term],
    families: Sequence[Family] | None = None,
    max_evals: int = 800,
    progress: Progress | None = None,
    warm: ComponentFit | None = None,
    explore: bool = True,
) -> ComponentFit:
    """Fit every candidate family to the shared component and keep the best by AIC.

    ``warm``: the same component fitted before over slightly different known parts (the wake-up fit's fixed-point
    loop refits the passes after every replay): each family also starts from its optimum there, and with
    ``explore`` off only from there (a quarter of the evaluations; a lab fit whose every refit started so ended
    1.5-2.6 log-likelihood units lower per pass, so the loop's last refit explores)."""
    terms = tuple(Term(t.obs.binned(), t.known, t.k) for t in terms)
    grid: Grid = terms[0].known.grid
    max_shift = _max_shift(terms)

    def fitted(fit: FitResult) -> None:
        if progress:
            progress(f"  {name}: {fit.family.name}: AIC {fit.aic:.1f}")

    previous = {fit.family: fit.theta for fit in warm.fits} if warm is not None else {}
    tried = tuple(families or candidates())
    fits = fit_component_families(terms, tried, max_shift, max_evals, fitted, previous, explore)

    def term_gofs(fit: FitResult) -> tuple[GoodnessOfFit, ...]:
        comp = from_cdf(grid, lambda x: fit.family.cdf(fit.theta, x, max_shift))
        return tuple(goodness_of_fit(t.obs, t.known.plus(power(comp, t.k)).cdf, fit.family.k) for t in terms)

    def judged() -> tuple[list[FitResult], list[tuple[GoodnessOfFit, ...]], int, list[str]]:
        # candidates in AIC order; the worst term's KS counts (every run must be reproduced)
        ordered = sorted(fits, key=lambda r: r.aic)
        gofs = [term_gofs(fit) for fit in ordered]
        index, why = choose([f.family.name for f in ordered], [f.distribution for f in ordered],
                            [max(g.ks for g in each) for each in gofs], max(t.obs.max for t in terms),
                            name, [t.obs.label for t in terms])
        return ordered, gofs, index, why

    try:
        fits, all_gofs, index, rejected = judged()
    except FitRefused:
        rest = widened(families or ())
        if not rest:
            raise
        if progress:
            progress(f"  {name}: no candidate of {len(tried)} acceptable; trying the other {len(rest)} families")
        fits = [*fits, *fit_component_families(terms, rest, max_shift, max_evals, fitted, previous, explore)]
        fits, all_gofs, index, rejected = judged()
    picked, gofs = fits[index], all_gofs[index]
    if progress and rejected:
        progress(f"  {name}: rejected {'; '.join(rejected)}")
    best = FitResult(picked.family, picked.theta, picked.distribution, picked.loglik, picked.n, gofs[0])
    fits = [best] + [f for f in fits if f is not picked]
    return ComponentFit(name, best, tuple(fits), gofs, terms, tuple(rejected))


def fit_component_family(family: Family, terms: tuple[Term, ...], max_shift: float, max_evals: int,
                         start: np.ndarray | None = None, explore: bool = True) -> FitResult:
    """The maximum-likelihood fit of one family to the component (a pure function: run in a worker process), from
    ``start`` when given and, with ``explore`` (or without a start), from the family's own starts."""
    grid = terms[0].known.grid
    main = max(terms, key=lambda t: t.obs.n)

    def start_q(p: float) -> float:
        return max((main.obs.quantile(p) - main.known.quantile(p)) / main.k, 1e-6)

    def nll(theta: np.ndarray) -> float:
        comp = from_cdf(grid, lambda x: family.cdf(theta, x, max_shift))
        total = 0.0
        for t in terms:
            total -= binned_loglik(t.obs, t.known.plus(power(comp, t.k)).cdf)
        return total

    starts = [start] if start is not None else []
    if explore or start is None:
        starts += family.starts(start_q, max_shift, max_shift)
    theta = maximise(finite_or_worst(nll), starts, max_evals)
    return FitResult(family, theta, family.distribution(theta, max_shift), -nll(theta), sum(t.obs.n for t in terms))


def fit_component_families(terms: tuple[Term, ...], families: tuple[Family, ...], max_shift: float, max_evals: int,
                           fitted: Callable[[FitResult], None],
                           starts: Mapping[Family, np.ndarray] | None = None,
                           explore: bool = True) -> list[FitResult]:
    """Every family's fit, in the order given, each handed to ``fitted`` as soon as it and those before it are
    done. The families are independent and each takes seconds (a lab fit runs dozens): they run side by side in
    forked workers, one per core; the results are those of one process."""
    starts = starts or {}
    processes = min(len(families), len(os.sched_getaffinity(0)))
    fits: list[FitResult] = []
    if processes <= 1:
        for family in families:
            fits.append(fit_component_family(family, terms, max_shift, max_evals, starts.get(family), explore))
            fitted(fits[-1])
        return fits
    # the families with most parameters take longest: started first, they do not finish alone at the end
    order = sorted(range(len(families)), key=lambda i: -families[i].k)
    pool = ProcessPoolExecutor(max_workers=processes, mp_context=multiprocessing.get_context("fork"),
                               initializer=start_worker, initargs=(Parent.here(),))
    try:
        with interrupts_deferred():  # submitting forks the workers: an interrupt inside a fork would be lost
            futures = {i: pool.submit(fit_component_family, families[i], terms, max_shift, max_evals,
                                      starts.get(families[i]), explore) for i in order}
        for i in range(len(families)):
            fits.append(futures[i].result())
            fitted(fits[-1])
    except BaseException:
        stop_workers(pool)
        raise
    pool.shutdown()
    return fits


def component_pmf(fit: ComponentFit) -> GridPmf:
    """The fitted component on the grid, to serve as a known part of later fits."""
    grid = fit.terms[0].known.grid
    shift = _max_shift(fit.terms)
    return from_cdf(grid, lambda x: fit.best.family.cdf(fit.best.theta, x, shift))
