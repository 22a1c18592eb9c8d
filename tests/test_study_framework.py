"""The study framework: cells, summaries, the report files and the CLI's errors (the five studies have their own
tests)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from meshsim.calibrate.studies.study_cells import Cell, StudyResult
from meshsim.calibrate.studies.study_report import cell_table, write_out


def _cell(published: float, predicted: float | None, role: str = "predicted", metric: str = "p50_ms",
          spread: tuple[float, float] | None = None) -> Cell:
    return Cell("Table 1", {"mesh": "istio", "rps": 50.0}, metric, published, predicted, (0.9, 1.1), role,
                published_spread=spread)


def test_cell_error_and_spread() -> None:
    c = _cell(2.0, 2.5, spread=(1.8, 2.4))
    assert c.error == pytest.approx(0.25)
    assert c.within_spread is False
    assert _cell(2.0, 2.2, spread=(1.8, 2.4)).within_spread is True
    assert _cell(2.0, None).error is None and _cell(0.0, 1.0).error is None
    assert _cell(2.0, 1.0).within_spread is None  # no published repetitions: nothing to say


@pytest.mark.parametrize("kwargs", [{"metric": "latency"}, {"role": "tuned"}])
def test_cell_refuses_unknown_metric_or_role(kwargs: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs.values()))):
        _cell(1.0, 1.0, **kwargs)


def test_summary_counts_only_predicted_latency_cells() -> None:
    cells = (_cell(1.0, 1.1), _cell(1.0, 1.3), _cell(1.0, 2.0, role="fit"), _cell(10.0, 30.0, metric="cpu_percent"),
             _cell(1.0, None))
    s = StudyResult("x", "X", "doc", cells).summary()
    assert s["median_abs_error_latency"] == pytest.approx(0.2)  # median of 0.1 and 0.3; fit and CPU cells left out
    assert s["median_abs_error_other"] == pytest.approx(2.0)
    assert (s["cells"], s["fit"], s["predicted"], s["not_predicted"]) == (5, 1, 4, 1)


def test_json_shape_table_and_out_folder(tmp_path) -> None:
    result = StudyResult("x", "X", "doc", (_cell(1.0, 1.1, spread=(0.9, 1.2)), _cell(2.0, 1.0, role="fit")),
                         notes=("a note",))
    d = result.to_dict()
    assert set(d) >= {"study", "cells", "summary"}
    assert set(d["cells"][0]) >= {"table", "condition", "metric", "published", "predicted", "ci95", "error", "role",
                                  "note"}
    assert d["cells"][0]["error"] == pytest.approx(0.1) and d["cells"][1]["role"] == "fit"
    text = cell_table(result)
    assert "+10%" in text and "note: a note" in text
    pytest.importorskip("matplotlib")
    paths = write_out(result, tmp_path / "out")
    assert json.loads(paths[0].read_text())["summary"]["within_published_spread"] == "1 of 1"
    assert paths[1].read_text().splitlines()[0].startswith("condition.mesh,condition.rps,table")
    assert paths[2].read_text().lstrip().startswith("<?xml")
    assert math.isfinite(d["summary"]["median_abs_error_latency"])


def _meshsim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "meshsim", *args], capture_output=True, text=True, timeout=120)


def test_unknown_study_is_one_line_exit_2() -> None:
    p = _meshsim("study", "run", "no-such-study", "--short")
    assert p.returncode == 2
    assert "no-such-study" in p.stderr and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
