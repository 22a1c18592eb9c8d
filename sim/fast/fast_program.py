"""Lowering a wired SimPy :class:`~meshsim.sim.engine.system.System` to the compiled engine's arrays and program.

The SimPy engine's wiring (sim/engine/system.py) is the single source of truth for who calls whom through which proxy on
which node: the compiled engine reads the built ``System`` (its stations, proxies, routes, samplers) and lowers the
request logic of ``System.client_request`` / ``call`` / ``handle`` to a program of ops (sim/fast/fast_kernels.py), one block
per (caller, service, replica) and one per replica's handler. Random numbers come from the very samplers the
SimPy engine would use, refilled batch by batch in the same order (sim/engine/streams.py): same names, same seeds.
"""

from __future__ import annotations

import math

import numpy as np

from meshsim.distributions import Deterministic
from meshsim.mesh import BALANCE, pass_side
from meshsim.topology import Call, Choose, Parallel
from meshsim.sim.fast import fast_kernels as K  # the loop, its op codes and its table columns
from meshsim.sim.engine.balancing import Balancer, LeastRequest, PeakEwma, PerConnection, Random, RoundRobin
from meshsim.sim.engine.components import ProxyInstance, freed_pools
from meshsim.sim.engine.proxy_views import BALANCING, INBOUND
from meshsim.sim.engine.stations import Station
from meshsim.sim.fast.fast_streams import StreamTable
from meshsim.sim.engine.system import Caller, System

POLICY_CODES = {RoundRobin: K.RR, Random: K.RANDOM, LeastRequest: K.LEAST, PeakEwma: K.EWMA, PerConnection: K.PINNED}
SIDE_CODES = {"": K.SIDE_NONE, "inbound": K.SIDE_IN, "outbound": K.SIDE_OUT}


