"""Jain's 2^k r factorial analysis: known answers (the book's worked example, synthetic data built from chosen
effects), the coverage of its intervals on seeded noisy data, and `meshsim factorial` running real simulations."""

from __future__ import annotations

import json
import math
from itertools import product

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from meshsim.cli import main
from meshsim.errors import FieldError
from meshsim.factorial_analysis import effect_terms, factorial_effects
from meshsim.factorial_design import FactorialDesign, parse_factor
from meshsim.request import PredictOptions


def synthetic(effects: dict[tuple[str, ...], float], factors: tuple[str, ...], noise: np.ndarray) -> pd.DataFrame:
    """y = sum of q_term x product of the term's levels, plus noise[cell, replication]."""
    rows = []
    for c, levels in enumerate(product((-1, 1), repeat=len(factors))):
        x = dict(zip(factors, levels))
        mean = sum(q * math.prod(x[f] for f in term) for term, q in effects.items())
        rows += [{**x, "value": mean + e} for e in noise[c]]
    return pd.DataFrame(rows)


def test_jain_example_18_1_memory_and_cache():
    """Jain, The Art of Computer Systems Performance Analysis, Example 18.1 (2^2 3 design): q0 41, qA 21.5, qB 9.5,
    qAB 5; SST 7032 = 5547 + 1083 + 300 + 102 (78.9 %, 15.4 %, 4.3 %, 1.5 %); s_e 3.57; 90 % CI of qA 19.58-23.42."""
    cells = {(-1, -1): (15, 18, 12), (1, -1): (45, 48, 51), (-1, 1): (25, 28, 19), (1, 1): (75, 75, 81)}
    frame = pd.DataFrame([{"A": a, "B": b, "value": y} for (a, b), ys in cells.items() for y in ys])
    result = factorial_effects(frame, ("A", "B"), confidence=0.90)
    assert [e.value for e in result.effects] == pytest.approx([41, 21.5, 9.5, 5])
    assert (result.sst, result.sse, result.error_dof) == (pytest.approx(7032), pytest.approx(102), 8)
    shares = [e.variation_percent for e in result.effects[1:]]
    assert shares == pytest.approx([5547 / 70.32, 1083 / 70.32, 300 / 70.32])
    assert result.error_percent == pytest.approx(102 / 70.32)
    qa = result.effect("A")
    assert (qa.ci_low, qa.ci_high) == (pytest.approx(19.58, abs=0.01), pytest.approx(23.42, abs=0.01))
    assert all(e.significant for e in result.effects)


def test_known_effects_are_recovered_exactly_with_zero_mean_noise_in_each_cell():
    factors = ("mtls", "rps", "payload")
    truth = {(): 5.0, ("mtls",): 1.25, ("rps",): -0.5, ("payload",): 2.0, ("mtls", "rps"): 0.75,
             ("mtls", "payload"): 0.0, ("rps", "payload"): -0.25, ("mtls", "rps", "payload"): 0.125}
    e = 0.1  # +e, 0, -e in every cell: the cell means, so the effects, are exactly the chosen ones
    noise = np.tile([e, 0.0, -e], (8, 1))
    result = factorial_effects(synthetic(truth, factors, noise), factors)
    assert [t for t in effect_terms(factors)] == [x.factors for x in result.effects]
    assert {x.factors: x.value for x in result.effects} == pytest.approx(truth, abs=1e-12)
    # SSE = 8 cells x 2 e^2 over 8 x 2 dof; half width t(0.975, 16) s_e / sqrt(24)
    assert result.sse == pytest.approx(16 * e * e) and result.error_dof == 16
    half = stats.t.ppf(0.975, 16) * math.sqrt(result.sse / 16 / 24)
    for x in result.effects:
        assert (x.ci_low, x.ci_high) == (pytest.approx(x.value - half), pytest.approx(x.value + half))
    assert result.effect("mtls", "payload").significant is False  # a zero effect's interval holds 0
    # SS_j = 2^k r q_j^2 and the shares with the error make 100 %
    sst = 24 * sum(q * q for t, q in truth.items() if t) + result.sse
    assert result.sst == pytest.approx(sst)
    assert sum(x.variation_percent for x in result.effects[1:]) + result.error_percent == pytest.approx(100)


def test_intervals_cover_the_true_effects_95_percent_of_the_time():
    """Normal errors, 2^2 3 design, 1500 seeded experiments: each effect's 95 % interval covers its true value in
    a fraction within 3 binomial standard deviations (0.017) of 0.95."""
    rng = np.random.default_rng(2024)
    factors = ("A", "B")
    truth = {(): 10.0, ("A",): 1.0, ("B",): -2.0, ("A", "B"): 0.3}
    trials = 1500
    hits = np.zeros(4)
    for _ in range(trials):
        result = factorial_effects(synthetic(truth, factors, rng.normal(0, 1.5, (4, 3))), factors)
        hits += [x.ci_low <= truth[x.factors] <= x.ci_high for x in result.effects]
    tolerance = 3 * math.sqrt(0.95 * 0.05 / trials)
    assert np.all(np.abs(hits / trials - 0.95) <= tolerance), hits / trials


def test_an_incomplete_design_is_refused():
    frame = synthetic({(): 1.0}, ("A", "B"), np.zeros((4, 2))).iloc[:-1]
    with pytest.raises(FieldError) as err:
        factorial_effects(frame, ("A", "B"))
    assert err.value.field == "replications"


