"""The fits the three-mesh paper's protocol allows (seed 001, Shulyak & Savenko 2021): its 50 rps column only.

The paper prints p50/p90/p99/p100 of five repetitions per stage and no histogram, so each fit matches quantiles of
a Monte Carlo sum (common random numbers, so least squares sees a smooth objective) to the medians of the five
repetitions:

- the baseline (no mesh): 6 one-way network hops of one lognormal (client -> web -> emoji -> web -> voting -> web ->
  client), the apps' computes and wrk2's 1 ms timer grain, matched on p50/p90/p99/p100. p100 is the maximum of the
  requests a stage printed: wrk2's 100 s less its calibration at 50 rps (kinvolk_wrk2.BENCHMARK: 4 800, five bursts
  of its 960 connections), and the median of the maximum of n draws is the quantile 0.5^(1/n);
- each mesh: its proxy passes (10 for sidecars, 4 for Traefik Mesh's node proxies) as a mixture of a lognormal body,
  a slower path and a rare narrow stall (the paper's Istio p99 is its maximum: a cluster of slow requests near
  230 ms, the mark of a timer, not of a long lognormal tail), matched on p50/p90/p99/p100 with the same n;
- each mesh's proxy CPU (idle, per pass, the held fraction over the mean pass fitted here): mesh_comparison_cpu.

``python -m meshsim.calibrate.studies.mesh_comparison_fit`` prints the fitted numbers; they are shipped in
models/topologies/emojivoto-study.yaml and models/meshes/{istio-1.11,linkerd-2.11,traefik-mesh-1.4}.yaml.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import optimize, special

from meshsim.calibrate.measure.tables import load_table
from meshsim.calibrate.studies.kinvolk_wrk2 import BENCHMARK
from meshsim.calibrate.studies.mesh_comparison_cpu import fit_proxy_cpu

FIT_RPS = 50.0  # the paper's first stage: the only column the protocol lets a fit see
PERCENTILES = ("p50", "p90", "p99", "p100")
PROBS = {"p50": 0.5, "p90": 0.9, "p99": 0.99}
HOPS = 6  # one-way network hops of one request without a mesh
PASSES = {"istio": 10, "linkerd": 10, "traefik-mesh": 4}  # see mesh_comparison_study.PASSES_NOTE
APP_COMPUTE_MS = 0.34  # mean of emojivoto-study.yaml's computes (web 0.10 + 0.08, emoji 0.08, voting 0.08)
TIMER_MS = 1.0  # wrk2's event-loop grain: a send leaves up to 1 ms after its intended time
STALL_SIGMA = 0.05  # a stall is a timer: narrow (the paper's Istio p99 and p100 differ by < 2 %)
SLOW_SIGMA = 0.3  # the slower path: what lifts p90 to 2.4 x p50 in every mesh
DRAWS = 200_000
# Nelder-Mead's first simplex: steps in each parameter (log body median, log body sigma, logit slow weight, log slow
# median, logit stall weight, log stall median) large enough to explore (scipy's default moves a zero start by 0.00025)
SIMPLEX_STEPS = (0.3, 0.3, 1.0, 0.3, 1.0, 0.2)
RESTARTS = 3


def published_column(mesh: str, rps: float) -> dict[str, float]:
    """Median over the five repetitions of each percentile (ms) of one mesh at one stage."""
    rows = load_table("paper001_latency").where(mesh=mesh, rate_rps=float(rps))
    return {p: statistics.median(r["latency_ms"] for r in rows if r["percentile"] == p) for p in PERCENTILES}


def max_quantile(n: int) -> float:
    """The level whose quantile is the median of the maximum of ``n`` independent draws."""
    return 0.5 ** (1.0 / n)


@dataclass(frozen=True)
class BaselineFit:
    hop_median_ms: float
    hop_sigma: float
    requests: int  # requests a stage printed at 50 rps (wrk2's run less its calibration)
    fitted: dict[str, float]  # the fit's own p50/p90/p99/p100 (ms)


def _baseline_draws(x: np.ndarray, normals: np.ndarray, extra: np.ndarray) -> np.ndarray:
    median, sigma = math.exp(x[0]), math.exp(x[1])
    return (median * np.exp(sigma * normals)).sum(axis=1) + extra


def fit_baseline(seed: int = 1) -> BaselineFit:
    rng = np.random.default_rng(seed)
    normals = rng.standard_normal((DRAWS, HOPS))
    extra = APP_COMPUTE_MS + TIMER_MS * rng.random(DRAWS)
    col = published_column("baseline", FIT_RPS)
    requests = BENCHMARK.requests(FIT_RPS)
    target = np.log([col[p] for p in PERCENTILES])
    levels = [*PROBS.values(), max_quantile(requests)]
    res = optimize.least_squares(lambda x: np.log(np.quantile(_baseline_draws(x, normals, extra), levels)) - target,
                                 [0.0, math.log(0.5)])
    fitted = np.quantile(_baseline_draws(res.x, normals, extra), levels)
    return BaselineFit(math.exp(res.x[0]), math.exp(res.x[1]), requests, dict(zip(PERCENTILES, map(float, fitted))))


@dataclass(frozen=True)
class PassFit:
    """A pass: a lognormal body, sometimes a slower path (sigma 0.3), rarely a narrow stall (sigma 0.05)."""

    mesh: str
    passes: int
    body_median_ms: float
    body_sigma: float
    slow_weight: float
    slow_median_ms: float
    stall_weight: float
    stall_median_ms: float
    fitted: dict[str, float]

    def components(self) -> list[tuple[float, float, float]]:
        """(weight, median ms, sigma) of each lognormal component."""
        body = 1.0 - self.slow_weight - self.stall_weight
        return [(body, self.body_median_ms, self.body_sigma), (self.slow_weight, self.slow_median_ms, SLOW_SIGMA),
                (self.stall_weight, self.stall_median_ms, STALL_SIGMA)]

    @property
    def mean_ms(self) -> float:
        return sum(w * m * math.exp(s ** 2 / 2) for w, m, s in self.components())

    def spec(self) -> dict[str, Any]:
        """The mixture as a model file writes it: weights to 6 decimals, the body's the rest (so they sum to 1)."""
        parts = self.components()
        weights = [round(w, 6) for w, _, _ in parts[1:]]
        weights.insert(0, round(1.0 - sum(weights), 6))
        return {"family": "mixture", "components": [
            {"weight": w, "family": "lognormal", "median_ms": round(m, 4), "sigma": round(s, 4)}
            for w, (_, m, s) in zip(weights, parts)]}


