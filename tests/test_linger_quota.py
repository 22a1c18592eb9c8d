"""A worker that lingers after its work (``wakeup.linger_us``) burns that CPU under its process's CPU quota: the
kernel throttles a spinning thread like any other. Until 2026-11-29 the engines counted the lingering as the
process's CPU without booking it on the quota, so a lab model with a linger predicted a 0.1-core sidecar burning
0.134 cores past saturation (clean-clone CI of a1484a1, tests/test_validate_lab.py)."""

from __future__ import annotations

import pytest

from meshsim.distributions import Deterministic
from meshsim.mesh import MeshModel, ProxyModel
from meshsim.scenario import Scenario
from meshsim.sim.engine.replication_result import Horizon
from meshsim.sim.engine.simpy_replication import run_replication
from meshsim.sim.engine.stations import CpuQuota, Station
from meshsim.sim.fast.fast_engine import run_fast_replication
from meshsim.wakeup import WakeUp
from meshsim.workload import FortioLoad, Workload
from simkit import ZERO, station_topology

US = 1e-6
ENGINES = {"simpy": run_replication, "fast": run_fast_replication}
KINDS = ("inbound_request", "inbound_response", "outbound_request", "outbound_response")


def _never_cold() -> float:
    return 1.0  # the cold lottery's draw: never below its probability


def test_the_lingering_spends_the_quota_before_the_next_job() -> None:
    """Exact timeline: 100 us of quota per 100 ms period. A 40 us job at 0 (the worker just started: no gap); the
    next at 200 us finds it idle 160 us, of which it lingered 50 us: 90 us of the period's 100 spent, so the second
    job's 40 us runs 10 us now and 30 us at the next period (100.03 ms). Counted without the quota, it ran at once
    (240 us)."""
    wake = WakeUp(delay=0.0, tau=1e-3, linger=50 * US)
    station = Station("w", 1, wakeup=wake, wake_draw=_never_cold, recording=True)
    station.quota = CpuQuota(cores=0.001)
    assert station.serve(0.0, 40 * US) == pytest.approx(40 * US)
    assert station.serve(200 * US, 40 * US) == pytest.approx(0.1 + 30 * US)
    assert sum(station.busy) == pytest.approx(130 * US)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_lingering_proxy_past_saturation_burns_no_more_than_its_quota(engine: str) -> None:
    """One worker limited to 0.1 core, passes of 50 us, a 30 us linger, one connection asking far more than the quota
    buys: each worker idles (and lingers) while the request is at the other sidecar, and each sidecar's CPU over the
    window is the quota's, however much of it the lingering takes."""
    proxy = ProxyModel("test", dict.fromkeys(KINDS, Deterministic(50 * US)), workers=1, cpu_limit=0.1,
                       wakeup=WakeUp(delay=0.0, tau=1e-3, linger=30 * US))
    scenario = Scenario(station_topology(ZERO, servers=1), MeshModel("m", proxy, {}, None), scope="both")
    horizon = Horizon(3.0, 0.5)
    result = ENGINES[engine](scenario, Workload(FortioLoad(20000, connections=1)), horizon, 1, 0)
    for side in ("q/sidecar", "client/sidecar"):
        usage = result.usage[side]
        cores = usage.cpu_seconds / (horizon.duration - horizon.warmup)
        assert 0.09 <= cores <= 0.1 * 1.01, (side, cores)
