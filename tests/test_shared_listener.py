"""How a proxy's listener hands connections to its workers (``proxy.connection_balance``), on both engines.

``shared_listener`` is Envoy before reuse_port became its default: every worker waits on one listening socket, the
worker that is running (it just accepted, or it was busy most recently) wins, and a busy worker cannot accept.
Connections opened one after another (fortio before 1.21 warms up sequentially) or together (within the accept
window) land on one worker, so one of two workers carries every request: the busiest worker is busy twice as long
as with connections spread over both. The two engines agree exactly on the same seeds.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from meshsim.request import PredictOptions, build_request
from meshsim.sim.engine.simpy_replication import run_replication
from meshsim.sim.fast.fast_engine import run_fast_replication
from meshsim.sim.experiments.predict import horizon_for

from engine_pairs import engine_disagreements

PASS = {"family": "deterministic", "value_ms": 0.1}


def _mesh(tmp: Path, balance: str, window_ms: float = 0.05) -> Path:
    model = {"schema": "meshsim/mesh/v1", "name": f"listener-{balance}", "version": "test",
             "proxy": {"kind": "envoy", "dispatch": "pinned", "connection_balance": balance,
                       "accept_window_ms": window_ms, "workers": 2, "source": "test",
                       "passes": {k: PASS for k in ("inbound_request", "inbound_response", "outbound_request",
                                                    "outbound_response")}}}
    path = tmp / f"{balance}-{window_ms}.yaml"
    path.write_text(yaml.safe_dump(model))
    return path


def _busiest_share(tmp: Path, balance: str, warmup: str, window_ms: float = 0.05) -> tuple[float, float]:
    """(busiest worker's utilisation / the proxy's mean worker utilisation) on each engine, server sidecar only."""
    request = build_request(PredictOptions(topology="single", mesh=_mesh(tmp, balance, window_ms), scope="server",
                                           rps=400, load="fortio", connections=8, fortio_warmup=warmup,
                                           duration_s=2.0, cluster="topology"))
    horizon = horizon_for(request.workload.load, request.settings)
    shares = []
    for run in (run_fast_replication, run_replication):
        result = run(request.scenario, request.workload, horizon, 3, 0)
        usage = result.usage["server/sidecar"]
        mean = usage.cpu_seconds / result.busy_window / 2  # two workers
        shares.append(usage.hottest / mean)
    return shares[0], shares[1]


@pytest.mark.parametrize("warmup", ["sequential", "parallel"])
def test_a_shared_listener_puts_every_connection_on_one_worker(tmp_path: Path, warmup: str) -> None:
    fast, simpy = _busiest_share(tmp_path, "shared_listener", warmup)
    assert fast == pytest.approx(simpy, rel=1e-9)
    assert fast == pytest.approx(2.0, rel=1e-6)  # one worker carries it all: twice the mean of two


def test_round_robin_spreads_them_evenly_and_hash_in_between(tmp_path: Path) -> None:
    rr, _ = _busiest_share(tmp_path, "round_robin", "sequential")
    assert rr == pytest.approx(1.0, rel=0.05)
    hashed, simpy = _busiest_share(tmp_path, "hash", "sequential")
    assert hashed == pytest.approx(simpy, rel=1e-9) and 1.0 <= hashed <= 2.0


def test_parallel_opens_outside_the_accept_window_go_to_an_idle_worker(tmp_path: Path) -> None:
    """Without an accept window, a connection arriving while the acceptor serves goes to the idle worker."""
    fast, simpy = _busiest_share(tmp_path, "shared_listener", "parallel", window_ms=0.0)
    assert fast == pytest.approx(simpy, rel=1e-9) and fast < 1.9


def test_the_engines_agree_on_a_shared_listener_under_load(tmp_path: Path) -> None:
    request = build_request(PredictOptions(topology="chain3", mesh=_mesh(tmp_path, "shared_listener"), rps=1500,
                                           load="fortio", connections=16, duration_s=1.0, cluster="topology"))
    assert not engine_disagreements(request, seed=5, count=4, cpu=True)
