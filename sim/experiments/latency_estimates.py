"""A prediction's latency estimates over its replications, after the start-up transient's cut.

Two questions, two estimators. The steady state (no warm-up given: sim/experiments/transient_cut.py cut the transient) asks for
the long-run percentile, whatever the run length: the percentile of the replications' pooled latencies, with the
sectioning interval (stats.sectioned). A run that keeps its start (a warm-up given, a rate profile, a time series:
a replay of a measured run) asks what a run of that length reports: the mean of the replications' own percentiles,
as before. The max is the pooled output's largest latency in the first (its 100th percentile: never below the
p99.9, and like any maximum it grows with the requests simulated), the mean of the replications' maxima in the
second; the mean latency is the mean of the replications' means in both.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from meshsim.workload import Load
from meshsim.sim.engine.replication_result import Horizon, ReplicationResult
from meshsim.sim.experiments.stats import (LATENCY_KEYS, PERCENTILES, Estimate, controlled_interval, latency_summary, sectioned,
                               t_interval)
from meshsim.sim.experiments.transient_cut import TransientCut

POOLED_LEVELS = {**PERCENTILES, "max": 100.0}  # the keys a steady state takes from the pooled latencies


def expected_arrivals(load: Load, horizon: Horizon) -> float | None:
    """The latency estimates' control variate: the requests a Poisson load starts in the window, whose
    expectation is its rate times the window. None for the other loads: fortio's and wrk2's schedules fix their
    count, sequential users' answers set it, and a rate profile is left out (its expectation is the rate's
    integral)."""
    return load.expected_arrivals(horizon.duration - horizon.warmup)


def replication_interval(values: Sequence[float], results: Sequence[ReplicationResult],
                         expected: float | None) -> Estimate:
    """A latency's estimate over the replications: with the arrivals in the window as a control variate when the
    load is Poisson (a replication that drew more arrivals ran busier; stats.controlled_interval), else plain."""
    if expected is None:
        return t_interval(values)
    return controlled_interval(values, [r.started for r in results], expected)


def latency_interval(key: str, values: Sequence[float], kept: Sequence[np.ndarray],
                     results: Sequence[ReplicationResult], expected: float | None, steady: bool) -> Estimate:
    """The estimate of latency ``key`` from each replication's value of it (``values``) and the latencies they
    were computed from (``kept``): pooled and sectioned for a steady state's percentile, else their mean."""
    estimate = replication_interval(values, results, expected)
    if not steady or key not in POOLED_LEVELS:
        return estimate
    present = [k for k in kept if k.size]
    finite = [v for v in values if math.isfinite(v)]
    if not present or not finite:
        return estimate
    pooled = float(np.percentile(np.concatenate(present), POOLED_LEVELS[key]))
    return sectioned(estimate, float(np.mean(finite)), pooled, len(finite))


def latency_estimates(results: Sequence[ReplicationResult], cut: TransientCut,
                      expected: float | None) -> dict[str, Estimate]:
    """Every latency key's estimate (seconds) over the replications' latencies that ``cut`` keeps."""
    kept = [cut.kept(r) for r in results]
    per_rep = [latency_summary(latencies) for latencies in kept]
    return {key: latency_interval(key, [s[key] for s in per_rep], kept, results, expected,
                                  cut.steady_state).at_least(0.0) for key in LATENCY_KEYS}
