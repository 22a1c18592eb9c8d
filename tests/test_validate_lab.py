"""The lab validation loop for real: calibrate the lab (real fortio, real Envoy, loopback only) on one connection at
two low rates plus one batching probe, measure held-out runs the calibration never saw (4 connections at 1000 rps;
a 0.1-core, 1-worker proxy driven at 3000 rps past its saturation; chain5 and Bookinfo with their baselines), each
twice, validate, and check the errors.

Thresholds are what six runs of SMALL_PLAN measured on this 2-core VM (median held-out p50 error 4-29 %, chain5
p50 within 30 %, Bookinfo within 15 %, saturated throughput from -53 % to +110 %) with a margin for the machine's
drift. The same runs measured the lab's own repeatability (a repeat of the same setup: p50 moves 4-22 % in the
median), and the saturated throughput of the 0.1-core worker itself swung from 712 to 1504 rps between runs of the
same day: a quota of guest CPU time buys fewer requests while the host is busy. Hence the wide limits.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from conftest import require_component

from meshsim.calibrate.load.held_fraction import BURST_CONNECTIONS
from meshsim.calibrate.validation.validate import validate_lab_report
from meshsim.calibrate.validation.lab_loop import SMALL_PLAN
from meshsim.calibrate.validation.text_report import summary_line

# Measured over six runs of SMALL_PLAN (see the module docstring); margins cover the drift seen between runs.
MEDIAN_P50_LIMIT = 0.45
CHAIN5_P50_LIMIT = 0.45
SATURATED_RPS_LIMIT = 1.5  # the measured throughput itself swung 712..1504 rps between runs that day
BOOKINFO_P50_LIMIT = 0.45


@pytest.fixture(scope="module")
def lab_validation(tmp_path_factory: pytest.TempPathFactory):
    require_component("fortio")
    require_component("envoy")
    out = tmp_path_factory.mktemp("lab-validation")
    # the library call behind `meshsim lab validate --plan small --json --html FILE`
    outcome = validate_lab_report(out, "small", html=out / "report.html", as_json=True, replications=3)
    assert outcome.html is not None and outcome.html.is_file()
    report = json.loads(outcome.text)
    held_setups = sum(len(h.probes) for h in SMALL_PLAN.held_out if h.mode != "baseline")
    assert report["summary"]["p50"]["n"] == held_setups * SMALL_PLAN.repeats
    # every held-out setup was measured twice: the measurement's own spread is reported next to the errors
    assert report["repeatability"]["p50"]["pairs"] >= len(SMALL_PLAN.held_out)
    print(summary_line(outcome.validation))  # shown with pytest -rP: the numbers behind the limits below
    return outcome.lab


def _by(result, role: str):
    return [c for c in result.validation.comparisons if c.role == role]


def test_every_run_is_measured_and_validated(lab_validation) -> None:
    v = lab_validation.validation
    expected_held = sum(len(h.probes) for h in SMALL_PLAN.held_out) * SMALL_PLAN.repeats
    assert len(lab_validation.held_out_runs) == expected_held
    # every stage at every rate with one connection, plus the batching probe (8 connections on one worker) and the
    # bursts (c = 2, 4, 8 firing together at the lowest rate)
    assert len(lab_validation.calibration_runs) == len(SMALL_PLAN.calibration_stages) * len(
        SMALL_PLAN.calibration_rates) + 1 + len(BURST_CONNECTIONS)
    assert not v.skipped, v.skipped
    assert len(v.comparisons) == expected_held + len(lab_validation.calibration_runs)
    assert all(Path(c.folder).is_dir() for c in v.comparisons)


def test_roles_fit_topology_and_held_out(lab_validation) -> None:
    fit = _by(lab_validation, "fit")
    assert {Path(c.folder) for c in fit} == set(lab_validation.calibration_runs)
    # each repeat's chain5 / bookinfo sidecar run derives its topology from its own repeat's baseline run
    baselines = sum(len(h.probes) for h in SMALL_PLAN.held_out if h.mode == "baseline") * SMALL_PLAN.repeats
    topology = _by(lab_validation, "topology")
    assert len(topology) == baselines
    assert {t.setup for t in topology} == {"chain5 baseline", "bookinfo baseline"}
    held = _by(lab_validation, "held-out")
    assert len(held) == sum(len(h.probes) for h in SMALL_PLAN.held_out) * SMALL_PLAN.repeats - baselines
    summary = lab_validation.validation.summary()
    assert summary["p50"].n == len(held)  # the summary counts held-out runs only


def test_saturated_cpu_limited_proxy_is_marked_and_capped(lab_validation) -> None:
    saturated = [c for c in _by(lab_validation, "held-out") if "cpu0.1" in c.setup]
    assert len(saturated) == SMALL_PLAN.repeats
    for sat in saturated:
        assert sat.status == "saturated"
        assert sat.achieved_rps.measured < 0.95 * sat.rps
        # the fortio model reproduces a throughput cap below the requested rate, and says where it is
        assert sat.achieved_rps.predicted < 0.95 * sat.rps
        assert sat.saturation_rps is not None and sat.saturation_rps < sat.rps


def test_held_out_errors_under_the_measured_limits(lab_validation) -> None:
    held = _by(lab_validation, "held-out")
    line = summary_line(lab_validation.validation)
    assert statistics.median(abs(c.error("p50")) for c in held) <= MEDIAN_P50_LIMIT, line
    assert max(abs(c.error("p50")) for c in held if c.setup.startswith("chain5")) <= CHAIN5_P50_LIMIT, line
    assert max(abs(c.error("p50")) for c in held if c.setup.startswith("bookinfo")) <= BOOKINFO_P50_LIMIT, line
    assert max(abs(c.error("rps")) for c in held if c.status == "saturated") <= SATURATED_RPS_LIMIT, line


@pytest.mark.xfail(strict=True, reason="aim not met: the lab's own repeatability on this shared 2-core VM is of the "
                   "same order (a repeat run's p50 moves 4-18 % in the median, up to 40 %; saturated throughput up to "
                   "25 %); a burst of synchronised requests at a low rate puts fortio's, both Envoys', the app's and "
                   "the kernel's CPU on 2 idle vCPUs at once, and the model books only proxies and apps on the host; "
                   "tails (p99) come from host noise the model does not see")
def test_aims_p50_10_percent_and_saturation_10_percent(lab_validation) -> None:
    held = _by(lab_validation, "held-out")
    assert max(abs(c.error("p50")) for c in held) <= 0.10
    assert all(abs(c.error("rps")) <= 0.10 for c in held if c.status == "saturated")
