"""A lab call graph's forwarding hop: its spread fitted to the graph's one-connection baseline run's percentiles
(calibrate/validation/hop_spread.py) instead of an assumed cv."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from meshsim.calibrate.measure.dataset import load_runs
from meshsim.calibrate.validation.hop_spread import best_cv, simulated_quantiles
from meshsim.calibrate.validation.replay import hop_halves, topology_for

HELDOUT = Path(__file__).resolve().parent.parent / "measurements" / "lab-heldout-2026-11-27"
BASELINE = {"family": "lognormal", "mean_ms": 0.11, "cv": 0.4}


def _steps(cv: float) -> tuple[list, list]:
    return hop_halves(0.23, "a test hop", 0.1, None, cv)


@pytest.mark.parametrize("truth", [0.5, 1.5])
def test_a_known_spread_is_recovered_from_the_percentiles(truth: float) -> None:
    """Quantiles of two hops beside one baseline drawn with a known cv (other random numbers than the fit's)."""
    measured = simulated_quantiles(BASELINE, 1, 2, 0.23, _steps, truth, seed=7)
    found, scores = best_cv(BASELINE, measured, 1, 2, 0.23, _steps)
    assert found == truth
    assert scores[truth] < min(s for cv, s in scores.items() if cv != truth)


def test_a_wider_hop_has_a_lower_median_and_a_longer_tail() -> None:
    narrow = simulated_quantiles(BASELINE, 1, 2, 0.23, _steps, 0.25, seed=1)
    wide = simulated_quantiles(BASELINE, 1, 2, 0.23, _steps, 3.0, seed=1)
    assert narrow[0] > wide[0] and narrow[-1] < wide[-1]  # a wider hop: lower median, longer tail


def test_a_real_chain_replay_carries_the_fitted_spread() -> None:
    """chain3's baseline at one connection (p99 1.52 ms where its p50 is 0.53): the fitted cv is wider than the
    0.5 once assumed, and the replayed topology's hop steps carry it."""
    model = yaml.safe_load((HELDOUT / "envoy-lab-graded.yaml").read_text())
    runs = load_runs([HELDOUT / "baselines", HELDOUT / "round1"]).runs
    run = next(r for r in runs if r.manifest.setup.topology == "chain3" and r.manifest.setup.path != "baseline")
    topology, _, notes = topology_for(model, run, runs, None)
    spread = next(n for n in notes if n.startswith("forwarding hop spread: cv "))
    cv = float(spread.split()[4])
    assert cv > 0.5
    sigmas = [step.time.sigma for step in topology.services["s1"].handler if hasattr(step, "time")]
    assert sigmas and all(math.sqrt(math.expm1(s * s)) == pytest.approx(cv) for s in sigmas)  # a lognormal's cv
