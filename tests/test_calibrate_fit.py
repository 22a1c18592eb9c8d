"""Parameter recovery: known distributions -> fortio-shaped histograms (fortio's bucket edges) -> fit -> truth.

Tolerances are set from the sampling error at the sample sizes used (n = 40 000 for direct fits): a median is
known to ~1 %, a lognormal sigma to ~2 %, so 4-5 % bounds leave room for the bucket discretisation without hiding
a wrong estimator (a fit ignoring the censoring misses the 10-us buckets' shape by far more).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from meshsim.calibrate.fit.convolution import Grid, from_observation, power
from meshsim.calibrate.load.cpu_cost import fit_cpu
from meshsim.calibrate.fit.deconvolution import ComponentFit, Term, fit_component
from meshsim.calibrate.fit.families import Family
from meshsim.calibrate.measure.fortio_histogram import histogram_data
from meshsim.calibrate.fit.mle import fit_best, fit_family
from meshsim.calibrate.fit.observations import Observation, from_buckets, from_samples
from meshsim.calibrate.fit.quantile_fit import fit_quantiles
from meshsim.calibrate.load.mean_wakeup import fit_wakeup
from meshsim.distributions import Gamma, LogNormal, Mixture, Shifted

RNG = np.random.default_rng(20261122)


def fortio_obs(samples: np.ndarray, resolution: float, label: str = "synthetic") -> Observation:
    data = histogram_data(samples, resolution)
    return from_buckets([d["Start"] for d in data], [d["End"] for d in data], [d["Count"] for d in data], label)


def test_shifted_lognormal_recovered_from_fortio_buckets() -> None:
    truth = Shifted(LogNormal(math.log(0.12e-3), 0.35), 0.15e-3)
    obs = fortio_obs(truth.sample(RNG, 40000), 1e-5)
    fit = fit_family(obs, Family("lognormal", shifted=True))
    spec = fit.distribution.to_spec()
    assert spec["median_ms"] == pytest.approx(0.12, rel=0.04)
    assert spec["sigma"] == pytest.approx(0.35, rel=0.05)
    assert spec["shift_ms"] == pytest.approx(0.15, abs=0.006)
    assert fit.gof is not None and fit.gof.ks < 0.01


def test_coarse_old_buckets_still_recover_the_mean() -> None:
    """The Istio 1.2 files used -r 0.00005: 50-us buckets near 0.3 ms, up to 1 ms wide near 10 ms."""
    truth = Shifted(Gamma(4.0, 0.08e-3), 0.5e-3)
    obs = fortio_obs(truth.sample(RNG, 40000), 5e-5)
    assert obs.hi[1] - obs.lo[1] >= 5e-5 - 1e-12
    fit = fit_family(obs, Family("gamma", shifted=True))
    assert fit.distribution.mean == pytest.approx(truth.mean, rel=0.02)
    assert math.sqrt(fit.distribution.variance) == pytest.approx(math.sqrt(truth.variance), rel=0.08)


def test_aic_picks_the_generating_family_and_the_tail_mixture() -> None:
    gamma = Shifted(Gamma(2.0, 0.1e-3), 0.1e-3)
    best, fits = fit_best(fortio_obs(gamma.sample(RNG, 40000), 1e-5), [Family("lognormal", True),
                                                                        Family("gamma", True), Family("weibull", True)])
    assert best.family.base == "gamma"
    assert fits[-1].gof.ks > best.gof.ks  # the worst family also fits visibly worse
    body = Shifted(LogNormal(math.log(0.2e-3), 0.25), 0.1e-3)
    tail = LogNormal(math.log(3e-3), 0.2)
    mix = Mixture((0.97, 0.03), (body, tail))
    best, _ = fit_best(fortio_obs(mix.sample(RNG, 40000), 1e-5),
                       [Family("lognormal", True), Family("lognormal", True, mixture=True)])
    assert best.family.mixture
    weights = best.distribution.to_spec()["components"]
    assert weights[1]["weight"] == pytest.approx(0.03, abs=0.005)
    assert best.distribution.quantile(0.99) == pytest.approx(mix.quantile(0.99), rel=0.08)


def test_raw_samples_fit_by_plain_likelihood() -> None:
    truth = Shifted(LogNormal(math.log(0.3e-3), 0.5), 0.05e-3)
    obs = from_samples(truth.sample(RNG, 20000), "raw")
    fit = fit_family(obs, Family("lognormal", True))
    assert fit.distribution.to_spec()["sigma"] == pytest.approx(0.5, rel=0.04)
    assert fit.distribution.quantile(0.5) == pytest.approx(truth.quantile(0.5), rel=0.03)
    # above 50 000 samples the likelihood runs on 2000 equal-probability cells; the estimate must not suffer
    big = fit_family(from_samples(truth.sample(RNG, 120000), "raw"), Family("lognormal", True))
    assert big.n == 120000 and big.distribution.to_spec()["sigma"] == pytest.approx(0.5, rel=0.03)
    assert big.distribution.quantile(0.99) == pytest.approx(truth.quantile(0.99), rel=0.03)


def test_deconvolution_recovers_a_hidden_pass() -> None:
    """Baseline and server-sidecar histograms; the per-pass distribution is never observed directly."""
    base = Shifted(LogNormal(math.log(0.12e-3), 0.3), 0.16e-3)
    hop = Shifted(Gamma(3.0, 0.03e-3), 0.04e-3)
    n = 60000
    b_obs = fortio_obs(base.sample(RNG, n), 1e-5, "baseline")
    s_obs = fortio_obs(base.sample(RNG, n) + hop.sample(RNG, n) + hop.sample(RNG, n), 1e-5, "server-sidecar")
    grid = Grid.covering([b_obs, s_obs])
    known = from_observation(grid, b_obs)
    fit = fit_component("inbound", [Term(s_obs, known, 2)], [Family("gamma", True), Family("lognormal", True)])
    d = fit.best.distribution
    assert d.mean == pytest.approx(hop.mean, rel=0.05)
    assert math.sqrt(d.variance) == pytest.approx(math.sqrt(hop.variance), rel=0.15)
    assert d.quantile(0.99) == pytest.approx(hop.quantile(0.99), rel=0.12)
    assert fit.gof[0].ks < 0.01
    # A second stage on top of the first: both-sidecars adds an outbound pass with another distribution.
    out_hop = Shifted(LogNormal(math.log(0.08e-3), 0.4), 0.05e-3)
    d_obs = fortio_obs(base.sample(RNG, n) + hop.sample(RNG, n) + hop.sample(RNG, n)
                       + out_hop.sample(RNG, n) + out_hop.sample(RNG, n), 1e-5, "both")
    grid2 = Grid.covering([b_obs, s_obs, d_obs])
    known2 = from_observation(grid2, b_obs).plus(power(
        from_observation(grid2, from_samples(hop.sample(RNG, 200000), "hop")), 2))
    out = fit_component("outbound", [Term(d_obs, known2, 2)], [Family("lognormal", True)])
    assert out.best.distribution.mean == pytest.approx(out_hop.mean, rel=0.06)


def test_families_fitted_side_by_side_give_what_one_process_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    """fit_component runs its candidate families in forked workers (one per core): the same fits, in the same
    order, as one after the other in this process."""
    from meshsim.calibrate.fit import deconvolution

    hop = Shifted(Gamma(3.0, 0.05e-3), 0.05e-3)
    base = Shifted(LogNormal(math.log(0.3e-3), 0.3), 0.1e-3)
    n = 20000
    b_obs = fortio_obs(base.sample(RNG, n), 1e-5, "baseline")
    s_obs = fortio_obs(base.sample(RNG, n) + hop.sample(RNG, n) + hop.sample(RNG, n), 1e-5, "server-sidecar")
    terms = [Term(s_obs, from_observation(Grid.covering([b_obs, s_obs]), b_obs), 2)]
    families = [Family("lognormal", True), Family("gamma", True), Family("lognormal", True, True)]

    def fitted(cores: set[int]) -> tuple[list[str], list[tuple[str, list[float], float]]]:
        monkeypatch.setattr(deconvolution.os, "sched_getaffinity", lambda _pid: cores)
        said: list[str] = []
        fit = fit_component("inbound", terms, families, progress=said.append)
        return said, [(f.family.name, list(f.theta), f.loglik) for f in fit.fits]

    workers, alone = fitted({0, 1, 2}), fitted({0})
    assert workers == alone
    assert [line.split(": ")[1] for line in alone[0][:3]] == [f.name for f in families]


def test_quantile_fit_reports_uncertainty() -> None:
    truth = LogNormal(math.log(20e-3), 0.8)
    probs = [0.5, 0.9, 0.99] * 5
    reps = [i // 3 for i in range(15)]
    noise = np.exp(RNG.normal(0.0, 0.03, 15))
    values = [truth.quantile(p) * e for p, e in zip(probs, noise)]
    fit = fit_quantiles(probs, values, reps)
    assert fit.median_s == pytest.approx(20e-3, rel=0.05)
    assert fit.sigma == pytest.approx(0.8, rel=0.08)
    assert 0 < fit.se_log_median < 0.05 and fit.rep_spread_median_s > 0
    exact = fit_quantiles([0.5, 0.9, 0.99], [truth.quantile(p) for p in (0.5, 0.9, 0.99)])
    assert exact.sigma == pytest.approx(0.8, rel=1e-3) and exact.rms_log_residual < 1e-4


def test_cpu_cost_and_wakeup_recovered() -> None:
    rates = [10, 100, 500, 1000]
    cores = [0.002 + r * 0.25e-3 for r in rates]
    fit = fit_cpu("server/sidecar", rates, cores)
    assert fit.cost_s == pytest.approx(0.25e-3, rel=1e-6) and fit.idle_cores == pytest.approx(0.002, rel=1e-6)
    assert fit.cross_check(0.6e-3)["service_demand"].startswith("cpu_cost")
    with pytest.raises(ValueError, match="single rate"):
        fit_cpu("server/sidecar", [100, 100], [0.1, 0.2])
    gaps = np.array([0.1e-3, 0.5e-3, 2e-3, 10e-3, 50e-3])
    added = 0.1e-3 + 0.3e-3 * -np.expm1(-gaps / 3e-3)
    w = fit_wakeup(gaps, added)
    assert not w.tau_fixed
    assert w.max_s == pytest.approx(0.3e-3, rel=0.02) and w.tau_s == pytest.approx(3e-3, rel=0.05)
    two = fit_wakeup(gaps[:2], added[:2], tau_prior_s=3e-3, tau_max_s=10e-3)
    assert two.tau_fixed and two.max_s == pytest.approx(0.3e-3, rel=0.02)
    # by default tau may not exceed 5x the largest gap seen: a prior beyond it is clipped, and that is a bound
    clipped = fit_wakeup(gaps[:2], added[:2], tau_prior_s=3e-3)
    assert clipped.tau_s == pytest.approx(2.5e-3) and clipped.on_bound and not clipped.accepted


def test_a_warm_refit_starts_from_the_last_optimum(monkeypatch: pytest.MonkeyPatch) -> None:
    """The wake-up loop refits the passes over slightly other known parts (its cold wake-ups). Warm, without
    exploring, each family runs one optimisation, from the last fit's optimum, instead of one per start of its own,
    and lands where the fit from its own starts lands; exploring, it adds the last optimum to its own starts (five
    per family) and lands there too."""
    from meshsim.calibrate.fit import deconvolution

    hop = Shifted(Gamma(3.0, 0.05e-3), 0.05e-3)
    base = Shifted(LogNormal(math.log(0.3e-3), 0.3), 0.1e-3)
    n = 20000
    b_obs = fortio_obs(base.sample(RNG, n), 1e-5, "baseline")
    s_obs = fortio_obs(base.sample(RNG, n) + hop.sample(RNG, n) + hop.sample(RNG, n), 1e-5, "server-sidecar")
    known = from_observation(Grid.covering([b_obs, s_obs]), b_obs)
    families = [Family("gamma", True), Family("lognormal", True)]
    monkeypatch.setattr(deconvolution.os, "sched_getaffinity", lambda _pid: {0})  # starts counted in this process
    starts: list[int] = []
    optimise = deconvolution.maximise

    def counted(objective, from_starts, max_evals):
        starts.append(len(from_starts))
        return optimise(objective, from_starts, max_evals)

    monkeypatch.setattr(deconvolution, "maximise", counted)

    def fitted(terms: list[Term], **warm) -> tuple[list[int], dict[str, float], ComponentFit]:
        starts.clear()
        fit = fit_component("inbound", terms, families, **warm)
        return list(starts), {f.family.name: f.loglik for f in fit.fits}, fit

    own_starts, _, last = fitted([Term(s_obs, known, 2)])
    assert own_starts == [4, 4]  # a shifted family's four starting shifts
    moved = [Term(s_obs, known.delayed(8e-6), 2)]  # the known parts 8 us later: a cold wake-up's share
    fresh_starts, fresh, fresh_fit = fitted(moved)
    warm_starts, warm, warm_fit = fitted(moved, warm=last, explore=False)
    both_starts, both, _ = fitted(moved, warm=last)
    assert fresh_starts == [4, 4] and warm_starts == [1, 1] and both_starts == [5, 5]
    for name in fresh:
        assert warm[name] == pytest.approx(fresh[name], abs=0.5)
        assert both[name] == pytest.approx(fresh[name], abs=0.5)
    assert warm_fit.best.distribution.mean == pytest.approx(fresh_fit.best.distribution.mean, rel=0.01)
