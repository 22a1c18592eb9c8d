"""What a prediction will cost, known before simulating: events, seconds and memory, a budget, and time-limit rules.

A replication costs one SimPy event per station visit (system.py folds pure delays into the next wait), so its
work is visits per request x requests per replication; a prediction runs at least the replications it is sure
to run. Its seconds add what every replication costs whatever the load -- building (SimPy) or resetting (compiled:
every random stream's first batch) the system and summarising it, per app replica and proxy -- and the compiled
engine's setup, once per process (EngineSpeed): a chain of 1,000 services costs seconds per replication at 10 rps.
Memory grows with the stations built (workers, cores, replicas), the instances' random streams, the client's
connections or users (one SimPy process each for fortio and sequential loads), the requests in flight (the compiled
engine's tokens: a call frame per level of the deepest call path) and the latency samples kept (8 bytes per
request, all replications kept until the summary). The estimate is arithmetic on the scenario: ``--rps 1e12`` or a
chain of 100,000 services is refused in milliseconds, with the option that drives the cost named (``rps``,
``duration_s``, ``connections``, ``proxy_workers``, ...).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from meshsim.errors import FieldError
from meshsim.scenario import Scenario
from meshsim.topology import Call, Choose, Compute, Delay, Parallel
from meshsim.wakeup import WakeUp
from meshsim.workload import RunSettings, Workload
from meshsim.sim.engine.replication_result import Horizon

# Default budget: 5e7 station visits. Measured on a shared 2-core machine (chain3/istio, bookinfo/linkerd, chain5
# at their test rates): one process simulates 30,000-40,000 visits per second, so the budget is at most ~25 minutes
# of one core; a default prediction (4 replications of 5,000 requests, 20-35 visits each) costs 0.4-0.7 million.
DEFAULT_MAX_EVENTS = 5e7
# Memory the simulated system may take before it is refused (a laptop's spare memory, not the machine's).
DEFAULT_MAX_MEMORY_MB = 2048.0
# The simulated clock is a float64 of seconds: at 1e7 s (116 days) its spacing is 1.9e-9 s, three orders of
# magnitude below the shortest modelled step (a proxy pass's microseconds); far past it such steps round away.
MAX_SIMULATED_S = 1e7
# Default wall-clock limit after which no further replications are started (the CI reached is reported).
DEFAULT_TIME_LIMIT_S = 60.0
# Rough per-object sizes in the engine (upper-bound guesses for Python objects, not measured: the memory estimate only
# has to tell absurd inputs, millions of workers or replicas, from ordinary ones).
KB_PER_STATION = 2.0  # a worker or core: SimPy resource, queue, busy-time counters
KB_PER_PROCESS = 3.0  # a fortio thread or sequential user: a SimPy process and its generator frames
BYTES_PER_SAMPLE = 8.0  # one float64 latency per completed request
# An app replica or proxy: its random streams' batches (measured: chain1000 with istio draws from 12,009 streams for
# 2,001 instances, each holding a batch of 2,048 values, 16 KB: sim/fast/fast_setup.py, sim/engine/streams.py) and its objects.
KB_PER_INSTANCE = 128.0
# A request in flight on the compiled engine: a token of 4 ints and 4 floats per call frame, two frames per level of
# the deepest call path (sim/fast/fast_engine.py); its table doubles when full, so up to twice the tokens in flight.
BYTES_PER_FRAME = 64.0
# Requests in flight are estimated from the idle-system latency; queueing holds more: this many times that.
IN_FLIGHT_MARGIN = 4.0


@dataclass(frozen=True)
class EngineSpeed:
    """How fast an engine simulates on one core, measured on a shared 2-core machine: visits per second
    (tests/bench_engine.py: chain3, bookinfo), and the seconds per app replica or proxy that every replication costs
    whatever its load, and that the compiled engine's setup costs once per process and per saturation probe (a 1 ms
    run of chain1000 and of a 999-way parallel fan-out: compiled 0.7-1.4 ms per replication and 2.0-2.1 ms per setup,
    SimPy 0.6-0.9 ms per replication)."""

    visits_per_s: float
    replication_s_per_instance: float
    setup_s_per_instance: float = 0.0


ENGINE_SPEEDS = {"fast": EngineSpeed(1e6, 1.5e-3, 2.5e-3), "simpy": EngineSpeed(4e4, 1e-3)}


@dataclass(frozen=True)
class PathCost:
    """One request's path through the call graph: station visits, the mean time with no queueing, and the fork
    branches it runs at once at most (a token each on the compiled engine)."""

    visits: float
    floor_s: float
    branches: float = 0.0


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
    instances: int = 1  # app replicas and proxies: what every replication builds or resets, one by one
    tokens_mb: float = 0.0  # of memory_mb: the requests in flight (the compiled engine's tokens)

    def replication_s(self, speed: EngineSpeed, requests: float) -> float:
        """One replication of ``requests`` requests on one core."""
        fixed = self.instances * speed.replication_s_per_instance
        return fixed + self.visits_per_request * requests / speed.visits_per_s

    def seconds(self, speed: EngineSpeed, processes: int = 1) -> float:
        """Wall seconds of the replications sure to run, over ``processes`` workers (each sets the system up once)."""
        rounds = math.ceil(self.replications / max(min(processes, self.replications), 1))
        return self.instances * speed.setup_s_per_instance + rounds * self.replication_s(
            speed, self.requests_per_replication)

    def probe_s(self, speed: EngineSpeed, requests: float) -> float:
        """One probe of the saturation search (a workload of its own: a setup and one replication, in this process)."""
        return self.instances * speed.setup_s_per_instance + self.replication_s(speed, requests)

    def plan(self, speed: EngineSpeed, engine: str, processes: int, settings: RunSettings) -> str:
        """What a run above ~2 s says it is about to do ("": nothing): the replications sure to run, and what a probe
        of the saturation search costs at least (none starts that would end past the time limit)."""
        seconds = self.seconds(speed, processes)
        probe = self.probe_s(speed, 5000) if settings.saturation_search else 0.0
        if max(seconds, probe) <= 2:
            return ""
        search = f"; each probe of the saturation search ~{probe:.0f} s or more" if probe else ""
        limit = f" (no batch or probe starts that would end past the time limit of {settings.time_limit_s:g} s)" \
            if settings.time_limit_s else ""
        return (f"estimated cost: {self.summary()}, ~{seconds:.0f} s on the {engine} engine with {processes} "
                f"process(es) before the precision target adds replications{search}{limit}")

    def summary(self) -> str:
        memory = f"{self.memory_mb:.0f}" if self.memory_mb < 1e6 else f"{self.memory_mb:.3g}"
        return (f"{self.events:.3g} station visits ({self.visits_per_request:.0f} per request x "
                f"{self.requests_per_replication:.3g} requests x {self.replications} replications), ~{memory} MB")


def path_cost(scenario: Scenario) -> PathCost:
    """Visits and idle-system latency of one request, entry to answer (iterative: a long chain is no recursion)."""
    topo = scenario.topology
    meshed = scenario.meshed
    proxy = scenario.mesh.proxy if meshed else None
    pass_mean = sum(d.mean for d in proxy.passes.values()) if proxy is not None else 0.0
    # an idle system's workers are cold: a call's request wakes the caller's proxy and the callee's (its response
    # finds them warm), a visit wakes the app (istio: 0.44 ms a wake; chain1000's idle latency is mostly wake-ups)
    hop = PathCost(1 + (4 if meshed else 0) + (2 if scenario.lb == "proxy" else 0),
                   2 * topo.network.cross_node.mean + pass_mean + 2 * _cold(proxy.wakeup if proxy else None))
    # a fork's branches leave through the caller's proxy, whose passes for one request take turns on its worker (all
    # of them on one when connections are pinned): a 999-way fork waits ~999 outbound passes however idle the system
    serial = sum(d.mean for kind, d in proxy.passes.items() if kind.startswith("outbound")) / \
        (1 if proxy.dispatch == "pinned" else proxy.workers) if proxy is not None else 0.0
    done: dict[str, PathCost] = {}
    for name in topo.callees_first():
        visits, floor, branches = 0.0, 0.0, 0.0
        for step in topo.services[name].handler:
            branches = max(branches, _branches(step, done))
            if isinstance(step, Compute):
                visits, floor = visits + 1, floor + step.time.mean
            elif isinstance(step, Delay):
                floor += step.time.mean
            elif isinstance(step, Call):
                visits, floor = visits + hop.visits + done[step.service].visits, floor + hop.floor_s + \
                    done[step.service].floor_s
            elif isinstance(step, Parallel):
                visits += sum(hop.visits + done[s].visits for s in step.services)
                floor += hop.floor_s + max(max(done[s].floor_s for s in step.services), len(step.services) * serial)
            elif isinstance(step, Choose):  # the costliest choice: an upper bound
                visits += hop.visits + max(done[s].visits for s in step.services)
                floor += hop.floor_s + sum(w * done[s].floor_s for s, w in zip(step.services, step.weights))
        done[name] = PathCost(visits, floor + _cold(topo.services[name].wakeup), branches)
    entry = done[topo.entry]
    return PathCost(entry.visits + hop.visits + len(topo.network.edge), entry.floor_s + hop.floor_s, entry.branches)


def _cold(wakeup: WakeUp | None) -> float:
    """What a cold wake-up adds to a request's latency."""
    return wakeup.delay + wakeup.cpu if wakeup is not None else 0.0


