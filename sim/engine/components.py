"""Runtime components built from a scenario: proxy instances, app replicas, the network's delays.

Each component wraps a :class:`~meshsim.sim.engine.stations.Station` and the samplers of its service times. Names follow
the measurement manifests: ``client/sidecar``, ``<service>/app``, ``<service>/sidecar``, ``lb:<service>``,
``node-proxy:<node>``, ``collector``.
"""

from __future__ import annotations

import math

from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from meshsim.distributions import Distribution
from meshsim.distribution_spec import total
from meshsim.hold_ceiling import hold_ceiling, mixed_fraction
from meshsim.mesh import Feature, ProxyModel, pass_side
from meshsim.topology import Compute, Delay, Network, Service
from meshsim.sim.engine.collection_clock import CollectionClock
from meshsim.sim.engine.proxy_views import new_histogram, record
from meshsim.sim.engine.stations import CpuQuota, Station
from meshsim.sim.engine.streams import Sampler, Streams


def make_station(name: str, servers: int, pinned: bool, streams: Streams, proxy: ProxyModel | None = None,
                 service: Service | None = None, features: Sequence[Feature] = ()) -> Station:
    wakeup = proxy.wakeup if proxy else (service.wakeup if service else None)
    if wakeup is not None and features:  # the features' code is cold too, and has its own work per wake
        wakeup = replace(wakeup, delay=wakeup.delay + sum(f.cold_delay for f in features),
                         cpu=wakeup.cpu + sum(f.cold_cpu for f in features),
                         resume_cpu=wakeup.resume_cpu + sum(f.resume_cpu for f in features))
    quota = CpuQuota(proxy.cpu_limit) if proxy is not None and proxy.cpu_limit is not None else None
    draw = streams.uniforms(f"{name}:wakeup") if wakeup is not None else None
    return Station(name, servers, pinned=pinned, wakeup=wakeup, wake_draw=draw, quota=quota,
                   cpu_fraction=service.cpu_fraction if service is not None else 1.0)


def collector_station(feature: Feature, streams: Streams) -> Station:
    """The span collector of ``feature`` (which has one), waking as its ``collector.wakeup`` says."""
    collector = feature.collector
    assert collector is not None
    wakeup = collector.wakeup
    draw = streams.uniforms(f"collector:{feature.name}:wakeup") if wakeup is not None else None
    return Station("collector", collector.workers, wakeup=wakeup, wake_draw=draw)


@dataclass
class Export:
    """Span export to a collector: background work on the collector per sampled pass."""

    collector: Station
    work: Sampler
    sampling: float


