"""The whole host's CPU: a node's cores shared by the load generator, the apps and the kernel's network stack.

Exact timelines on deterministic inputs, node-CPU queueing against M/M/c (Erlang C) over seeded replications,
the shipped single topology's baseline rising with connections, and the YAML validation of the new keys.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import simpy

from meshsim.catalog import load_topology
from meshsim.distributions import Deterministic, Exponential
from meshsim.errors import ModelError
from meshsim.sim.engine.replication_result import Horizon
from meshsim.sim.engine.simpy_replication import run_replication
from meshsim.sim.experiments.predict import predict
from meshsim.sim.engine.stations import NodeCores
from meshsim.sim.engine.streams import Streams
from meshsim.sim.engine.system import System
from meshsim.topology import Client, KernelCpu, Network, load_topology_text
from meshsim.workload import FortioLoad, OpenLoad, Workload
from simkit import NO_NETWORK, ZERO, plain, station_topology
from test_queueing_theory import REPS, SEED, assert_theory, engine, erlang_c_wait  # noqa: F401 (engine: a fixture)

MS = 1e-3


# -- the cores themselves ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cores, burst", [(1, 5), (2, 7), (4, 9)])
def test_a_burst_finishes_in_waves_of_the_core_count(cores, burst):
    node = NodeCores(cores)
    finishes = [node.run(0.0, 0.1) for _ in range(burst)]
    assert finishes == pytest.approx([math.ceil(k / cores) * 0.1 for k in range(1, burst + 1)])


def test_a_booking_ahead_of_time_leaves_the_gap_before_it_usable():
    node = NodeCores(1)
    assert node.run(5.0, 1.0) == 6.0  # booked ahead (a hop's receive side)
    assert node.run(1.0, 2.0) == 3.0  # earlier work still fits in the gap before it
    assert node.run(2.5, 2.0) == 5.0  # waits for the core until 3, then fits exactly between 3 and 5
    assert node.run(2.0, 0.5) == 6.5  # no gap left before 6: it runs after the booking ahead


def test_a_fractional_node_has_that_capacity():
    node = NodeCores(1.5)  # two cores at 3/4 speed
    assert [node.run(0.0, 0.3) for _ in range(3)] == pytest.approx([0.4, 0.4, 0.8])


# -- timelines through the engine ----------------------------------------------------------------------------------

def _on_nodes(topology, client_cpu, client_cores, kernel=None, latency=ZERO):
    """The station topology with the client on its own node and the service ``q`` on node ``server``."""
    network = replace(NO_NETWORK, same_node=latency, cross_node=latency, loopback=latency, kernel_cpu=kernel)
    services = {n: replace(s, node="server") for n, s in topology.services.items()}
    return replace(topology, services=services, network=network,
                   client=Client(node="client", request_bytes=0, cpu_per_call=client_cpu),
                   node_cores={"client": client_cores, "server": 64})


def _burst(topology, c: int) -> list[float]:
    """c requests sent together at t = 0; when each is answered."""
    env = simpy.Environment()
    system = System(env, plain(topology), Workload(OpenLoad(1.0)), Streams(SEED, 0))
    done: list[float] = []

    def one(k: int):
        yield from system.client_request(k)
        done.append(env.now)

    for k in range(c):
        env.process(one(k))
    env.run()
    return sorted(done)


def test_a_burst_of_requests_queues_on_the_client_nodes_cores():
    """c equal requests at once, deterministic client CPU on a 2-core node: the k-th leaves at ceil(k/2) x cost."""
    cost, work = 0.05 * MS, 0.2 * MS
    topo = _on_nodes(station_topology(Deterministic(work), servers=64), Deterministic(cost), 2)
    assert _burst(topo, 8) == pytest.approx([math.ceil(k / 2) * cost + work for k in range(1, 9)])


def test_kernel_cpu_is_half_on_each_side_and_the_hop_keeps_its_latency():
    """One cross-node hop each way: sender half + latency + receiver half, on each node; payload adds per KB."""
    hop, per_kb, latency, work = 0.02 * MS, 0.01 * MS, 0.1 * MS, 0.2 * MS
    topo = _on_nodes(station_topology(Deterministic(work), servers=64), None, 1,
                     KernelCpu(Deterministic(hop), Deterministic(per_kb)), Deterministic(latency))
    topo = replace(topo, services={"q": replace(topo.services["q"], request_bytes=1024, response_bytes=4096)})
    request_way = hop + per_kb * 1 + latency
    response_way = hop + per_kb * 4 + latency
    assert _burst(topo, 1) == pytest.approx([request_way + work + response_way])
    # two at once on a 1-core client node: the second's sending half waits for the first's (hop + per_kb) / 2, and
    # its response then arrives while the first's receiving half, (hop + 4 per_kb) / 2 and longer, still runs
    alone = request_way + work + response_way
    assert _burst(topo, 2) == pytest.approx([alone, alone + (hop + 4 * per_kb) / 2])


def test_zero_host_costs_change_nothing():
    """The new bookings cost nothing when their costs are zero: same draws, same latencies (common random numbers)."""
    base = station_topology(Exponential(0.5 * MS))
    lat = Exponential(0.1 * MS)
    without = _on_nodes(base, None, 2, None, lat)
    with_zero = _on_nodes(base, Deterministic(0.0), 2, KernelCpu(ZERO, ZERO), lat)
    load, horizon = Workload(OpenLoad(800.0)), Horizon(2.0, 0.2)
    a = run_replication(plain(without), load, horizon, SEED, 0).latencies
    b = run_replication(plain(with_zero), load, horizon, SEED, 0).latencies
    assert np.array_equal(a, b)


# -- theory --------------------------------------------------------------------------------------------------------

def test_node_cpu_queueing_matches_mmc():
    """Poisson arrivals, exponential client CPU on a c-core node, nothing else: the client node is an M/M/c queue."""
    mu, lam, c = 1000.0, 2400.0, 3
    topo = _on_nodes(station_topology(ZERO, servers=64), Exponential(1 / mu), c)
    requests = 30000
    duration = requests / lam
    values = [float(np.mean(run_replication(plain(topo), Workload(OpenLoad(lam)), Horizon(duration, 0.1 * duration),
                                            SEED, i).latencies)) for i in range(REPS)]
    assert_theory(values, erlang_c_wait(c, lam, mu) + 1 / mu)


def test_app_compute_lands_on_its_nodes_cores_as_mmc():
    """An app with many workers on a 2-core node: its compute queues on the node's cores, an M/M/2 queue."""
    mu, lam = 1000.0, 1500.0
    topo = _on_nodes(station_topology(Exponential(1 / mu), servers=64), None, 64, KernelCpu(ZERO, ZERO))
    topo = replace(topo, node_cores={"client": 64, "server": 2})
    duration = 30000 / lam
    values = [float(np.mean(run_replication(plain(topo), Workload(OpenLoad(lam)), Horizon(duration, 0.1 * duration),
                                            SEED, i).latencies)) for i in range(REPS)]
    assert_theory(values, erlang_c_wait(2, lam, mu) + 1 / mu)


