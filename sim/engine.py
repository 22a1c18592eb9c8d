"""One replication: build the system, drive it with the workload, collect latencies and per-station busy time."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import simpy

from meshsim.scenario import Scenario
from meshsim.topology import Call, Choose, Parallel, Step
from meshsim.workload import Load, Workload
from meshsim.sim.loadgen import LoadTrace, start_generator
from meshsim.sim.streams import Streams
from meshsim.sim.system import System
from meshsim.sim.window_series import ReplicationSeries, replication_series, start_sampler


@dataclass(frozen=True)
class Horizon:
    """Simulated time: load for ``duration`` s, measure from ``warmup`` s, let stragglers finish for ``drain`` s.

    Times count from the start of the load's timed run: fortio's warm-up calls come before it, outside the horizon.
    """

    duration: float
    warmup: float = 0.0
    drain: float = 5.0
    series_s: float | None = None  # window of the time series (sim/window_series.py); None: no series


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
    connections: int = 0
    instances: int = 0
    jobs: int = 0
    idle_gaps: np.ndarray | None = None  # with observe_gaps: every job's worker idle gap, all instances
    idle_cores: float = 0.0  # CPU of the component's proxies with no traffic (their idle_cores), all instances


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


def run_replication(scenario: Scenario, workload: Workload, horizon: Horizon, seed: int,
                    replication: int, observe_gaps: bool = False) -> ReplicationResult:
    """``observe_gaps``: also return the idle gap every job found its worker in (calibration of wake-ups)."""
    env = simpy.Environment()
    streams = Streams(seed, replication)
    system = System(env, scenario, workload, streams)
    if observe_gaps:
        for _, station, _ in system.stations():
            station.idle_gaps = []
    latencies: list[float] = []
    warmup = horizon.warmup
    measure_from = [warmup]
    finished = [0]
    sent_times: list[float] = []  # of the measured requests, in the order of their latencies

    def record(sent: float, latency: float) -> None:
        finished[0] += 1
        if sent >= measure_from[0]:
            latencies.append(latency)
            sent_times.append(sent)

    trace = LoadTrace()
    opened = env.event()

    def open_window() -> None:
        """The load's timed run starts now (fortio: after its warm-up calls, which are not measured)."""
        measure_from[0] = env.now + warmup
        if warmup == 0:
            system.set_recording(True)  # before the first timed call books any work
        opened.succeed()

    load = workload.load
    start_generator(env, system, load, horizon.duration, record, streams, trace, open_window)
    if load.runs_fixed_calls:  # fortio: its untimed warm-up calls come first
        env.run(until=opened)

    origin = trace.origin  # the load's own times (duration, warm-up cut) count from here
    sampler = start_sampler(env, system.stations(), origin + warmup, origin + horizon.duration, horizon.series_s)
    if warmup > 0:
        env.run(until=origin + warmup)
    system.set_recording(True)
    system.set_hold_window(env.now, origin + horizon.duration)
    started_before = trace.started if warmup > 0 else 0
    env.run(until=origin + horizon.duration)
    started_in_window = trace.started - started_before
    system.set_recording(False)
    env.run(until=origin + horizon.duration + horizon.drain)

    # fortio reports calls / elapsed where elapsed ends when its last thread ends; open loads use the window
    end = max(trace.ends) if load.runs_fixed_calls and trace.ends else origin + horizon.duration
    window = max(end - origin - warmup, 1e-12)
    measured = len(latencies)
    achieved = measured / window
    busy_window = max(min(horizon.duration, end - origin) - warmup, 1e-12)
    growth, answered = backlog(load, np.asarray(sent_times), np.asarray(latencies), origin + warmup,
                               origin + horizon.duration)
    measured_latencies, filed_at = in_filed_order(np.asarray(latencies), np.asarray(sent_times))
    return ReplicationResult(
        latencies=measured_latencies,
        window=window,
        started=started_in_window,
        completed=measured,
        in_flight=trace.started - finished[0],
        achieved_rps=achieved,
        usage=_usage(system, busy_window),
        busy_window=busy_window,
        sim_time=env.now,
        breakdown=time_breakdown(system, started_in_window),
        node_utilization=node_utilization(system, busy_window),
        backlog_growth=growth,
        answered_rps=answered,
        wire_bytes=wire_bytes(system, started_in_window),
        load_start=origin,
        series=replication_series(sampler, origin, sent_times if horizon.series_s else None, latencies),
        filed_at=filed_at,
    )


