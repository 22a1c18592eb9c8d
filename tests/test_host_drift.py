"""host_drift pairs a calibration setup measured again with the calibration's own run of it, on shipped lab runs
(measurements/lab-ladder-2026-11-26 and lab-heldout-2026-11-27: the same sidecar setup a day apart)."""

from __future__ import annotations

from pathlib import Path

import pytest

from meshsim.calibrate.measure.dataset import load_run
from meshsim.calibrate.validation.compare import measured_latency
from meshsim.calibrate.validation.host_drift import DriftPair, HostDrift, host_drift

MEASUREMENTS = Path(__file__).resolve().parents[1] / "measurements"
LADDER = MEASUREMENTS / "lab-ladder-2026-11-26" / "calibration"
HELDOUT = MEASUREMENTS / "lab-heldout-2026-11-27" / "calibration"


def _runs(folder: Path, pattern: str) -> list[Path]:
    found = sorted(folder.glob(pattern))
    assert found, f"{folder}/{pattern}"
    return found


def test_each_run_measured_again_pairs_with_the_calibrations_run_of_its_setup_rate_and_connections() -> None:
    calibration = _runs(HELDOUT, "lab-single-*")  # every setup, both payloads, one connection and the ladder
    again = _runs(LADDER, "lab-single-sidecar-q*-c1-b1024-*")  # the sidecar setup at 200 and 500 rps, a day earlier
    drift = host_drift(calibration, again)
    assert sorted(p.setup for p in drift.pairs) == ["single both-sidecars 200 rps c1", "single both-sidecars 500 rps c1"]
    for pair in drift.pairs:
        rate = pair.setup.split()[2]
        first = load_run(_runs(HELDOUT, f"lab-single-sidecar-q{rate}-c1-b1024-*")[0])
        assert pair.calibration["p50"] == measured_latency(first)[0]["p50"]  # the 1024 B run, not the 16 KiB one
        assert pair.calibration["rps"] == first.result.actual_rps
    # a run of a setup the calibration did not measure pairs with nothing
    assert host_drift(_runs(HELDOUT, "lab-single-baseline-*"), again).pairs == ()


def test_a_run_measured_again_unchanged_has_no_drift() -> None:
    runs = _runs(LADDER, "lab-single-sidecar-q*-c1-b1024-*")
    drift = host_drift(runs, runs)
    assert len(drift.pairs) == 2
    assert all(drift.median_abs(k) == 0.0 for k in ("p50", "p99", "rps"))


def test_the_change_is_relative_to_the_mean_and_symmetric() -> None:
    slower = DriftPair("s", {"p50": 1.5, "p99": 3.0, "rps": 200.0}, {"p50": 1.0, "p99": 3.0, "rps": 200.0})
    faster = DriftPair("s", slower.again, slower.calibration)
    assert slower.change("p50") == faster.change("p50") == pytest.approx(0.4)
    drift = HostDrift((slower, faster, DriftPair("t", slower.again, slower.again)))
    assert drift.median_abs("p50") == pytest.approx(0.4)
    assert drift.to_dict()["median_abs_difference"]["p50"] == 0.4
    assert "3 calibration setup(s)" in drift.line() and "p50 40.0%" in drift.line()
    assert HostDrift(()).median_abs("p50") == 0.0
