"""A lab run whose leaf apps wait (``meshsim lab run --leaf-delay``, fortio echo's ``delay=``): `meshsim validate`
replays the wait (it once ignored it and reported such a run 78 % too fast), `meshsim fit` leaves the run out.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from meshsim.calibrate.measure.dataset import load_runs
from meshsim.calibrate.validation.validate import validate_runs
from meshsim.calibrate.validation.validate_options import ValidateOptions
from meshsim.distributions import Deterministic
from meshsim.errors import ModelError
from meshsim.catalog import load_mesh
from meshsim.run_folder import LoadSettings
from meshsim.scenario import Scenario
from meshsim.sim.engine.replication_result import Horizon
from meshsim.sim.engine.simpy_replication import run_replication
from meshsim.workload import FortioLoad, Workload
from simkit import station_topology

ROOT = Path(__file__).resolve().parent.parent / "measurements"
CONTENTION = ROOT / "lab-contention-2026-11-27"
MODEL = ROOT / "lab-heldout-2026-11-27" / "envoy-lab-feature-wake.yaml"


@pytest.mark.parametrize(("url", "seconds"), [
    ("http://127.0.0.1:1/echo?size=1024&delay=10ms", 0.01), ("http://127.0.0.1:1/echo?delay=250us&size=0", 2.5e-4),
    ("http://127.0.0.1:1/echo?delay=1.5s", 1.5), ("http://127.0.0.1:1/echo?size=1024", 0.0)])
def test_the_leaf_delay_is_read_from_the_runs_url(url: str, seconds: float) -> None:
    assert LoadSettings(url=url).leaf_delay_s == pytest.approx(seconds)


def test_a_distribution_of_delays_is_refused_by_name() -> None:
    with pytest.raises(ModelError, match=r"load.url: delay=1ms:50,5ms:10"):
        _ = LoadSettings(url="http://127.0.0.1:1/echo?delay=1ms:50,5ms:10").leaf_delay_s


def test_only_the_leaves_wait_and_they_hold_no_core() -> None:
    """One connection, an app working 1 ms: the delay adds exactly itself to every request and no CPU."""
    topology = station_topology(Deterministic(1e-3))
    delayed = topology.with_leaf_delay(4e-3)
    assert all(len(delayed.services[n].handler) == len(s.handler) + (0 if s.callees() else 1)
               for n, s in topology.services.items())
    horizon, load = Horizon(2.0, 0.2), Workload(FortioLoad(100, connections=1))
    mesh = load_mesh(MODEL)
    plain = run_replication(Scenario(topology, mesh, scope="none"), load, horizon, 1, 0)
    waited = run_replication(Scenario(delayed, mesh, scope="none"), load, horizon, 1, 0)
    assert waited.latencies.mean() - plain.latencies.mean() == pytest.approx(4e-3, rel=1e-6)
    cpu = {c: u.cpu_seconds for c, u in plain.usage.items()}
    assert {c: u.cpu_seconds for c, u in waited.usage.items()} == pytest.approx(cpu, rel=0.02)


def test_validate_replays_the_wait_of_a_real_run() -> None:
    runs = sorted((CONTENTION / "leaf-delay" / "d10").iterdir())
    found = validate_runs(ValidateOptions(MODEL, tuple(runs), replications=2, sim_duration_s=2.0))
    assert len(found.comparisons) == 2
    for row in found.comparisons:
        assert any("leaf apps wait 10 ms" in n for n in row.notes)
        assert abs(row.error("p50")) < 0.2  # the measured p50 is 13.2-13.4 ms: 10 of them the leaf's wait


def test_the_fit_leaves_a_run_with_a_leaf_delay_out() -> None:
    from meshsim.calibrate.fit_runs import FitSummary, fittable_runs

    run = load_runs([CONTENTION / "leaf-delay" / "d10"]).runs[0]
    plain = load_runs([CONTENTION / "leaf-delay" / "d0"]).runs[0]
    summary = FitSummary("m", None, [])
    assert fittable_runs([run, plain], True, summary) == [plain]
    assert "leaf apps wait" in summary.flagged[0]
    assert replace(run.manifest.load, url="").leaf_delay_s == 0.0
    spread = _with_url(run, run.manifest.load.url.replace("delay=10ms", "delay=1ms:50,5ms:10"))
    relabelled = _with_url(plain, plain.manifest.load.url + "&xdelay=10ms")  # another parameter: no wait
    assert fittable_runs([spread, relabelled], True, FitSummary("m", None, [])) == [relabelled]


def _with_url(run: Any, url: str) -> Any:
    return replace(run, manifest=replace(run.manifest, load=replace(run.manifest.load, url=url)))
