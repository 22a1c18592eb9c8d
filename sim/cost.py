"""What a prediction will cost, known before simulating: events and memory, a budget, and a time-limit rule.

A replication costs one SimPy event per station visit (system.py folds pure delays into the next wait), so its
work is visits per request x requests per replication; a prediction runs at least the replications it is sure
to run. Memory grows with the stations built (workers, cores, replicas), the client's connections or users (one
SimPy process each for fortio and sequential loads) and the latency samples kept (8 bytes per request, all
replications kept until the summary). The estimate is arithmetic on the scenario: ``--rps 1e12`` or a chain of
100,000 services is refused in milliseconds, with the option that drives the cost named (``rps``,
``duration_s``, ``connections``, ``proxy_workers``, ...).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from meshsim.errors import FieldError
from meshsim.scenario import Scenario
from meshsim.topology import Call, Choose, Compute, Parallel
from meshsim.workload import FortioLoad, OpenLoad, RunSettings, SequentialLoad, Workload, Wrk2Load
from meshsim.sim.engine import Horizon

# Default budget: 5e7 station visits. Measured on a shared 2-core machine (chain3/istio, bookinfo/linkerd, chain5
# at their test rates): one process simulates 30,000-40,000 visits per second, so the budget is at most ~25 minutes
# of one core; a default prediction (4 replications of 5,000 requests, 20-35 visits each) costs 0.4-0.7 million.
DEFAULT_MAX_EVENTS = 5e7
# Memory the simulated system may take before it is refused (a laptop's spare memory, not the machine's).
DEFAULT_MAX_MEMORY_MB = 2048.0
# Default wall-clock limit after which no further replications are started (the CI reached is reported).
DEFAULT_TIME_LIMIT_S = 60.0
# Rough per-object sizes in the engine (upper-bound guesses for Python objects, not measured: the memory estimate only
# has to tell absurd inputs, millions of workers or replicas, from ordinary ones).
KB_PER_STATION = 2.0  # a worker or core: SimPy resource, queue, busy-time counters
KB_PER_PROCESS = 3.0  # a fortio thread or sequential user: a SimPy process and its generator frames
BYTES_PER_SAMPLE = 8.0  # one float64 latency per completed request


@dataclass(frozen=True)
class PathCost:
    """One request's path through the call graph: station visits and the mean time with no queueing."""

    visits: float
    floor_s: float


@dataclass(frozen=True)
class CostEstimate:
    visits_per_request: float
    floor_s: float  # mean latency of an idle system (no queueing): what bounds a closed loop's rate
    rps: float  # the rate the load generator will offer (upper bound)
    requests_per_replication: float
    replications: int  # replications sure to run
    events: float  # visits x requests x replications
    stations: int
    processes: int  # SimPy processes of the load generator
    memory_mb: float

    def summary(self) -> str:
        return (f"{self.events:.3g} station visits ({self.visits_per_request:.0f} per request x "
                f"{self.requests_per_replication:.3g} requests x {self.replications} replications), "
                f"~{self.memory_mb:.0f} MB")


def path_cost(scenario: Scenario) -> PathCost:
    """Visits and idle-system latency of one request, entry to answer (iterative: a long chain is no recursion)."""
    topo = scenario.topology
    meshed = scenario.meshed
    proxy = scenario.mesh.proxy if meshed else None
    pass_mean = sum(d.mean for d in proxy.passes.values()) if proxy is not None else 0.0
    hop = PathCost(1 + (4 if meshed else 0) + (2 if scenario.lb == "proxy" else 0),
                   2 * topo.network.cross_node.mean + pass_mean)
    done: dict[str, PathCost] = {}
    for name in topo.callees_first():
        visits, floor = 0.0, 0.0
        for step in topo.services[name].handler:
            if isinstance(step, Compute):
                visits, floor = visits + 1, floor + step.time.mean
            elif isinstance(step, Call):
                visits, floor = visits + hop.visits + done[step.service].visits, floor + hop.floor_s + \
                    done[step.service].floor_s
            elif isinstance(step, Parallel):
                visits += sum(hop.visits + done[s].visits for s in step.services)
                floor += hop.floor_s + max(done[s].floor_s for s in step.services)
            elif isinstance(step, Choose):  # the costliest choice: an upper bound
                visits += hop.visits + max(done[s].visits for s in step.services)
                floor += hop.floor_s + sum(w * done[s].floor_s for s, w in zip(step.services, step.weights))
        done[name] = PathCost(visits, floor)
    entry = done[topo.entry]
    return PathCost(entry.visits + hop.visits + len(topo.network.edge), entry.floor_s + hop.floor_s)


