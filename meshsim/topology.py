"""Topologies: the call graph of services, their app work and payloads, and the network between them.

A topology is data (``models/topologies/*.yaml``, schema ``meshsim/topology/v1``, documented in
models/README.md); this module turns it into frozen dataclasses and validates it once: unknown callees, cycles,
impossible numbers are refused with the file and key named.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from meshsim.distributions import Deterministic, Distribution
from meshsim.distribution_spec import distribution_at
from meshsim.errors import FieldError, ModelError
from meshsim.garbage_collection import GarbageCollection, parse_garbage_collection
from meshsim.handler_steps import (  # noqa: F401 (the step types are re-exported: part of a topology)
    Call, Choose, Compute, Delay, Parallel, Step, parse_step)
from meshsim.limits import MAX_BANDWIDTH_GBPS, MAX_CORES, MAX_MESSAGE_BYTES, MAX_REPLICAS, MAX_SERVICES, MAX_WORKERS
from meshsim.tick_hold import TickHold
from meshsim.woken_first import WokenFirst
from meshsim.wakeup import WakeUp, parse_wakeup
from meshsim.yamlio import Section, content_hash, parse_yaml_text

SCHEMA = "meshsim/topology/v1"


@dataclass(frozen=True)
class Service:
    name: str
    handler: tuple[Step, ...]
    replicas: int = 1
    cores: int = 1
    request_bytes: int = 200
    response_bytes: int = 1024
    node: str | None = None
    wakeup: WakeUp | None = None
    # replicas spread over these nodes, replica r on nodes[r % len(nodes)] (a scheduler spreading pods); () = `node`
    nodes: tuple[str, ...] = ()
    # the share of each compute step's time that holds a core; the rest waits holding none (a measured baseline's
    # client, kernel and network time beside the app's CPU)
    cpu_fraction: float = 1.0
    garbage_collection: GarbageCollection | None = None  # its CPU in lumps every so many requests

    def node_of_replica(self, r: int) -> str | None:
        """Replica ``r``'s declared node (None: the service declares none)."""
        return self.nodes[r % len(self.nodes)] if self.nodes else self.node

    def callees(self) -> tuple[str, ...]:
        names: list[str] = []
        for step in self.handler:
            if isinstance(step, Call):
                names.append(step.service)
            elif isinstance(step, (Parallel, Choose)):
                names.extend(step.services)
        return tuple(names)


@dataclass(frozen=True)
class EdgeHop:
    """A hop between an outside client and the entry service: NodePort bridge, cloud LB, edge proxy."""

    name: str
    latency: Distribution
    workers: int | None = None
    service: Distribution | None = None


@dataclass(frozen=True)
class KernelCpu:
    """CPU of the kernel's network stack for one one-way hop: ``per_hop + per_kb x KB``, half on the sender's node
    and half on the receiver's (a loopback hop: all on its node). Its latency stays the network's."""

    per_hop: Distribution
    per_kb: Distribution


@dataclass(frozen=True)
class Network:
    loopback: Distribution
    same_node: Distribution
    cross_node: Distribution
    bandwidth_bps: float
    client_rtt: Distribution | None = None
    edge: tuple[EdgeHop, ...] = ()
    kernel_cpu: KernelCpu | None = None


@dataclass(frozen=True)
class Client:
    """The load generator's own per-request work and where it runs.

    ``overhead`` is the per-request delay of the client (booked on its node's cores when the node is declared);
    ``cpu_per_call`` is the load generator's CPU per call measured from /proc (fortio's utime+stime / calls),
    booked on the client node's cores before the request leaves (on a core of its own when no node is declared).
    """

    overhead: Distribution | None = None
    node: str = "client"
    request_bytes: int = 100
    cpu_per_call: Distribution | None = None


@dataclass(frozen=True)
class EntryRate:
    """The rate requests arrive at the entry in the system the topology was taken from (traces: the requests rooted
    at the entry over the span of their start times); a prediction uses it when no rate is given."""

    rps: float
    source: str