@pytest.mark.parametrize("text, expected", [
    ("mtls", ("mtls", "features", "no-mtls", "mtls")), ("rps=10,100", ("rps", "rps", 10.0, 100.0)),
    ("payload=120,98000", ("payload", "payload_bytes", 120, 98000)), ("scope=none,both", ("scope", "scope", "none",
                                                                                          "both")),
    ("tls", ("tls", "tls", False, True)), ("proxy_workers=1,2", ("proxy-workers", "proxy_workers", 1, 2)),
])
def test_factors_as_users_write_them(text: str, expected: tuple) -> None:
    f = parse_factor(text)
    assert (f.name, f.field, f.low, f.high) == expected


@pytest.mark.parametrize("text", ["rps", "rps=10", "rps=a,b", "rps=5,5", "colour=red,blue", "no-mtls", "a b"])
def test_bad_factors_name_the_factor_option(text: str) -> None:
    with pytest.raises(FieldError) as err:
        parse_factor(text)
    assert err.value.field == "factors"


@pytest.mark.parametrize("factors, base, replications, field, words", [
    (("rps=10,100",), PredictOptions(rps=50), 2, "factors", "cannot also be fixed as rps"),
    (("mtls",), PredictOptions(rps=50, features=("mtls",)), 2, "factors", "fixed in features"),
    (("rps=10,100", "rps=20,200"), PredictOptions(), 2, "factors", "name each factor once"),
    (("mtls",), PredictOptions(rps=50), 1, "replications", "2^k (r - 1)"),
    (("connections=0,4",), PredictOptions(rps=50), 2, "factors", "cell connections=0: connections: must be >= 1"),
    (("bogus",), PredictOptions(rps=50), 2, "factors", "no feature 'bogus'"),
    (("mtls",), PredictOptions(rps=-1), 2, "rps", "> 0"),  # a fixed option keeps its own name
])
def test_bad_designs_name_the_factor_or_the_option(factors, base, replications, field, words) -> None:
    design = FactorialDesign(tuple(parse_factor(f) for f in factors), replications)
    with pytest.raises(FieldError) as err:
        design.validate(base)
    assert err.value.field == field and words in err.value.problem, err.value


def test_feature_factors_leave_cells_without_proxies_alone():
    design = FactorialDesign((parse_factor("scope=none,both"), parse_factor("mtls")), 2)
    base = PredictOptions(rps=50)
    design.validate(base)  # the baseline with mtls "on" is a valid cell: it has nothing to turn on
    assert design.options_for(base, (-1, 1)).features == ()
    assert design.options_for(base, (1, 1)).features == ("mtls",)
    assert design.options_for(base, (1, -1)).features == ("no-mtls",)


def test_meshsim_factorial_runs_real_simulations(capsys: pytest.CaptureFixture[str]) -> None:
    """2 factors (mTLS off/on, 100/400 rps), r = 2, 1 s replications of the single-service topology on istio."""
    argv = ["factorial", "--topology", "single", "--mesh", "istio", "--factor", "mtls", "--factor", "rps=100,400",
            "-r", "2", "--duration", "1", "--metric", "mean_ms"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    for word in ("q0 (mean)", "qmtls", "qrps", "qmtls:rps", "error (SSE)", "mtls=on, rps=400"):
        assert word in text, text
    assert main([*argv, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert [e["name"] for e in d["effects"]] == ["q0", "qmtls", "qrps", "qmtls:rps"]
    assert d["error_dof"] == 4 and len(d["cells"]) == 4 and all(len(c["values"]) == 2 for c in d["cells"])
    shares = [e["variation_percent"] for e in d["effects"][1:]]
    assert sum(shares) + d["error_percent"] == pytest.approx(100)
    means = {tuple(c["signs"]): c["mean"] for c in d["cells"]}
    assert d["effects"][0]["value"] == pytest.approx(np.mean(list(means.values())))
    q_mtls = (means[(1, -1)] + means[(1, 1)] - means[(-1, -1)] - means[(-1, 1)]) / 4
    assert d["effects"][1]["value"] == pytest.approx(q_mtls)
    assert q_mtls > 0  # mTLS adds work to every pass through a sidecar


@pytest.mark.parametrize("argv, flag", [
    (["--factor", "rps=10,100", "--rps", "50"], "--factor:"),
    (["--factor", "mtls", "--rps", "50", "-r", "1"], "--replications:"),
    (["--factor", "nonsense=1,2", "--rps", "50"], "--factor:"),
    (["--factor", "mtls"], "--rps:"),
])
def test_the_factorial_cli_says_the_flag_in_one_line(argv: list[str], flag: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["factorial", "--topology", "single", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"meshsim: error: {flag}"), err


@settings(max_examples=60, deadline=None)
@given(k=st.integers(1, 4), r=st.integers(2, 4), data=st.data())
def test_any_chosen_effects_are_recovered_whatever_the_row_order(k: int, r: int, data: st.DataObject) -> None:
    factors = tuple("ABCD"[:k])
    terms = effect_terms(factors)
    values = data.draw(st.lists(st.floats(-100, 100), min_size=len(terms), max_size=len(terms)))
    truth = dict(zip(terms, values))
    spread = data.draw(st.floats(0.0, 10.0))
    noise = np.tile(np.linspace(-spread, spread, r), (2 ** k, 1))  # zero mean in every cell
    frame = synthetic(truth, factors, noise)
    frame = frame.sample(frac=1.0, random_state=data.draw(st.integers(0, 2 ** 16)))  # rows in any order
    result = factorial_effects(frame, factors)
    assert {x.factors: x.value for x in result.effects} == pytest.approx(truth, abs=1e-9)
    if result.sst > 1e-9:
        total = sum(x.variation_percent for x in result.effects[1:]) + result.error_percent
        assert total == pytest.approx(100)