def offered_rps(workload: Workload, floor_s: float) -> float:
    """The highest rate the load generator can send: open and fortio loads their rps, sequential users at most
    one request per (think + idle-system latency) each."""
    load = workload.load
    if isinstance(load, SequentialLoad):
        cycle = load.think.mean + floor_s
        return load.users / cycle if cycle > 0 else math.inf
    return load.rps


def _stations(scenario: Scenario) -> int:
    topo, proxy = scenario.topology, scenario.mesh.proxy if scenario.meshed else None
    count = 0
    for svc in topo.services.values():
        count += svc.replicas * (svc.cores + (proxy.workers if proxy is not None else 0))
    if scenario.lb == "proxy" and scenario.mesh.load_balancer is not None:
        count += len(topo.services) * scenario.mesh.load_balancer.workers
    return count + sum(hop.workers or 0 for hop in topo.network.edge)


def outside_floor_s(scenario: Scenario, workload: Workload) -> float:
    """Idle-system time a request spends outside the cluster: the client's round trips (one per request, plus the
    TCP and TLS handshakes of a new connection when keep-alive is off) and the edge hops, both ways."""
    net = scenario.topology.network
    rtts = 1 + ((1 + (2 if workload.tls else 0)) if not workload.keepalive else 0)
    rtt = net.client_rtt.mean * rtts if net.client_rtt is not None else 0.0
    return rtt + 2 * sum(hop.latency.mean for hop in net.edge)


def estimate(scenario: Scenario, workload: Workload, settings: RunSettings, horizon: Horizon) -> CostEstimate:
    """Events and memory of a prediction, from the scenario alone (nothing is simulated)."""
    path = path_cost(scenario)
    path = PathCost(path.visits, path.floor_s + outside_floor_s(scenario, workload))
    rps = offered_rps(workload, path.floor_s)
    requests = rps * horizon.duration if rps < math.inf else math.inf  # the drain sends nothing new
    replications = settings.replications if settings.replications is not None else settings.min_replications
    load = workload.load
    processes = load.users if isinstance(load, SequentialLoad) else load.connections \
        if isinstance(load, (FortioLoad, Wrk2Load)) else 1
    stations = _stations(scenario)
    samples = requests * replications
    memory_mb = (stations * KB_PER_STATION + processes * KB_PER_PROCESS) / 1024 + samples * BYTES_PER_SAMPLE / 2**20
    return CostEstimate(path.visits, path.floor_s, rps, requests, replications, path.visits * requests * replications,
                        stations, processes, memory_mb)


def _driver(scenario: Scenario, workload: Workload, settings: RunSettings, cost: CostEstimate) -> str:
    """The option most responsible for the cost, so that the error names what to change."""
    load = workload.load
    if cost.memory_mb > DEFAULT_MAX_MEMORY_MB and cost.processes * KB_PER_PROCESS / 1024 > DEFAULT_MAX_MEMORY_MB / 2:
        return "connections"
    if cost.memory_mb > DEFAULT_MAX_MEMORY_MB and cost.stations * KB_PER_STATION / 1024 > DEFAULT_MAX_MEMORY_MB / 2:
        return "proxy_workers" if scenario.meshed else "topology"
    if settings.replications is not None and settings.replications > 100:
        return "replications"
    if isinstance(load, SequentialLoad):
        return "connections"
    if settings.duration_s is not None and settings.duration_s * cost.rps > 10 * settings.requests_per_replication:
        return "duration_s"
    if isinstance(load, OpenLoad) and load.profile is not None:
        return "profile"
    return "rps"


def check_budget(scenario: Scenario, workload: Workload, settings: RunSettings, horizon: Horizon,
                 max_events: float = DEFAULT_MAX_EVENTS,
                 max_memory_mb: float = DEFAULT_MAX_MEMORY_MB) -> CostEstimate:
    """The estimate, or one FieldError naming the option that drives a cost above the budget."""
    cost = estimate(scenario, workload, settings, horizon)
    if cost.events > max_events or cost.memory_mb > max_memory_mb:
        field = _driver(scenario, workload, settings, cost)
        limit = (f"the budget of {max_events:.3g} events (max_events)" if cost.events > max_events
                 else f"{max_memory_mb:.0f} MB of memory")
        raise FieldError(field, f"this run would take {cost.summary()}, above {limit}; lower it or raise the "
                                "budget")
    return cost


def time_left_for_another_batch(elapsed_s: float, last_batch_s: float, time_limit_s: float | None) -> bool:
    """The replication time limit: start another batch only if it is expected to end within the limit (a batch
    takes about as long as the last one did)."""
    if time_limit_s is None:
        return True
    return elapsed_s + last_batch_s <= time_limit_s
