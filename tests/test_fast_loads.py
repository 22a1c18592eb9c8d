"""The compiled engine's rate profiles, time series and wrk2 load against the SimPy reference engine and theory.

Exact timelines: on deterministic service times both engines draw the same arrivals from the same named streams
(thinning included), so every latency, every window's counts, CPU and time-average in system are the same.
Statistics: on random service times the two engines' summaries and per-window means agree within their 95 %
confidence intervals over seeded replications; a profile's achieved rate follows the profile window by window
(Poisson counts); wrk2 on one connection is the D/M/1 queue timed from the intended send times.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import brentq

from meshsim.distributions import Deterministic, Exponential
from meshsim.request import PredictOptions, build_request
from meshsim.sim.engine.replication_result import Horizon, ReplicationResult
from meshsim.sim.engine.simpy_replication import run_replication
from meshsim.sim.fast.fast_engine import run_fast_replication
from meshsim.sim.experiments.stats import t_interval
from meshsim.workload import FortioLoad, OpenLoad, RateProfile, SequentialLoad, Workload, Wrk2Load
from engine_pairs import SUMMARY_KEYS, disagreement, replication_summary, replications
from simkit import plain, station_topology, tandem_topology

MS = 1e-3
REPS = 5
SEED = 11
STEPS = RateProfile("steps", ((0.0, 500.0), (1.0, 1500.0), (2.0, 0.0), (2.5, 800.0)))


@pytest.fixture(scope="module", autouse=True)
def compiled() -> None:
    """Compile (or load from numba's disk cache) once for the module, outside the timed tests."""
    run_fast_replication(plain(station_topology(Deterministic(MS))), Workload(OpenLoad(100.0)),
                         Horizon(0.05, 0.0, 0.01), 1, 0)


@pytest.mark.parametrize("load, horizon", [
    (OpenLoad(1500.0, 8, RateProfile.ramp(500.0, 1500.0, 4.0)), Horizon(4.0, 0.0, 1.0, 0.5)),
    (OpenLoad(1500.0, 8, STEPS), Horizon(3.0, 0.3, 1.0, 0.25)),
    (Wrk2Load(1000.0, 8, 2), Horizon(2.0, 0.2, 1.0, 0.5)),  # 1 ms timer ticks
    (Wrk2Load(1200.0, 6, 3, timer_s=0.0), Horizon(2.0, 0.2, 0.5)),  # exact waits, no series
    (FortioLoad(400.0, 4), Horizon(1.0, 0.0, 1.0, 0.1)),  # the series starts after fortio's warm-up calls
    (SequentialLoad(Deterministic(0.01), 3), Horizon(1.0, 0.1, 0.5, 0.3)),  # a last window shorter than the rest
], ids=["ramp", "steps", "wrk2-timer", "wrk2-exact", "fortio-series", "sequential-series"])
def test_deterministic_timelines_are_the_same_on_both_engines(load, horizon: Horizon) -> None:
    scenario = plain(tandem_topology([Deterministic(0.4e-3), Deterministic(0.3e-3), Deterministic(0.2e-3)]))
    fast = run_fast_replication(scenario, Workload(load), horizon, 3, 0)
    simpy = run_replication(scenario, Workload(load), horizon, 3, 0)
    assert fast.latencies.size == simpy.latencies.size > 200
    np.testing.assert_allclose(fast.latencies, simpy.latencies, rtol=0, atol=1e-9)
    assert (fast.started, fast.in_flight, fast.window) == (simpy.started, simpy.in_flight, simpy.window)
    assert fast.usage["q2/app"].cpu_seconds == pytest.approx(simpy.usage["q2/app"].cpu_seconds, rel=1e-9)
    if horizon.series_s is None:
        assert fast.series is None and simpy.series is None
        return
    a, b = fast.series, simpy.series
    np.testing.assert_allclose(a.edges, b.edges, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(a.requests, b.requests)
    np.testing.assert_array_equal(a.completed, b.completed)
    np.testing.assert_allclose(a.in_system, b.in_system, rtol=1e-9, atol=1e-12)
    for k, window in enumerate(b.latencies):
        np.testing.assert_allclose(np.sort(a.latencies[k]), np.sort(window), rtol=0, atol=1e-9)
    assert a.instance_cores.keys() == b.instance_cores.keys()
    for name in b.instance_cores:
        np.testing.assert_allclose(a.instance_cores[name], b.instance_cores[name], rtol=1e-9, atol=1e-12)
        np.testing.assert_array_equal(a.instance_jobs[name], b.instance_jobs[name])
    assert a.component_of == b.component_of and a.capacity == b.capacity


def _runs(run, request, reps: int = REPS) -> list[ReplicationResult]:
    return replications(run, request, SEED, reps)


def _compare(fast: list[ReplicationResult], simpy: list[ReplicationResult]) -> list[str]:
    """Summaries, then per window: mean latency of the requests sent in it, achieved rate, bottleneck cores."""
    fast_summaries, simpy_summaries = [replication_summary(r) for r in fast], [replication_summary(r) for r in simpy]
    problems = [p for key in SUMMARY_KEYS if (p := disagreement([s[key] for s in fast_summaries],
                                                                 [s[key] for s in simpy_summaries], key)) is not None]
    if fast[0].series is None:
        return problems
    hot = max(fast[0].series.instance_cores, key=lambda n: fast[0].series.instance_cores[n].sum())
    for k in range(len(simpy[0].series.requests)):
        if not any(r.series.requests[k] for r in fast + simpy):  # a 0 rps step: no latency on either engine
            continue
        for what, value in (("mean latency", lambda s: float(np.mean(s.latencies[k]))),
                            ("achieved rps", lambda s: s.completed[k] / (s.edges[k + 1] - s.edges[k])),
                            (f"{hot} cores", lambda s: float(s.instance_cores[hot][k]))):
            problem = disagreement([value(r.series) for r in fast], [value(r.series) for r in simpy],
                                   f"window {k} {what}")
            problems += [problem] if problem else []
    return problems


@pytest.mark.parametrize("options", [
    dict(topology="chain3", mesh="istio", profile=RateProfile.ramp(200.0, 1200.0, 4.0), connections=64),
    dict(topology="lb3", mesh="linkerd", profile=STEPS, connections=64),
    dict(topology="chain3", mesh="istio", load="wrk2", rps=800.0, connections=16, threads=4, duration_s=3.0),
    dict(topology="single", mesh="istio", load="fortio", rps=500.0, connections=8, duration_s=3.0),
], ids=["ramp", "steps", "wrk2-series", "fortio-series"])
def test_engines_agree_within_their_confidence_intervals_per_window(options: dict) -> None:
    request = build_request(PredictOptions(timeseries_s=0.5, **options))
    fast, simpy = _runs(run_fast_replication, request), _runs(run_replication, request)
    assert fast[0].series is not None and len(fast[0].series.requests) >= 6
    problems = _compare(fast, simpy)
    assert not problems, "; ".join(problems)


def test_a_profile_achieved_rate_follows_the_profile_window_by_window() -> None:
    """Thinned Poisson arrivals: the requests sent in a window over R replications are Poisson with mean R x the
    profile's exact mean rate x the window; with cores to spare every one is answered in its window (+- edges)."""
    profile = RateProfile("steps", ((0.0, 300.0), (2.0, 1200.0), (4.0, 0.0), (5.0, 600.0)))
    request = build_request(PredictOptions(topology=station_topology(Exponential(0.2 * MS), servers=8), mesh="none",
                                           profile=profile, timeseries_s=0.5))
    runs = _runs(run_fast_replication, request, reps=8)
    series = [r.series for r in runs]
    edges = series[0].edges
    assert edges[-1] == 6.0 and len(edges) == 13
    for k, (a, b) in enumerate(zip(edges, edges[1:])):
        expected = 8 * profile.mean_rps(a, b) * (b - a)
        sent = sum(int(s.requests[k]) for s in series)
        assert abs(sent - expected) <= 4 * math.sqrt(expected) + 1e-9, (k, sent, expected)
        if expected == 0:
            assert sent == 0  # the 0 rps step sends nothing
    rates = [[s.requests[k] / (b - a) for s in series] for k, (a, b) in enumerate(zip(edges, edges[1:]))]
    assert np.mean(rates[0]) < np.mean(rates[4]) and np.mean(rates[8]) == 0.0 < np.mean(rates[10])


def dm1_sigma(rho: float) -> float:
    """D/M/1: the root in (0, 1) of sigma = exp(-(1 - sigma) / rho)."""
    return brentq(lambda s: s - math.exp(-(1 - s) / rho), 1e-12, 1 - 1e-12)


def test_wrk2_on_one_connection_is_a_dm1_queue_timed_from_the_intended_send() -> None:
    """One wrk2 connection sends at its intended times, or at once when behind: the latency from the intended send
    time is the D/M/1 sojourn time (mean s / (1 - sigma)), not the service time's s (tests/test_wrk2_load.py checks
    the SimPy engine the same way)."""
    service, rho = 1e-3, 0.7
    scenario = plain(station_topology(Exponential(service)))
    workload = Workload(Wrk2Load(rho / service, connections=1, threads=1, timer_s=0.0))
    means = [float(np.mean(run_fast_replication(scenario, workload, Horizon(15.0, 0.0, 1.0), 7, rep).latencies))
             for rep in range(8)]
    estimate = t_interval(means)
    expected = service / (1 - dm1_sigma(rho))
    assert abs(estimate.value - expected) <= max(estimate.half_width, 0.01 * expected) * 1.5, (estimate, expected)
    assert estimate.value > 1.5 * service  # coordinated omission corrected: the queueing behind late answers counts


def test_saturated_wrk2_latency_grows_with_the_run_on_the_fast_engine() -> None:
    """1500 rps offered to a 1000 rps server through one connection: the k-th answer is k (s - a) late."""
    service, rho = 1e-3, 1.5
    scenario = plain(station_topology(Exponential(service)))
    workload = Workload(Wrk2Load(rho / service, connections=1, threads=1))
    means = {}
    for duration in (4.0, 16.0):
        r = run_fast_replication(scenario, workload, Horizon(duration, 0.0, drain=1.0), 3, 0)
        means[duration] = float(np.mean(r.latencies))
        assert r.achieved_rps == pytest.approx(1 / service, rel=0.04)
        assert means[duration] == pytest.approx(duration * (1 - 1 / rho) / 2, rel=0.1)
    assert means[16.0] / means[4.0] == pytest.approx(4.0, rel=0.1)


def test_a_run_without_drain_closes_its_last_window_with_the_totals() -> None:
    """No drain: the run ends at the last window edge, before its snapshot's turn; nothing is booked after the
    window closes, so the last edge takes the run's totals (the windows' CPU and visits add up to the usage)."""
    horizon = Horizon(1.0, 0.2, 0.0, 0.25)
    result = run_fast_replication(plain(station_topology(Exponential(MS))), Workload(OpenLoad(300.0)), horizon, 1, 0)
    series, usage = result.series, result.usage["q/app"]
    spans = np.diff(series.edges)
    assert list(series.edges) == pytest.approx([0.2, 0.45, 0.7, 0.95, 1.0])
    assert float(np.sum(series.instance_cores["q/app#0"] * spans)) == pytest.approx(usage.cpu_seconds, rel=1e-9)
    assert float(np.sum(series.instance_jobs["q/app#0"] * spans)) == pytest.approx(usage.jobs, abs=1e-6)
    assert usage.jobs > 200 and int(series.requests.sum()) == result.latencies.size
