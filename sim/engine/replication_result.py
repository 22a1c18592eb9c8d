"""What one replication returns, on either engine: its horizon, its result and each component's usage. Both the
SimPy engine (simpy_replication.py) and the compiled one (sim/fast/fast_engine.py) fill these; the experiments
(sim/experiments/) read them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from meshsim.sim.engine.proxy_views import ViewHistograms
from meshsim.sim.engine.window_series import ReplicationSeries


@dataclass(frozen=True)
class Horizon:
    """Simulated time: load for ``duration`` s, measure from ``warmup`` s, let stragglers finish for ``drain`` s.

    Times count from the start of the load's timed run: fortio's warm-up calls come before it, outside the horizon.
    """

    duration: float
    warmup: float = 0.0
    drain: float = 5.0
    series_s: float | None = None  # window of the time series (sim/engine/window_series.py); None: no series


@dataclass
class ComponentUsage:
    """CPU and load of one component (all instances of it) over the measurement window."""

    cpu_seconds: float = 0.0
    capacity_cores: float = 0.0
    hottest: float = 0.0  # utilisation of the busiest instance (busiest worker for pinned proxies)
    memory_mb: float = 0.0  # the largest instance's resident memory (per proxy, not summed)
    in_flight: float = 0.0  # mean requests held in the component's proxies, all instances
    holds: int = 0  # requests whose hold in a proxy began in the window, all instances ...
    held_seconds: float = 0.0  # ... and their hold times summed (Little's law: in_flight = holds/window x mean)
    connections: int = 0  # the most downstream connections one instance holds open (ProxyInstance.held_connections)
    instances: int = 0
    jobs: int = 0
    cpu_waited: float = 0.0  # seconds its jobs on a request's path waited for the node's cores or the quota
    idle_gaps: np.ndarray | None = None  # with observe_gaps: every job's worker idle gap, all instances
    idle_cores: float = 0.0  # CPU of the component's proxies with no traffic (their idle_cores), all instances
    # view -> histogram of the latencies the component's proxies themselves record, all instances
    # (sim/engine/proxy_views.py: what its request-duration metrics would show)
    views: dict[str, np.ndarray] = field(default_factory=ViewHistograms)


class PastDeadline(Exception):
    """A replication given up at its deadline (a saturation probe under the time limit)."""


@dataclass
class ReplicationResult:
    latencies: np.ndarray
    window: float
    started: int
    completed: int
    in_flight: int
    achieved_rps: float
    usage: dict[str, ComponentUsage] = field(default_factory=dict)
    busy_window: float = 1.0
    sim_time: float = 0.0
    breakdown: dict[str, float] = field(default_factory=dict)  # mechanism -> seconds per measured request
    node_utilization: dict[str, float] = field(default_factory=dict)  # declared node -> share of its cores booked
    backlog_growth: int = 0  # open load: requests sent minus answered over the window's second half (backlog())
    answered_rps: float = math.nan  # open load: the rate of answers over the window's second half
    load_start: float = 0.0  # when the timed run began: fortio's warm-up calls come before, unmeasured
    wire_bytes: dict[str, float] = field(default_factory=dict)  # bytes per measured request (see wire_bytes())
    series: ReplicationSeries | None = None  # with Horizon.series_s: the run cut into windows
    # each latency's time (the simulation's clock): its send (intended for an open load), for wrk2 its answer (what
    # wrk2 files it under); latencies and filed_at are in the order of these times (in_filed_order)
    filed_at: np.ndarray = field(default_factory=lambda: np.empty(0))


BREAKDOWN_KEYS = ("proxy work", "proxy delay (worker free)", "proxy worker queueing", "wake-ups", "app work",
                  "app queueing", "node CPU and quota waits", "kernel and load-generator CPU", "network")


def in_filed_order(latencies: np.ndarray, filed_at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A replication's latencies and their times in the order of those times (ties by latency): the order the
    start-up transient is looked for in (sim/experiments/transient_cut.py), the same on both engines whatever order their
    answers came back in."""
    order = np.lexsort((latencies, filed_at))
    return latencies[order], filed_at[order]
