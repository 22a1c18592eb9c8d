"""The saturation rate: the offered rate at which a prediction's bottleneck reaches utilisation 1, found with
short open-load probes on the engine the prediction ran on (the utilisation law, corrected until it holds)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from meshsim.scenario import Scenario
from meshsim.workload import OpenLoad, RunSettings, Workload
from meshsim.sim.experiments.run_cost import DEFAULT_MAX_EVENTS, DEFAULT_MAX_MEMORY_MB, EngineSpeed, estimate, idle_latency_s
from meshsim.sim.engine.replication_result import Horizon, PastDeadline, ReplicationResult
from meshsim.sim.engine_choice import choose_engine, run_one_replication


def unstable(results: list[ReplicationResult]) -> bool:
    """Whether a replication of an open load ended with requests piling up (an overloaded open system: more runs do
    not help). A load that waits for its answers (fortio, wrk2, sequential users; their ``answered_rps`` is nan, as
    in ``fell_behind``) holds at most one request per connection: however many a short run ends with, they cannot
    pile up (a wrk2 that falls behind its schedule says so in its own warning)."""
    return any(not math.isnan(r.answered_rps) and r.in_flight > max(10, 0.01 * max(r.completed, 1)) for r in results)


# A probe lasts at least this many idle-system latencies: its half window (0.4 of it, after a 0.2 warm-up) must be
# longer than a request takes, or answers still on their way read as falling behind (a chain of 1,000 services takes
# ~2 s a request: a 5,000-request probe of ~1.2 s measured a tenth of its capacity).
PROBE_LATENCIES = 5.0


@dataclass
class ProbeClock:
    """Whether the search may start a probe: only within the prediction's budget of events and memory (a probe of a
    chain of 1,000 services near its capacity holds ~10,000 requests 2,000 calls deep) and if it is expected to end
    before ``deadline`` (a time.perf_counter() value) -- the first as the cost model says for ``speed``
    (sim/experiments/run_cost.py) scaled by how much slower the prediction's own replications ran (``pace``), later ones by how long
    the last one took against its estimate. ``stopped`` says why a probe was left out ("": none was)."""

    deadline: float = math.inf
    speed: EngineSpeed | None = None
    max_events: float = DEFAULT_MAX_EVENTS
    pace: float = 1.0  # measured / estimated seconds (of the replications, then of the last probe)
    stopped: str = ""

    def run(self, job: tuple[Scenario, Workload, Horizon, int, int, str]) -> ReplicationResult | None:
        """The probe's result (run_one_replication's job), or None when it may not start."""
        scenario, workload, horizon = job[:3]
        if time.perf_counter() >= self.deadline:  # said first: whatever else would stop it, the limit has passed
            self.stopped = "the time limit had passed before its next probe"
            return None
        cost = estimate(scenario, workload, RunSettings(replications=1), horizon)
        if cost.events > self.max_events or cost.memory_mb > DEFAULT_MAX_MEMORY_MB:
            self.stopped = f"its next probe would take {cost.summary()}, above the budget"
            return None
        model = cost.probe_s(self.speed, cost.requests_per_replication) if self.speed is not None else 0.0
        started = time.perf_counter()
        if started + self.pace * model > self.deadline:
            self.stopped = f"its next probe would take ~{self.pace * model:.0f} s, past the time limit"
            return None
        try:
            result = run_one_replication(job, self.deadline)
        except PastDeadline:
            self.stopped = "its probe was given up at the time limit"
            return None
        if model > 0:
            self.pace = (time.perf_counter() - started) / model
        return result


MIN_BACKLOG = 50  # requests: a stable chain near saturation holds tens more or fewer at the end than at the middle
FELL_BEHIND = 0.05  # of the requests sent in the half window
MAX_OVERLOADED = 3  # probes past the capacity a search may run (each one measures the capacity it ran into)


def fell_behind(results: list[ReplicationResult]) -> bool:
    """Whether an open load's replications answered fewer requests than they were sent over their windows' second
    halves, on average by more than a stable system's swing in what it holds: the load is above the capacity
    (sim/engine/simpy_replication.py backlog)."""
    if not results or any(math.isnan(r.answered_rps) for r in results):  # not an open load: it cannot pile up
        return False
    growth = float(np.mean([r.backlog_growth for r in results]))
    sent = growth + float(np.mean([r.answered_rps * r.window / 2 for r in results]))
    return growth > max(MIN_BACKLOG, FELL_BEHIND * sent)


def find_saturation(scenario: Scenario, workload: Workload, settings: RunSettings,
                    results: list[ReplicationResult], util: dict[str, float], iterations: int = 3,
                    tolerance: float = 0.03, deadline: float = math.inf, clock: ProbeClock | None = None) -> float:
    """Offered rate at which the bottleneck reaches utilisation 1, or at which the answers first fall behind.

    Utilisation grows linearly with the rate while service demands stay put (utilisation law), so
    ``rate / max utilisation`` is the first estimate; the model is then run at 95 % of it with open Poisson load
    (same connections, so pinned workers see the same spread) and the estimate corrected until it holds. A probe
    whose answers fall behind (``fell_behind``) ran past the capacity whatever its utilisations say -- a node's
    cores, where hops book their work ahead of time, saturate below 100 % -- and answered at that capacity: the
    estimate becomes its rate of answers, and no later estimate goes above it. A probe that would end past the
    deadline (``clock``'s, else ``deadline``: a ``time.perf_counter()`` value) does not start: the estimate so far
    is returned.
    """
    clock = clock if clock is not None else ProbeClock(deadline)
    if not util or max(util.values()) <= 0:
        return float("inf")
    connections = max(getattr(workload.load, "connections", 64), 1)
    if unstable(results) or max(util.values()) >= 0.95:
        # overloaded: completions and utilisation no longer follow the offered rate; start from a light load
        estimate = _light_load_estimate(scenario, workload, settings, connections, clock)
    else:
        estimate = float(np.mean([r.achieved_rps for r in results])) / max(util.values())
    if estimate <= 0:  # nothing answered in the window: no rate to start from
        return float("nan")
    # the lowest offered rate a probe fell behind at, and the rate it answered at: the capacity it met (a probe far
    # past it answers slower still, its backlog crowding the nodes' cores)
    lowest_behind, ceiling, overloaded, i = math.inf, math.inf, 0, 0
    while i < iterations + overloaded and math.isfinite(estimate):
        probe_rate = 0.95 * estimate
        probe = _probe_at(scenario, workload, settings, probe_rate, connections, 5000, 10_000 + i, clock)
        if probe is None:
            break
        i += 1
        if fell_behind([probe]) and overloaded < MAX_OVERLOADED:
            overloaded += 1
            if probe_rate < lowest_behind:
                lowest_behind = probe_rate
                ceiling = min(probe_rate, probe.answered_rps) if probe.answered_rps > 0 else probe_rate / 4
            estimate = ceiling  # the next probe, at 95 % of it, checks that it holds
            continue
        hottest = _hottest(probe)
        if hottest <= 0:
            return float("inf")
        new = min(probe_rate / hottest, ceiling)
        if abs(new - estimate) <= tolerance * estimate:
            return new
        estimate = new
    return estimate


def _light_load_estimate(scenario: Scenario, workload: Workload, settings: RunSettings, connections: int,
                         clock: ProbeClock) -> float:
    """Capacity from the utilisation law at a load light enough to hold it: the offered rate divided by 4 until
    the busiest instance is below 80 % busy (each probe ~1,000 requests, cheap at low rates)."""
    rate = workload.load.rps
    for i in range(8):
        rate /= 4
        probe = _probe_at(scenario, workload, settings, rate, connections, 1000, 20_000 + i, clock)
        if probe is None:
            break
        hottest = _hottest(probe)
        if hottest <= 0:
            return float("inf")
        if hottest < 0.8:
            return rate / hottest
    return float("nan")


def _probe_at(scenario: Scenario, workload: Workload, settings: RunSettings, rate: float, connections: int,
              requests: int, replication: int, clock: ProbeClock) -> ReplicationResult | None:
    """A replication under an open Poisson load of ``rate`` for about ``requests`` requests (at least 20 ms: at
    very high rates a fixed floor in seconds would make the probe cost millions of events; and PROBE_LATENCIES idle
    latencies), or None when the clock does not let it start."""
    probe = Workload(OpenLoad(rate, connections), workload.keepalive, workload.tls)
    duration = max(requests / rate, 0.02, PROBE_LATENCIES * idle_latency_s(scenario, probe))
    engine = choose_engine(settings.engine, scenario, probe).name  # the probe runs where the prediction ran
    return clock.run((scenario, probe, Horizon(duration, 0.2 * duration, settings.drain_s), settings.seed,
                      replication, engine))


def _hottest(result: ReplicationResult) -> float:
    """Utilisation of the busiest instance or node."""
    return max([u.hottest for u in result.usage.values()] + list(result.node_utilization.values()), default=0.0)