class Lowering:
    """Arrays and program of a wired system; its streams serve any replication (StreamTable.rebind)."""

    def __init__(self, system: System, connections: int) -> None:
        self.system = system
        self.streams = StreamTable(system.streams.names)
        self.connections = connections
        self.nodes: dict[str, int] = {name: i for i, name in enumerate(system.node_cpu)}
        self.core_ids = {id(cores): i for i, cores in enumerate(system.node_cpu.values())}
        self.station_list: list[Station] = []
        self.station_ids: dict[int, int] = {}
        self.proxy_list: list[ProxyInstance] = []
        self.proxy_ids: dict[int, int] = {}
        self.view_rows: list[tuple[ProxyInstance, str]] = []  # a row of R_VIEWS per (proxy, view)
        self.view_ids: dict[tuple[int, str], int] = {}
        self.balancer_rows: list[tuple[int, int, int, int]] = []
        self.balancer_ids: dict[int, int] = {}
        self.balancer_replays: list[int] = []  # per balancer row: the replay giving its first replica
        self.routes: dict[tuple[str, str], int] = {}
        self.route_rows: list[tuple[int, list[tuple]]] = []  # (balancer, block labels per replica)
        self.chooses: list[tuple[int, list[float], list[int]]] = []
        self.forks: list[list[tuple]] = []
        self.tls_pairs: dict[tuple[int, int], int] = {}
        self.blocks: dict[tuple, list[list]] = {}
        self.pending_routes: list[tuple[Caller, str, int]] = []
        for _, station, proxy in system.stations():
            self.station(station)
            if proxy is not None:
                self.proxy(proxy)

    def node(self, name: str) -> int:
        if name not in self.nodes:
            self.nodes[name] = len(self.nodes)
        return self.nodes[name]

    def station(self, station: Station) -> int:
        key = id(station)
        if key not in self.station_ids:
            self.station_ids[key] = len(self.station_list)
            self.station_list.append(station)
        return self.station_ids[key]

    def proxy(self, proxy: ProxyInstance) -> int:
        key = id(proxy)
        if key not in self.proxy_ids:
            self.proxy_ids[key] = len(self.proxy_list)
            self.proxy_list.append(proxy)
            self.station(proxy.station)
        return self.proxy_ids[key]

    def view(self, proxy: ProxyInstance, name: str) -> int:
        key = (id(proxy), name)
        if key not in self.view_ids:
            self.view_ids[key] = len(self.view_rows)
            self.view_rows.append((proxy, name))
        return self.view_ids[key]

    def balancer(self, balancer: Balancer) -> int:
        key = id(balancer)
        if key not in self.balancer_ids:
            stream = self.streams.uniforms(balancer.rng)
            # the balancer's constructor drew its initial state (round robin's first replica, kube-proxy's seed):
            # replayed for another replication
            self.balancer_replays.append(self.streams.replay(
                balancer.rng, lambda rng, kind=type(balancer), n=balancer.n: kind(n, rng).initial))
            self.balancer_ids[key] = len(self.balancer_rows)
            self.balancer_rows.append((balancer.n, POLICY_CODES[type(balancer)], stream, balancer.initial))
        return self.balancer_ids[key]

    def route(self, caller: Caller, target: str) -> int:
        key = (caller.name, target)
        if key not in self.routes:
            system = self.system
            route = system.route_to(caller, target)
            rid = len(self.route_rows)
            self.routes[key] = rid
            labels = [("route", rid, r) for r in range(len(route.replicas))]
            self.route_rows.append((self.balancer(route.balancer), labels))
            self.pending_routes.append((caller, target, rid))
        return self.routes[key]

    # -- program -------------------------------------------------------------------------------------------------

    def build_program(self) -> None:
        system = self.system
        self.blocks[("client",)] = self.client_block()
        while self.pending_routes:
            caller, target, rid = self.pending_routes.pop()
            for r, replica in enumerate(system.apps[target]):
                self.blocks[("route", rid, r)] = self.route_block(caller, target, r)
                if ("handler", replica.instance) not in self.blocks:
                    self.blocks[("handler", replica.instance)] = []  # reserve (a handler is emitted once)
                    self.blocks[("handler", replica.instance)] = self.handler_block(replica)

    def client_block(self) -> list[list]:
        system, topo = self.system, self.system.scenario.topology
        client_node = self.node(topo.client.node)
        declared = 1 if topo.client.node in system.node_cpu else 0
        ops: list[list] = [[K.OP_CLIENT_PRE, self.streams.sampler(system.client_overhead),
                            self.streams.sampler(system.client_cpu_per_call), client_node, declared]]
        if not system.workload.keepalive:
            rtts = 1 + (2 if system.workload.tls else 0)
            ops.append([K.OP_RTT, client_node, self.node("edge"), rtts])
        for _, lat, station, service in system.edges:
            ops.append([K.OP_EDGE_LAT, self.streams.sampler(lat)])
            if station is not None and service is not None:
                ops += [[K.OP_YIELD], [K.OP_EDGE_SERVE, self.station(station), self.streams.sampler(service)]]
        ops.append([K.OP_CALL, self.route(system.client, topo.entry)])
        for _, lat, _, _ in system.edges:
            ops.append([K.OP_EDGE_LAT, self.streams.sampler(lat)])
        ops += [[K.OP_YIELD], [K.OP_END_REQUEST]]
        return ops

    def _pass(self, proxy: ProxyInstance, kind: str, nbytes: int, last: bool, handshake: bool, slot: int) -> list:
        return [K.OP_PASS, self.proxy(proxy), self.streams.sampler(proxy.passes[kind]), nbytes, int(last),
                int(handshake), slot, SIDE_CODES[pass_side(kind)]]

    def route_block(self, caller: Caller, target: str, r: int) -> list[list]:
        """System.call for one replica, op for op (slots: 0 outbound, 1 LB, 2 inbound opening times)."""
        system = self.system
        route = system.route_to(caller, target)
        svc, lb, replica = route.service, route.lb, route.replicas[r]
        inbound, out = replica.sidecar, caller.outbound
        node, cnode = self.node(replica.node), self.node(caller.node)
        req = svc.request_bytes + (system.header_bytes if out is not None or inbound is not None else 0)
        resp = svc.response_bytes
        ops: list[list] = []
        if system.mtls and out is not None and inbound is not None:
            pair = self.tls_pairs.setdefault((id(out), id(inbound)), len(self.tls_pairs))
            ops.append([K.OP_TLS, pair])
        src = cnode
        if out is not None:
            onode = self.node(out.node)
            ops += [[K.OP_HOP, cnode, onode, req, int(onode == cnode)], [K.OP_YIELD],
                    self._pass(out, "outbound_request", req, False, True, 0)]
            src = onode
        if lb is not None:
            lnode = self.node(lb.node)
            ops += [[K.OP_HOP, src, lnode, req, 0], [K.OP_YIELD], self._pass(lb, "request", req, False, False, 1)]
            src = lnode
        ops.append([K.OP_HOP, src, node, req, 0])
        if inbound is not None and inbound.handshake_round_trips and system.mtls and out is not None:
            ops.append([K.OP_HS_RTT, src, node, inbound.handshake_round_trips])
        if inbound is not None:
            ops += [[K.OP_YIELD], self._pass(inbound, "inbound_request", req, False, True, 2),
                    [K.OP_HOP, node, node, req, 1]]
        ops.append([K.OP_GOSUB, ("handler", replica.instance)])
        ops += self._response(caller, out, lb, inbound, node, src, resp, route.view)
        return ops

    def _closes(self, at: ProxyInstance, out, lb, inbound) -> list[int]:
        """An OP_HOLD's two last operands: the proxies whose pooled connections it frees (-1: none)."""
        freed = [self.proxy(p) for p in freed_pools(at, out, lb, inbound)]
        return freed + [-1] * (2 - len(freed))

    def _response(self, caller: Caller, out, lb, inbound, node: int, src: int, resp: int, view: str) -> list[list]:
        ops: list[list] = []
        if inbound is not None:
            ops += [[K.OP_HOP, node, node, resp, 1], [K.OP_YIELD],
                    self._pass(inbound, "inbound_response", resp, True, False, -1),
                    [K.OP_HOLD, self.proxy(inbound), 2, self.view(inbound, INBOUND),
                     *self._closes(inbound, out, lb, inbound)]]
        if lb is not None:
            lnode = self.node(lb.node)
            back = src if out is None else self.node(out.node)  # src is the LB's node here, as in System.call
            ops += [[K.OP_HOP, node, lnode, resp, 0], [K.OP_YIELD], self._pass(lb, "response", resp, True, False, -1),
                    [K.OP_HOLD, self.proxy(lb), 1, self.view(lb, BALANCING),
                     *self._closes(lb, out, lb, inbound)],
                    [K.OP_HOP, lnode, back, resp, 0]]
        else:
            ops.append([K.OP_HOP, node, src, resp, 0])
        if out is not None:
            onode, cnode = self.node(out.node), self.node(caller.node)
            ops += [[K.OP_YIELD], self._pass(out, "outbound_response", resp, True, False, -1),
                    [K.OP_HOLD, self.proxy(out), 0, self.view(out, view),
                     *self._closes(out, out, lb, inbound)],
                    [K.OP_HOP, onode, cnode, resp, int(onode == cnode)]]
        ops += [[K.OP_YIELD], [K.OP_CALL_END]]
        return ops

    def handler_block(self, replica) -> list[list]:
        """System.handle: compute steps, calls, weighted choices and fork/join."""
        system = self.system
        me = system.callers[replica.instance]
        ops: list[list] = []
        phase = self.streams.sampler(replica.station.collection.phase if replica.station.collection else None)
        for i, step in enumerate(replica.service.handler):
            if i in replica.computes:
                ops += [[K.OP_YIELD], [K.OP_COMPUTE, self.station(replica.station),
                                       self.streams.sampler(replica.computes[i]), int(i == replica.first_compute), phase]]
            elif i in replica.delays:  # System.handle: a wait that holds no core, added to the pending delay
                ops.append([K.OP_EDGE_LAT, self.streams.sampler(replica.delays[i])])
            elif isinstance(step, Call):
                ops.append([K.OP_CALL, self.route(me, step.service)])
            elif isinstance(step, Choose):
                chooser = system.streams.uniforms(f"{replica.instance}:choose{i}")
                routes = [self.route(me, name) for name in step.services]
                self.chooses.append((self.streams.sampler(chooser), list(step.weights), routes))
                ops.append([K.OP_CHOOSE, len(self.chooses) - 1])
            elif isinstance(step, Parallel):
                fork = len(self.forks)
                self.forks.append([])
                for k, name in enumerate(step.services):
                    label = ("branch", fork, k)
                    self.blocks[label] = [[K.OP_CALL, self.route(me, name)], [K.OP_END_BRANCH]]
                    self.forks[fork].append(label)
                ops += [[K.OP_YIELD], [K.OP_FORK, fork]]
        ops += [[K.OP_YIELD], [K.OP_RET]]
        return ops