def _branches(step: object, done: dict[str, PathCost]) -> float:
    """Fork branches a handler step keeps running at once at most: a Parallel step's, each with its own below."""
    if isinstance(step, Parallel):
        return sum(1 + done[s].branches for s in step.services)
    if isinstance(step, Choose):
        return max(done[s].branches for s in step.services)
    if isinstance(step, Call):
        return done[step.service].branches
    return 0.0


def offered_rps(workload: Workload, floor_s: float) -> float:
    """The highest rate the load generator can send: open and fortio loads their rps, sequential users at most
    one request per (think + idle-system latency) each."""
    return workload.load.offered_rps(floor_s)


def _instances(scenario: Scenario) -> int:
    """App replicas and proxies (a sidecar each and the client's, an upper bound for node proxies; a central LB
    per service): what a replication builds or resets and summarises one by one."""
    topo = scenario.topology
    replicas = sum(svc.replicas for svc in topo.services.values())
    proxies = replicas + 1 if scenario.meshed else 0
    return replicas + proxies + (len(topo.services) if scenario.lb == "proxy" else 0)


def _tokens_mb(scenario: Scenario, path: PathCost, rps: float, processes: int, closed: bool) -> float:
    """The compiled engine's tokens for the requests in flight: a closed loop's connections or users, an open load's
    rate x a few idle-system latencies; each request with its fork branches, each token with its call frames."""
    in_flight = processes if closed else rps * path.floor_s * IN_FLIGHT_MARGIN + 1
    frames = 2 * scenario.topology.call_depth() + 4
    return 2 * in_flight * (1 + path.branches) * (frames * BYTES_PER_FRAME + 72) / 2**20


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


