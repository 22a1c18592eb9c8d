"""Accuracy per column beside the naive forecast (calibrate/validation/column_accuracy.py): which fit run a naive
forecast copies, the medians per column and overall, and the same block from ``meshsim validate --by`` on real runs
and on summary rows (``--rows``)."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from meshsim.calibrate.validation.column_accuracy import ScoredRun, column_accuracy, naive_source, naive_values
from meshsim.cli import main

REPO = Path(__file__).resolve().parent.parent
RUNS = REPO / "measurements" / "istio-1.2.0"
ROWS = REPO / "measurements" / "istio-1.7" / "telemetry-lowrate.csv"


def _run(name: str, setup: str, rps: float, connections: int, role: str, measured: float,
         predicted: float, payload: int = 1024) -> ScoredRun:
    return ScoredRun(name, setup, rps, connections, payload, role, {"p50": measured}, {"p50": predicted})


def test_the_naive_forecast_copies_the_nearest_fit_run_of_the_same_setup() -> None:
    fits = [_run("a", "both", 200, 1, "fit", 1.0, 1.1), _run("b", "both", 1000, 1, "fit", 2.0, 2.1),
            _run("c", "both", 1000, 16, "fit", 3.0, 3.1), _run("d", "other", 2000, 4, "fit", 9.0, 9.0),
            _run("e", "both", 2000, 4, "held-out", 5.0, 5.0)]
    # nearest in connections first (4 is nearer 1 than 16 on a log scale? |log 4| = 1.39 = |log(16/4)|: a tie,
    # broken by the rate: 1000 for both, then the first in the pool)
    assert naive_source(_run("x", "both", 900, 4, "held-out", 1, 1), fits).name == "b"
    assert naive_source(_run("x", "both", 900, 12, "held-out", 1, 1), fits).name == "c"
    assert naive_source(_run("x", "both", 300, 1, "held-out", 1, 1), fits).name == "a"
    assert naive_source(_run("x", "chain5", 300, 1, "held-out", 1, 1), fits) is None  # no fit run of its setup
    assert naive_source(fits[0], fits).name == "b"  # a fit run is never its own naive forecast
    assert naive_source(_run("x", "other", 2000, 4, "held-out", 1, 1), fits[4:]) is None  # held-out never a source
    # the payload last: a 16 KB run copies the 1 KB fit run of its load, not a 16 KB run at another rate
    sized = [_run("k1", "s", 500, 1, "fit", 1, 1), _run("k16", "s", 200, 1, "fit", 1, 1, payload=16384)]
    assert naive_source(_run("x", "s", 500, 1, "held-out", 1, 1, payload=16384), sized).name == "k1"


def test_the_naive_forecast_keeps_the_fraction_of_the_rate_and_the_cpu_per_request() -> None:
    """A copied 200 rps would be a straw man for a 2000 rps run: the achieved rate and the CPU scale with the
    requested rate, the latencies are copied."""
    source = ScoredRun("s", "x", 200.0, 1, 1024, "fit", {"p50": 1.0, "rps": 190.0, "cpu": 0.02}, {})
    run = ScoredRun("r", "x", 2000.0, 16, 1024, "held-out", {"p50": 3.0, "rps": 1900.0, "cpu": 0.3}, {})
    assert naive_values(run, source) == pytest.approx({"p50": 1.0, "rps": 1900.0, "cpu": 0.2})


def test_medians_per_column_and_overall() -> None:
    fits = [_run("f1", "s", 1000, 1, "fit", 1.0, 1.0)]
    held = [_run("h1", "s", 1000, 4, "held-out", 2.0, 2.2),  # model 10 %, naive 50 %
            _run("h2", "s", 1000, 4, "held-out", 4.0, 3.0),  # model 25 %, naive 75 %
            _run("h3", "chain5", 1000, 4, "held-out", 1.0, 1.5),  # model 50 %, no naive
            _run("h4", "s", 1000, 16, "held-out", 1.25, 1.0)]  # model 20 %, naive 20 %
    rows = column_accuracy(fits + held, held, "connections", ("p50", "p99"))
    by = {r.label: r for r in rows}
    assert [r.label for r in rows] == ["connections=4", "connections=16", "overall"]
    four = by["connections=4"]
    assert (four.runs, four.naive_runs) == (3, 2)
    assert four.model["p50"] == pytest.approx(0.25)  # median of 10, 25, 50 %
    assert four.model_on_naive_runs["p50"] == pytest.approx(0.175) and four.naive["p50"] == pytest.approx(0.625)
    assert "p99" not in four.model  # no run measured it
    overall = by["overall"]
    assert (overall.runs, overall.naive_runs) == (4, 3) and overall.naive["p50"] == pytest.approx(0.5)
    assert column_accuracy(fits, [], "rps", ("p50",)) == []
    with pytest.raises(ValueError, match="column must be one of"):
        column_accuracy(fits, held, "features", ("p50",))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 4, 16]), st.sampled_from([200.0, 1000.0, 3000.0]),
                          st.floats(0.1, 10.0)), min_size=1, max_size=12))
def test_a_model_that_copies_the_naive_forecast_ties_it(loads) -> None:
    """Whatever the runs: a model predicting exactly the naive forecast's values has the naive's medians, and the
    model's median over every run is the plain median of its errors."""
    fits = [_run("fit", "s", 500.0, 1, "fit", 1.0, 1.0)]
    held = [_run(f"h{i}", "s", rps, c, "held-out", measured, 1.0) for i, (c, rps, measured) in enumerate(loads)]
    rows = column_accuracy(fits + held, held, "rps", ("p50",))
    for row in rows:
        assert row.model["p50"] == pytest.approx(row.naive["p50"]) and row.naive_runs == row.runs
    overall = rows[-1]
    assert overall.label == "overall" and overall.runs == len(held)
    assert overall.model["p50"] == pytest.approx(statistics.median(abs(1.0 - m) / m for _, _, m in loads))


