"""Setup by setup, the prediction beside the repeats of a setup (calibrate/validation/setup_repeats.py): exact
values on hand-made runs, and the same block in ``meshsim validate``'s text and JSON on real lab runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from meshsim.calibrate.validation.column_accuracy import ScoredRun
from meshsim.calibrate.validation.setup_repeats import FAR, repeats_lines, setup_repeats
from meshsim.cli import main

REPO = Path(__file__).resolve().parent.parent
LAB = REPO / "measurements" / "lab-baseline-by-rate-2026-11-29"
MODEL = REPO / "measurements" / "lab-wakeup-priority-2026-11-29" / "woken-first" / "lab-baseline-by-rate-2026-11-29" \
    / "envoy-lab.yaml"


def _run(name: str, measured: float, predicted: float, rps: float = 800.0, payload: int = 1024,
         setup: str = "chain3 both-sidecars") -> ScoredRun:
    return ScoredRun(name, setup, rps, 16, payload, "held-out", {"p50": measured, "rps": rps},
                     {"p50": predicted, "rps": rps})


def test_error_from_the_repeats_mean_beside_their_range() -> None:
    runs = [_run("a", 10.0, 13.0), _run("b", 12.0, 13.0),  # mean 11, range 2: error 2/11, spread 2/11
            _run("c", 10.0, 16.0, rps=900.0), _run("d", 12.0, 16.0, rps=900.0),  # error 5/11 > twice 2/11
            _run("e", 4.0, 5.0, rps=1000.0), _run("f", 5.0, 5.0, rps=1000.0), _run("g", 6.0, 8.0, rps=1000.0),
            _run("h", 10.0, 10.0, payload=16384),  # measured once (another payload): no line
            _run("i", 10.0, 10.0, setup="single both-sidecars")]
    repeats = setup_repeats(runs)
    assert [r.runs for r in repeats] == [("a", "b"), ("c", "d"), ("e", "f", "g")]
    near, far, three = (r.values["p50"] for r in repeats)
    assert near.error == pytest.approx(2 / 11) and near.spread == pytest.approx(2 / 11) and not near.beyond
    assert far.error == pytest.approx(5 / 11) and far.error > FAR * far.spread and far.beyond
    # three repeats: the range over the mean, the predictions' mean against the measured mean
    assert three.spread == pytest.approx(2 / 5) and three.error == pytest.approx((6 - 5) / 5) and not three.beyond
    # a paced rate equal to its load everywhere: no error, and none named however small the spread
    assert all(r.values["rps"].error == 0.0 and not r.values["rps"].beyond for r in repeats)
    text = repeats_lines(repeats)
    assert "900 rps, c16, 2 runs: p50 +45% (18%), rps +0% (0%): p50 beyond twice" in text[2]
    assert text[-1] == "  1 of 6 beyond twice the repeats' difference"
    assert setup_repeats(runs[7:]) == [] and repeats_lines([]) == []


def test_validate_prints_and_writes_each_repeated_setup(capsys) -> None:
    """The lab's paced runs (two setups, each measured twice; the chain's apps from its baseline runs): the text's
    lines and the JSON's values are the module's on the runs' own measured and predicted values."""
    base = ["validate", "--model", str(MODEL), *(str(LAB / f) for f in ("baselines", "baselines-loaded", "paced")),
            "--replications", "2"]
    assert main(base + ["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [len(r["runs"]) for r in data["setup_repeats"]] == [2, 2]
    by_run = {r["run"]: r for r in data["runs"]}
    for repeat in data["setup_repeats"]:
        p50 = [by_run[name]["latency_ms"]["p50"] for name in repeat["runs"]]
        assert repeat["p50"]["measured"] == pytest.approx([m["measured"] for m in p50], abs=1e-5)
        mean = sum(m["measured"] for m in p50) / 2
        predicted = sum(m["predicted"] for m in p50) / 2
        assert repeat["p50"]["error"] == pytest.approx((predicted - mean) / mean, abs=1e-3)
    assert main(base) == 0
    text = capsys.readouterr().out
    assert "per setup measured more than once" in text
    assert text.count(" rps, c16, 2 runs: p50 ") == 2
