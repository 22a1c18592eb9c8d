"""``find_capacity``: the library behind ``meshsim capacity`` and the Dash capacity view (sizing for a target rate
is ``sim/experiments/capacity_sizing.py``).

**Capacity** is the highest offered rate that meets every objective of an :class:`~meshsim.capacity_slo.Slo`. It is
found by bisection over the rate, once per replication: replication ``r`` has its own seed, and every rate it probes
is simulated with that same seed (common random numbers), so its latency is a smooth function of the rate and the
bisection converges on one well-defined crossing instead of chasing noise. The ``r`` crossings are independent
(independent seeds), so their mean and Student-t interval are the estimate and its 95 % CI. Why this and not the rate
where the CI bound of the percentile crosses the SLO: that gives a one-sided, conservative rate (its width depends on
how many replications were pooled), not an interval for the capacity itself; bisecting per replication does.

The bracket comes from the utilisation law: a light-load probe gives the saturation rate ``rate / utilisation`` of
the busiest instance; an open system's percentiles grow without bound there, so the capacity lies below it (a run
that meets the SLO even at saturation reports the saturation rate and says so).
"""

from __future__ import annotations

import math
import multiprocessing
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from meshsim.capacity_slo import Slo
from meshsim.errors import FieldError
from meshsim.interrupts import interrupts_deferred
from meshsim.parent_death import Parent, start_worker
from meshsim.progress import Progress
from meshsim.request import PredictOptions, build_request
from meshsim.sim.engine_choice import load_compiled_engine
from meshsim.sim.experiments.predict import (Prediction, check_request, predict_options,
                                 uses_compiled_engine)
from meshsim.sim.experiments.replication_workers import stop_workers
from meshsim.sim.experiments.stats import t_interval

LIGHT_RPS = 100.0  # first probe when the options give no rate
LIGHT_REQUESTS = 2000  # requests of the light-load probe that estimates the saturation rate
TOLERANCE = 0.02  # bisection stops when the bracket is within 2 % of its top


@dataclass(frozen=True)
class Crossing:
    """One replication's bisection: the highest rate found to meet the SLO, and what was found there."""

    seed: int
    max_rps: float
    saturation_rps: float
    binding: str  # the objective missed just above max_rps (the one furthest over its limit)
    bottleneck: str  # the busiest component at max_rps
    probes: int


@dataclass(frozen=True)
class Capacity:
    max_rps: float
    max_rps_ci95: tuple[float, float]
    binding: str
    bottleneck: str
    slo: Slo
    crossings: tuple[Crossing, ...]
    notes: tuple[str, ...] = ()
    size: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "max_rps": round(self.max_rps, 1), "max_rps_ci95": [_round(v) for v in self.max_rps_ci95],
            "binding": self.binding, "bottleneck": self.bottleneck, "slo_ms": self.slo.to_dict(),
            "replications": [{"seed": c.seed, "max_rps": round(c.max_rps, 1), "binding": c.binding,
                              "bottleneck": c.bottleneck, "saturation_rps": _round(c.saturation_rps),
                              "probes": c.probes} for c in self.crossings],
            "notes": list(self.notes)}
        if self.size is not None:
            out["size"] = self.size
        return out


def _round(value: float) -> float | None:
    return round(value, 1) if math.isfinite(value) else None


def _probe(options: PredictOptions, rate: float, seed: int, light: bool = False) -> Prediction:
    changes: dict[str, Any] = {}
    if light and options.duration_s is not None:  # the utilisation law needs ~LIGHT_REQUESTS, whatever the probes'
        changes = {"duration_s": max(options.duration_s, LIGHT_REQUESTS / rate), "warmup_s": None}
    return predict_options(options.with_changes(rps=rate, seed=seed, replications=1, precision=None,
                                                saturation=False, processes=1, **changes))


def _met(slo: Slo, prediction: Prediction) -> bool:
    """A saturated probe misses whatever its window measured: an open system's percentiles grow without bound."""
    return not prediction.saturated and slo.met(_latency(prediction))


def _latency(prediction: Prediction) -> dict[str, float]:
    return {k: e.value for k, e in prediction.latency.items()}


def replication_seeds(seed: int, replications: int) -> list[int]:
    return [int(np.random.SeedSequence([seed, r]).generate_state(1)[0]) for r in range(replications)]


def bisect_capacity(options: PredictOptions, slo: Slo, seed: int, tolerance: float = TOLERANCE) -> Crossing:
    """One replication's crossing: every probe uses ``seed`` (common random numbers across rates)."""
    rate = options.rps or LIGHT_RPS
    light = _probe(options, rate, seed, light=True)
    for _ in range(6):  # the utilisation law holds at light load only: go lower until the busiest is under 50 %
        busiest = max(light.utilization.values(), default=0.0)
        if busiest < 0.5:
            break
        rate /= 4
        light = _probe(options, rate, seed, light=True)
    busiest = max(light.utilization.values(), default=0.0)
    saturation = rate / busiest if busiest > 0 else math.inf
    if not math.isfinite(saturation):
        raise FieldError("rps", "no component is ever busy: the capacity is unbounded")
    probes = 1
    if not _met(slo, light):
        ratios = slo.ratios(_latency(light))
        return Crossing(seed, 0.0, saturation, max(ratios, key=ratios.__getitem__), light.bottleneck, probes)
    # Light-load utilisation overstates the cost per request (wake-ups are dearer when idle), so the saturation
    # estimate may be low: grow the top of the bracket until it misses.
    lo, hi, at_lo = rate, saturation, light
    at_hi = _probe(options, hi, seed)
    probes += 1
    while _met(slo, at_hi):
        if hi > 8 * saturation:
            return Crossing(seed, hi, saturation, "saturation", at_hi.bottleneck, probes)
        lo, at_lo, hi = hi, at_hi, 1.5 * hi
        at_hi = _probe(options, hi, seed)
        probes += 1
    while hi - lo > tolerance * hi:
        mid = 0.5 * (lo + hi)
        found = _probe(options, mid, seed)
        probes += 1
        if _met(slo, found):
            lo, at_lo = mid, found
        else:
            hi, at_hi = mid, found
    ratios = slo.ratios(_latency(at_hi))
    return Crossing(seed, lo, saturation, max(ratios, key=ratios.__getitem__), at_lo.bottleneck, probes)


