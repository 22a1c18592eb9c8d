"""Cold wake-ups of proxy workers from runs at several rates: latency and CPU per request, one event behind both.

The mesh schema's ``wakeup`` block says: a worker idle for g wakes cold with probability p(g) = 1 - exp(-g / tau),
and a cold wake costs the request ``delay`` (exit latency, not CPU) plus ``cpu`` (CPU on the worker). Per request
one proxy has two passes: the request pass after the gap between requests, the response pass after the time the
request spent downstream. With P the expected cold wakes per request (p(g) summed over its passes):

- mean latency one proxy adds per request   = L0 + resume_cpu x R + (delay + cpu) x P
- CPU one proxy spends per request          = C0 + resume_cpu x R + cpu x P     (one series per sidecar)

R is the passes per request that found their worker idle at all (it blocked in epoll_wait and had to be woken:
a syscall return and a switch-in, paid however short the gap). Where requests arrive together (several
connections firing at once, a busy worker) a wake serves several passes and R < 2. P and R come from the idle gaps
the passes of each run found, taken from a simulation of the run's own setup. With only one-connection runs every
pass resumes (R = 2): then resume CPU is not separable from C0 and is left inside it.

Given tau all are linear in the unknowns, so tau is profiled on a grid and the rest solved by non-negative least
squares on all series at once. The fit is kept only when it improves on "no load dependence" (constants) by a
likelihood-ratio test, tau is not on its lower bound and every series keeps a cost of its own. Tau on its upper bound
(the cost still rising linearly at the longest gaps) determines only cost / tau: the fit is kept, with a note.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np
from scipy import optimize, stats

SIGNIFICANCE = 0.05
TAU_MIN_S = 1e-6
TAU_GAP_FACTOR = 5.0  # tau may reach this many times the largest gap between requests seen by a worker
TAU_GRID = 160


def cold_probability(gap_s: float | np.ndarray, tau_s: float) -> float | np.ndarray:
    return -np.expm1(-np.maximum(gap_s, 0.0) / tau_s)


@dataclass(frozen=True, eq=False)  # holds arrays: compared by identity
class WakePoint:
    """One run's value per request of one proxy, with the idle gaps its workers' passes found (0 = busy)."""

    rps: float
    gaps_s: np.ndarray  # every pass's idle gap, of ``requests`` requests through the proxy (or proxies)
    requests: float
    value_s: float
    sigma_s: float

    def colds(self, tau_s: float) -> float:
        """Expected cold wakes per request."""
        return float(np.sum(cold_probability(self.gaps_s, tau_s))) / self.requests

    @property
    def resumes(self) -> float:
        """Passes per request that found their worker idle (it blocked in epoll and had to be woken)."""
        return float(np.count_nonzero(self.gaps_s > 0)) / self.requests


@dataclass(frozen=True)
class WakeSeries:
    name: str  # "latency" or the CPU component ("server/sidecar")
    kind: str  # "latency" (slope delay + cpu) or "cpu" (slope cpu)
    points: tuple[WakePoint, ...]


@dataclass(frozen=True)
class ColdWakeFit:
    tau_s: float
    delay_s: float
    cpu_s: float
    resume_cpu_s: float
    resume_identified: bool
    bases_s: dict[str, float]  # per series: its value with no wake-up at all (L0, C0)
    chi2: float
    chi2_constant: float
    p_value: float
    tau_max_s: float
    series: tuple[WakeSeries, ...]
    resume_note: str = ""  # why resume CPU was left out although the runs vary the passes per wake

    @property
    def bases_on_bound(self) -> str:
        """Series whose own cost (no wake-up at all) came out at the bound 0: the wake-ups took all of it."""
        low = [name for s in self.series for name in [s.name]
               if self.bases_s[name] <= BASE_FLOOR * float(np.mean([p.value_s for p in s.points]))]
        return f"{', '.join(low)} would have no cost without wake-ups" if low else ""

    @property
    def tau_at_upper_bound(self) -> bool:
        """The cold cost still rises about linearly with the gap at the longest gaps seen: over the runs' gaps only
        cost / tau is determined, and tau is kept at its bound. Accepted all the same: a fit whose tau lands just
        under the bound is, and the model without the block (every rate at the reference rate's cost) is the worse
        extrapolation wherever runs at higher rates show the fall. Below the lowest rate measured the cold cost
        extrapolates (it levels off near tau), and the block's note says so."""
        return self.tau_s >= self.tau_max_s * (1 - 1e-3)

    @property
    def on_bound(self) -> str:
        """Why the fit is not identified ('' when it is)."""
        if self.tau_s <= TAU_MIN_S * (1 + 1e-3):
            return "tau at its lower bound"
        return self.bases_on_bound

    @property
    def significant(self) -> bool:
        return (self.delay_s + self.cpu_s + self.resume_cpu_s) > 0 and bool(self.p_value < SIGNIFICANCE)

    @property
    def accepted(self) -> bool:
        return self.significant and not self.on_bound

    def describe(self) -> str:
        resume = (f"resume CPU {self.resume_cpu_s * 1e3:.4g} ms per wake from idle; " if self.resume_identified
                  else f"{self.resume_note or 'resume CPU not identified (every pass found its worker idle)'}: "
                  "inside the pass CPU; ")
        return (f"{resume}cold wake delay {self.delay_s * 1e3:.4g} ms + CPU {self.cpu_s * 1e3:.4g} ms, "
                f"tau {self.tau_s * 1e3:.4g} ms" + (" (its upper bound: only cost / tau is determined by these gaps)"
                                                   if self.tau_at_upper_bound else ""))

    def verdict(self) -> str:
        if not self.significant:
            return f"not significant ({self.describe()}: improvement over no load dependence p = {self.p_value:.2g})"
        if self.on_bound:
            return f"not identified ({self.describe()}: {self.on_bound}; only a ratio is determined by these gaps)"
        return f"{self.describe()}, improvement over no load dependence p = {self.p_value:.2g}"

    def block(self, source: str) -> dict[str, object]:
        out = {"delay_ms": round(self.delay_s * 1e3, 4), "cpu_ms": round(self.cpu_s * 1e3, 4),
               "tau_ms": round(self.tau_s * 1e3, 4)}
        if self.resume_identified:
            out["resume_cpu_ms"] = round(self.resume_cpu_s * 1e3, 4)
        if self.tau_at_upper_bound:
            out["note"] = (f"tau_ms is its upper bound, {TAU_GAP_FACTOR:g} x the longest gap between requests: "
                           f"{TAU_BOUND_NOTE}")
        return {**out, "source": source}


TAU_BOUND_NOTE = ("the cold cost still rises with the gap at the longest gaps measured, so only cost / tau is "
                  "determined there; below the lowest rate measured the cold cost is extrapolated")


BASE_FLOOR = 0.05  # a series' own cost below this share of its mean counts as on the bound 0
RESUME_SPREAD = 0.1  # resumes per request must differ by this much between runs of a series to be identified


def resume_identified(series: Sequence[WakeSeries]) -> bool:
    return any(np.ptp([p.resumes for p in s.points]) >= RESUME_SPREAD for s in series if len(s.points) > 1)


def _design(series: Sequence[WakeSeries], tau: float, with_resume: bool, with_delay: bool = True,
            ) -> tuple[np.ndarray, np.ndarray]:
    """Rows of (one base per series, resume CPU, cold CPU, cold delay) weighted by 1/sigma; weighted targets."""
    rows, target, sig = [], [], []
    n = len(series)
    has_cpu = any(s.kind == "cpu" for s in series)  # without CPU data, delay and CPU are one slope: call it delay
    for i, s in enumerate(series):
        for p in s.points:
            row = np.zeros(n + 3)
            row[i] = 1.0
            row[n] = p.resumes if with_resume else 0.0  # CPU on the path: in both kinds
            colds = p.colds(tau)
            row[n + 1] = colds if has_cpu else 0.0
            if s.kind == "latency" and with_delay:
                row[n + 2] = colds
            rows.append(row)
            target.append(p.value_s)
            sig.append(p.sigma_s)
    w = 1.0 / np.maximum(np.asarray(sig), 1e-12)
    return np.asarray(rows) * w[:, None], np.asarray(target) * w


def _solve(series: Sequence[WakeSeries], tau: float, with_resume: bool, with_delay: bool = True,
           ) -> tuple[np.ndarray, float]:
    a, b = _design(series, tau, with_resume, with_delay)
    scale = np.maximum(np.abs(a).max(axis=0), 1e-300)  # columns of very different size: solve scaled
    x, rnorm = optimize.nnls(a / scale, b)
    return x / scale, float(rnorm**2)


def fit_cold_wake(series: Sequence[WakeSeries], tau_max_s: float) -> ColdWakeFit:
    """Profile tau on a log grid (then refine); NNLS for the bases, resume CPU, cold wake CPU and delay.

    Resume CPU is tried only where the runs vary how many passes share a wake; if it would leave a series no
    cost of its own (a base on its bound of 0), the split is not identified and the fit is made without it.
    The cold wake delay is kept only where the latency series need it (see ``_without_needless_delay``).
    """
    series = [s for s in series if s.points]
    if not any(s.kind == "latency" for s in series):
        raise ValueError("cold wake fit needs a latency series")
    if len({p.rps for s in series for p in s.points}) < 2:
        raise ValueError("load dependence needs runs at two or more rates")
    tau_hi = max(float(tau_max_s), TAU_MIN_S * 10)
    if resume_identified(series):
        fit = _without_needless_delay(series, tau_hi, True)
        if not fit.bases_on_bound:
            return fit
        without = _without_needless_delay(series, tau_hi, False)
        return replace(without, resume_note=f"resume CPU not identified: with it, {fit.bases_on_bound}")
    return _without_needless_delay(series, tau_hi, False)


DELAY_SIGNIFICANCE = 0.05


def _without_needless_delay(series: Sequence[WakeSeries], tau_hi: float, with_resume: bool) -> ColdWakeFit:
    """The fit with a cold wake delay, unless the fit without one is as good (a likelihood-ratio test, 1 dof).

    Where the latency runs all wake about as often (every pass cold at low rates, say) while the CPU runs span the
    wake-ups' time scale, the latency series' own base and the delay trade off exactly, and least squares may put
    all of the latency on the delay and none on the pass. Occam's choice: no delay the data do not ask for.
    """
    full = _fit(series, tau_hi, with_resume, True)
    if full.delay_s <= 0.0 or not any(s.kind == "cpu" for s in series):
        return full  # without CPU data delay is the whole slope: it is the load dependence itself
    bare = _fit(series, tau_hi, with_resume, False)
    if stats.chi2.sf(max(bare.chi2 - full.chi2, 0.0), 1) > DELAY_SIGNIFICANCE:
        return bare
    return full


def _fit(series: Sequence[WakeSeries], tau_hi: float, with_resume: bool, with_delay: bool = True) -> ColdWakeFit:
    grid = np.geomspace(TAU_MIN_S, tau_hi, TAU_GRID)
    costs = [_solve(series, t, with_resume, with_delay)[1] for t in grid]
    k = int(np.argmin(costs))
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, grid.size - 1)]
    tau = float(grid[k])
    if hi > lo:
        res = optimize.minimize_scalar(lambda lt: _solve(series, math.exp(lt), with_resume, with_delay)[1],
                                       bounds=(math.log(lo), math.log(hi)), method="bounded")
        if res.fun <= costs[k]:
            tau = math.exp(res.x)
    x, chi2 = _solve(series, tau, with_resume, with_delay)
    n = len(series)
    # constants only (no load dependence): each series at its weighted mean
    chi2_const = 0.0
    for s in series:
        v = np.array([p.value_s for p in s.points])
        w = 1 / np.array([p.sigma_s for p in s.points]) ** 2
        chi2_const += float(np.sum(w * (v - np.sum(w * v) / np.sum(w)) ** 2))
    gain = max(chi2_const - chi2, 0.0)
    has_cpu = any(s.kind == "cpu" for s in series)
    dof = 1 + int(with_delay) + int(has_cpu) + int(with_resume)  # tau, delay, cold CPU, resume CPU
    bases = {s.name: float(x[i]) for i, s in enumerate(series)}
    return ColdWakeFit(tau, float(x[n + 2]), float(x[n + 1]), float(x[n]), with_resume, bases, chi2, chi2_const,
                       float(stats.chi2.sf(gain, dof)), tau_hi, tuple(series))