def idle_latency_s(scenario: Scenario, workload: Workload) -> float:
    """Mean latency of a request through an idle system: the cluster's path and the client's side of it."""
    return path_cost(scenario).floor_s + outside_floor_s(scenario, workload)


def estimate(scenario: Scenario, workload: Workload, settings: RunSettings, horizon: Horizon) -> CostEstimate:
    """Events and memory of a prediction, from the scenario alone (nothing is simulated)."""
    path = replace(path_cost(scenario), floor_s=idle_latency_s(scenario, workload))
    rps = offered_rps(workload, path.floor_s)
    requests = rps * horizon.duration if rps < math.inf else math.inf  # the drain sends nothing new
    replications = settings.replications if settings.replications is not None else settings.min_replications
    load = workload.load
    processes = load.processes
    stations, instances = _stations(scenario), _instances(scenario)
    samples = requests * replications
    tokens_mb = _tokens_mb(scenario, path, rps, processes, not load.is_open)
    memory_mb = (stations * KB_PER_STATION + processes * KB_PER_PROCESS + instances * KB_PER_INSTANCE) / 1024 + \
        samples * BYTES_PER_SAMPLE / 2**20 + tokens_mb
    return CostEstimate(path.visits, path.floor_s, rps, requests, replications, path.visits * requests * replications,
                        stations, processes, memory_mb, instances, tokens_mb)