def test_a_nodes_utilisation_is_the_cpu_offered_to_it_over_its_cores(engine):
    """Utilisation law on a node: an app with 64 workers on a 2-core node, exponential compute at 1500/s of
    mean 1 ms: the node's cores are busy 1500 x 1 ms / 2 = 75 % of the time; the client's node, with no CPU
    to book, 0 %. Both engines."""
    mu, lam = 1000.0, 1500.0
    topo = _on_nodes(station_topology(Exponential(1 / mu), servers=64), None, 64, KernelCpu(ZERO, ZERO))
    topo = replace(topo, node_cores={"client": 64, "server": 2})
    duration = 30000 / lam
    runs = [engine(plain(topo), Workload(OpenLoad(lam)), Horizon(duration, 0.1 * duration), SEED, i)
            for i in range(REPS)]
    assert_theory([r.node_utilization["server"] for r in runs], lam / mu / 2)
    assert all(r.node_utilization["client"] == 0.0 for r in runs)


@pytest.mark.parametrize("engine_name", ["fast", "simpy"])
def test_a_node_bound_service_saturates_where_its_node_does(engine_name):
    """64 app workers on a 1-core node, 1 ms of exponential compute a request: the node saturates at 1000 rps
    while each worker is at most 1/64 busy. The prediction names the node the bottleneck and the saturation
    search lands on 1000 rps (utilisation law) within its 3 % tolerance and a probe's noise; searching the
    workers' utilisation alone, it had landed tens of thousands of rps off."""
    topo = _on_nodes(station_topology(Exponential(1e-3), servers=64), None, 64, KernelCpu(ZERO, ZERO))
    topo = replace(topo, node_cores={"client": 64, "server": 1})
    p = predict(topo, "none", rps=500, duration_s=4.0, replications=4, precision=None, seed=SEED, processes=1,
                engine=engine_name)
    assert p.bottleneck == "node:server"
    assert p.utilization["node:server"] == pytest.approx(0.5, rel=0.05)
    assert p.utilization["q/app"] < 0.02
    assert 930 < p.saturation_rps < 1070


def test_a_chain_on_small_nodes_saturates_where_its_answers_fall_behind():
    """chain3 on 2-core nodes: each node's sidecar, app and kernel work need ~2 cores near 3500 rps, and the
    hops' work booked ahead of time on the cores leaves gaps no later burst fits, so the nodes fall behind
    below 100 % busy (about 87 %). Whatever the utilisations say, a load 20 % above the predicted saturation
    must pile up (the prediction says saturated) and one 10 % below must not: the search lands within that
    bracket of where the chain falls behind (about 3 100 rps here). The utilisations alone had put it at
    4 300 rps, and at 5 300 with the nodes', where this chain has long piled up."""
    chain = load_topology("chain3")
    small = replace(chain, node_cores={node: 2 for node in chain.node_cores})

    def run(rps: float, search: bool):
        return predict(small, "istio", rps=rps, duration_s=2.0, replications=4, precision=None, seed=SEED,
                       processes=1, saturation=search)

    saturation = run(2000.0, True).saturation_rps
    assert run(1.2 * saturation, False).saturated
    below = run(0.9 * saturation, False)
    assert not below.saturated and below.utilization[below.bottleneck] < 0.99


