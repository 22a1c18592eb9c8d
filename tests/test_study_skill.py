"""A study's skill against its naive forecast: the naive values and the medians on a hand-made study with known
answers, the role audit (a copied value is never a prediction), the reports, and the shipped studies' files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from meshsim.calibrate.studies.study_catalog import study_names
from meshsim.calibrate.studies.study_cells import Cell, StudyResult
from meshsim.calibrate.studies.study_report import cell_table, write_html
from meshsim.calibrate.studies.study_skill import StudyColumns
from meshsim.calibrate.studies.study_skill_report import readme_table

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "docs" / "studies"
COLUMNS = StudyColumns("rps", 50.0, ("mesh", "percentile"), "the 50 rps column copied along its row")


def _cell(mesh: str, rps: float, pct: str, published: float, predicted: float | None, role: str = "predicted",
          metric: str = "p50_ms", **extra) -> Cell:
    return Cell("Table 1", {"mesh": mesh, "rps": rps, "percentile": pct}, metric, published, predicted, role=role,
                **extra)


def _study() -> StudyResult:
    """Errors chosen by hand: model |error| and naive |error| per predicted cell in the comments."""
    cells = (
        _cell("istio", 50.0, "p50", 10.0, 10.4, "fit"), _cell("istio", 50.0, "p99", 100.0, 90.0, "fit"),
        _cell("linkerd", 50.0, "p50", 5.0, 5.1, "fit"),
        _cell("istio", 450.0, "p50", 12.0, 13.0),     # model 1/12, naive 10 -> 1/6
        _cell("istio", 450.0, "p99", 110.0, 99.0),    # model 0.1,  naive 100 -> 1/11
        _cell("linkerd", 450.0, "p50", 5.5, 6.6),     # model 0.2,  naive 5 -> 1/11
        _cell("istio", 3500.0, "p50", 20.0, 30.0),    # model 0.5,  naive 10 -> 0.5
        _cell("linkerd", 3500.0, "p50", 4.0, 4.2),    # model 0.05, naive 5 -> 0.25
        _cell("linkerd", 450.0, "p50", 20.0, 5.1, "derived", "memory_mb"),  # copies the fit: not counted
        _cell("istio", 450.0, "data-plane", 0.1, 0.15, metric="cpu_cores"),  # no fit cell in its row: no naive
    )
    return StudyResult("x", "X", "doc", cells, columns=COLUMNS)


def test_naive_forecast_copies_the_fit_column_along_each_row() -> None:
    cells = _study().cells
    assert [c.naive for c in cells] == [None, None, None, 10.0, 100.0, 5.0, 10.0, 5.0, None, None]
    assert cells[3].naive_error == pytest.approx(-1 / 6) and cells[-1].naive_error is None
    d = cells[3].to_dict()
    assert d["naive"] == 10.0 and d["naive_error"] == pytest.approx(-1 / 6, abs=1e-6)


def test_medians_per_column_and_mesh_and_the_skill_have_known_answers() -> None:
    s = _study().summary()
    assert (s["fit"], s["derived"], s["predicted"]) == (3, 1, 6)
    lat = s["skill"]["latency"]
    expected = {  # (model median, naive median) over the same cells
        "overall": (0.1, 1 / 6), "rps=450": (0.1, 1 / 11), "rps=3500": (0.275, 0.375),
        "istio": (0.1, 1 / 6), "linkerd": (0.125, (1 / 11 + 0.25) / 2)}
    groups = {"overall": lat["overall"], **lat["by_column"], **lat["by_mesh"]}
    assert set(groups) == set(expected)
    for name, (model, naive) in expected.items():
        g = groups[name]
        assert g["model_on_naive_cells"] == pytest.approx(model, abs=1e-4), name
        assert g["naive"] == pytest.approx(naive, abs=1e-4), name
        assert g["skill"] == pytest.approx(1 - g["model_on_naive_cells"] / g["naive"], abs=1e-4), name
        assert g["beats_naive"] is (model < naive), name
    assert lat["overall"]["skill"] == pytest.approx(0.4, abs=1e-3)
    assert s["reproduced"] is True
    assert (s["reproduced_columns"], s["not_reproduced_columns"]) == (["rps=3500"], ["rps=450"])
    other = s["skill"]["other"]["overall"]  # the CPU cell has no naive value: counted for the model, not the skill
    assert (other["cells"], other["naive_cells"], other["skill"], other["beats_naive"]) == (1, 0, None, None)
    assert other["model"] == pytest.approx(0.5)


def test_a_study_without_columns_reports_no_skill_and_is_not_reproduced() -> None:
    s = StudyResult("x", "X", "doc", (_cell("istio", 450.0, "p50", 12.0, 13.0),)).summary()
    assert s["skill"] is None and s["reproduced"] is None
    assert "does not count as reproduced" in cell_table(StudyResult("x", "X", "doc", ()))


def test_a_copied_value_is_refused_as_predicted() -> None:
    with pytest.raises(ValueError, match="its published value.*'fit' or 'derived'"):
        _cell("istio", 450.0, "p50", 12.0, 12.0)
    assert _cell("istio", 450.0, "p50", 12.0, 12.0, "derived").role == "derived"
    with pytest.raises(ValueError, match="its naive forecast"):
        _cell("istio", 450.0, "p50", 12.0, 10.0, naive=10.0)
    # the study's own construction: a predicted cell that copies its row's fitted column is caught when its
    # naive value is attached
    copied = (_cell("istio", 50.0, "p50", 10.0, 10.4, "fit"), _cell("istio", 450.0, "p50", 12.0, 10.0))
    with pytest.raises(ValueError, match="its naive forecast"):
        StudyResult("x", "X", "doc", copied, columns=COLUMNS)


def test_row_keys_must_name_one_row() -> None:
    cells = (_cell("istio", 50.0, "p50", 10.0, 10.4, "fit"), _cell("istio", 50.0, "p50", 11.0, 10.4, "fit"))
    with pytest.raises(ValueError, match="two fit cells"):
        StudyResult("x", "X", "doc", cells, columns=COLUMNS)


def test_reports_carry_the_skill_and_the_verdict(tmp_path) -> None:
    result = _study()
    text = cell_table(result)
    assert "naive forecast: the 50 rps column copied along its row" in text
    assert "columns where it does: rps=3500; where it does not: rps=450" in text
    assert any(line.startswith("latency  rps=450") and line.endswith("no") for line in text.splitlines())
    pytest.importorskip("matplotlib")
    page = write_html(result, tmp_path / "x.html").read_text()
    assert "Skill against the naive forecast" in page and "#fff3c4" in page  # derived rows have their colour
    table = readme_table([result.to_dict()])
    assert "| `x` | rps (fit: 50) | 3 / 1 / 6 | 10.0 % / 16.7 % (+0.40) |" in table
    assert "| 450: 10.0 % / 9.1 %; 3500: 27.5 % / 37.5 % | yes: not at 450 |" in table


@pytest.mark.parametrize("name", study_names())
def test_each_shipped_study_has_its_skill(name: str) -> None:
    """docs/studies/NAME/study.json (what docs/studies.md shows) carries the naive forecast, the per-column medians and
    the verdict, and its cells carry their naive values."""
    data = json.loads((SHIPPED / name / "study.json").read_text())
    s = data["summary"]
    assert {"derived", "skill", "reproduced", "reproduced_columns", "not_reproduced_columns"} <= set(s)
    skill = s["skill"]
    assert skill["naive_forecast"] and skill["column"] and skill["definition"].startswith("skill = 1 - model")
    lat = skill["latency"]
    assert lat["overall"]["cells"] > 0 and lat["by_column"]
    assert s["reproduced"] == (lat["overall"]["beats_naive"] is True)
    assert set(s["reproduced_columns"]) | set(s["not_reproduced_columns"]) == set(lat["by_column"])
    assert all("naive" in c and "naive_error" in c for c in data["cells"])
    assert not [c for c in data["cells"] if c["role"] == "predicted" and c["predicted"] == c["published"]]


def _meshsim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "meshsim", *args], capture_output=True, text=True, timeout=300)


def test_table_command_prints_the_readme_table_of_the_shipped_studies(tmp_path) -> None:
    p = _meshsim("study", "table", str(SHIPPED))
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("\n| `") == len(study_names())
    # docs/studies.md quotes the table as the command prints it from the shipped study.json files
    assert p.stdout.strip() in (SHIPPED.parent / "studies.md").read_text()
    p = _meshsim("study", "table", str(tmp_path / "none"))
    assert p.returncode == 2 and "DIR:" in p.stderr and "Traceback" not in p.stderr
    (tmp_path / "network-paths").mkdir()
    (tmp_path / "network-paths" / "study.json").write_text("{not json")
    p = _meshsim("study", "table", str(tmp_path))
    assert p.returncode == 2 and "network-paths/study.json" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_regenerate_writes_each_study_and_refuses_unknown_names_first(tmp_path) -> None:
    p = _meshsim("study", "regenerate", str(tmp_path), "--studies", "network-paths", "no-such", "--short")
    assert p.returncode == 2 and "--studies" in p.stderr and "no-such" in p.stderr
    assert not (tmp_path / "network-paths").exists()  # nothing ran
    p = _meshsim("study", "regenerate", str(tmp_path), "--studies", "network-paths", "--short", "--processes", "1")
    assert p.returncode == 0, p.stderr
    assert {f.name for f in (tmp_path / "network-paths").iterdir()} >= {"study.json", "cells.csv"}
    assert "| `network-paths` |" in p.stdout
