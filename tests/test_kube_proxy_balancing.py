"""kube-proxy's pick per connection: a caller without a proxy keeps each keep-alive connection on one replica."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pytest
import simpy

from meshsim.request import PredictOptions, build_request
from meshsim.sim.engine.balancing import HASH_PRIME, pinned_replica
from meshsim.sim.engine.replication_result import Horizon
from meshsim.sim.engine.simpy_replication import run_replication
from meshsim.sim.engine.streams import Streams
from meshsim.sim.engine.system import System
from meshsim.sim.fast import fast_kernels
from meshsim.sim.fast.fast_engine import run_fast_replication


def test_both_engines_pin_a_connection_to_the_same_replica() -> None:
    rng = np.random.default_rng(7)
    for _ in range(3000):
        seed, conn, n = int(rng.integers(HASH_PRIME)), int(rng.integers(100_000)), int(rng.integers(1, 1000))
        replica = pinned_replica(seed, conn, n)
        assert 0 <= replica < n
        assert fast_kernels.pinned_replica(seed, conn, n) == replica


def _max_share_probabilities(n: int, connections: int) -> dict[int, float]:
    """P(the busiest of n replicas holds k of the connections) for independent uniform picks (exact enumeration)."""
    counts: Counter[int] = Counter()
    for picks in itertools.product(range(n), repeat=connections):
        counts[max(Counter(picks).values())] += 1
    return {k: c / n ** connections for k, c in counts.items()}


def test_connections_spread_as_independent_uniform_picks() -> None:
    """Over seeds, how unevenly 4 connections land on 3 replicas matches independent uniform picks (iptables'
    random endpoint per connection), within 4 standard errors of each probability."""
    n, connections, seeds = 3, 4, 30_000
    rng = np.random.default_rng(11)
    seen: Counter[int] = Counter()
    for _ in range(seeds):
        seed = int(rng.integers(HASH_PRIME))
        seen[max(Counter(pinned_replica(seed, c, n) for c in range(connections)).values())] += 1
    for k, p in _max_share_probabilities(n, connections).items():
        assert seen[k] / seeds == pytest.approx(p, abs=4 * math.sqrt(p * (1 - p) / seeds)), k


def _system(mesh: str, scope: str, keepalive: bool) -> System:
    request = build_request(PredictOptions(topology="lb3", mesh=mesh, scope=scope, load="fortio", connections=2,
                                           rps=100, keepalive=keepalive))
    return System(simpy.Environment(), request.scenario, request.workload, Streams(1, 0))


@pytest.mark.parametrize("mesh,scope,keepalive,client,app", [
    ("none", "both", True, "per_connection", "kube-proxy"),  # fortio through a ClusterIP
    ("none", "both", False, "random", "kube-proxy"),  # a new connection per request: a new pick each time
    ("istio", "server", True, "per_connection", "least_request"),  # no client sidecar: kube-proxy
    ("istio", "none", True, "per_connection", "kube-proxy"),  # the baseline bypasses every proxy
    ("istio", "both", True, "least_request", "least_request"),  # the client's sidecar balances per request
    ("traefik-grpc-lb", "both", True, "round_robin", "round_robin"),  # grpc-go's client-side round robin
])
def test_who_picks_the_replica(mesh: str, scope: str, keepalive: bool, client: str, app: str) -> None:
    system = _system(mesh, scope, keepalive)
    assert system.caller_policy(system.client) == client
    app_caller = next(iter(system.callers.values()))
    assert system.caller_policy(app_caller) == ("random" if app == "kube-proxy" else app)


@pytest.mark.parametrize("engine", [run_replication, run_fast_replication], ids=["simpy", "compiled"])
@pytest.mark.parametrize("mesh,scope,keepalive,pinned", [
    ("none", "both", True, True), ("istio", "server", True, True), ("istio", "both", True, False),
    ("none", "both", False, False),
])
def test_one_connection_without_a_client_proxy_loads_one_replica(engine, mesh: str, scope: str, keepalive: bool,
                                                                   pinned: bool) -> None:
    """One fortio connection to 3 replicas: the busiest replica does all the work when kube-proxy pinned the
    connection, about a third of it when the requests are spread."""
    request = build_request(PredictOptions(topology="lb3", mesh=mesh, scope=scope, load="fortio", connections=1,
                                           rps=200, keepalive=keepalive))
    result = engine(request.scenario, request.workload, Horizon(duration=2.0, warmup=0.2), 1, 0)
    app = result.usage["server/app"]
    share = app.hottest * result.busy_window / app.cpu_seconds  # busiest replica's CPU over all replicas'
    if pinned:
        assert share == pytest.approx(1.0)
    else:
        assert share < 0.6


@pytest.mark.parametrize("engine", [run_replication, run_fast_replication], ids=["simpy", "compiled"])
def test_a_sidecar_behind_another_holds_its_callers_pool_not_the_load_generators_connections(engine) -> None:
    """wrk2's 960 connections at 50 rps (the mesh-comparison benchmark's setting): the client's sidecar holds all
    960, the sidecars behind it only the pool their callers grew, one connection per request they had in flight at
    once (Little's law puts about 50 rps x a few ms = well under 1 there on average)."""
    request = build_request(PredictOptions(topology="chain3", mesh="istio", load="wrk2", connections=960, threads=2,
                                           rps=50))
    result = engine(request.scenario, request.workload, Horizon(duration=20.0, warmup=1.0), 1, 0)
    usage = result.usage
    assert usage["client/sidecar"].connections == 960
    for inner in ("s1/sidecar", "s2/sidecar", "s3/sidecar"):
        assert 1 <= usage[inner].connections <= 10
        assert usage[inner].memory_mb < usage["client/sidecar"].memory_mb


def test_the_pool_is_the_peak_of_requests_on_it_at_once() -> None:
    """An exact timeline: a request takes a pooled connection at its first pass in and frees it when the caller's
    proxy has the response; the peak counts overlaps."""
    system = _system("istio", "both", True)
    client = system.client.outbound
    assert client is not None and client.faces_load_generator
    proxy = system.apps["server"][0].sidecar
    assert proxy is not None and not proxy.faces_load_generator
    for step in ("open", "open", "close", "open", "open", "close", "close", "close"):
        proxy.open_pool() if step == "open" else proxy.close_pool()
    assert (proxy.pool_busy, proxy.pool_peak) == (0, 3)


@pytest.mark.parametrize("engine", [run_replication, run_fast_replication], ids=["simpy", "compiled"])
def test_a_burst_of_connections_grows_the_pool_behind_the_client_sidecar(engine) -> None:
    """fortio's 64 connections fire together (no -uniform): the server's sidecar sees most of them on the client
    sidecar's pool at once, as the lab's server Envoy grew with the connections (lab-memory-2026-11-23); every
    pool is free again at the end."""
    request = build_request(PredictOptions(topology="single", mesh="istio", load="fortio", connections=64, rps=100))
    result = engine(request.scenario, request.workload, Horizon(duration=4.0, warmup=0.5), 1, 0)
    assert result.usage["client/sidecar"].connections == 64
    assert 48 <= result.usage["server/sidecar"].connections <= 64
