"""The spread of a lab call graph's forwarding hop, from the graph's one-connection baseline run.

A baseline chainN or Bookinfo run (no proxies) holds the model's ``calibration.baseline`` (client, network, leaf
app) once per leaf and one forwarding hop per forwarding app. Its mean gives the hop's mean (``replay``); its
percentiles give the hop's spread. The hop's steps (lognormal halves of its CPU and of its wait) are sampled with each
coefficient of variation of CV_GRID beside the leaves' baselines, shifted to the hop's mean, and the cv whose
p50/p75/p90/p99 match the run best (least squares on relative errors) is kept. At one connection nothing queues, so
the sum is what a replay of the run gives. The lab's Go forwarding apps are heavy-tailed: cv 1 in chain3, chain5
and Bookinfo alike (measurements/lab-heldout-2026-11-27), where 0.5 had been assumed and their baselines' p99 came
out 29-36 % low.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from meshsim.calibrate.fit.observations import from_result
from meshsim.calibrate.load.baseline_wake import LEVELS
from meshsim.calibrate.measure.dataset import Run
from meshsim.distribution_spec import parse_distribution

CV_GRID = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0)
SAMPLES = 100_000

Steps = Callable[[float], tuple[list[dict[str, Any]], list[dict[str, Any]]]]  # cv -> a hop's steps before/after


def _sample_steps(steps: Sequence[Mapping[str, Any]], rng: np.random.Generator) -> np.ndarray:
    total = np.zeros(SAMPLES)
    for step in steps:
        (kind, spec), = step.items()
        total += parse_distribution(spec, where=f"hop {kind}").sample(rng, SAMPLES)
    return total


def simulated_quantiles(baseline: Mapping[str, Any], leaves: int, forwarders: int, hop_mean_ms: float, steps: Steps,
                        cv: float, seed: int) -> np.ndarray:
    """LEVELS' quantiles (s) of ``leaves`` baselines beside ``forwarders`` hops whose steps have spread ``cv``."""
    rng = np.random.default_rng(seed)
    leaf = parse_distribution(baseline, where="calibration.baseline")
    total = sum((leaf.sample(rng, SAMPLES) for _ in range(leaves)), np.zeros(SAMPLES))
    before, after = steps(cv)
    for _ in range(forwarders):
        hop = _sample_steps([*before, *after], rng)
        total += hop + (hop_mean_ms * 1e-3 - hop.mean())  # the hop's mean is the run's, whatever the steps'
    return np.quantile(total, LEVELS)


def best_cv(baseline: Mapping[str, Any], measured: np.ndarray, leaves: int, forwarders: int, hop_mean_ms: float,
            steps: Steps, seed: int = 1) -> tuple[float, dict[float, float]]:
    """The cv of CV_GRID whose quantiles match ``measured`` (LEVELS', s) best, and every cv's objective (common
    random numbers: the cvs differ only in the spread)."""
    scores = {cv: float(np.sum(((simulated_quantiles(baseline, leaves, forwarders, hop_mean_ms, steps, cv, seed)
                                 - measured) / measured) ** 2)) for cv in CV_GRID}
    return min(CV_GRID, key=lambda c: scores[c]), scores


def fit_hop_cv(baseline: Mapping[str, Any], run: Run, leaves: int, forwarders: int, hop_mean_ms: float,
               steps: Steps, seed: int = 1) -> tuple[float, str]:
    """The hop's cv (each of its lognormal steps') from ``run``, and the source line saying how it was found."""
    observed = from_result(run.result)
    measured = np.array([observed.quantile(p) for p in LEVELS])
    best, scores = best_cv(baseline, measured, leaves, forwarders, hop_mean_ms, steps, seed)
    source = (f"cv {best:g} of each step fitted to {run.id}'s p50/p75/p90/p99 "
              f"({'/'.join(f'{v * 1e3:.3f}' for v in measured)} ms) with {leaves} x calibration.baseline beside "
              f"{forwarders} hops sampled, cvs {'/'.join(f'{c:g}' for c in CV_GRID)} (objective {scores[best]:.4f}; "
              f"cv 0.5: {scores[0.5]:.4f})")
    return best, source
