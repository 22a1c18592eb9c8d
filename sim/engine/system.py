"""The simulated system: every component of a scenario wired together, and the path a request takes.

A call from a caller to a service goes: caller app -> caller's outbound proxy -> (central LB) -> network ->
callee's inbound sidecar -> callee app (its handler: compute, calls, fork/join, weighted choice) and back the same
way; Envoy's request and response passes of one connection land on the same worker. Delays that are pure latency
(network, loopback) are folded into the wait for the next station, so each station visit costs one SimPy event.
The CPU that belongs to no station (kernel, load generator) is booked in host_cpu.py; a request's nested calls run as
one SimPy process by nested_calls.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import simpy

from meshsim.mesh import LB_PASS_KINDS, PASS_KINDS, Feature
from meshsim.scenario import Scenario
from meshsim.topology import Call, Choose, Parallel, Service
from meshsim.workload import Workload
from meshsim.sim.engine.balancing import POLICIES, Balancer, caller_policy
from meshsim.sim.engine.components import AppReplica, NetworkDelays, ProxyInstance, build_app, build_proxy, make_station
from meshsim.sim.engine.components import close_pools, collector_station
from meshsim.sim.engine.host_cpu import HostCpu
from meshsim.sim.engine.nested_calls import Nested, Process, nested
from meshsim.sim.engine.proxy_views import BALANCING, INBOUND, outbound
from meshsim.sim.engine.stations import Station
from meshsim.sim.engine.streams import Sampler, Streams


@dataclass
class Caller:
    name: str
    node: str
    outbound: ProxyInstance | None


@dataclass
class Route:
    """A call from one caller to one service: the callee, its central LB (or None), the balancer, the replicas."""

    service: Service
    lb: ProxyInstance | None
    balancer: Balancer
    replicas: list[AppReplica]
    view: str  # the caller's proxy's view of these calls (proxy_views.outbound)


class System:
    """All stations of one replication of a scenario, and the request logic that drives them."""

    def __init__(self, env: simpy.Environment, scenario: Scenario, workload: Workload, streams: Streams) -> None:
        self.env = env
        self.scenario = scenario
        self.workload = workload
        self.streams = streams
        topo, mesh = scenario.topology, scenario.mesh
        features: list[Feature] = [mesh.features[name] for name in scenario.features]
        self.features = features
        self.net = NetworkDelays(topo.network, topo.client.node, streams)
        self.collectors: dict[str, Station] = {}
        for f in features:
            if f.collector is not None:
                self.collectors[f.name] = collector_station(f, streams)
        proxy = mesh.proxy if scenario.meshed else None
        self.proxy_model = proxy
        self.header_bytes = (proxy.header_bytes + sum(f.header_bytes for f in features)) if proxy else 0
        self.mtls = any(f.handshake is not None for f in features)
        self.node_proxies: dict[str, ProxyInstance] = {}
        self.apps: dict[str, list[AppReplica]] = {}
        self.callers: dict[str, Caller] = {}
        for name, svc in topo.services.items():
            self.apps[name] = [self._app(name, svc, r) for r in range(svc.replicas)]
        client_out = None
        if proxy is not None and scenario.scope == "both":
            client_out = self._outbound_for("client/sidecar", "client/sidecar#0", topo.client.node)
        self.client = Caller("client", topo.client.node, client_out)
        self.lbs: dict[str, ProxyInstance] = {}
        self.lb_balancers: dict[str, Balancer] = {}
        if scenario.lb == "proxy":
            self._build_load_balancers()
        self.client_balancers: dict[tuple[str, str], Balancer] = {}
        self.choosers: dict[str, Sampler] = {}
        self.routes: dict[tuple[str, str], Route] = {}
        self.client_overhead = (streams.sampler("client:overhead", topo.client.overhead)
                                if topo.client.overhead is not None else None)
        self.edges = [(hop, streams.sampler(f"edge:{hop.name}:latency", hop.latency),
                       make_station(f"edge:{hop.name}", hop.workers, False, streams) if hop.workers else None,
                       streams.sampler(f"edge:{hop.name}:service", hop.service) if hop.service else None)
                      for hop in topo.network.edge]
        # mTLS between two proxies rides on the calling proxy's own upstream connections, not on the client's: the
        # pair's first call makes the handshake, every later one reuses the session (see models/README.md, mtls)
        self.tls_pairs: set[tuple[str, str]] = set()
        self._share_node_cpu()
        for proxy in self._load_generator_facing():
            proxy.faces_load_generator = True
        self.in_system = 0  # requests between the client's send and the full answer (for Little's law checks)
        # bytes of every call's request (mesh headers included) and response while recording, and the size of the
        # request the entry service receives: what a packet capture between pods sees (loopback copies excluded)
        self.wire_request_bytes = 0.0
        self.wire_response_bytes = 0.0
        self.entry_request_bytes = 0

    # -- wiring helpers ------------------------------------------------------------------------------------------

    def _proxy_for(self, component: str, instance: str, node: str) -> ProxyInstance:
        assert self.proxy_model is not None
        return build_proxy(component, instance, self.proxy_model, self.features, node, self.streams, PASS_KINDS,
                           self.collectors)

    def _outbound_for(self, component: str, instance: str, node: str) -> ProxyInstance | None:
        """The proxy a caller on ``node`` sends through when it has no sidecar of its own (None without a mesh)."""
        proxy = self.proxy_model
        if proxy is None:
            return None
        if proxy.placement == "node":  # one shared proxy per node (Traefik Mesh)
            if node not in self.node_proxies:
                self.node_proxies[node] = self._proxy_for(f"node-proxy:{node}", f"node-proxy:{node}", node)
            return self.node_proxies[node]
        return self._proxy_for(component, instance, node)

    def _app(self, name: str, svc: Service, r: int) -> AppReplica:
        """Replica ``r`` of service ``name`` with its sidecar, registered as a caller."""
        topo = self.scenario.topology
        # replicas without a declared node each get a node of their own
        declared = svc.node_of_replica(r)
        node = declared if declared is not None else topo.node_of(name) if svc.replicas == 1 else \
            f"{topo.node_of(name)}-{r}"
        app = build_app(svc, r, node, self.streams)
        if self.proxy_model is not None and self.proxy_model.placement == "sidecar":
            app.sidecar = self._proxy_for(f"{name}/sidecar", f"{name}/sidecar#{r}", node)
        outbound = app.sidecar
        if outbound is None and svc.callees():
            outbound = self._outbound_for("", "", node)
        self.callers[app.instance] = Caller(app.instance, node, outbound)
        return app

    def _build_load_balancers(self) -> None:
        """One central proxy LB in front of every service (lb: proxy)."""
        lb_model = self.scenario.mesh.load_balancer
        assert lb_model is not None
        for name in self.scenario.topology.services:
            instance = f"lb:{name}"
            self.lbs[name] = build_proxy(instance, instance, lb_model, [], f"lb-node:{name}", self.streams,
                                         LB_PASS_KINDS, self.collectors)
            self.lb_balancers[name] = self._balancer(lb_model.policy, name, instance)

    def _share_node_cpu(self) -> None:
        """Put every station on its node's CPU quota (nodes with declared cores)."""
        topo = self.scenario.topology
        self.host = HostCpu(self.env, topo, self.streams, self.net)
        self.node_cpu = self.host.node_cpu
        self.client_cpu_per_call = self.host.client_cpu_per_call
        for reps in self.apps.values():
            for app in reps:
                app.station.node = self.node_cpu.get(app.node)
        for _, station, p in self.stations():
            if p is not None:
                station.node = self.node_cpu.get(p.node)
        self.client_cpu = self.node_cpu.get(topo.client.node)
        for f in self.features:
            if f.collector is not None and f.collector.node is not None:
                self.collectors[f.name].node = self.node_cpu.get(f.collector.node)

    def _balancer(self, policy: str, target: str, chooser: str) -> Balancer:
        n = self.scenario.topology.services[target].replicas
        return POLICIES[policy](n, self.streams.rng(f"balance:{chooser}->{target}"))

    def _load_generator_facing(self) -> list[ProxyInstance]:
        """The proxies the load generator's connections reach directly: its own proxy, else the entry service's
        central balancer, else the entry replicas' sidecars."""
        entry = self.scenario.topology.entry
        if self.client.outbound is not None or entry in self.lbs:
            return [self.client.outbound or self.lbs[entry]]
        return [app.sidecar for app in self.apps[entry] if app.sidecar is not None]

    def _client_balancer(self, caller: Caller, target: str) -> Balancer:
        key = (caller.name, target)
        bal = self.client_balancers.get(key)
        if bal is None:
            bal = self.client_balancers[key] = self._balancer(self.caller_policy(caller), target, caller.name)
        return bal

    def caller_policy(self, caller: Caller) -> str:
        """How a caller's calls pick a replica (balancing.caller_policy)."""
        return caller_policy(self.scenario.mesh, caller.outbound is not None,
                             caller is self.client and self.workload.keepalive)

    @property
    def host_cpu_time(self) -> float:
        """Recorded time in kernel and load-generator CPU (use and wait), summed."""
        return self.host.time

    @host_cpu_time.setter
    def host_cpu_time(self, seconds: float) -> None:  # the compiled engine hands back its own sum
        self.host.time = seconds

    def stations(self) -> list[tuple[str, Station, ProxyInstance | None]]:
        """(component, station, proxy or None) for every station, for CPU and utilisation accounting."""
        out: list[tuple[str, Station, ProxyInstance | None]] = []
        seen: set[int] = set()
        proxies = [r.sidecar for reps in self.apps.values() for r in reps if r.sidecar is not None]
        proxies += list(self.node_proxies.values()) + list(self.lbs.values())
        if self.client.outbound is not None:
            proxies.append(self.client.outbound)
        for p in proxies:
            if id(p) not in seen:
                seen.add(id(p))
                out.append((p.component, p.station, p))
        out += [(r.component, r.station, None) for reps in self.apps.values() for r in reps]
        out += [("collector", s, None) for s in self.collectors.values()]
        out += [(f"edge:{hop.name}", st, None) for hop, _, st, _ in self.edges if st is not None]
        return out

    def set_recording(self, on: bool) -> None:
        for _, station, _ in self.stations():
            station.recording = on
        for cores in self.node_cpu.values():
            cores.recording = on
        self.net.recording = on

    def set_hold_window(self, start: float, end: float) -> None:
        """The window over which each proxy's mean number of requests held (its memory's in-flight part) counts."""
        for _, _, proxy in self.stations():
            if proxy is not None:
                proxy.window = (start, end)

    # -- request logic -------------------------------------------------------------------------------------------

    def client_request(self, conn: int) -> Process:
        """One request from the load generator; returns when the full response is back at the client."""
        self.in_system += 1
        pending = self.client_overhead() if self.client_overhead is not None else 0.0
        if self.client_cpu is not None and pending > 0:  # the load generator's own CPU on a shared node
            pending = self.client_cpu.run(self.env.now, pending) - self.env.now
        if self.client_cpu_per_call is not None:  # fortio's CPU per call, before the request leaves
            now = self.env.now
            before = pending
            pending = self.host.on_node(self.client.node, now + pending, self.client_cpu_per_call.draw()) - now
            self.host.count(pending - before)
        entry = self.scenario.topology.entry
        if not self.workload.keepalive:  # a new TCP (and TLS) connection per request
            rtts = 1 + (2 if self.workload.tls else 0)
            pending += sum(self.net.round_trip(self.client.node, "edge") for _ in range(rtts))
        for hop, latency, station, service in self.edges:
            pending += latency()
            if station is not None and service is not None:
                if pending > 0:
                    yield self.env.timeout(pending)
                pending = station.serve(self.env.now, service()) - self.env.now
        yield from nested(self.call(self.client, entry, conn, pending))
        back = sum(latency() for _, latency, _, _ in self.edges)
        if back > 0:
            yield self.env.timeout(back)
        self.in_system -= 1

    def route_to(self, caller: Caller, target: str) -> Route:
        """The parts of a call from ``caller`` to ``target`` that do not change from call to call."""
        route = self.routes.get((caller.name, target))
        if route is None:
            lb = self.lbs.get(target)
            balancer = self.lb_balancers[target] if lb is not None else self._client_balancer(caller, target)
            route = self.routes[(caller.name, target)] = Route(self.scenario.topology.services[target], lb, balancer,
                                                               self.apps[target], outbound(target))
        return route

    def call(self, caller: Caller, target: str, conn: int, pending: float) -> Nested:
        env, net = self.env, self.net
        timeout, hop = env.timeout, self.host.hop
        route = self.route_to(caller, target)
        svc, lb, balancer = route.service, route.lb, route.balancer
        index = balancer.start(conn)
        replica = route.replicas[index]
        inbound = replica.sidecar
        out = caller.outbound
        node = replica.node
        req_bytes = svc.request_bytes + (self.header_bytes if out is not None or inbound is not None else 0)
        resp_bytes = svc.response_bytes
        if net.recording:
            self.wire_request_bytes += req_bytes
            self.wire_response_bytes += resp_bytes
            if caller is self.client:
                self.entry_request_bytes = req_bytes
        sent = env.now + pending
        new_session = self._new_tls_session(out, inbound)
        # request direction
        if out is not None:
            pending = hop(pending, caller.node, out.node, req_bytes, out.node == caller.node)
            if pending > 0:
                yield timeout(pending)
            now = env.now
            pending = out.pass_(now, "outbound_request", conn, req_bytes, handshake=new_session) - now
            out_opened = out.station.last_start  # the proxy's own clock starts when its code reads the request
        src = out.node if out is not None else caller.node
        if lb is not None:
            pending = hop(pending, src, lb.node, req_bytes)
            if pending > 0:
                yield timeout(pending)
            now = env.now
            pending = lb.pass_(now, "request", conn, req_bytes) - now
            lb_opened = lb.station.last_start
            src = lb.node
        pending = hop(pending, src, node, req_bytes)
        if new_session and inbound is not None and inbound.handshake_round_trips:
            pending += net.round_trip(src, node) * inbound.handshake_round_trips
        if inbound is not None:
            if pending > 0:
                yield timeout(pending)
            now = env.now
            pending = inbound.pass_(now, "inbound_request", conn, req_bytes, handshake=new_session) - now
            in_opened = inbound.station.last_start
            pending = hop(pending, node, node, req_bytes, True)
        yield self.handle(replica, conn, pending)  # run to its end by nested()
        # response direction (the app has just sent its response; env.now is that time)
        pending = 0.0
        if inbound is not None:
            pending = hop(0.0, node, node, resp_bytes, True)
            if pending > 0:
                yield timeout(pending)
            now = env.now
            pending = inbound.pass_(now, "inbound_response", conn, resp_bytes, last=True) - now
            inbound.hold(in_opened, now + pending, INBOUND)
            close_pools(inbound, out, lb, inbound)
        if lb is not None:
            pending = hop(pending, node, lb.node, resp_bytes)
            if pending > 0:
                yield timeout(pending)
            now = env.now
            pending = lb.pass_(now, "response", conn, resp_bytes, last=True) - now
            lb.hold(lb_opened, now + pending, BALANCING)
            close_pools(lb, out, lb, inbound)
            pending = hop(pending, lb.node, src if out is None else out.node, resp_bytes)
        else:
            pending = hop(pending, node, src, resp_bytes)
        if out is not None:
            if pending > 0:
                yield timeout(pending)
            now = env.now
            pending = out.pass_(now, "outbound_response", conn, resp_bytes, last=True) - now
            out.hold(out_opened, now + pending, route.view)
            close_pools(out, out, lb, inbound)
            pending = hop(pending, out.node, caller.node, resp_bytes, out.node == caller.node)
        if pending > 0:
            yield timeout(pending)
        balancer.done(index, env.now - sent)

    def _new_tls_session(self, out: ProxyInstance | None, inbound: ProxyInstance | None) -> bool:
        """Whether this call makes its proxy pair's mTLS session (the pair's first call; later ones reuse it)."""
        if not self.mtls or out is None or inbound is None:
            return False
        pair = (out.instance, inbound.instance)
        if pair in self.tls_pairs:
            return False
        self.tls_pairs.add(pair)
        return True

    def handle(self, replica: AppReplica, conn: int, pending: float) -> Nested:
        """Run the service's handler; returns when the app sends its response."""
        env = self.env
        me = self.callers[replica.instance]
        computes, first = replica.computes, replica.first_compute
        for i, step in enumerate(replica.service.handler):
            if i in computes:  # a Compute step
                if pending > 0:
                    yield env.timeout(pending)
                now, station = env.now, replica.station
                if i == first:
                    station.start_request(now)
                time = computes[i].draw()  # its CPU first, then the rest as a wait that holds no core
                pending = station.serve(now, time * station.cpu_fraction) - now + time * (1.0 - station.cpu_fraction)
            elif i in replica.delays:  # a Delay step: it holds no core
                pending += replica.delays[i].draw()
            elif isinstance(step, Call):
                yield self.call(me, step.service, conn, pending)
                pending = 0.0
            elif isinstance(step, Choose):
                yield self.call(me, self._choose(replica, i, step), conn, pending)
                pending = 0.0
            elif isinstance(step, Parallel):
                if pending > 0:
                    yield env.timeout(pending)
                pending = 0.0
                branches = [env.process(nested(self.call(me, name, conn, 0.0))) for name in step.services]
                yield env.all_of(branches)
        if pending > 0:
            yield env.timeout(pending)

    def _choose(self, replica: AppReplica, index: int, step: Choose) -> str:
        key = f"{replica.instance}:choose{index}"
        u = self.choosers.get(key)
        if u is None:
            u = self.choosers[key] = self.streams.uniforms(key)
        draw, acc = u(), 0.0
        for name, weight in zip(step.services, step.weights):
            acc += weight
            if draw < acc:
                return name
        return step.services[-1]