def in_filed_order(latencies: np.ndarray, filed_at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A replication's latencies and their times in the order of those times (ties by latency): the order the
    start-up transient is looked for in (sim/transient_cut.py), the same on both engines whatever order their
    answers came back in."""
    order = np.lexsort((latencies, filed_at))
    return latencies[order], filed_at[order]


BREAKDOWN_KEYS = ("proxy work", "proxy delay (worker free)", "proxy worker queueing", "wake-ups", "app work",
                  "app queueing", "node CPU and quota waits", "kernel and load-generator CPU", "network")


def time_breakdown(system: System, requests: int) -> dict[str, float]:
    """Where the requests' time went, in seconds per request: every station visit and hop booked inside the window,
    over the ``requests`` started in it (a request's later visits may fall after the window: an edge effect of
    latency / window). With fork/join the parts overlap in time, so they may add up to more than the mean latency."""
    parts = dict.fromkeys(BREAKDOWN_KEYS, 0.0)
    for _, station, proxy in system.stations():
        kind = "proxy" if proxy is not None else "app"
        parts[f"{kind} work"] += station.worked
        parts["proxy worker queueing" if proxy is not None else "app queueing"] += station.waited
        parts["wake-ups"] += station.woke
        parts["node CPU and quota waits"] += station.cpu_waited
        if proxy is not None:
            parts["proxy delay (worker free)"] += proxy.delayed
    parts["network"] = system.net.total
    parts["kernel and load-generator CPU"] = system.host_cpu_time
    return {k: v / max(requests, 1) for k, v in parts.items()}


def wire_bytes(system: System, requests: int) -> dict[str, float]:
    """Bytes between pods per request started in the window: every call's request (the mesh's headers included)
    and response, and the size of the request the entry service receives (the packet a capture at the entry pod
    compares with and without a mesh)."""
    n = max(requests, 1)
    return {"request": system.wire_request_bytes / n, "response": system.wire_response_bytes / n,
            "entry_request": float(system.entry_request_bytes)}


def expected_wire_bytes(system: System) -> dict[str, float]:
    """:func:`wire_bytes` as expected values from the call graph (a Choose step weighs its branches): for an engine
    that does not count the bytes of each call (the compiled one). Every call of a meshed scenario carries the
    mesh's headers, as in :meth:`System.call`. Callees before callers: no recursion however deep the graph."""
    scenario = system.scenario
    topo = scenario.topology
    header = system.header_bytes if scenario.meshed else 0
    below: dict[str, tuple[float, float]] = {}  # request and response bytes of the calls one visit makes
    for name in topo.callees_first():
        req = resp = 0.0
        for step in topo.services[name].handler:
            for callee, weight in _weighted_callees(step):
                sub_req, sub_resp = below[callee]
                req += weight * (topo.services[callee].request_bytes + header + sub_req)
                resp += weight * (topo.services[callee].response_bytes + sub_resp)
        below[name] = (req, resp)
    entry = topo.services[topo.entry]
    req, resp = below[topo.entry]
    return {"request": entry.request_bytes + header + req, "response": entry.response_bytes + resp,
            "entry_request": float(entry.request_bytes + header)}


def _weighted_callees(step: Step) -> list[tuple[str, float]]:
    """The services a handler step calls, each with its expected number of calls per visit."""
    if isinstance(step, Call):
        return [(step.service, 1.0)]
    if isinstance(step, Parallel):
        return [(s, 1.0) for s in step.services]
    if isinstance(step, Choose):
        total = sum(step.weights)
        return [(s, w / total) for s, w in zip(step.services, step.weights)]
    return []


def backlog(load: Load, sent: np.ndarray, latencies: np.ndarray, start: float, end: float) -> tuple[int, float]:
    """Under an open load, of the requests measured from ``start`` on: those sent in the window's second half minus
    those answered in it, and the rate of answers in it. A stable system answers as many as it is sent (they differ
    by the change in the number it holds); an overloaded one falls behind by (offered - capacity) x the half window
    and answers at its capacity -- whichever of its parts is the bottleneck, and whatever the utilisations say.
    Other loads wait for their answers (fortio, sequential users) or time their own lag (wrk2): (0, nan)."""
    if not load.is_open or end <= start:
        return 0, math.nan
    mid = (start + end) / 2
    done = sent + latencies
    arrived = int(np.count_nonzero((sent >= mid) & (sent < end)))
    answered = int(np.count_nonzero((done >= mid) & (done < end)))
    return arrived - answered, answered / (end - mid)


def node_utilization(system: System, window: float) -> dict[str, float]:
    """Each declared node's cores: the share of their capacity booked over the window by everything placed there
    (apps, proxies, the load generator, the kernel's network stack). A node can saturate before any one worker
    does."""
    return {name: cores.utilization(window) for name, cores in system.node_cpu.items()}


def _usage(system: System, window: float) -> dict[str, ComponentUsage]:
    usage: dict[str, ComponentUsage] = {}
    open_load = system.workload.load.is_open  # its connection ids are nominal (memory counts the pool)
    for component, station, proxy in system.stations():
        u = usage.setdefault(component, ComponentUsage())
        busy = sum(station.busy)
        u.cpu_seconds += busy
        u.capacity_cores += station.capacity
        u.instances += 1
        u.jobs += station.jobs
        if station.idle_gaps is not None:
            gaps = np.asarray(station.idle_gaps)
            u.idle_gaps = gaps if u.idle_gaps is None else np.concatenate([u.idle_gaps, gaps])
        hottest = busy / (window * station.capacity)
        if station.pinned:  # a pinned worker saturates on its own, whatever its siblings do
            hottest = max(hottest, max(station.busy) / window)
        u.hottest = max(u.hottest, hottest)
        if proxy is not None:
            u.cpu_seconds += proxy.model.idle_cores * window  # background work of the process, traffic or not
            u.idle_cores += proxy.model.idle_cores
            u.memory_mb = max(u.memory_mb, proxy.memory_mb(nominal_connections=open_load))
            u.in_flight += proxy.in_flight
            u.holds += proxy.holds
            u.held_seconds += proxy.held_seconds
            u.connections = max(u.connections, proxy.connections)
    return usage