@dataclass(frozen=True)
class Topology:
    name: str
    entry: str
    services: Mapping[str, Service]
    network: Network
    client: Client = field(default_factory=Client)
    description: str = ""
    origin: str = ""
    content_hash: str = ""
    # cores of the nodes whose CPU is shared: every app, sidecar and proxy placed there competes for them
    node_cores: Mapping[str, float] = field(default_factory=dict)
    entry_rate: EntryRate | None = None
    # Linux's per-CPU run queues on those nodes: a burst that finds no core idle queues on one core, chosen when it
    # wakes, instead of taking whichever core frees first (sim/engine/stations.py NodeCores)
    per_core_queues: bool = False
    # a thread with a backlog keeps its core till the scheduler's next tick, for a share of the bursts that find the
    # cores of those nodes taken (meshsim/tick_hold.py); fitted per host, so set from a model's cluster block
    tick_hold: TickHold | None = None
    # those nodes' scheduler runs a thread that woke ahead of the running ones (meshsim/woken_first.py); a property of
    # the host's kernel, set from a model's cluster block like the tick hold
    woken_first: WokenFirst | None = None

    def callees_first(self) -> list[str]:
        """Every service after the services it calls (the graph is acyclic: checked on load)."""
        return callees_first(self.services, self.origin or self.name)

    def call_depth(self) -> int:
        """Services on the longest call path from the entry (1: the entry calls nobody): how deep calls nest."""
        depth: dict[str, int] = {}
        for name in self.callees_first():
            depth[name] = 1 + max((depth[callee] for callee in self.services[name].callees()), default=0)
        return depth[self.entry]

    def node_of(self, service: str) -> str:
        node = self.services[service].node_of_replica(0)
        return node if node is not None else f"node-{service}"

    def with_payload(self, response_bytes: int) -> "Topology":
        """Every service answers ``response_bytes`` (fortio echo ?size=...)."""
        if isinstance(response_bytes, bool) or not isinstance(response_bytes, int) \
                or not 0 <= response_bytes <= MAX_MESSAGE_BYTES:
            raise FieldError("payload_bytes", f"must be an integer in [0, {MAX_MESSAGE_BYTES}], got {response_bytes!r}")
        services = {n: replace(s, response_bytes=response_bytes) for n, s in self.services.items()}
        return replace(self, services=services)

    def with_leaf_delay(self, seconds: float) -> "Topology":
        """Every leaf service (one that calls none) waits ``seconds`` per request before it answers, holding no
        core (fortio echo's ``delay``: a timer in the request's goroutine)."""
        services = {n: replace(s, handler=s.handler + (Delay(Deterministic(seconds)),)) if not s.callees() else s
                    for n, s in self.services.items()}
        return replace(self, services=services)

    def without_loopback(self) -> "Topology":
        """The hops between an app and its sidecar take no time of their own (a mesh model's passes hold them)."""
        return replace(self, network=replace(self.network, loopback=Deterministic(0.0)))

    def on_one_host(self, cores: float, per_core_queues: bool = False, tick_hold: TickHold | None = None,
                    woken_first: WokenFirst | None = None) -> "Topology":
        """The lab: the client, every app and every proxy on one machine sharing its cores.

        Every CPU consumer of the topology lands on that host: app computes, proxy passes, the load generator's
        ``client.cpu_per_call`` and the kernel's ``network.kernel_cpu`` (all hops are then same-node hops, booked on
        the host as one burst). The topology's own node declarations (``single``: client and server apart) give
        way. ``tick_hold``: how often a thread keeps one of the host's cores till the next tick (fitted for that
        host), else the topology's own; ``woken_first`` likewise (the host's scheduler runs a woken thread first)."""
        services = {name: replace(svc, node="host", nodes=()) for name, svc in self.services.items()}
        return replace(self, services=services, client=replace(self.client, node="host"), node_cores={"host": cores},
                       per_core_queues=per_core_queues, tick_hold=tick_hold or self.tick_hold,
                       woken_first=woken_first or self.woken_first)


# ---------------------------------------------------------------------------------------------------------------


