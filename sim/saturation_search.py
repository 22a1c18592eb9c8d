"""The saturation rate: the offered rate at which a prediction's bottleneck reaches utilisation 1, found with
short open-load probes on the engine the prediction ran on (the utilisation law, corrected until it holds)."""

from __future__ import annotations

import math
import time

import numpy as np

from meshsim.scenario import Scenario
from meshsim.workload import OpenLoad, RunSettings, Workload
from meshsim.sim.engine import Horizon, ReplicationResult, run_replication
from meshsim.sim.fast_coverage import choose_engine


def run_one_replication(args: tuple[Scenario, Workload, Horizon, int, int, str]) -> ReplicationResult:
    """One replication on the named engine ('fast' or 'simpy'): the unit of work of predictions and probes."""
    *job, engine = args
    if engine == "fast":
        from meshsim.sim.fast_engine import run_fast_replication  # loaded only when the fast engine runs

        return run_fast_replication(*job)
    return run_replication(*job)



def unstable(results: list[ReplicationResult]) -> bool:
    """Whether a replication ended with requests piling up (an overloaded open system: more runs do not help)."""
    return any(r.in_flight > max(10, 0.01 * max(r.completed, 1)) for r in results)


def find_saturation(scenario: Scenario, workload: Workload, settings: RunSettings,
                    results: list[ReplicationResult], util: dict[str, float], iterations: int = 3,
                    tolerance: float = 0.03, deadline: float = math.inf) -> float:
    """Offered rate at which the bottleneck reaches utilisation 1.

    Utilisation grows linearly with the rate while service demands stay put (utilisation law), so
    ``rate / max utilisation`` is the first estimate; the model is then run at 95 % of it with open Poisson load
    (same connections, so pinned workers see the same spread) and the estimate corrected until it holds. Past
    ``deadline`` (a ``time.perf_counter()`` value) no further probe starts: the estimate so far is returned.
    """
    if not util or max(util.values()) <= 0:
        return float("inf")
    connections = max(getattr(workload.load, "connections", 64), 1)
    if unstable(results) or max(util.values()) >= 0.95:
        # overloaded: completions and utilisation no longer follow the offered rate; start from a light load
        estimate = _light_load_estimate(scenario, workload, settings, connections, deadline)
    else:
        estimate = float(np.mean([r.achieved_rps for r in results])) / max(util.values())
    for i in range(iterations):
        if not math.isfinite(estimate) or time.perf_counter() > deadline:
            break
        probe_rate = 0.95 * estimate
        hottest = _hottest_at(scenario, workload, settings, probe_rate, connections, 5000, 10_000 + i)
        if hottest <= 0:
            return float("inf")
        new = probe_rate / hottest
        if abs(new - estimate) <= tolerance * estimate:
            return new
        estimate = new
    return estimate


def _light_load_estimate(scenario: Scenario, workload: Workload, settings: RunSettings, connections: int,
                         deadline: float = math.inf) -> float:
    """Capacity from the utilisation law at a load light enough to hold it: the offered rate divided by 4 until
    the busiest instance is below 80 % busy (each probe ~1,000 requests, cheap at low rates)."""
    rate = workload.load.rps
    for i in range(8):
        if time.perf_counter() > deadline:
            break
        rate /= 4
        hottest = _hottest_at(scenario, workload, settings, rate, connections, 1000, 20_000 + i)
        if hottest <= 0:
            return float("inf")
        if hottest < 0.8:
            return rate / hottest
    return float("nan")


def _hottest_at(scenario: Scenario, workload: Workload, settings: RunSettings, rate: float, connections: int,
                requests: int, replication: int) -> float:
    """Utilisation of the busiest instance under an open Poisson load of ``rate`` for about ``requests`` requests
    (at least 20 ms: at very high rates a fixed floor in seconds would make the probe cost millions of events)."""
    probe = Workload(OpenLoad(rate, connections), workload.keepalive, workload.tls)
    duration = max(requests / rate, 0.02)
    engine = choose_engine(settings.engine, scenario, probe).name  # the probe runs where the prediction ran
    result = run_one_replication((scenario, probe, Horizon(duration, 0.2 * duration, settings.drain_s), settings.seed,
                       replication, engine))
    return max((u.hottest for u in result.usage.values()), default=0.0)
