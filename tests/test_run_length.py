"""An answer that does not depend on the run's length (issue 28, item 5): ``--duration`` alone moves a steady-state
p99 by no more than its confidence interval, on a fortio, an open and a wrk2 load that each start with a transient.

"Within the intervals" is the engine-equivalence rule (tests/engine_pairs.py): the two estimates differ by at most
the sum of their 95 % half-widths."""

from __future__ import annotations

import numpy as np

from meshsim.distributions import Exponential
from meshsim.request import PredictOptions, build_request
from meshsim.sim.fast.fast_engine import run_fast_replication
from meshsim.sim.experiments.predict import horizon_for, predict
from meshsim.sim.experiments.stats import Estimate, t_interval
from simkit import NO_MESH, station_topology

FORTIO = dict(topology="single", mesh="istio", features=("mtls",), load="fortio", jitter=True, connections=64,
              rps=1000.0, saturation=False)
# wrk2 -t1 -c96: one thread connects its 96 connections 5 ms apart, so the load ramps up over its first 0.48 s
WRK2 = dict(topology="single", mesh="istio", features=("mtls",), load="wrk2", connections=96, threads=1,
            rps=5000.0, saturation=False)
WRK2_RAMP_S = 96 * 0.005
# M/M/1 at rho 0.8, started empty: p99 = ln(100) / (mu - lambda) = 23.0 ms in the steady state
MM1 = dict(topology=station_topology(Exponential(1e-3)), mesh=NO_MESH, load="open", rps=800.0, saturation=False)


def apart(a: Estimate, b: Estimate) -> float:
    """How far apart two estimates are, in units of the sum of their half-widths (<= 1: within the intervals)."""
    return abs(a.value - b.value) / (a.half_width + b.half_width)


def test_fortio_p99_does_not_depend_on_the_run_length() -> None:
    """The issue's case: 64 connections send their first calls together, a burst no later period repeats (their
    jitter spreads them). Before the cut: p99 6.42 ms over 5 s, 4.03 ms over 20 s. Measured from its start (a
    warm-up of 0 given) the 5 s run still reports the burst, as fortio itself would."""
    short, long = (predict(duration_s=d, **FORTIO) for d in (5.0, 20.0))
    assert apart(short.latency["p99"], long.latency["p99"]) <= 1.0, (short.latency["p99"], long.latency["p99"])
    assert short.transient.requests >= 64  # the burst is cut
    with_start = predict(duration_s=5.0, warmup_s=0.0, **FORTIO)
    assert with_start.latency["p99"].lo > long.latency["p99"].hi


def test_open_load_p99_does_not_depend_on_the_run_length() -> None:
    """An M/M/1 queue at rho 0.8 started empty. Its p99s from 2 s and 8 s runs agree (before: 19.4 +- 1.0 against
    22.9 +- 1.1 ms: a 10 % warm-up left part of the transient, and the mean of short runs' own p99s falls short of
    the long-run p99, stats.sectioned), and the long one is near the formula's 23.0 ms. (What the empty start does
    to a short run's mean: tests/test_queueing_theory.py, at rho 0.9.)"""
    short, long = (predict(duration_s=d, seed=1, **MM1) for d in (2.0, 8.0))
    assert apart(short.latency["p99"], long.latency["p99"]) <= 1.0, (short.latency["p99"], long.latency["p99"])
    theory = np.log(100.0) / (1000.0 - 800.0)
    assert abs(long.latency["p99"].value - theory) <= 2 * long.latency["p99"].half_width


def test_wrk2_p99_does_not_depend_on_the_run_length() -> None:
    """wrk2's staggered connects ramp its load up over the first 0.48 s: the cut ends there, and the 1 s and 4 s
    runs agree on the p99 and the mean."""
    short, long = (predict(duration_s=d, **WRK2) for d in (1.0, 4.0))
    for key in ("p99", "mean"):
        assert apart(short.latency[key], long.latency[key]) <= 1.0, (key, short.latency[key], long.latency[key])
    for run in (short, long):
        assert 0.5 * WRK2_RAMP_S <= run.transient.seconds <= 1.5 * WRK2_RAMP_S
    assert _start_bias(WRK2, 1.0, 4.0).hi < 0


def _start_bias(options: dict, short_s: float, long_s: float, count: int = 8) -> Estimate:
    """Mean latency of the short run minus the long run's, both measured from their start, paired replication by
    replication (the same seeds draw the same start): what the start-up transient does to a short run's answer."""
    fields = {k: v for k, v in options.items() if k != "saturation"}
    diffs = []
    for r in range(count):
        means = []
        for duration in (short_s, long_s):
            request = build_request(PredictOptions(duration_s=duration, warmup_s=0.0, **fields))
            horizon = horizon_for(request.workload.load, request.settings)
            means.append(float(run_fast_replication(request.scenario, request.workload, horizon, 1, r)
                               .latencies.mean()))
        diffs.append(means[0] - means[1])
    return t_interval(diffs)