# -- arrays -------------------------------------------------------------------------------------------------------

def link(lowering: Lowering) -> tuple:
    """The program's ops with labels resolved to positions, and its tables (routes, choices, forks, TLS)."""
    start: dict[tuple, int] = {}
    flat: list[list] = []
    for label, ops in lowering.blocks.items():
        start[label] = len(flat)
        flat += fold_waits(ops)
    program = np.full((len(flat), 8), -1, dtype=np.int64)
    for pc, op in enumerate(flat):
        for k, arg in enumerate(op):
            program[pc, k] = start[arg] if isinstance(arg, tuple) else arg
    routes = lowering.route_rows
    width = max((len(labels) for _, labels in routes), default=1)
    route_pc = np.zeros((max(len(routes), 1), width), dtype=np.int64)
    route_bal = np.zeros(max(len(routes), 1), dtype=np.int64)
    for rid, (bal, labels) in enumerate(routes):
        route_bal[rid] = bal
        route_pc[rid, :len(labels)] = [start[label] for label in labels]
    chooses = lowering.chooses
    cw = max((len(w) for _, w, _ in chooses), default=1)
    ch_stream = np.array([s for s, _, _ in chooses] or [0], dtype=np.int64)
    ch_n = np.array([len(w) for _, w, _ in chooses] or [0], dtype=np.int64)
    ch_w = np.zeros((max(len(chooses), 1), cw))
    ch_route = np.zeros((max(len(chooses), 1), cw), dtype=np.int64)
    for c, (_, weights, rts) in enumerate(chooses):
        ch_w[c, :len(weights)] = weights
        ch_route[c, :len(rts)] = rts
    forks = lowering.forks
    fw = max((len(f) for f in forks), default=1)
    fk_n = np.array([len(f) for f in forks] or [0], dtype=np.int64)
    fk_pc = np.zeros((max(len(forks), 1), fw), dtype=np.int64)
    for f, labels in enumerate(forks):
        fk_pc[f, :len(labels)] = [start[label] for label in labels]
    tls_seen = np.zeros((max(len(lowering.tls_pairs), 1), 1), dtype=np.int64)  # per proxy pair: its session made
    return (program, route_pc, route_bal, ch_stream, ch_n, ch_w, ch_route, tls_seen, fk_n, fk_pc), start[("client",)]