def _bisect_job(args: tuple[PredictOptions, Slo, int, float]) -> Crossing:
    return bisect_capacity(*args)


class CapacityInterrupted(KeyboardInterrupt):
    """An interrupt (Ctrl-C, SIGTERM, SIGHUP) during a capacity or sizing search, with what it had finished: one
    line per finished part, for the command line to print before it exits 130."""

    def __init__(self, done: list[str]) -> None:
        super().__init__("; ".join(done))
        self.done = tuple(done)


def check_counts(replications: int, processes: int) -> None:
    """The bisections' count (an interval needs two) and the processes that run them."""
    if isinstance(replications, bool) or not isinstance(replications, int) or replications < 2:
        raise FieldError("replications", f"need >= 2 for a confidence interval, got {replications!r}")
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise FieldError("processes", f"must be a whole number >= 1, got {processes!r}")


def find_capacity(options: PredictOptions, slo: Slo, replications: int = 3, processes: int = 1,
                  progress: Progress | None = None, tolerance: float = TOLERANCE) -> Capacity:
    """The highest offered rate meeting ``slo``, with its 95 % CI over ``replications`` independent bisections.

    An interrupt stops the bisections (and their workers) and raises :class:`CapacityInterrupted` with the
    crossings already found."""
    check_counts(replications, processes)
    base = options.with_changes(rps=options.rps or LIGHT_RPS)
    request = build_request(base.with_changes(replications=1, precision=None, saturation=False, processes=1))
    check_request(request)  # what a probe would refuse is refused before any probe, as predict refuses it
    if uses_compiled_engine([request]):
        load_compiled_engine(progress)  # once, here: the bisection workers fork with it loaded
    jobs = [(base, slo, seed, tolerance) for seed in replication_seeds(options.seed, replications)]
    finished: list[Crossing] = []

    def found(crossing: Crossing) -> None:
        finished.append(crossing)
        if progress:
            progress(f"bisection {len(finished)} of {len(jobs)}: max rps {crossing.max_rps:.0f} "
                     f"({crossing.probes} probes)")

    try:
        _run_jobs(jobs, processes, found)
    except KeyboardInterrupt:
        done = [f"interrupted after {len(finished)} of {len(jobs)} bisections"]
        done += [f"bisection with seed {c.seed}: max rps {c.max_rps:.0f} (binding {c.binding}, bottleneck "
                 f"{c.bottleneck}, {c.probes} probes)" for c in finished]
        raise CapacityInterrupted(done) from None
    if progress:
        progress(f"{len(finished)} bisections, {sum(c.probes for c in finished)} probes")
    order = {seed: i for i, (_, _, seed, _) in enumerate(jobs)}  # as_completed's order is the workers' timing
    return summarise(sorted(finished, key=lambda c: order[c.seed]), slo)


def _run_jobs(jobs: list[tuple[PredictOptions, Slo, int, float]], processes: int,
              found: Callable[[Crossing], None]) -> None:
    """Run the bisections, handing each crossing to ``found`` as it comes (so an interrupt keeps them)."""
    if processes <= 1 or len(jobs) == 1:
        for job in jobs:
            found(_bisect_job(job))
        return
    pool = ProcessPoolExecutor(max_workers=min(processes, len(jobs)), mp_context=multiprocessing.get_context("fork"),
                               initializer=start_worker, initargs=(Parent.here(),))
    try:
        with interrupts_deferred():  # submitting forks the workers: an interrupt inside a fork would be lost
            futures = [pool.submit(_bisect_job, j) for j in jobs]
        for future in as_completed(futures):
            found(future.result())
    except BaseException:
        stop_workers(pool)
        raise
    pool.shutdown()


def summarise(crossings: list[Crossing], slo: Slo) -> Capacity:
    if all(c.max_rps == 0 for c in crossings):
        binding = Counter(c.binding for c in crossings).most_common(1)[0][0]
        raise FieldError("slo", f"{binding} is missed even at light load (the no-load latency is above the "
                                f"objective {slo.to_dict()[binding]:g} ms)")
    estimate = t_interval([c.max_rps for c in crossings]).at_least(0.0)
    notes = []
    if any(c.binding == "saturation" for c in crossings):
        notes.append("the SLO holds up to saturation in some replications: the capacity is the saturation rate")
    binding = Counter(c.binding for c in crossings).most_common(1)[0][0]
    bottleneck = Counter(c.bottleneck for c in crossings).most_common(1)[0][0]
    return Capacity(estimate.value, (estimate.lo, estimate.hi), binding, bottleneck, slo, tuple(crossings),
                    tuple(notes))
