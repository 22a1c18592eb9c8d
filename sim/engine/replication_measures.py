"""The measures both engines take from a wired System after a replication (the compiled engine's counters are
copied back into the System's stations first): where the time went, bytes on the wire, node and component usage,
and an open load's backlog."""

from __future__ import annotations

import math

import numpy as np

from meshsim.topology import Call, Choose, Parallel, Step
from meshsim.workload import Load
from meshsim.sim.engine.replication_result import BREAKDOWN_KEYS, ComponentUsage
from meshsim.sim.engine.system import System


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


def component_usage(system: System, window: float) -> dict[str, ComponentUsage]:
    """Each component's CPU, utilisation, memory and holds over the window, all its instances summed."""
    usage: dict[str, ComponentUsage] = {}
    open_load = system.workload.load.is_open  # its connection ids are nominal (memory counts the pool)
    for component, station, proxy in system.stations():
        u = usage.setdefault(component, ComponentUsage())
        busy = sum(station.busy)
        u.cpu_seconds += busy
        u.capacity_cores += station.capacity
        u.instances += 1
        u.jobs += station.jobs
        u.cpu_waited += station.cpu_waited
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
            u.connections = max(u.connections, proxy.held_connections(nominal_connections=open_load))
            for view, histogram in proxy.views.items():
                u.views[view] = u.views[view] + histogram if view in u.views else histogram.copy()
    return usage