def fold_waits(ops: list[list]) -> list[list]:
    """A block's ops with every OP_YIELD folded into the op after it (its code + OP_WAIT): the loop waits there
    without dispatching an op of its own (a quarter of a request's ops were waits). A wait is never a block's last
    op, so every one has an op to fold into; labels point at the op that waits, which waits as the YIELD did."""
    folded: list[list] = []
    wait = False
    for op in ops:
        if op[0] == K.OP_YIELD:
            wait = True
            continue
        folded.append([op[0] + K.OP_WAIT, *op[1:]] if wait else op)
        wait = False
    if wait:
        raise RuntimeError("a block of the compiled program ends with a wait")
    return folded


def station_arrays(lowering: Lowering) -> tuple:
    stations = lowering.station_list
    width = max(s.servers for s in stations) if stations else 1
    n = max(len(stations), 1)
    st_i = np.zeros((n, K.WIDTHS[K.R_STI]), dtype=np.int64)
    st_f = np.zeros((n, K.WIDTHS[K.R_STF]))
    for k, s in enumerate(stations):
        st_i[k, K.ST_SERVERS], st_i[k, K.ST_PINNED] = s.servers, int(s.pinned)
        st_i[k, K.ST_WAKE] = lowering.streams.sampler(s.wake_draw) if s.wakeup is not None else -1
        st_i[k, K.ST_NODE] = lowering.core_ids.get(id(s.node), -1) if s.node is not None else -1
        st_i[k, K.ST_QUOTA], st_f[k, K.ST_FRACTION] = int(s.quota is not None), s.cpu_fraction
        if s.wakeup is not None:
            w = s.wakeup
            st_f[k, [K.ST_DELAY, K.ST_TAU, K.ST_CPU, K.ST_RESUME, K.ST_SHAPE, K.ST_LINGER, K.ST_GRADED, K.ST_SPIN]] = \
                w.delay, w.tau, w.cpu, w.resume_cpu, w.shape, w.linger, w.graded, w.spin_share
        if s.quota is not None:
            st_f[k, K.ST_BUDGET] = s.quota.budget
        if (c := s.collection) is not None:  # CollectionClock
            st_f[k, [K.ST_GC_EVERY, K.ST_GC_CPU, K.ST_GC_COUNT]] = c.every, c.cpu, c.count
    quota_tag = np.full((n, K.QUOTA_RING), -1, dtype=np.int64)
    return st_i, st_f, np.zeros((n, width)), np.zeros((n, width)), np.zeros((n, K.QUOTA_RING)), quota_tag


