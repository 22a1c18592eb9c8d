"""The start-up transient's cut (sim/experiments/transient_cut.py): MSER-5 against its definition and on series with a known
transient, the same cut on both engines, the runs that keep their start, the JSON and the text."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from meshsim.distributions import Deterministic
from meshsim.errors import FieldError
from meshsim.request import PredictOptions, build_request
from meshsim.sim.engine.replication_result import Horizon, ReplicationResult
from meshsim.sim.engine.simpy_replication import run_replication
from meshsim.sim.fast.fast_engine import run_fast_replication
from meshsim.sim.experiments.predict import horizon_for, predict
from meshsim.sim.experiments.stats import Estimate, sectioned, t_quantile
from meshsim.sim.experiments.transient_cut import MSER_BATCH, choose_cut, mser_cut
from meshsim.workload import FortioLoad, RateProfile, Workload
from engine_pairs import disagreement
from simkit import plain, tandem_topology


def mser_statistics(series: np.ndarray, batch: int = MSER_BATCH) -> list[float]:
    """White (1997) written out: batch means, then for every d up to half of them the squared deviations of the
    rest about their mean over (m - d)^2."""
    m = series.size // batch
    z = [float(np.mean(series[j * batch:(j + 1) * batch])) for j in range(m)]
    out = []
    for d in range(m // 2 + 1):
        rest = z[d:]
        mean = sum(rest) / len(rest)
        out.append(sum((x - mean) ** 2 for x in rest) / len(rest) ** 2)
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=0, max_size=400))
def test_mser_is_its_definition(values: list[float]) -> None:
    """The cut is at a minimum of the statistic (ties and float rounding aside: within 1e-9 of the scale)."""
    series = np.asarray(values)
    cut, at_limit = mser_cut(series)
    if series.size // MSER_BATCH < 4:
        assert (cut, at_limit) == (0, False)  # too short to look for a transient in
        return
    statistics = mser_statistics(series)
    assert cut % MSER_BATCH == 0 and 0 <= cut // MSER_BATCH < len(statistics)
    scale = 1e-9 * max(float(np.max(np.abs(series))) ** 2, 1e-300)
    assert statistics[cut // MSER_BATCH] <= min(statistics) + scale
    assert at_limit == (cut // MSER_BATCH == len(statistics) - 1)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 300), st.floats(2.0, 20.0), st.integers(0, 2**32 - 1))
def test_mser_cuts_a_level_shift_where_it_ends(step: int, height: float, seed: int) -> None:
    """Unit noise after ``step`` observations raised by 2-20 standard deviations (fortio's burst): the cut takes the
    whole step, and then some noise at most (MSER trades a little data for no bias: over 3000 draws the median
    overshoot was 3 observations, the largest 232 of 2000)."""
    rng = np.random.default_rng(seed)
    series = rng.normal(0.0, 1.0, 2000)
    series[:step] += height
    cut, at_limit = mser_cut(series)
    assert step - MSER_BATCH < cut <= step + 0.2 * series.size
    assert not at_limit


def test_mser_says_when_the_transient_outlasts_half_the_run() -> None:
    """A series that trends to its very end has no steady part: the cut stops at half and says so."""
    cut, at_limit = mser_cut(np.linspace(0.0, 1.0, 1000) + np.random.default_rng(1).normal(0, 0.01, 1000))
    assert (cut, at_limit) == (500, True)


def test_sectioned_interval_is_the_pooled_quantile_with_the_sections_spread_about_it() -> None:
    """Nakayama's sectioning: centre on the pooled value, S^2 = sum (q_r - pooled)^2 / (R - 1)."""
    values = [1.0, 2.0, 4.0, 3.0]
    pooled, n = 3.5, len(values)
    t = t_quantile(0.975, n - 1)
    plain = Estimate(2.5, 2.5 - t * float(np.std(values, ddof=1)) / np.sqrt(n), 2.5 + t * float(np.std(values, ddof=1))
                     / np.sqrt(n))
    got = sectioned(plain, float(np.mean(values)), pooled, n)
    spread = np.sqrt(sum((v - pooled) ** 2 for v in values) / (n - 1))
    assert got.value == pytest.approx(pooled)
    assert got.half_width == pytest.approx(t * spread / np.sqrt(n))


def _fortio_request(**extra):
    return build_request(PredictOptions(topology="single", mesh="istio", features=("mtls",), load="fortio",
                                        jitter=True, connections=64, rps=1000, **extra))


def test_both_engines_give_the_same_cut_on_the_same_timeline() -> None:
    """fortio's exact timeline on a deterministic chain (tests/test_fast_engine.py): both engines file the same
    latencies at the same times, in the same order, so MSER cuts the same requests."""
    scenario = plain(tandem_topology([Deterministic(0.2e-3), Deterministic(0.1e-3)]))
    workload = Workload(FortioLoad(400.0, 8))
    horizon = Horizon(1.0, 0.0, 1.0)
    fast = [run_fast_replication(scenario, workload, horizon, 3, r) for r in range(3)]
    slow = [run_replication(scenario, workload, horizon, 3, r) for r in range(3)]
    for a, b in zip(fast, slow):
        np.testing.assert_allclose(a.latencies, b.latencies, rtol=0, atol=1e-9)
        np.testing.assert_allclose(a.filed_at, b.filed_at, rtol=0, atol=1e-9)
        assert np.all(np.diff(a.filed_at) >= 0)
    cut_fast, cut_slow = choose_cut(fast, False), choose_cut(slow, False)
    assert cut_fast.requests == cut_slow.requests > 0  # the 8 connections' first calls, sent at one instant
    assert cut_fast.seconds == pytest.approx(cut_slow.seconds, abs=1e-9)


def test_both_engines_cut_fortios_start_and_agree_after_it() -> None:
    """The issue's fortio case, 2 s runs on each engine: the cut ends after the 64 connections' first calls
    (sent together, at most a few hundred requests in) and the p99s after it agree within their intervals."""
    request = _fortio_request(duration_s=2.0)
    horizon = horizon_for(request.workload.load, request.settings)
    runs = {name: [run(request.scenario, request.workload, horizon, 5, r) for r in range(6)]
            for name, run in (("fast", run_fast_replication), ("simpy", run_replication))}
    cuts = {name: choose_cut(results, False) for name, results in runs.items()}
    for cut in cuts.values():
        assert 64 <= cut.requests <= 320 and cut.seconds < 0.3
    p99s = {name: [float(np.percentile(cuts[name].kept(r), 99)) for r in results] for name, results in runs.items()}
    assert disagreement(p99s["fast"], p99s["simpy"], "p99 after the cut") is None


def test_prediction_says_what_was_cut_in_its_json_and_text() -> None:
    from meshsim.cli.prediction_text import prediction_table

    result = predict(**_fortio_kwargs(), duration_s=2.0, replications=4, precision=None, saturation=False)
    block = result.to_dict()["warmup"]
    assert block["method"] == "MSER-5" and block["requests_cut_per_replication"] >= 64
    assert 0 < block["seconds_cut_per_replication"] < 1.0 and "jointly" in block["chosen"]
    assert json.loads(json.dumps(block)) == block
    assert result.inputs["warmup_s"] == 0.0
    text = prediction_table(result.to_dict())
    assert f"the first {block['requests_cut_per_replication']} requests of each replication" in text


def _fortio_kwargs() -> dict:
    return dict(topology="single", mesh="istio", features=("mtls",), load="fortio", jitter=True, connections=64,
                rps=1000)


@pytest.mark.parametrize("options, method, warmup", [
    (dict(load="fortio", warmup_s=0.0), "none", 0.0),  # a run of a given length with its start: nothing cut
    (dict(load="open", warmup_s=0.3), "fixed", 0.3),
    (dict(load="open", timeseries_s=0.5), "fixed", 0.2),  # a time series keeps the old default: 10 % of an open run
    (dict(load="fortio", timeseries_s=0.5), "none", 0.0),
    (dict(load="open", profile=RateProfile.ramp(200.0, 600.0, 2.0)), "none", 0.0),
], ids=["warmup-0", "warmup-given", "series-open", "series-fortio", "profile"])
def test_runs_that_keep_their_start_are_measured_as_before(options: dict, method: str, warmup: float) -> None:
    rate = {} if "profile" in options else {"rps": 400.0}
    result = predict("single", "istio", duration_s=2.0, replications=2, precision=None, saturation=False, **rate,
                     **options)
    block = result.to_dict()["warmup"]
    assert (block["method"], block["seconds_cut_per_replication"]) == (method, warmup)
    assert block["requests_cut_per_replication"] in ((None,) if method == "fixed" else (0,))
    assert result.inputs["warmup_s"] == pytest.approx(warmup)


def test_a_saturated_run_is_not_cut() -> None:
    """An overloaded open load has no steady state: MSER would keep only its later, longer queues."""
    result = predict("chain3", "istio", rps=20000.0, duration_s=0.3, replications=2, precision=None,
                     saturation=False)
    assert result.saturated
    assert result.to_dict()["warmup"]["method"] == "none" and "saturated" in result.to_dict()["warmup"]["why"]


def test_a_warmup_as_long_as_the_run_still_names_the_field() -> None:
    with pytest.raises(FieldError, match="warmup_s"):
        predict("single", "istio", rps=400.0, duration_s=1.0, warmup_s=1.0, replications=2, precision=None)


def _results_of(latencies: list[np.ndarray]) -> list[ReplicationResult]:
    return [ReplicationResult(latencies=x, window=1.0, started=x.size, completed=x.size, in_flight=0,
                              achieved_rps=float(x.size), filed_at=np.arange(x.size) / 1000.0) for x in latencies]


def test_the_joint_cut_is_one_for_all_replications_from_their_mean_series() -> None:
    """Replications of unequal length, each with the same 100-request raised start and its own noise: one cut for
    all, from the mean over the shortest one's length, and the seconds are where the kept requests begin."""
    rng = np.random.default_rng(7)
    series = [rng.normal(1.0, 0.2, n) for n in (900, 1000, 1100)]
    for s in series:
        s[:100] += 3.0
    cut = choose_cut(_results_of(series), False)
    assert 100 <= cut.requests <= 110
    assert cut.seconds == pytest.approx(cut.requests / 1000.0)
    assert all(cut.kept(r).size == r.latencies.size - cut.requests for r in _results_of(series))
