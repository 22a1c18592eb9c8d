"""The cluster's wake-up, recovered by simulation from baseline runs at two idle gaps.

Baseline runs of a known cluster (its apps wake cold after idling: delay 0.3 ms, Weibull tau 8 ms, shape 4) are
simulated at one connection (idle gaps of about 1 ms: almost never cold) and at 16 connections firing together at
the same rate (16 ms: nearly always cold); their latencies become fortio histograms of run folders.
``fit_baseline_wake`` must find the delay and a hazard that makes the short gaps warm and the long ones cold, out
of a grid that holds the truth among wrong neighbours (other delays, a constant hazard, other taus); the replay
uses other seeds than the runs. Runs whose gaps are alike identify nothing: the fit declines.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from meshsim.calibrate.fit.sim_check import calibration_topology
from meshsim.calibrate.load.baseline_wake import wake_objective, fit_baseline_wake
from meshsim.calibrate.measure.dataset import load_runs
from meshsim.calibrate.measure.fortio_histogram import result_json
from meshsim.run_folder import LoadSettings, RunManifest, Setup, write_run
from meshsim.wakeup import WakeUp

BASELINE = {"family": "lognormal", "median_ms": 0.25, "sigma": 0.15, "source": "test truth"}
TRUTH = {"delay_ms": 0.3, "tau_ms": 8.0, "shape": 4.0}
GRID = ((0.1, 0.3, 0.5), (2.0, 8.0, 50.0), (1.0, 4.0))


def _model(wakeup: dict | None) -> dict:
    return {"schema": "meshsim/mesh/v1", "name": "cluster-truth", "version": "test",
            "calibration": {"baseline": BASELINE}, **({"cluster": {"wakeup": wakeup}} if wakeup else {})}


def _run(tmp: Path, connections: int) -> Path:
    from meshsim.sim.experiments.predict import predict

    model = _model(TRUTH)
    pred = predict(calibration_topology(model, tmp), "none", rps=1000, load="fortio", connections=connections,
                   scope="none", warmup_s=0.0, duration_s=8.0, replications=1, processes=1, seed=21,
                   saturation=False, cluster="topology").to_dict()
    cdf = pred["latency_cdf_ms"]
    samples = np.interp(np.random.default_rng(connections).uniform(0, 1, 6000), cdf["q"], cdf["ms"]) * 1e-3
    manifest = RunManifest(
        id=f"base-c{connections}", source="lab", provenance="simulated by meshsim (a known cluster), test",
        when="2026-11-26T00:00:00Z", where={"simulator": "meshsim"}, setup=Setup(mesh="none", path="baseline"),
        load=LoadSettings(rps=1000, connections=connections, duration_s=8.0, resolution_s=1e-5))
    result = result_json(samples, 1e-5, requested_rps=1000, connections=connections)
    return write_run(tmp / "runs" / manifest.id, manifest, result)


def test_the_clusters_wake_up_is_recovered_from_two_idle_gaps(tmp_path: Path) -> None:
    runs = load_runs([_run(tmp_path, 1), _run(tmp_path, 16)]).runs
    fit = fit_baseline_wake(_model(None), runs, seed=5, grid=GRID)
    assert fit is not None and fit.delay_ms == pytest.approx(TRUTH["delay_ms"])
    found, truth = WakeUp(fit.delay_ms, fit.tau_ms, shape=fit.shape), WakeUp(0.3, 8.0, shape=4.0)
    for gap_ms in (0.7, 16.0):  # the runs' idle gaps: the fitted hazard agrees where the runs can see it
        assert found.probability(gap_ms) == pytest.approx(truth.probability(gap_ms), abs=0.1)
    assert fit.objective < 0.2 * _objective_without(fit)
    block = fit.block()
    assert block["source"].startswith("fitted by meshsim fit") and "base-c16" in block["source"]


def _objective_without(fit) -> float:
    return wake_objective(fit.measured_ms, fit.without_ms)


def test_runs_at_one_idle_gap_identify_no_wake_up(tmp_path: Path) -> None:
    runs = load_runs([_run(tmp_path, 1)]).runs
    assert fit_baseline_wake(_model(None), runs, grid=GRID) is None