def test_validate_by_connections_on_the_istio_runs(capsys) -> None:
    """Two fit runs of one setup at 1 and 16 connections: each is the other's naive forecast; the text and the JSON
    give the same medians, and the repeatability does not pair runs of different payloads."""
    runs = [str(RUNS / "istio-1.2.0-c1-qps1000-baseline"), str(RUNS / "istio-1.2.0-c16-qps1000-baseline")]
    base = ["validate", "--model", str(REPO / "models" / "meshes" / "istio-1.2.yaml"), *runs, "--replications", "2",
            "--sim-duration", "3", "--include-fit-runs", "--by", "connections"]
    assert main(base + ["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {r["column"]: r for r in data["by_column"]["rows"]}
    assert set(rows) == {"connections=1", "connections=16", "overall"}
    c1, c16 = ({r["connections"]: r for r in data["runs"]}[c]["latency_ms"]["p50"]["measured"] for c in (1, 16))
    assert rows["connections=1"]["naive_median_abs_error"]["p50"] == pytest.approx(abs(c16 - c1) / c1, abs=1e-3)
    assert rows["connections=16"]["naive_median_abs_error"]["p50"] == pytest.approx(abs(c1 - c16) / c16, abs=1e-3)
    assert all(r["payload_bytes"] == 1024 for r in data["runs"])
    assert main(base) == 0
    text = capsys.readouterr().out
    assert "median |error| by column" in text and "connections=16" in text
    with pytest.raises(SystemExit) as stop:
        main(base[:-2] + ["--by", "features"])
    assert stop.value.code == 2 and "--by" in capsys.readouterr().err


def test_validate_rows_replays_the_fit_rows(capsys) -> None:
    """``--rows``: the Istio 1.7 model replayed on its own low-rate rows with the settings its fit recorded; every
    row is a fit row, each within the fit's worst error (21 % at p50), and the CPU of a bypassed sidecar is not
    scored."""
    base = ["validate", "--model", str(REPO / "models" / "meshes" / "istio-1.7.yaml"), "--rows", str(ROWS)]
    assert main(base + ["--json", "--include-fit-runs", "--by", "rps"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["rows"]) == 8 and {r["role"] for r in data["rows"]} == {"fit"}
    for row in data["rows"]:
        measured, predicted = row["measured"], row["predicted"]
        assert abs(predicted["p50"] - measured["p50"]) / measured["p50"] < 0.25, row["row"]
        assert (measured["cpu"] is None) == row["row"].endswith("_baseline")
    assert [r["column"] for r in data["by_column"]["rows"]] == ["rps=10", "rps=100", "overall"]
    assert data["summary"]["p50"]["n"] == 8 and not math.isnan(data["summary"]["cpu"]["median_abs_error"])
    assert main(base) == 0
    assert "no held-out rows to summarise" in capsys.readouterr().out


@pytest.mark.parametrize("extra, flag", [(["--html", "x.html"], "--html"), (["--seed", "2"], "--seed"),
                                         ([str(RUNS)], "RUN_DIR")])
def test_validate_rows_refuses_what_does_not_apply(extra: list[str], flag: str, capsys) -> None:
    code = main(["validate", "--model", str(REPO / "models" / "meshes" / "istio-1.7.yaml"), "--rows", str(ROWS),
                 *extra])
    err = capsys.readouterr().err
    assert code == 2 and flag in err and err.strip().count("\n") == 0


def test_validate_rows_needs_a_model_fitted_from_rows(capsys) -> None:
    code = main(["validate", "--model", str(REPO / "models" / "meshes" / "istio-1.2.yaml"), "--rows", str(ROWS)])
    err = capsys.readouterr().err
    assert code == 2 and "row_settings" in err and "--model" in err
