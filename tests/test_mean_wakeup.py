"""The wake-up's mean cost against the idle gap (calibrate/load/mean_wakeup.py): bounded, written only when identified
and significant; a cost still linear in the gap keeps tau at its bound with a note (only cost / tau is determined:
dropping it was the worse error); and the baseline's own rate dependence (calibration.baseline_wakeup)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from meshsim.calibrate.fit_runs import fit_runs
from meshsim.calibrate.load.mean_wakeup import fit_wakeup
from meshsim.catalog import load_mesh

# fresh_draws: an autouse fixture
from synthetic_passes import (BASE, GAMMA, INBOUND, fresh_draws, sum_of, write_pass_run)  # noqa: F401


def test_wakeup_linear_in_the_gap_is_not_identified() -> None:
    """Gaps of 1-5 ms with a cost still rising linearly: only max/tau is determined; the fit must say so."""
    gaps = np.array([0.8e-3, 1.7e-3, 4.4e-3])
    added = 0.1e-3 + 0.065 * gaps  # 0.065 ms per ms of idle gap, no sign of saturation
    fit = fit_wakeup(gaps, added, tau_max_s=5 * 5e-3, max_max_s=3 * added.max())
    assert fit.tau_s <= 25e-3 * (1 + 1e-9) and fit.max_s <= 3 * added.max() * (1 + 1e-9)
    assert fit.on_bound and not fit.accepted
    assert "not identified" in fit.verdict()


def test_wakeup_within_noise_is_not_significant() -> None:
    gaps = np.array([0.8e-3, 1.7e-3, 4.4e-3])
    added = np.array([0.200e-3, 0.195e-3, 0.204e-3])
    fit = fit_wakeup(gaps, added, sigma_s=[0.01e-3] * 3, tau_max_s=25e-3, max_max_s=0.6e-3)
    assert not fit.significant and not fit.accepted
    assert "not significant" in fit.verdict()


def test_wakeup_inside_its_bounds_is_recovered_and_accepted() -> None:
    gaps = np.array([0.3e-3, 1.8e-3, 9.3e-3])
    added = 0.1e-3 + 0.3e-3 * -np.expm1(-gaps / 2e-3)
    fit = fit_wakeup(gaps, added, sigma_s=[0.01e-3] * 3, tau_max_s=50e-3, max_max_s=1e-3)
    assert fit.accepted, fit.verdict()
    assert fit.max_s == pytest.approx(0.3e-3, rel=0.02) and fit.tau_s == pytest.approx(2e-3, rel=0.05)


def test_a_cost_still_linear_in_the_gap_keeps_tau_at_its_bound_and_says_so(tmp_path: Path) -> None:
    """The lab case: per-request cost falls with rate, linearly in the gap over the gaps seen. Only cost / tau is
    determined. The block is written with tau at its upper bound (5 x the longest gap between requests) and a note,
    so a fit whose tau lands on the bound and one whose tau lands just under it give nearly the same model. The
    block used to be dropped there, and the model then booked the reference rate's cost at every rate: in the lab,
    twice the sidecars' CPU at 12 000 rps (measurements/lab-ladder-2026-11-26)."""
    for rps in (200.0, 500.0, 1000.0):
        write_pass_run(tmp_path, f"base-{rps:g}", "baseline", rps, sum_of(BASE))
        gap = 1 / rps - 0.5e-3
        write_pass_run(tmp_path, f"server-{rps:g}", "server-sidecar", rps, sum_of(BASE, INBOUND, INBOUND) + 0.05 * gap)
    summary = fit_runs([tmp_path], "envoy-linear", tmp_path / "m.yaml", families=GAMMA)
    model = yaml.safe_load((tmp_path / "m.yaml").read_text())
    wake = load_mesh(str(tmp_path / "m.yaml")).proxy.wakeup
    assert wake is not None, summary.notes
    assert wake.tau == pytest.approx(5 / 200.0)
    assert "upper bound" in model["proxy"]["wakeup"]["note"]
    assert any("its upper bound: only cost / tau is determined" in n for n in summary.notes), summary.notes
    # what the runs determine: the added latency per second of idle gap (0.05), here all of it delay
    assert wake.delay / wake.tau == pytest.approx(0.05, rel=0.25) and wake.cpu == 0.0
    # the baseline is the same at every rate: no baseline_wakeup, and the note says why
    assert "baseline_wakeup" not in model["calibration"]
    assert any(n.startswith("baseline load dependence") and "no baseline_wakeup" in n for n in summary.notes)


def test_baseline_wakeup_recorded(tmp_path: Path) -> None:
    max_wake, tau = 0.15e-3, 2e-3
    for rps in (100.0, 400.0, 1000.0):
        base = sum_of(BASE)
        gap = max(1 / rps - base.mean(), 0.0)
        write_pass_run(tmp_path, f"base-{rps:g}", "baseline", rps, base + max_wake * -math.expm1(-gap / tau))
    write_pass_run(tmp_path, "server-1000", "server-sidecar", 1000.0, sum_of(BASE, INBOUND, INBOUND))
    # a load-ladder baseline: 16 connections firing together, each request queued behind half its burst on average
    write_pass_run(tmp_path, "base-3000-c16", "baseline", 3000.0, sum_of(BASE) + 8 * BASE.mean, connections=16)
    summary = fit_runs([tmp_path], "envoy-basewake", tmp_path / "m.yaml", families=GAMMA)
    block = yaml.safe_load((tmp_path / "m.yaml").read_text())["calibration"]["baseline_wakeup"]
    assert block["max_ms"] == pytest.approx(max_wake * 1e3, rel=0.2)
    assert block["tau_ms"] == pytest.approx(tau * 1e3, rel=0.3)
    assert "source" in block and "100 rps" in block["source"] and "3000 rps" not in block["source"]
    assert any("(3000 rps) left out of the baseline's load dependence" in n for n in summary.notes), summary.notes
    assert any("calibration.baseline_wakeup" in n for n in summary.notes)