@dataclass
class ProxyInstance:
    """One proxy process (a sidecar, a node proxy, a central LB) with its workers and per-pass samplers."""

    component: str
    instance: str
    model: ProxyModel
    station: Station
    node: str
    passes: dict[str, Sampler]
    per_kb: float
    post: dict[str, list[tuple[Sampler, float]]]  # side of the last pass ('' for a load balancer) -> its work
    exports: list[Export]
    hold_ceilings: dict[str, float]  # side of a pass -> how long one of its passes holds a worker at most
    handshake: Sampler | None
    handshake_round_trips: int
    rng: np.random.Generator
    uniform: Sampler
    binding: dict[int, int] = field(default_factory=dict)
    _next_worker: int = 0
    _acceptor: int = -1  # shared listener: the worker that accepted the last connection, and when
    _accepted_at: float = float("-inf")
    delayed: float = 0.0  # recorded pass time that did not hold a worker (kernel path, scheduling), summed
    features_mb: float = 0.0  # the enabled features' part of this proxy's memory
    window: tuple[float, float] | None = None  # (start, end) of the measurement window, once known
    held_area: float = 0.0  # integral over the window of the number of requests held (request-seconds)
    holds: int = 0  # requests whose hold began inside the window ...
    held_seconds: float = 0.0  # ... and their hold times, summed (Little's law: rate x mean hold)
    # requests on its callers' pooled connections to it now: from its first pass in to the caller's proxy's pass
    # of the response (whole run); at most: the connections those pools grew to (HTTP/1.1, kept open)
    pool_busy: int = 0
    pool_peak: int = 0
    faces_load_generator: bool = False  # its downstream connections are the load generator's own (System wires it)
    views: dict[str, np.ndarray] = field(default_factory=dict)  # view -> histogram of its holds (proxy_views.py)

    @property
    def connections(self) -> int:
        return len(self.binding)

    def open_pool(self) -> None:
        """A request's first pass in: one more of its callers' pooled connections busy."""
        self.pool_busy += 1
        if self.pool_busy > self.pool_peak:
            self.pool_peak = self.pool_busy

    def close_pool(self) -> None:
        """The caller's proxy has the response (or, without one, the request left this proxy): a connection free."""
        self.pool_busy -= 1

    def hold(self, opened: float, closed: float, view: str) -> None:
        """A request held from its first pass's own work on a worker (``opened``) to its last pass out (``closed``):
        its stream's buffers live that long, and it is the latency the proxy itself records for the request, under
        ``view`` (sim/engine/proxy_views.py). Adds its overlap with the window to the time-integral of requests
        held; a hold that began in the window goes into the view's histogram."""
        if self.window is None:
            return
        start, end = self.window
        self.held_area += max(0.0, min(closed, end) - max(opened, start))
        if start <= opened < end:
            self.holds += 1
            self.held_seconds += closed - opened
            histogram = self.views.get(view)
            if histogram is None:
                histogram = self.views[view] = new_histogram()
            record(histogram, closed - opened)

    @property
    def in_flight(self) -> float:
        """Mean requests held over the window (the time-average, measured directly; Little's law predicts it)."""
        if self.window is None or self.window[1] <= self.window[0]:
            return 0.0
        return self.held_area / (self.window[1] - self.window[0])

    def memory_mb(self, nominal_connections: bool = False) -> float:
        """Resident memory. ``nominal_connections``: the load's connection ids only spread requests over workers (an
        open load's 1000 by default), so the connections really held are those the concurrency needs (below)."""
        return self.model.memory.resident_mb(self.held_connections(nominal_connections), self.in_flight,
                                             self.features_mb)

    def held_connections(self, nominal_connections: bool = False) -> int:
        """Downstream connections held open. The load generator's own, where they reach this proxy directly; behind
        another proxy or an app, the pool its callers grew (one connection per request they had in flight at once,
        kept open), never more than the load generator's connections whose requests came by."""
        if nominal_connections:
            return pooled_connections(self.connections, self.in_flight)
        return self.connections if self.faces_load_generator else min(self.connections, self.pool_peak)

    def worker_for(self, conn: int, now: float = 0.0) -> int | None:
        """Envoy: a downstream connection lives on one worker (kernel SO_REUSEPORT hash, round robin, or the warm
        worker that wins the accept race on a shared listening socket: ``ProxyModel.connection_balance``)."""
        worker = self.binding.get(conn)
        if worker is None:
            balance = self.model.connection_balance
            if balance == "round_robin":
                worker = self._next_worker % self.station.servers
                self._next_worker += 1
            elif balance == "shared_listener":
                worker = self._accept(now)
            else:
                worker = int(self.rng.integers(self.station.servers))
            self.binding[conn] = worker
        return worker if self.station.pinned else None

    def _accept(self, now: float) -> int:
        """A shared listening socket: the worker that accepted the last connection is running its accept loop and
        takes whatever arrives before an idle worker is awake (``accept_window_s``); otherwise the worker whose
        core is still warm (the one busy most recently) wins the race, and a busy worker is not in epoll_wait."""
        if self._acceptor >= 0 and now - self._accepted_at <= self.model.accept_window_s:
            worker = self._acceptor
        else:
            worker = self.station.pick(now)
        self._acceptor, self._accepted_at = worker, now
        return worker

    def post_work(self, side: str) -> float:
        work = 0.0
        for sampler, sampling in self.post.get(side, ()):
            if sampling >= 1.0 or self.uniform.draw() < sampling:
                work += sampler.draw()
        return work

    def pass_(self, now: float, kind: str, conn: int, nbytes: int, *, last: bool = False,
              handshake: bool = False) -> float:
        """One pass of a request (or its response) through this proxy; returns when it leaves."""
        if not last:  # the request's pass in: it rides one of its callers' pooled connections
            self.open_pool()
        work = self.passes[kind].draw()
        side = pass_side(kind)
        cpu = min(work, self.hold_ceilings[side])  # its CPU first, then waits that free the worker
        extra = 0.0  # work beyond the fitted pass (payload, a handshake): the side's held fraction of it is CPU
        if self.per_kb:
            extra += self.per_kb * nbytes / 1024.0
        if handshake and self.handshake is not None:
            extra += self.handshake()
        if extra:
            work += extra
            cpu += extra * self.model.side_fraction(side)
        post = self.post_work(side) if last and self.post else 0.0
        worker = self.binding.get(conn)
        if worker is None:
            worker = self.worker_for(conn, now)
        station = self.station
        # the worker computes `cpu`; the rest of the pass is delay that does not hold it
        departure = station.serve(now, cpu, worker if station.pinned else None, post) + (work - cpu)
        if station.recording:
            self.delayed += work - cpu
        if last and self.exports:
            for export in self.exports:
                if export.sampling >= 1.0 or self.uniform() < export.sampling:
                    export.collector.add_background(departure, export.work())
        return departure