# -- the shipped topology ------------------------------------------------------------------------------------------

def test_baseline_latency_rises_with_connections_on_the_shipped_single_topology():
    """fortio without -uniform fires all connections together: with no mesh, c=32 queues on the client's and the
    server's cores, c=1 does not. The rise must exceed both CIs (replications), and part of it is the node CPU:
    without the node declarations c=1 is the same (one request at a time never waits for a core), c=32 is lower."""
    single = load_topology("single")

    def p50(topology, c: int):
        p = predict(topology, "none", rps=1000, load="fortio", connections=c, duration_s=2.0, warmup_s=0.2,
                    replications=4, precision=None, seed=SEED, processes=1, saturation=False)
        d = p.to_dict()
        return d["latency_ms"]["p50"], d["latency_ci95_ms"]["p50"]

    (low, low_ci), (high, high_ci) = p50(single, 1), p50(single, 32)
    assert high_ci[0] > low_ci[1]
    assert high > 1.3 * low
    unshared = replace(single, node_cores={})
    assert p50(unshared, 1)[0] == pytest.approx(low, rel=1e-9)
    assert p50(unshared, 32)[0] < high


def test_shipped_single_and_chain_declare_their_nodes():
    single = load_topology("single")
    assert single.client.node != single.node_of("server")  # fortio client and server pods on different nodes
    assert {single.client.node, single.node_of("server")} <= set(single.node_cores)
    assert single.client.cpu_per_call is not None and single.network.kernel_cpu is not None
    chain = load_topology("chain3")
    assert {chain.client.node, *(chain.node_of(s) for s in chain.services)} <= set(chain.node_cores)


# -- validation ----------------------------------------------------------------------------------------------------

_YAML = """
schema: meshsim/topology/v1
name: t
entry: s
client: {{node: c, cpu_per_call: {client}}}
network:
  loopback: 0.01
  same_node: 0.02
  cross_node: 0.1
  bandwidth_gbps: 10
  kernel_cpu: {kernel}
services:
  s: {{handler: [{{compute: 0.05}}]}}
"""


def _load(client: str = "0.05", kernel: str = "{per_hop_ms: 0.01, per_kb_ms: 0.001}"):
    return load_topology_text(_YAML.format(client=client, kernel=kernel), "t.yaml")


def test_valid_host_costs_parse():
    topo = _load()
    assert topo.client.cpu_per_call == Deterministic(0.05 * MS)
    assert topo.network.kernel_cpu == KernelCpu(Deterministic(0.01 * MS), Deterministic(0.001 * MS))


@pytest.mark.parametrize("client, kernel, message", [
    ("-0.05", "{per_hop_ms: 0.01, per_kb_ms: 0.001}", "t.yaml: client.cpu_per_call: a duration must be in [0, 3.6e+06] ms"),
    (".inf", "{per_hop_ms: 0.01, per_kb_ms: 0.001}", "t.yaml: client.cpu_per_call"),
    ("0.05", "{per_hop_ms: -1, per_kb_ms: 0.001}", "t.yaml: network.kernel_cpu.per_hop_ms: a duration must be in [0, 3.6e+06] ms"),
    ("0.05", "{per_hop_ms: 0.01}", "t.yaml: network.kernel_cpu.per_kb_ms: missing"),
    ("0.05", "{per_hop_ms: 0.01, per_kb_ms: 0.001, per_call_ms: 1}", "t.yaml: network.kernel_cpu"),
    ("{family: lognormal, mean_ms: -1, cv: 1}", "{per_hop_ms: 0.01, per_kb_ms: 0.001}",
     "t.yaml: client.cpu_per_call.mean_ms: must be > 0"),
])
def test_bad_host_costs_name_the_file_and_key(client, kernel, message):
    with pytest.raises(ModelError) as err:
        _load(client, kernel)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_network_without_kernel_cpu_has_none():
    assert Network(ZERO, ZERO, ZERO, 1e9).kernel_cpu is None


def test_the_lab_replay_puts_every_consumer_on_one_host():
    from meshsim.calibrate.validation.replay import on_one_host

    lab = on_one_host(load_topology("chain3"), 2.0)
    assert lab.node_cores == {"host": 2.0}
    assert lab.client.node == "host" and {lab.node_of(s) for s in lab.services} == {"host"}
    assert lab.client.cpu_per_call is not None and lab.network.kernel_cpu is not None  # their CPU lands on the host


def test_a_saturated_node_keeps_its_bookings_bounded_and_its_order():
    """A backlog far beyond the clock: the core forgets old intervals but never books into the forgotten span."""
    node = NodeCores(1)
    finishes = [node.run(0.0, 1.0) for _ in range(200)]
    assert finishes == pytest.approx([k + 1.0 for k in range(200)])
    assert all(len(ends) <= 32 for _, ends in node.cores)
    assert node.run(0.5, 0.25) == pytest.approx(200.25)  # the gaps of the forgotten span are not reused
