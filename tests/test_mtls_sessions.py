"""mTLS between two sidecars rides on the proxies' own connections, not on the client's: the calling proxy's first
call to a peer makes the session (the handshake), and every later call reuses it, whichever client connection it
came on (linkerd2-proxy multiplexes its calls to a peer over one HTTP/2 connection; Envoy keeps its upstream pool's
connections open, so in a running mesh they exist before a benchmark measures).

Before, every client connection opened its own session on every hop: an open load's 1000 connections made up to
1000 handshakes per hop in a 5 s run, and chain3 on Linkerd (mTLS always on) at 1000 rps predicted a p99 of 865 ms
that fell to 6 ms in a 30 s run: a start-up storm, not the system's steady state.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from meshsim.catalog import load_mesh, load_topology
from meshsim.distributions import Deterministic
from meshsim.scenario import build_scenario
from meshsim.sim.engine.replication_result import Horizon
from meshsim.sim.engine.simpy_replication import run_replication
from meshsim.sim.fast.fast_engine import run_fast_replication
from meshsim.sim.experiments.predict import predict
from meshsim.workload import OpenLoad, Workload

HANDSHAKE_S = 0.020  # far above everything else on the path, so a call that paid one stands out


def _mesh_with_a_slow_handshake():
    mesh = load_mesh("istio")
    mtls = mesh.features["mtls"]
    slow = replace(mtls, handshake=replace(mtls.handshake, cpu=Deterministic(HANDSHAKE_S)))
    return replace(mesh, features={**mesh.features, "mtls": slow})


@pytest.mark.parametrize("run", [run_replication, run_fast_replication], ids=["simpy", "fast"])
def test_a_proxy_pair_makes_one_mtls_session_whatever_the_client_connections(run) -> None:
    """100 rps over 1000 client connections for 5 s: about 400 of them carry a request (each one's first would have
    paid a 20 ms handshake on each side), but only the pair's first call does, and the few calls queued behind it
    on their worker wait for it."""
    scenario = build_scenario(load_topology("single"), _mesh_with_a_slow_handshake(), features=("mtls",))
    workload = Workload(OpenLoad(100.0, connections=1000))
    for replication in range(3):
        result = run(scenario, workload, Horizon(5.0, 0.0, 1.0), 5, replication)
        slow = int(np.count_nonzero(result.latencies > HANDSHAKE_S))
        assert result.latencies.size > 400
        assert 1 <= slow <= 0.02 * result.latencies.size, (replication, slow, result.latencies.size)
        assert result.latencies.max() > 2 * HANDSHAKE_S  # the first call: the handshake's CPU on both sides


@pytest.mark.slow
def test_an_mtls_prediction_does_not_depend_on_the_run_length() -> None:
    """A stationary system's p99 is a property of the system, not of how long it is simulated: chain3 on Linkerd
    (mTLS always on, 1000 client connections) at 1000 rps, 5 s runs against 20 s runs."""
    short = predict("chain3", "linkerd", rps=1000.0, duration_s=5.0, replications=8, processes=1, saturation=False)
    long = predict("chain3", "linkerd", rps=1000.0, duration_s=20.0, replications=4, processes=1, saturation=False)
    a, b = short.latency["p99"], long.latency["p99"]
    assert abs(a.value - b.value) <= a.half_width + b.half_width + 0.1 * b.value, (a, b)
    assert a.value < 0.05  # tens of ms at most: no start-up storm of handshakes
