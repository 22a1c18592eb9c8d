"""The engine against queueing theory, with tolerances from seeded independent replications (warm-up cut).

Each check runs R replications, forms the Student-t 99 % interval of the replication means, and requires the
theoretical value inside it (widened by 2 % for the finite-run bias that remains after the warm-up cut).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import simpy

from meshsim.distributions import Deterministic, Exponential, LogNormal
from meshsim.sim.engine.replication_result import Horizon
from meshsim.sim.engine.simpy_replication import run_replication
from meshsim.sim.fast.fast_engine import run_fast_replication
from meshsim.sim.engine.loadgen import LoadTrace, open_arrivals
from meshsim.sim.experiments.stats import MIN_CONTROLLED, controlled_interval, t_interval
from meshsim.sim.engine.streams import Streams
from meshsim.sim.experiments.transient_cut import choose_cut
from meshsim.sim.engine.system import System
from meshsim.workload import OpenLoad, Workload
from simkit import plain, station_topology, tandem_topology

REPS = 8
SEED = 20261122
ENGINES = {"simpy": run_replication, "fast": run_fast_replication}


@pytest.fixture(params=sorted(ENGINES))
def engine(request):
    """Every theory check runs on both engines: the SimPy reference and the compiled one."""
    return ENGINES[request.param]


def _means(scenario, rate: float, requests: int = 30000, stat=lambda r: float(np.mean(r.latencies)),
           run=run_replication):
    duration = requests / rate
    return [stat(run(scenario, Workload(OpenLoad(rate)), Horizon(duration, 0.1 * duration), SEED, i))
            for i in range(REPS)]


def assert_theory(values: list[float], theory: float, slack: float = 0.02) -> None:
    est = t_interval(values, confidence=0.99)
    lo, hi = est.lo - slack * theory, est.hi + slack * theory
    assert lo <= theory <= hi, f"theory {theory:.6g} outside 99% CI [{est.lo:.6g}, {est.hi:.6g}] (mean {est.value:.6g})"
    # and the interval is tight enough to mean something
    assert est.half_width < 0.1 * theory


def test_mm1_mean_sojourn(engine):
    mu, lam = 1000.0, 800.0
    values = _means(plain(station_topology(Exponential(1 / mu))), lam, run=engine)
    assert_theory(values, 1 / (mu - lam))


def erlang_c_wait(servers: int, lam: float, mu: float) -> float:
    a = lam / mu
    rho = a / servers
    top = a**servers / math.factorial(servers) / (1 - rho)
    p_wait = top / (sum(a**k / math.factorial(k) for k in range(servers)) + top)
    return p_wait / (servers * mu - lam)


def test_mmc_erlang_c(engine):
    mu, lam, c = 1000.0, 2400.0, 3
    values = _means(plain(station_topology(Exponential(1 / mu), servers=c)), lam, run=engine)
    assert_theory(values, erlang_c_wait(c, lam, mu) + 1 / mu)


@pytest.mark.parametrize("service", [Deterministic(1e-3), LogNormal(math.log(0.8e-3), 0.8)],
                         ids=["M/D/1", "M/G/1-lognormal"])
def test_mg1_pollaczek_khinchine(service, engine):
    lam = 0.75 / service.mean
    second_moment = service.variance + service.mean**2
    rho = lam * service.mean
    theory = service.mean + lam * second_moment / (2 * (1 - rho))
    values = _means(plain(station_topology(service)), lam, requests=40000, run=engine)
    assert_theory(values, theory, slack=0.03)


def test_tandem_jackson_product_form(engine):
    mus = [1000.0, 1250.0, 2000.0]
    lam = 700.0
    values = _means(plain(tandem_topology([Exponential(1 / m) for m in mus])), lam, run=engine)
    assert_theory(values, sum(1 / (m - lam) for m in mus))


def test_utilisation_law(engine):
    mu, lam, c = 1000.0, 1500.0, 2
    scenario = plain(station_topology(Exponential(1 / mu), servers=c))
    utils = _means(scenario, lam, requests=20000, stat=lambda r: r.usage["q/app"].cpu_seconds / r.busy_window / c,
                   run=engine)
    assert_theory(utils, lam / mu / c)


def test_littles_law_on_a_chain():
    """Time-average number in the system, sampled at Poisson instants (PASTA), equals rate x mean latency."""
    scenario = plain(tandem_topology([Exponential(1 / 1000.0), LogNormal(math.log(0.5e-3), 0.5)]))
    lam, duration, warmup = 600.0, 40.0, 4.0
    sampled, predicted = [], []
    for rep in range(REPS):
        env = simpy.Environment()
        streams = Streams(SEED, rep)
        system = System(env, scenario, Workload(OpenLoad(lam)), streams)
        lat: list[float] = []
        open_arrivals(env, system, OpenLoad(lam), duration, lambda s, l: lat.append(l) if s >= warmup else None,
                      streams, LoadTrace())
        counts: list[int] = []

        def observer():
            rng = streams.rng("observer")
            yield env.timeout(warmup)
            while env.now < duration:
                counts.append(system.in_system)
                yield env.timeout(rng.exponential(0.005))

        env.process(observer())
        env.run(until=duration + 1)
        sampled.append(float(np.mean(counts)))
        predicted.append(lam * float(np.mean(lat)))
    est_l = t_interval(sampled, 0.99)
    est_w = t_interval(predicted, 0.99)
    assert abs(est_l.value - est_w.value) <= est_l.half_width + est_w.half_width + 0.02 * est_w.value


@pytest.mark.parametrize("df", [1, 2, 3, 4, 7, 10, 41, 159, 1000, 1001, 5000, 10**6])
def test_the_t_quantile_behind_every_interval_is_students(df: int) -> None:
    """sim/stats.t_quantile (no scipy at run time) against closed forms (Cauchy for df=1, Student's df=2 formula)
    and scipy's stdtrit, at the levels intervals use and in both tails, on both sides of its switch from the exact
    series to Fisher's expansion (LARGE_DF)."""
    from scipy.special import stdtrit

    from meshsim.sim.experiments.stats import t_quantile

    for p in (0.6, 0.9, 0.95, 0.975, 0.995, 0.9995, 0.025):
        value = t_quantile(p, df)
        if df == 1:
            assert value == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-11)
        if df == 2:
            assert value == pytest.approx((2 * p - 1) / math.sqrt(2 * p * (1 - p)), rel=1e-11)
        assert value == pytest.approx(float(stdtrit(df, p)), rel=1e-9)
    with pytest.raises(ValueError):
        t_quantile(1.0, df)