def _service(name: str, raw: Any, where: str) -> Service:
    s = Section(raw, where)
    s.reject_unknown(("replicas", "cores", "request_bytes", "response_bytes", "node", "nodes", "handler", "wakeup",
                      "cpu_fraction", "cpu_fraction_source", "source", "note", "language",
                      "garbage_collection"))
    handler_raw = s.require("handler")
    if not isinstance(handler_raw, list) or not handler_raw:
        raise ModelError(f"{s.key('handler')}: expected a non-empty list of steps")
    handler = tuple(parse_step(step, f"{s.key('handler')}[{i}]") for i, step in enumerate(handler_raw))
    return Service(
        name=name,
        handler=handler,
        replicas=s.integer("replicas", 1, maximum=MAX_REPLICAS),
        cores=s.integer("cores", 1, maximum=MAX_CORES),
        request_bytes=s.integer("request_bytes", 200, minimum=0, maximum=MAX_MESSAGE_BYTES),
        response_bytes=s.integer("response_bytes", 1024, minimum=0, maximum=MAX_MESSAGE_BYTES),
        node=s.get("node"),
        wakeup=parse_wakeup(s.section("wakeup", required=False)),
        nodes=_spread_nodes(s),
        cpu_fraction=s.number("cpu_fraction", 1.0, strictly_positive=True, maximum=1.0),
        garbage_collection=parse_garbage_collection(s.section("garbage_collection", required=False)),
    )


def _spread_nodes(s: Section) -> tuple[str, ...]:
    raw = s.get("nodes")
    if raw is None:
        return ()
    if not isinstance(raw, list) or not raw or not all(isinstance(n, str) and n for n in raw):
        raise ModelError(f"{s.key('nodes')}: expected a non-empty list of node names")
    if s.get("node") is not None:
        raise ModelError(f"{s.key('nodes')}: give either node or nodes, not both")
    return tuple(raw)


def _cpu_cost(section: Section, name: str) -> Distribution:
    """A CPU cost: a distribution (never negative: parse_distribution refuses negative values) with a finite mean."""
    dist = distribution_at(section, name)
    assert dist is not None
    if not math.isfinite(dist.mean):
        raise ModelError(f"{section.key(name)}: a CPU cost needs a finite mean, got {dist.mean}")
    return dist


def _kernel_cpu(s: Section) -> KernelCpu | None:
    k = s.section("kernel_cpu", required=False)
    if k is None:
        return None
    k.reject_unknown(("per_hop_ms", "per_kb_ms", "source", "note"))
    return KernelCpu(_cpu_cost(k, "per_hop_ms"), _cpu_cost(k, "per_kb_ms"))


def _network(s: Section) -> Network:
    s.reject_unknown(("loopback", "same_node", "cross_node", "bandwidth_gbps", "client_rtt", "edge", "kernel_cpu",
                      "source", "note"))
    edge = []
    for i, raw in enumerate(s.get("edge", [])):
        e = Section(raw, f"{s.key('edge')}[{i}]")
        e.reject_unknown(("name", "latency", "workers", "service", "source", "note"))
        workers = e.integer("workers", maximum=MAX_WORKERS) if e.has("workers") else None
        service = distribution_at(e, "service", required=workers is not None)
        edge.append(EdgeHop(e.string("name"), distribution_at(e, "latency"), workers, service))
    return Network(
        loopback=distribution_at(s, "loopback"),
        same_node=distribution_at(s, "same_node"),
        cross_node=distribution_at(s, "cross_node"),
        bandwidth_bps=s.number("bandwidth_gbps", strictly_positive=True, maximum=MAX_BANDWIDTH_GBPS) * 1e9,
        client_rtt=distribution_at(s, "client_rtt", required=False),
        edge=tuple(edge),
        kernel_cpu=_kernel_cpu(s),
    )


def _check_graph(services: Mapping[str, Service], entry: str, where: str) -> None:
    if entry not in services:
        raise ModelError(f"{where} entry: unknown service {entry!r} (known: {', '.join(services)})")
    for svc in services.values():
        for callee in svc.callees():
            if callee not in services:
                raise ModelError(f"{where} services.{svc.name}.handler: calls unknown service {callee!r}")
    callees_first(services, where)  # refuses a cycle


def callees_first(services: Mapping[str, Service], where: str = "topology") -> list[str]:
    """Every service after all the services it calls: a depth-first post-order with an explicit stack (a
    1,000-service chain must not hit Python's recursion limit); a cycle is a ModelError naming it."""
    order: list[str] = []
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    for root in services:
        if root in state:
            continue
        state[root] = 1
        path = [root]
        stack = [iter(services[root].callees())]
        while stack:
            callee = next(stack[-1], None)
            if callee is None:
                order.append(path[-1])
                state[path.pop()] = 2
                stack.pop()
            elif state.get(callee) == 1:
                cycle = " -> ".join(path[path.index(callee):] + [callee])
                raise ModelError(f"{where} services: call graph has a cycle: {cycle}")
            elif callee not in state:
                state[callee] = 1
                path.append(callee)
                stack.append(iter(services[callee].callees()))
    return order


