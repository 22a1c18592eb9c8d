"""CPU work that belongs to no station: the load generator's CPU per call and the kernel's network stack per hop
and per KB, on the cores of the declared nodes (a node without declared cores gives each burst a core of its own).

The wired System (sim/engine/system.py) books through it; the compiled engine lowers the same arithmetic
(fast_kernels' hop, in the same order of bookings).
"""

from __future__ import annotations

from itertools import repeat
from typing import Callable

import simpy

from meshsim.distributions import Deterministic, Distribution
from meshsim.topology import Topology
from meshsim.sim.engine.components import NetworkDelays
from meshsim.sim.engine.stations import NodeCores
from meshsim.sim.engine.streams import Streams
from meshsim.sim.engine.woken_first_cores import WokenFirstCores


class HostCpu:
    """The declared nodes' cores, the samplers of the CPU consumers that are not stations, and the recorded time a
    request spent in them."""

    def __init__(self, env: simpy.Environment, topo: Topology, streams: Streams, net: NetworkDelays) -> None:
        self.env, self.net = env, net
        cpu = topo.client.cpu_per_call
        self.client_cpu_per_call = streams.sampler("client:cpu", cpu) if cpu is not None else None
        kernel = topo.network.kernel_cpu
        self.kernel_per_hop: Callable[[], float] | None = None
        self.kernel_per_kb: Callable[[], float] = _constant(0.0)
        if kernel is not None:
            self.kernel_per_hop = _draws(streams, "kernel:per-hop", kernel.per_hop)
            self.kernel_per_kb = _draws(streams, "kernel:per-kb", kernel.per_kb)
        self.node_cpu = {node: _node_cores(topo, cores, lambda: env.now) for node, cores in topo.node_cores.items()}
        self.time = 0.0  # recorded time in kernel and load-generator CPU (use and wait), summed

    def on_node(self, node: str, start: float, work: float) -> float:
        """When ``work`` CPU seconds ready at ``start`` finish on ``node`` (on a core of its own if undeclared)."""
        cores = self.node_cpu.get(node)
        return start + work if cores is None else cores.run(start, work)

    def hop(self, pending: float, src: str, dst: str, nbytes: int, loopback: bool = False) -> float:
        """``pending`` after a one-way hop: the network's latency, plus the time the kernel's sending and
        receiving work waits for and uses a core of the sender's and the receiver's node."""
        latency = self.net.loopback() if loopback else self.net.hop(src, dst, nbytes)
        per_hop = self.kernel_per_hop
        if per_hop is None:
            return pending + latency
        cpu = per_hop() + self.kernel_per_kb() * nbytes / 1024.0
        now = self.env.now
        t = now + pending
        node_cpu = self.node_cpu
        cores = node_cpu.get(src)
        if src == dst:  # loopback or same node: sender and receiver work on the same cores, booked as one burst
            after = (t + cpu if cores is None else cores.run(t, cpu)) + latency - now
        else:
            half = 0.5 * cpu
            t = (t + half if cores is None else cores.run(t, half)) + latency
            cores = node_cpu.get(dst)
            after = (t + half if cores is None else cores.run(t, half)) - now
        if self.net.recording:  # time a request spent in CPU that belongs to no station (here the kernel)
            self.time += after - pending - latency
        return after

    def count(self, seconds: float) -> None:
        """Time a request spent in CPU that belongs to no station (kernel, load generator), while recording."""
        if self.net.recording:
            self.time += seconds


def _node_cores(topo: Topology, cores: float, clock: Callable[[], float]) -> NodeCores:
    """A declared node's cores, with the topology's scheduler (a woken thread first, a tick hold)."""
    if topo.woken_first is not None:
        return WokenFirstCores(cores, topo.woken_first, clock, topo.per_core_queues, topo.tick_hold)
    return NodeCores(cores, clock, topo.per_core_queues, topo.tick_hold)


def _draws(streams: Streams, name: str, dist: Distribution) -> Callable[[], float]:
    """A sampler's draw, or for a constant its value without drawing (per-hop costs are drawn on every hop)."""
    if isinstance(dist, Deterministic):
        return _constant(max(dist.value, 0.0))
    return streams.sampler(name, dist).draw


def _constant(value: float) -> Callable[[], float]:
    return repeat(value).__next__