def test_the_control_variate_interval_covers_the_mean_at_its_confidence() -> None:
    """Y = mu + b (C - E[C]) + noise, C the Poisson arrivals of a replication: over 2000 experiments of 20
    replications the controlled 95 % interval must cover mu 95 % of the time (within 3.5 binomial standard
    deviations) and be narrower than the plain interval on average, by about the correlation it removes."""
    rng = np.random.default_rng(SEED)
    covered, ratios = 0, []
    experiments, n, lam, mu = 2000, 20, 400.0, 10.0
    for _ in range(experiments):
        c = rng.poisson(lam, n).astype(float)
        y = mu + 0.05 * (c - lam) + rng.normal(0.0, 1.0, n)  # correlation 0.71: the variance falls by half
        est = controlled_interval(y, c, lam)
        covered += est.lo <= mu <= est.hi
        ratios.append(est.half_width / t_interval(y).half_width)
    tolerance = 3.5 * math.sqrt(0.95 * 0.05 / experiments)
    assert abs(covered / experiments - 0.95) <= tolerance
    assert 0.6 < float(np.mean(ratios)) < 0.8  # sqrt(1 - 0.5) = 0.71, widened a little by the lost degree of freedom


def test_the_control_variate_needs_enough_replications_and_a_varying_control() -> None:
    y = [1.0, 2.0, 4.0, 3.0] * 5
    assert controlled_interval(y, [7.0] * len(y), 7.0) == t_interval(y)  # a control that does not vary
    short = y[:MIN_CONTROLLED - 1]
    assert controlled_interval(short, list(range(len(short))), 4.0) == t_interval(short)


