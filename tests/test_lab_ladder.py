"""The load ladder finds its top rung from what the host carries (real fortio and Envoy, loopback only).

A plan that asks for a fixed rate the machine may not carry made the suite depend on the machine's speed: a 2-core
host carried 7 364 of the ladder's 9 000 rps, the rung was flagged saturated, left out of the fit and then counted
by ``meshsim validate`` as a held-out run. Here a rung no host carries (a million requests per second on 16
connections) makes the same happen on any machine, fast or slow: the saturated rung must stay in the calibration
(recorded as a measured capacity, role ``fit`` in validation) and the ladder must get one more rung below what the
host carried, which the host then keeps (or at least is not asked more than it carried).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import require_component

from meshsim.calibrate.measure.dataset import load_run
from meshsim.calibrate.lab_calibration import CARRIED_FRACTION, calibrate_lab
from meshsim.calibrate.lab_plan import LADDER_STAGES, LabPlan
from meshsim.calibrate.validation.compare import validate_runs
from meshsim.calibrate.validation.validate_options import ValidateOptions

pytestmark = pytest.mark.lab

BEYOND_ANY_HOST = 1_000_000.0  # rps on 16 connections over loopback HTTP/1.1 through two Envoys
PLANNED = (1500.0, BEYOND_ANY_HOST)


@pytest.fixture(scope="module")
def calibration(tmp_path_factory: pytest.TempPathFactory):
    require_component("fortio")
    require_component("envoy")
    out = tmp_path_factory.mktemp("ladder")
    cal = calibrate_lab(LabPlan("envoy-lab", out / "runs", out / "model.yaml", rates=(200.0,), payloads=(1024,),
                                duration_s=2.0, stages=LADDER_STAGES, batching_probe=False, burst_probes=False,
                                ladder_rates=PLANNED, state_dir=out / "state"))
    return cal


def test_a_rung_the_host_cannot_carry_adds_one_below_what_it_carried(calibration) -> None:
    for setup in {r.setup for r in calibration.ladder}:
        rungs = [r for r in calibration.ladder if r.setup == setup]
        beyond = [r for r in rungs if r.requested_rps == BEYOND_ANY_HOST]
        assert len(beyond) == 1 and beyond[0].status == "saturated", rungs
        added = [r for r in rungs if r.added]
        assert len(added) == 1, rungs
        # placed from what the host carried, never above it
        assert added[0].requested_rps == pytest.approx(CARRIED_FRACTION * beyond[0].achieved_rps, abs=5.0)
        assert added[0].requested_rps < beyond[0].achieved_rps
        assert added[0].folder in calibration.run_dirs
    assert "carried" in calibration.summary


def test_the_saturated_rung_is_a_calibration_result_not_a_held_out_run(calibration) -> None:
    model = yaml.safe_load(Path(calibration.model_out).read_text())
    saturated = model["calibration"]["saturated_runs"]
    beyond = {load_run(r.folder).id for r in calibration.ladder if r.requested_rps == BEYOND_ANY_HOST}
    assert {s["run"] for s in saturated} >= beyond
    for s in saturated:
        assert 0 < s["achieved_rps"] < 0.95 * s["requested_rps"] and s["source"]
    assert not beyond & set(model["calibration"]["fitted_from"])
    validation = validate_runs(ValidateOptions(calibration.model_out, tuple(calibration.run_dirs), replications=2))
    roles = {c.run_id: c.role for c in validation.comparisons}
    assert roles and set(roles.values()) == {"fit"}, roles
    assert not validation.summary()  # nothing held out: the summary, which speaks of held-out runs, is empty