def proxy_arrays(lowering: Lowering) -> tuple:
    proxies = lowering.proxy_list
    n = max(len(proxies), 1)
    posts = max((sum(map(len, p.post.values())) for p in proxies), default=1) or 1
    exports = max((len(p.exports) for p in proxies), default=1) or 1
    px_i = np.zeros((n, K.WIDTHS[K.R_PXI]), dtype=np.int64)
    px_f = np.zeros((n, K.WIDTHS[K.R_PXF]))
    post = np.zeros((n, posts, 3))
    export = np.zeros((n, exports, 3))
    streams = lowering.streams
    for k, p in enumerate(proxies):
        px_i[k, K.PX_STATION] = lowering.station(p.station)
        px_i[k, K.PX_BALANCE] = BALANCE.index(p.model.connection_balance)
        px_i[k, K.PX_ACCEPTOR] = -1
        px_f[k, K.PX_ACCEPTED_AT] = -math.inf
        px_f[k, K.PX_ACCEPT_WINDOW] = p.model.accept_window_s
        px_i[k, K.PX_BIND_STREAM] = streams.uniforms(p.rng)
        px_i[k, K.PX_HS_STREAM] = streams.sampler(p.handshake)
        px_i[k, K.PX_UNIFORM] = streams.sampler(p.uniform)
        entries = [(streams.sampler(sampler), sampling, SIDE_CODES[side])
                   for side, work in p.post.items() for sampler, sampling in work]
        px_i[k, K.PX_NPOST], px_i[k, K.PX_NEXP] = len(entries), len(p.exports)
        px_f[k, K.PX_PER_KB] = p.per_kb
        for side, code in SIDE_CODES.items():  # a side without its own fraction holds the proxy's
            px_f[k, K.PX_FRACTION + code] = p.model.side_fraction(side)
            px_f[k, K.PX_CEILING + code] = p.hold_ceilings.get(side, math.inf)
        for j, entry in enumerate(entries):
            post[k, j] = entry
        for j, e in enumerate(p.exports):
            export[k, j] = (lowering.station(e.collector), streams.sampler(e.work), e.sampling)
    bind = np.full((n, lowering.connections), -1, dtype=np.int64)
    return px_i, px_f, bind, post, export


def node_arrays(lowering: Lowering) -> tuple:
    cores = list(lowering.system.node_cpu.values())
    n = max(len(cores), 1)
    width = max((len(c.last) for c in cores), default=1)
    ncores = np.array([len(c.last) for c in cores] or [0], dtype=np.int64)
    slowdown = np.zeros((n, K.SLOW_WIDTH))  # per node: K.SLOW_FACTOR ... K.SLOW_OWED
    slowdown[:, [K.SLOW_FACTOR, K.SLOW_TURN]] = [(c.slowdown, c.turn) for c in cores] or [(1.0, -1.0)]
    holds = [(h.tick, h.share) if (h := c.tick_hold) is not None else (0.0, 0.0) for c in cores]
    slowdown[:, [K.SLOW_TICK, K.SLOW_TICK_SHARE]] = holds or [(0.0, 0.0)]
    slowdown[:, K.SLOW_WINDOW] = [c.window for c in cores] or [0.0]
    rows = n * width  # one row per (node, core): its last end, its floor, its intervals (kernels' CORE_*)
    core_rows = np.zeros((rows, K.CORE_WIDTH))
    core_rows[:, [K.CORE_LAST, K.CORE_WOKEN]] = -np.inf
    return ncores, slowdown, core_rows, np.zeros(rows, dtype=np.int64), width


def network_arrays(lowering: Lowering) -> tuple:
    system, streams = lowering.system, lowering.streams
    net = system.net
    net_i = np.full(8, -1, dtype=np.int64)
    net_f = np.zeros(3)
    net_i[K.NET_LOOP], net_i[K.NET_SAME] = streams.sampler(net.loopback_delay), streams.sampler(net.same_node_delay)
    net_i[K.NET_CROSS], net_i[K.NET_CLIENT] = streams.sampler(net.cross_node_delay), streams.sampler(net.client_rtt)
    net_i[K.NET_CLIENT_NODE] = lowering.node(net.client_node)
    net_f[K.NETF_BANDWIDTH] = net.bandwidth
    kernel = system.scenario.topology.network.kernel_cpu
    net_i[K.NET_KERNEL] = int(kernel is not None)
    if kernel is not None:
        for col, fcol, name, dist in ((K.NET_PER_HOP, K.NETF_PER_HOP, "kernel:per-hop", kernel.per_hop),
                                      (K.NET_PER_KB, K.NETF_PER_KB, "kernel:per-kb", kernel.per_kb)):
            if isinstance(dist, Deterministic):
                net_f[fcol] = max(dist.value, 0.0)
            else:
                net_i[col] = streams.sampler(system.streams.sampler(name, dist))
    return net_i, net_f


def balancer_arrays(lowering: Lowering) -> tuple:
    rows = lowering.balancer_rows
    n = max(len(rows), 1)
    width = max((r[0] for r in rows), default=1)
    bal_i = np.zeros((n, 4), dtype=np.int64)
    for b, row in enumerate(rows):
        bal_i[b] = row
    return bal_i, np.zeros((n, width), dtype=np.int64), np.zeros((n, width))