def _unpack(x: np.ndarray) -> tuple[float, ...]:
    return (math.exp(x[0]), math.exp(x[1]), float(special.expit(x[2])), math.exp(x[3]), float(special.expit(x[4])),
            math.exp(x[5]))


def _mesh_draws(x: np.ndarray, normals: np.ndarray, uniforms: np.ndarray, base: np.ndarray) -> np.ndarray:
    body, sigma, slow_w, slow, stall_w, stall = _unpack(x)
    passes = np.where(uniforms < stall_w, stall * np.exp(STALL_SIGMA * normals),
                      np.where(uniforms < stall_w + slow_w, slow * np.exp(SLOW_SIGMA * normals),
                               body * np.exp(sigma * normals)))
    return passes.sum(axis=1) + base


def fit_passes(mesh: str, baseline: BaselineFit, seed: int = 2, draws: int = 100_000) -> PassFit:
    """The pass mixture whose sum over the mesh's passes, plus the fitted baseline, matches its 50 rps column
    (Nelder-Mead on the squared log-quantile residuals: Monte Carlo quantiles are steps, gradients are not useful)."""
    rng = np.random.default_rng(seed)
    n = PASSES[mesh]
    normals = rng.standard_normal((draws, n))
    uniforms = rng.random((draws, n))
    base = _baseline_draws(np.log([baseline.hop_median_ms, baseline.hop_sigma]), rng.standard_normal((draws, HOPS)),
                           APP_COMPUTE_MS + TIMER_MS * rng.random(draws))
    col = published_column(mesh, FIT_RPS)
    levels = [*PROBS.values(), max_quantile(baseline.requests)]
    target = np.log([col[p] for p in PERCENTILES])

    def cost(x: np.ndarray) -> float:
        r = np.log(np.quantile(_mesh_draws(x, normals, uniforms, base), levels)) - target
        return float(r @ r)

    x = np.array([math.log(col["p50"] / (2 * n)), math.log(0.8), special.logit(0.01), math.log(25.0),
                  special.logit(0.012 / n), math.log(col["p100"] - col["p50"])])
    for _restart in range(RESTARTS):  # a restart from the best point re-opens a simplex that collapsed early
        simplex = np.vstack([x, x + np.diag(SIMPLEX_STEPS)])
        x = optimize.minimize(cost, x, method="Nelder-Mead", options={
            "maxiter": 3000, "xatol": 1e-4, "fatol": 1e-8, "initial_simplex": simplex}).x
    fitted = np.quantile(_mesh_draws(x, normals, uniforms, base), levels)
    return PassFit(mesh, n, *_unpack(x), fitted=dict(zip(PERCENTILES, map(float, fitted))))


def main() -> None:  # pragma: no cover - prints the numbers shipped in the model files
    baseline = fit_baseline()
    print("baseline", baseline, published_column("baseline", FIT_RPS))
    for mesh in PASSES:
        fit = fit_passes(mesh, baseline)
        print(mesh, fit, "mean ms", round(fit.mean_ms, 4), published_column(mesh, FIT_RPS), fit.spec())
        cpu = fit_proxy_cpu(mesh, fit.mean_ms)
        print(f"  cpu_fraction: {cpu.held_fraction:.4g}  idle_millicores: {cpu.idle_cores * 1e3:.4g}\n  {cpu.source()}")


if __name__ == "__main__":  # pragma: no cover
    main()
