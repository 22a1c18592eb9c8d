"""A cold wake-up's graded share (``wakeup.graded``): every wake pays that share of the cold cost in proportion to its
sleep, the rest stays a lottery; both engines carry it, and the fit chooses the share from the one-connection
sidecar runs' percentiles (calibrate/load/graded_share.py).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from meshsim.calibrate.load import graded_share
from meshsim.calibrate.measure.dataset import load_runs
from meshsim.distributions import Deterministic
from meshsim.errors import ModelError
from meshsim.mesh import MeshModel, ProxyModel, mesh_from_data
from meshsim.scenario import Scenario
from meshsim.sim.engine.replication_result import Horizon
from meshsim.sim.engine.simpy_replication import run_replication
from meshsim.sim.engine.stations import Station
from meshsim.sim.fast.fast_engine import run_fast_replication
from meshsim.wakeup import WakeUp
from meshsim.workload import FortioLoad, Workload
from simkit import station_topology

MS = 1e-3
ENGINES = {"simpy": run_replication, "fast": run_fast_replication}
KINDS = ("inbound_request", "inbound_response", "outbound_request", "outbound_response")
HELDOUT = Path(__file__).resolve().parent.parent / "measurements" / "lab-heldout-2026-11-27"


def _no_draw() -> float:
    raise AssertionError("a fully graded cold cost draws nothing")


def test_a_graded_wake_pays_its_share_of_the_cold_cost_on_every_wake() -> None:
    """Exact timeline: idle g, the share p(g) = 1 - exp(-g / tau) of the delay (not CPU) and of the CPU."""
    wake = WakeUp(delay=1e-3, tau=2e-3, cpu=2e-4, graded=1.0)
    station = Station("w", 1, wakeup=wake, wake_draw=_no_draw, recording=True)
    assert station.serve(0.0, 1e-4) == pytest.approx(1e-4)  # just started: no idle gap
    p = -math.expm1(-1e-3 / 2e-3)  # idle 1 ms
    first = station.serve(1e-4 + 1e-3, 1e-4)
    assert first == pytest.approx(1e-4 + 1e-3 + p * 1e-3 + p * 2e-4 + 1e-4)
    queued = station.serve(first - 5e-5, 1e-4)  # arrives while busy: no wake at all
    assert queued == pytest.approx(first + 1e-4)
    assert station.cold_wakes == pytest.approx(p)
    assert sum(station.busy) == pytest.approx(3 * 1e-4 + p * 2e-4)  # the delay is not CPU


def test_a_half_graded_wake_pays_half_always_and_half_by_lottery() -> None:
    draws = iter([0.1, 0.9])  # the first wake's lottery half is cold, the second's warm
    wake = WakeUp(delay=0.0, tau=2e-3, cpu=2e-4, graded=0.5)
    station = Station("w", 1, wakeup=wake, wake_draw=lambda: next(draws), recording=True)
    p = -math.expm1(-1e-3 / 2e-3)  # 0.39: a draw of 0.1 is cold, 0.9 warm
    first = station.serve(1e-3, 1e-4)
    assert first == pytest.approx(1e-3 + (0.5 * p + 0.5) * 2e-4 + 1e-4)
    second = station.serve(first + 1e-3, 1e-4)
    assert second == pytest.approx(first + 1e-3 + 0.5 * p * 2e-4 + 1e-4)
    assert station.cold_wakes == pytest.approx(0.5 * p + 0.5 + 0.5 * p)


def test_the_share_is_read_written_and_bounded() -> None:
    data: dict[str, Any] = {"schema": "meshsim/mesh/v1", "name": "m",
                            "proxy": {"passes": dict.fromkeys(KINDS, {"family": "deterministic", "value_ms": 0.1}),
                                      "wakeup": {"delay_ms": 0.0, "cpu_ms": 0.5, "tau_ms": 10.0, "graded": 0.75}}}
    wake = mesh_from_data(data, "m.yaml").proxy.wakeup
    assert wake is not None and wake.graded == 0.75 and wake.to_spec()["graded"] == 0.75
    assert "graded" not in WakeUp(delay=0.0, tau=1.0).to_spec()  # a lottery writes no share
    data["proxy"]["wakeup"]["graded"] = 1.5
    with pytest.raises(ModelError, match=r"m.yaml: proxy.wakeup.graded"):
        mesh_from_data(data, "m.yaml")


def _cold_mesh(graded: float) -> MeshModel:
    """Passes of 0.1 ms, one worker, a cold cost of 1 ms CPU with tau 10 ms."""
    proxy = ProxyModel("test", dict.fromkeys(KINDS, Deterministic(0.1 * MS)), workers=1,
                       wakeup=WakeUp(delay=0.0, tau=10 * MS, cpu=1 * MS, graded=graded))
    return MeshModel("m", proxy, {}, None)


@pytest.mark.parametrize("engine", ENGINES)
def test_both_engines_spread_a_lottery_and_not_a_graded_cost_of_the_same_mean(engine: str) -> None:
    """One connection at 200 rps to an app working 1 ms: every pass finds its worker asleep for one of two fixed
    gaps. Graded, every request pays the same cold CPU (no spread); a lottery pays the same on average, all of it
    on a few requests (p99 a whole cold cost above p50)."""
    horizon = Horizon(6.0, 0.5)

    def run(graded: float) -> tuple[float, float]:
        scenario = Scenario(station_topology(Deterministic(MS)), _cold_mesh(graded), scope="both")
        result = ENGINES[engine](scenario, Workload(FortioLoad(200, connections=1)), horizon, 1, 0)
        requests = result.achieved_rps * (horizon.duration - horizon.warmup)
        spread = float(np.quantile(result.latencies, 0.99) - np.quantile(result.latencies, 0.5))
        return result.usage["q/sidecar"].cpu_seconds / requests, spread

    graded_cpu, graded_spread = run(1.0)
    lottery_cpu, lottery_spread = run(0.0)
    assert graded_spread < 0.01 * MS
    assert lottery_spread > 0.8 * MS
    assert graded_cpu > 2 * 0.1 * MS + 0.2 * MS  # the cold cost is paid: about 0.3-0.4 ms per wake pair
    assert graded_cpu == pytest.approx(lottery_cpu, rel=0.05)


def _c1_runs() -> list[Any]:
    runs = load_runs([HELDOUT / "calibration"]).runs
    return [r for r in graded_share.share_runs(runs) if r.manifest.setup.payload_bytes == 1024
            and r.manifest.setup.path == "both-sidecars"]


@pytest.mark.parametrize("truth", [0.0, 1.0])
def test_the_fit_recovers_a_known_share_from_percentiles(truth: float, monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    """The lab's real one-connection runs (200, 500, 1000 rps) with their measured histograms replaced by a replay of
    the shipped lab model at a known share (other random numbers than the fit's): the fit finds that share."""
    model = yaml.safe_load((HELDOUT / "envoy-lab-feature-wake.yaml").read_text())
    model["proxy"]["wakeup"].pop("graded", None)
    runs = _c1_runs()
    assert sorted({r.rps for r in runs}) == [200.0, 500.0, 1000.0]
    truth_model = {**model, "proxy": {**model["proxy"], "wakeup": {**model["proxy"]["wakeup"], "graded": truth}}}
    known = {r.id: graded_share.simulated_quantiles(truth_model, r, tmp_path / r.id, seed=7) for r in runs}
    monkeypatch.setattr(graded_share, "measured_quantiles", lambda run: known[run.id])
    fit = graded_share.fit_graded_share(model, runs)
    assert fit is not None and fit.share == truth


def test_one_rate_leaves_the_share_unidentified() -> None:
    model = yaml.safe_load((HELDOUT / "envoy-lab-feature-wake.yaml").read_text())
    one_rate = [r for r in _c1_runs() if r.rps == 1000.0]
    assert graded_share.fit_graded_share(model, one_rate) is None
    notes: list[str] = []
    graded_share.add_graded_share(model, one_rate, notes)
    assert "graded" not in model["proxy"]["wakeup"] and "kept a lottery" in notes[0]