def _driver(scenario: Scenario, workload: Workload, settings: RunSettings, cost: CostEstimate,
            max_events: float) -> str:
    """The option most responsible for the cost, so that the error names what to change."""
    load = workload.load
    if cost.memory_mb > DEFAULT_MAX_MEMORY_MB and cost.processes * KB_PER_PROCESS / 1024 > DEFAULT_MAX_MEMORY_MB / 2:
        return "connections"
    if cost.memory_mb > DEFAULT_MAX_MEMORY_MB and cost.stations * KB_PER_STATION / 1024 > DEFAULT_MAX_MEMORY_MB / 2:
        return "proxy_workers" if scenario.meshed else "topology"
    if cost.memory_mb > DEFAULT_MAX_MEMORY_MB and cost.tokens_mb > DEFAULT_MAX_MEMORY_MB / 2:
        return load.in_flight_field
    if cost.memory_mb > DEFAULT_MAX_MEMORY_MB and cost.instances * KB_PER_INSTANCE / 1024 > DEFAULT_MAX_MEMORY_MB / 2:
        return "topology"
    if settings.replications is not None and settings.replications > 100:
        return "replications"
    if load.rate_is_outcome:
        return "connections"  # sequential users: their count sets the rate
    if settings.duration_s is not None and _default_length_fits(cost, settings, max_events):
        return "duration_s"  # the run's default length would fit: the duration asked for is what costs
    return load.rate_field


def _default_length_fits(cost: CostEstimate, settings: RunSettings, max_events: float) -> bool:
    """Whether this rate fits the budget at the default length (requests_per_replication, at least 1 s)."""
    requests = max(settings.requests_per_replication, cost.rps)
    return (cost.visits_per_request * requests * cost.replications <= max_events
            and requests * cost.replications * BYTES_PER_SAMPLE / 2**20 <= DEFAULT_MAX_MEMORY_MB)


def check_budget(scenario: Scenario, workload: Workload, settings: RunSettings, horizon: Horizon,
                 max_events: float = DEFAULT_MAX_EVENTS,
                 max_memory_mb: float = DEFAULT_MAX_MEMORY_MB) -> CostEstimate:
    """The estimate, or one FieldError naming the option that drives a cost above the budget."""
    cost = estimate(scenario, workload, settings, horizon)
    if cost.events > max_events or cost.memory_mb > max_memory_mb:
        field = _driver(scenario, workload, settings, cost, max_events)
        limit = (f"the budget of {max_events:.3g} events (max_events)" if cost.events > max_events
                 else f"{max_memory_mb:.0f} MB of memory")
        raise FieldError(field, f"this run would take {cost.summary()}, above {limit}; lower it or raise the "
                                "budget")
    check_horizon(workload, settings, horizon, cost, max_events)
    return cost


def check_horizon(workload: Workload, settings: RunSettings, horizon: Horizon, cost: CostEstimate,
                  max_events: float = DEFAULT_MAX_EVENTS) -> None:
    """A replication must fit the engine's clock and expect at least one request in its measurement window
    (``--rps 1e-300`` or ``--duration 1e-300`` simulate nothing and would report nothing as a result)."""
    blamed = _horizon_driver(workload, settings, cost, max_events)
    if horizon.duration > MAX_SIMULATED_S:
        raise FieldError(blamed, f"a replication would last {horizon.duration:.3g} simulated seconds, beyond the "
                                 f"engine's clock ({MAX_SIMULATED_S:.0e} s: far past it, microsecond steps round "
                                 "away)")
    window = horizon.duration - horizon.warmup
    expected = cost.rps * window
    if not expected >= 1:
        raise FieldError(blamed, f"a replication expects {expected:.3g} requests ({cost.rps:.3g} rps over its "
                                 f"{window:.3g} s measurement window): nothing to measure")


def _horizon_driver(workload: Workload, settings: RunSettings, cost: CostEstimate, max_events: float) -> str:
    """The duration when one was given and the rate's own default length would be fine, else the rate."""
    rate_fine = _default_length_fits(cost, settings, max_events) and \
        settings.requests_per_replication / cost.rps <= MAX_SIMULATED_S
    return "duration_s" if settings.duration_s is not None and rate_fine else workload.load.rate_field


def time_left_for_another_batch(elapsed_s: float, last_batch_s: float, time_limit_s: float | None) -> bool:
    """The replication time limit: start another batch only if it is expected to end within the limit (a batch
    takes about as long as the last one did)."""
    if time_limit_s is None:
        return True
    return elapsed_s + last_batch_s <= time_limit_s