def build_proxy(component: str, instance: str, model: ProxyModel, features: list[Feature], node: str,
                streams: Streams, pass_kinds: tuple[str, ...], collectors: dict[str, Station]) -> ProxyInstance:
    pinned = model.dispatch == "pinned"
    station = make_station(instance, model.workers, pinned, streams, proxy=model, features=features)
    passes: dict[str, Sampler] = {}
    by_side: dict[str, list[Distribution]] = {}
    held: dict[str, list[tuple[Distribution, float]]] = {}  # side -> its parts and the fraction of each that holds
    for kind in pass_kinds:
        parts: list[Distribution | None] = [model.passes[kind]]
        parts += [f.per_pass.get(kind) for f in features]
        dist = total(parts)
        assert dist is not None
        side = pass_side(kind)
        by_side.setdefault(side, []).append(dist)
        own = model.side_fraction(side)
        held.setdefault(side, []).append((model.passes[kind], own))
        held[side] += [(f.per_pass[kind], f.side_fraction(side, own)) for f in features if kind in f.per_pass]
        # Streams are named after the instance and pass, names that do not depend on the rest of the scenario:
        # a what-if variant sharing this proxy draws the same numbers for it (common random numbers).
        passes[kind] = streams.sampler(f"{instance}:{kind}", dist)
    ceilings = {side: hold_ceiling(tuple(dists), mixed_fraction(held[side])) for side, dists in by_side.items()}
    post = _post_work(instance, model, features, streams, pass_kinds)
    exports: list[Export] = []
    handshake_parts: list[Distribution] = []
    round_trips = 0
    for f in features:
        if f.collector is not None:
            exports.append(Export(collectors[f.name], streams.sampler(f"{instance}:{f.name}:span",
                                                                      f.collector.service), f.sampling))
        if f.handshake is not None:
            handshake_parts.append(f.handshake.cpu)
            round_trips = max(round_trips, f.handshake.round_trips)
    handshake_dist = total(handshake_parts)
    return ProxyInstance(
        component=component,
        instance=instance,
        model=model,
        station=station,
        node=node,
        passes=passes,
        per_kb=model.per_kb + sum(f.per_kb for f in features),
        post=post,
        exports=exports,
        hold_ceilings=ceilings,
        handshake=streams.sampler(f"{instance}:handshake", handshake_dist) if handshake_dist else None,
        handshake_round_trips=round_trips,
        rng=streams.rng(f"{instance}:binding"),
        uniform=streams.uniforms(f"{instance}:sampling"),
        features_mb=sum(f.memory_mb for f in features),
    )


def _post_work(instance: str, model: ProxyModel, features: list[Feature], streams: Streams,
               pass_kinds: tuple[str, ...]) -> dict[str, list[tuple[Sampler, float]]]:
    """The samplers of the work after each side's last pass: the side's own (or the proxy's), then the features'.
    A side's own work has a stream of its own; the proxy's and the features' streams serve both sides."""
    shared = [(streams.sampler(f"{instance}:post", model.post_response), 1.0)] if model.post_response else []
    features_post = [(streams.sampler(f"{instance}:{f.name}:post", f.post_response), f.sampling)
                     for f in features if f.post_response is not None]
    post: dict[str, list[tuple[Sampler, float]]] = {}
    for side in dict.fromkeys(pass_side(kind) for kind in pass_kinds):
        own = model.sides.get(side)
        if own is not None and own.post_response is not None:
            work = [(streams.sampler(f"{instance}:{side}:post", own.post_response), 1.0)]
        else:
            work = shared
        if work or features_post:
            post[side] = work + features_post
    return post