def _entry_rate(top: Section) -> EntryRate | None:
    rate = top.section("entry_rate", required=False)
    if rate is None:
        return None
    rate.reject_unknown(("rps", "source", "note"))
    source = rate.string("source")
    if not source.strip():
        raise ModelError(f"{rate.key('source')}: empty (say where the rate was seen)")
    return EntryRate(rate.number("rps", strictly_positive=True), source)


def topology_from_data(data: Any, where: str, digest: str = "") -> Topology:
    top = Section(data, f"{where}:")
    top.reject_unknown(("schema", "name", "description", "entry", "entry_rate", "client", "network", "services",
                        "nodes", "source", "sources", "note"))
    if top.get("schema", SCHEMA) != SCHEMA:
        raise ModelError(f"{top.key('schema')}: expected {SCHEMA!r}, got {top.get('schema')!r}")
    services_sec = top.section("services")
    assert services_sec is not None
    if not services_sec.data:
        raise ModelError(f"{top.key('services')}: no services")
    if len(services_sec.data) > MAX_SERVICES:
        raise ModelError(f"{top.key('services')}: {len(services_sec.data)} services, at most {MAX_SERVICES} "
                         "(meshsim/limits.py says why)")
    services = {str(n): _service(str(n), raw, services_sec.key(str(n))) for n, raw in services_sec.data.items()}
    entry = top.string("entry")
    _check_graph(services, entry, f"{where}:")
    client_sec = top.section("client", required=False)
    client = Client()
    if client_sec is not None:
        client_sec.reject_unknown(("overhead", "node", "request_bytes", "cpu_per_call", "source", "note"))
        client = Client(distribution_at(client_sec, "overhead", required=False), client_sec.string("node", "client"),
                        client_sec.integer("request_bytes", 100, minimum=0),
                        _cpu_cost(client_sec, "cpu_per_call") if client_sec.has("cpu_per_call") else None)
    network = _network(top.section("network"))  # type: ignore[arg-type]
    node_cores: dict[str, float] = {}
    nodes = top.section("nodes", required=False)
    if nodes is not None:
        for node in nodes.data:
            n = Section(nodes.data[node], nodes.key(str(node)))
            n.reject_unknown(("cores", "source", "note"))
            node_cores[str(node)] = n.number("cores", strictly_positive=True, maximum=MAX_CORES)
    return Topology(top.string("name"), entry, services, network, client, top.get("description", ""), where, digest,
                    node_cores, _entry_rate(top))


def load_topology_text(text: str, where: str = "<uploaded topology>") -> Topology:
    """Parse a topology from YAML text (CLI files, Dash uploads)."""
    return topology_from_data(parse_yaml_text(text, where), where, content_hash(text))


def chain_topology(template: Topology, n: int) -> Topology:
    """``chainN``: the chain3 template stretched to n services s1 -> ... -> sN (middle hops like s2, leaf like s3)."""
    if not 1 <= n <= MAX_SERVICES:
        raise ModelError(f"chain{n}: a chain has 1 to {MAX_SERVICES} services (meshsim/limits.py says why)")
    middle, leaf = template.services["s2"], template.services["s3"]
    services: dict[str, Service] = {}
    # a service whose template sits on a declared node gets a node of its own with the template node's cores
    node_cores = {node: cores for node, cores in template.node_cores.items()
                  if node not in {template.node_of(s) for s in template.services}}
    for i in range(1, n + 1):
        name = f"s{i}"
        like = leaf if i == n else middle
        handler = tuple(Call(f"s{i + 1}") if isinstance(st, Call) else st for st in like.handler)
        services[name] = replace(like, name=name, handler=handler, node=None, nodes=())
        cores = template.node_cores.get(template.node_of(like.name))
        if cores is not None:
            node_cores[f"node-{name}"] = cores
    return replace(template, name=f"chain{n}", entry="s1", services=services, node_cores=node_cores,
                   description=f"{n} services in a chain, built from {template.origin} (middle = s2, leaf = s3)",
                   content_hash=f"{template.content_hash}+chain{n}")


