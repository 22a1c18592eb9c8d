"""Benchmark (not collected by pytest): how much of the p99's spread between replications a control removes.

    .venv/bin/python tests/bench_variance.py [--topology chain3] [--rps 3500] [--replications 80]

The default prediction's replications (Poisson arrivals, 10 % warm-up) on the compiled engine, each cut into 1 ms
windows of the requests it sent. Printed: the p99's coefficient of variation between replications; its variance
with the control variate predict uses (the requests started in the window, sim/experiments/stats.py controlled_interval)
against without; and how much more the arrivals' burstiness could explain: the sums of squared and of cubed
deviations of the windows' counts from their mean, normalised so that a Poisson stream's expectation is 1 (so
they could be controls), for windows of 1 to 50 ms, as the in-sample and the adjusted R-squared of a regression
of the p99 on the arrival count and them.
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np

from meshsim.request import PredictOptions, PredictRequest, build_request
from meshsim.sim.fast.fast_engine import run_fast_replication
from meshsim.sim.experiments.predict import horizon_for
from meshsim.sim.experiments.stats import controlled_interval, latency_summary, t_interval

WINDOWS_MS = (1, 2, 5, 10, 20, 50)


def burstiness(counts: np.ndarray, per_window: float) -> tuple[float, float]:
    """Normalised second and third central sums of the windows' counts (each 1 in expectation for Poisson)."""
    deviation = counts - per_window
    return float((deviation ** 2).mean() / per_window), float((deviation ** 3).mean() / per_window)


def r_squared(y: np.ndarray, controls: list[np.ndarray]) -> tuple[float, float]:
    """In-sample and adjusted R-squared of y regressed on the controls."""
    x = np.column_stack([np.ones(y.size), *controls])
    fitted = x @ np.linalg.lstsq(x, y, rcond=None)[0]
    r2 = 1.0 - float(((y - fitted) ** 2).sum() / ((y - y.mean()) ** 2).sum())
    return r2, 1.0 - (1.0 - r2) * (y.size - 1) / (y.size - x.shape[1])


def default_prediction_case(doc: str, replications: int) -> tuple[argparse.Namespace, PredictRequest]:
    """The command line of the variance benchmarks (--topology, --rps, --replications) and the default
    prediction's request on Istio for it."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--topology", default="chain3")
    parser.add_argument("--rps", type=float, default=3500.0)
    parser.add_argument("--replications", type=int, default=replications)
    args = parser.parse_args()
    return args, build_request(PredictOptions(topology=args.topology, mesh="istio", rps=args.rps))


def main() -> None:
    args, request = default_prediction_case(__doc__, 80)
    horizon = dataclasses.replace(horizon_for(request.workload.load, request.settings), series_s=0.001)
    expected = args.rps * (horizon.duration - horizon.warmup)
    p99, started, counts = [], [], []
    for replication in range(args.replications):
        result = run_fast_replication(request.scenario, request.workload, horizon, request.settings.seed,
                                      replication)
        p99.append(latency_summary(result.latencies)["p99"])
        started.append(result.started)
        counts.append(result.series.requests[:int((horizon.duration - horizon.warmup) / 0.001)].astype(float))
    y, c = np.array(p99), np.array(started, dtype=float)
    plain, controlled = t_interval(y), controlled_interval(y, c, expected)
    print(f"{args.topology}/istio at {args.rps:g} rps, {args.replications} replications of "
          f"{expected / (1 - horizon.warmup / horizon.duration):.0f} requests (warm-up {horizon.warmup:.3f} s)")
    print(f"  p99 {plain.value * 1e3:.3f} ms, coefficient of variation {y.std(ddof=1) / y.mean() * 100:.1f} %")
    print(f"  control variate (requests started, expected {expected:.0f}): correlation "
          f"{np.corrcoef(y, c)[0, 1]:+.2f}, interval half-width {controlled.half_width / plain.half_width:.2f} "
          f"of the plain one (variance {(controlled.half_width / plain.half_width) ** 2:.2f})")
    for ms in WINDOWS_MS:
        sums = np.array([burstiness(row[:row.size // ms * ms].reshape(-1, ms).sum(axis=1), args.rps * ms / 1e3)
                         for row in counts])
        square, cube = sums[:, 0], sums[:, 1]
        r2, adjusted = r_squared(y, [c, square, cube])
        print(f"  {ms:3d} ms windows: correlation {np.corrcoef(y, square)[0, 1]:+.2f} (squares, mean "
              f"{square.mean():.3f}) {np.corrcoef(y, cube)[0, 1]:+.2f} (cubes, mean {cube.mean():.3f}); with the "
              f"count R-squared {r2:.2f} in-sample, {adjusted:.2f} adjusted")


if __name__ == "__main__":
    main()