def test_mm1_mean_sojourn_with_the_arrivals_as_control_variate() -> None:
    """The M/M/1 check with the control variate predict uses for Poisson loads (the requests started in the
    window): theory inside its 99 % interval, which is narrower than the plain one over the same replications
    (at rho 0.8 a replication that drew more arrivals waits markedly longer)."""
    mu, lam, requests, reps = 1000.0, 800.0, 5000, 24
    duration = requests / lam
    horizon = Horizon(duration, 0.1 * duration)
    runs = [run_fast_replication(plain(station_topology(Exponential(1 / mu))), Workload(OpenLoad(lam)), horizon,
                                 SEED, i) for i in range(reps)]
    means = [float(np.mean(r.latencies)) for r in runs]
    est = controlled_interval(means, [r.started for r in runs], lam * (duration - horizon.warmup), confidence=0.99)
    theory = 1 / (mu - lam)
    assert est.lo - 0.02 * theory <= theory <= est.hi + 0.02 * theory, (est, theory)
    assert est.half_width < 0.8 * t_interval(means, confidence=0.99).half_width


def mm1_started_empty(seed: int, reps: int = 1000, duration: float = 1.0) -> dict[str, list[float]]:
    """Mean waiting time of each of ``reps`` 1 s replications of an M/M/1 queue at rho 0.9 started empty (mu 1000/s):
    after MSER-5's cut chosen from all of them (what predict applies), from the start, and after the 10 % warm-up
    predict cut before."""
    mu, lam = 1000.0, 900.0
    scenario, workload = plain(station_topology(Exponential(1 / mu))), Workload(OpenLoad(lam))
    runs = [run_fast_replication(scenario, workload, Horizon(duration, 0.0), seed, i) for i in range(reps)]
    cut = choose_cut(runs, saturated=False)
    return {"cut": [float(np.mean(cut.kept(r))) - 1 / mu for r in runs],
            "start": [float(np.mean(r.latencies)) - 1 / mu for r in runs],
            "ten percent": [float(np.mean(r.latencies[r.filed_at >= 0.1 * duration])) - 1 / mu for r in runs]}


def test_mm1_started_empty_is_unbiased_after_the_transient_cut() -> None:
    """An empty M/M/1 queue at rho 0.9 relaxes over about 1 / (mu (1 - sqrt rho)^2) = 0.38 s, a third of these
    runs: measured from the start its mean waiting time falls short of rho / (mu - lambda) = 9 ms. After the cut the
    theory is inside the 99 % interval; from the start, and after the old 10 % warm-up, the interval lies below it.
    Over seeds 0-19 of this check the cut's interval held the theory in 17 (19 with the 2 % slack of the checks
    above), the 10 % warm-up's in 1 (8), the start's in none: MSER-5 leaves about 2 % of so slow a transient in
    (it cut 0.2-0.45 s), and no slack is given here because the old warm-up's bias is only 3-4 times that."""
    theory = 0.9 / (1000.0 - 900.0)
    means = mm1_started_empty(SEED)
    cut = t_interval(means["cut"], confidence=0.99)
    assert cut.lo <= theory <= cut.hi and cut.half_width < 0.1 * theory, (cut, theory)
    for biased in ("start", "ten percent"):
        est = t_interval(means[biased], confidence=0.99)
        assert est.hi < theory, (biased, est, theory)


# -- capacity: what an overloaded open queue answers ---------------------------------------------------------------

def test_an_overloaded_queue_answers_at_its_service_rate_and_falls_behind(engine):
    """M/M/1 with mu = 1000/s offered 1250/s: its server never idles once the backlog builds, so over the window's
    second half it answers at mu (theory inside the replications' interval) and the unanswered grow by
    (lam - mu) x the half window; offered 900/s it keeps up, and no replication is taken for overloaded."""
    from meshsim.sim.experiments.saturation_search import fell_behind

    mu, duration = 1000.0, 4.0
    scenario = plain(station_topology(Exponential(1 / mu)))
    over = [engine(scenario, Workload(OpenLoad(1250.0)), Horizon(duration, 0.1 * duration), SEED, i)
            for i in range(REPS)]
    assert_theory([r.answered_rps for r in over], mu)
    growth = float(np.mean([r.backlog_growth for r in over])) / ((1250.0 - mu) * 0.45 * duration)
    assert 0.8 < growth < 1.2  # 450 requests expected; the mean of 8 has a standard deviation of about 22
    assert all(fell_behind([r]) for r in over)
    kept_up = [engine(scenario, Workload(OpenLoad(900.0)), Horizon(duration, 0.1 * duration), SEED, i)
               for i in range(REPS)]
    assert not any(fell_behind([r]) for r in kept_up)
    assert abs(float(np.mean([r.backlog_growth for r in kept_up]))) < 20  # what an M/M/1 at 0.9 holds: ~9
