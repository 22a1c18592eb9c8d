"""Benchmark (not collected by pytest): how often the reported p99 interval covers the p99 it estimates.

    .venv/bin/python tests/bench_coverage.py [--topology chain3] [--rps 3500] [--replications 2000]

Runs a population of the default prediction's replications (Poisson arrivals, 10 % warm-up) on the compiled
engine in two processes, takes the population's controlled estimate of the mean per-replication p99 as the truth,
and draws experiments from it without replacement:

- fixed counts of replications: the plain Student-t interval and the control-variate interval
  (sim/experiments/stats.py controlled_interval, the requests started in the window as control);
- the prediction's sequential rule (sim/experiments/predict.py: batches of 2, the p99's relative half-width at most 5 %, up
  to 160 replications) from 4 replications on, as predict runs it, and with later first checks for comparison.

Printed: coverage (the share of experiments whose 95 % interval holds the truth), on which side the misses fall,
and the mean number of replications the rule used.
"""

from __future__ import annotations

from multiprocessing import Pool

import numpy as np
from bench_variance import default_prediction_case  # this folder is the script's: sys.path[0]

from meshsim.request import PredictOptions, build_request
from meshsim.sim.fast.fast_engine import run_fast_replication
from meshsim.sim.experiments.latency_estimates import expected_arrivals
from meshsim.sim.experiments.predict import horizon_for
from meshsim.sim.experiments.stats import MIN_CONTROLLED, Estimate, controlled_interval, latency_summary, t_interval

SEED = 3
EXPERIMENTS = 3000


def _replication(args: tuple[str, float, int]) -> tuple[float, int]:
    topology, rps, replication = args
    request = build_request(PredictOptions(topology=topology, mesh="istio", rps=rps))
    horizon = horizon_for(request.workload.load, request.settings)
    result = run_fast_replication(request.scenario, request.workload, horizon, SEED, replication)
    return latency_summary(result.latencies)["p99"], result.started


def sequential(p99: np.ndarray, started: np.ndarray, expected: float, first_check: int) -> tuple[int, Estimate]:
    """predict's stopping rule on one sequence of replications (the control variate from MIN_CONTROLLED on)."""
    for n in range(4, p99.size + 1, 2):
        estimate = controlled_interval(p99[:n], started[:n], expected)  # the plain interval below MIN_CONTROLLED
        if n >= first_check and estimate.half_width <= 0.05 * estimate.value:
            return n, estimate
    return p99.size, estimate


def main() -> None:
    args, request = default_prediction_case(__doc__, 2000)
    expected = expected_arrivals(request.workload.load, horizon_for(request.workload.load, request.settings))
    with Pool(2) as pool:
        rows = pool.map(_replication, [(args.topology, args.rps, r) for r in range(args.replications)],
                        chunksize=50)
    p99, started = np.array([r[0] for r in rows]), np.array([r[1] for r in rows], dtype=float)
    truth = controlled_interval(p99, started, expected).value
    skew = float(((p99 - p99.mean()) ** 3).mean() / p99.std() ** 3)
    print(f"{args.topology}/istio at {args.rps:g} rps: {args.replications} replications, p99 {truth * 1e3:.3f} ms, "
          f"coefficient of variation {p99.std(ddof=1) / p99.mean() * 100:.1f} %, skewness {skew:.2f}; "
          f"{EXPERIMENTS} experiments each")
    rng = np.random.default_rng(0)
    for n in (10, 20, 40, 80):
        covered = {"plain": [0, 0, 0], "control variate": [0, 0, 0]}  # covered, truth below, truth above
        for _ in range(EXPERIMENTS):
            pick = rng.choice(p99.size, n, replace=False)
            for name, estimate in (("plain", t_interval(p99[pick])),
                                   ("control variate", controlled_interval(p99[pick], started[pick], expected))):
                side = 0 if estimate.lo <= truth <= estimate.hi else (1 if truth < estimate.lo else 2)
                covered[name][side] += 1
        print(f"  {n:3d} replications: " + "; ".join(
            f"{name} covers {c[0] / EXPERIMENTS:.3f} (misses below {c[1] / EXPERIMENTS:.3f}, above "
            f"{c[2] / EXPERIMENTS:.3f})" for name, c in covered.items()))
    for first_check in (4, MIN_CONTROLLED, 20, 30):
        stops, hits = [], 0
        for _ in range(EXPERIMENTS):
            pick = rng.choice(p99.size, min(160, p99.size), replace=False)
            n, estimate = sequential(p99[pick], started[pick], expected, first_check)
            stops.append(n)
            hits += estimate.lo <= truth <= estimate.hi
        label = "as predict runs it" if first_check == 4 else "for comparison"
        print(f"  sequential rule, first check at {first_check:2d} ({label}): covers {hits / EXPERIMENTS:.3f}, "
              f"{np.mean(stops):.1f} replications on average")


if __name__ == "__main__":
    main()
