"""The lab validation loop for real: calibrate the lab (real fortio, real Envoy, loopback only) on one connection at
two low rates, measure held-out runs the calibration never saw (4 connections at 1000 qps; a 0.1-core, 1-worker
proxy driven at 3000 qps past its saturation; chain5 with its baseline), validate, and check the errors.

Thresholds are what was measured on this 2-core machine with other jobs running (see the README's "How accurate is
it"); they are far above the aims (p50 <= 10 %, p99 <= 20 %, saturation <= 10 %). The aims are kept as strict xfail
tests naming the causes found, so a model fix that meets them turns them into failures to update here.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from conftest import require_component

from meshsim.calibrate.validation.api import validate_lab_report
from meshsim.calibrate.validation.lab import SMALL_PLAN
from meshsim.calibrate.validation.render import summary_line

# Measured over repeated runs of SMALL_PLAN (see module docstring); margins cover the run-to-run spread seen.
MEDIAN_P50_LIMIT = 0.75
CHAIN5_P50_LIMIT = 1.25


@pytest.fixture(scope="module")
def lab_validation(tmp_path_factory: pytest.TempPathFactory):
    require_component("fortio")
    require_component("envoy")
    out = tmp_path_factory.mktemp("lab-validation")
    # the library call behind `meshsim lab validate --plan small --json --html FILE`
    outcome = validate_lab_report(out, "small", html=out / "report.html", as_json=True, replications=3)
    assert outcome.html is not None and outcome.html.is_file()
    assert json.loads(outcome.text)["summary"]["p50"]["n"] == 3
    print(summary_line(outcome.validation))  # shown with pytest -rP: the numbers behind the limits below
    return outcome.lab


def _by(result, role: str):
    return [c for c in result.validation.comparisons if c.role == role]


def test_every_run_is_measured_and_validated(lab_validation) -> None:
    v = lab_validation.validation
    expected_held = sum(len(h.probes) for h in SMALL_PLAN.held_out)
    assert len(lab_validation.held_out_runs) == expected_held
    assert len(lab_validation.calibration_runs) == len(SMALL_PLAN.calibration_stages) * len(
        SMALL_PLAN.calibration_rates)
    assert not v.skipped, v.skipped
    assert len(v.comparisons) == expected_held + len(lab_validation.calibration_runs)
    assert all(Path(c.folder).is_dir() for c in v.comparisons)


def test_roles_fit_topology_and_held_out(lab_validation) -> None:
    fit = _by(lab_validation, "fit")
    assert {Path(c.folder) for c in fit} == set(lab_validation.calibration_runs)
    (topology,) = _by(lab_validation, "topology")
    assert topology.setup.startswith("chain5 baseline")
    held = _by(lab_validation, "held-out")
    assert len(held) == 3
    summary = lab_validation.validation.summary()
    assert summary["p50"].n == 3  # the summary counts held-out runs only


def test_saturated_cpu_limited_proxy_is_marked_and_capped(lab_validation) -> None:
    (sat,) = [c for c in _by(lab_validation, "held-out") if "cpu0.1" in c.setup]
    assert sat.status == "saturated"
    assert sat.achieved_rps.measured < 0.95 * sat.qps
    # the fortio model reproduces a throughput cap below the requested rate, and says where it is
    assert sat.achieved_rps.predicted < 0.95 * sat.qps
    assert sat.saturation_rps is not None and sat.saturation_rps < sat.qps


def test_held_out_p50_errors_under_the_measured_limits(lab_validation) -> None:
    held = _by(lab_validation, "held-out")
    errors = [abs(c.error("p50")) for c in held]
    assert statistics.median(errors) <= MEDIAN_P50_LIMIT, summary_line(lab_validation.validation)
    (chain,) = [c for c in held if c.setup.startswith("chain5")]
    assert abs(chain.error("p50")) <= CHAIN5_P50_LIMIT, summary_line(lab_validation.validation)


@pytest.mark.xfail(strict=True, reason="aim not met yet: proxy pass time is used as worker busy time and CPU-quota "
                   "demand (measured CPU/request is ~half of it); the fitted wake-up can degenerate (tau at its "
                   "bound); fortio, Envoys and apps share 2 cores, which the model does not see")
def test_aims_p50_10_percent_and_saturation_10_percent(lab_validation) -> None:
    held = _by(lab_validation, "held-out")
    assert max(abs(c.error("p50")) for c in held) <= 0.10
    (sat,) = [c for c in held if c.status == "saturated"]
    assert abs(sat.error("rps")) <= 0.10