def freed_pools(at: ProxyInstance, out: ProxyInstance | None, lb: ProxyInstance | None,
                inbound: ProxyInstance | None) -> list[ProxyInstance]:
    """The proxies whose pooled connections a call frees when proxy ``at`` of its path (the caller's ``out``, a
    central ``lb``, the callee's ``inbound``) has the response: the next one's, whose connection ``at`` used, and
    the first one's own (its caller, an app or the load generator, has no proxy to hold the response)."""
    path = [proxy for proxy in (out, lb, inbound) if proxy is not None]
    k = path.index(at)
    return path[k + 1:k + 2] + (path[:1] if k == 0 else [])


def close_pools(at: ProxyInstance, out: ProxyInstance | None, lb: ProxyInstance | None,
                inbound: ProxyInstance | None) -> None:
    for proxy in freed_pools(at, out, lb, inbound):
        proxy.close_pool()


def pooled_connections(seen: int, in_flight: float) -> int:
    """Connections an HTTP/1.1 pool grows to under an open load: one per concurrent request, up to the peak the
    run reaches. Requests held in a proxy form an M/G/inf occupancy, Poisson with mean ``in_flight``; its 99.9th
    percentile stands for the peak (normal approximation above 50). Never more than the ids seen."""
    if in_flight <= 0:
        return min(seen, 1)
    if in_flight > 50:
        return min(seen, math.ceil(in_flight + 3.09 * math.sqrt(in_flight)))
    k, term = 0, math.exp(-in_flight)
    cumulative = term
    while cumulative < 0.999:
        k += 1
        term *= in_flight / k
        cumulative += term
    return min(seen, max(k, 1))


@dataclass
class AppReplica:
    component: str
    instance: str
    service: Service
    station: Station
    node: str
    computes: dict[int, Sampler]
    delays: dict[int, Sampler] = field(default_factory=dict)  # Delay steps: waits that hold no core
    sidecar: ProxyInstance | None = None
    first_compute: int = -1  # the handler step where a request reaches the app's work (Station.start_request)


def build_app(service: Service, replica: int, node: str, streams: Streams) -> AppReplica:
    instance = f"{service.name}/app#{replica}"
    station = make_station(instance, service.cores, False, streams, service=service)
    if service.garbage_collection is not None:
        station.collection = CollectionClock(service.garbage_collection, streams.uniforms(f"{instance}:collection"))
    computes = {i: streams.sampler(f"{instance}:compute{i}", step.time)
                for i, step in enumerate(service.handler) if isinstance(step, Compute)}
    delays = {i: streams.sampler(f"{instance}:delay{i}", step.time)
              for i, step in enumerate(service.handler) if isinstance(step, Delay)}
    return AppReplica(f"{service.name}/app", instance, service, station, node, computes, delays,
                      first_compute=min(computes, default=-1))


class NetworkDelays:
    """One-way hop delays: propagation (by placement) plus transfer time of the bytes at the link bandwidth.

    While ``recording``, ``total`` sums every delay handed out (the network's part of a prediction's time breakdown).
    """

    recording = False
    total = 0.0

    def _add(self, delay: float) -> float:
        if self.recording:
            self.total += delay
        return delay

    def __init__(self, network: Network, client_node: str, streams: Streams) -> None:
        self.bandwidth = network.bandwidth_bps
        self.client_node = client_node
        self.loopback_delay = streams.sampler("net:loopback", network.loopback)
        self.same_node_delay = streams.sampler("net:same-node", network.same_node)
        self.cross_node_delay = streams.sampler("net:cross-node", network.cross_node)
        self.client_rtt = streams.sampler("net:client-rtt", network.client_rtt) if network.client_rtt else None

    def loopback(self) -> float:
        delay = self.loopback_delay.draw()
        if self.recording:
            self.total += delay
        return delay

    def hop(self, src: str, dst: str, nbytes: int) -> float:
        transfer = nbytes * 8.0 / self.bandwidth
        if self.client_rtt is not None and self.client_node in (src, dst):
            return self._add(0.5 * self.client_rtt() + transfer)
        delay = (self.same_node_delay.draw() if src == dst else self.cross_node_delay.draw()) + transfer
        if self.recording:
            self.total += delay
        return delay

    def round_trip(self, src: str, dst: str) -> float:
        if self.client_rtt is not None and self.client_node in (src, dst):
            return self._add(self.client_rtt())
        return self.hop(src, dst, 0) + self.hop(dst, src, 0)
