"""Shipped measurements: the Istio 1.2.0 run folders and the published tables, with their provenance."""

from __future__ import annotations

import shutil
import statistics
from pathlib import Path

import pytest

from meshsim.calibrate.measure.dataset import load_runs
from meshsim.calibrate.measure.tables import load_all, load_table, measurements_dir
from meshsim.errors import ModelError

ISTIO12 = measurements_dir() / "istio-1.2.0"


def test_istio_runs_load_with_modes_features_and_provenance() -> None:
    batch = load_runs([ISTIO12])
    assert batch.errors == ()
    # every mode at one connection and at sixteen (the 16 firing together: the load-ladder step)
    assert sorted(r.manifest.load.connections for r in batch.runs) == [1] * 5 + [16] * 5
    by_mode = {(r.manifest.setup.path, r.features): r for r in batch.runs if r.manifest.load.connections == 1}
    assert set(by_mode) == {
        ("baseline", frozenset()), ("server-sidecar", frozenset()), ("both-sidecars", frozenset()),
        ("server-sidecar", frozenset({"telemetry"})), ("both-sidecars", frozenset({"telemetry"})),
    }
    for run in batch.runs:
        m = run.manifest
        assert m.source == "istio-tools" and "2997c96673" in m.provenance
        assert "results-istio-1.2.0-fortio/" in m.provenance
        assert m.setup.mesh_version == "1.2.0" and m.setup.proxy_workers == 2 and m.setup.payload_bytes == 1024
        assert m.load.rps == 1000 and m.load.duration_s == 240 and f"_c_{m.load.connections}_" in m.provenance
        assert run.result.labels in m.provenance  # the file name carries fortio's Labels
        assert m.status == run.quality.status  # the manifest records what the reader detects
    assert by_mode[("both-sidecars", frozenset({"telemetry"}))].status == "saturated"


def test_every_measurement_folder_has_its_section_in_the_index() -> None:
    """measurements/README.md describes each folder under measurements/ in a section of its own (what it holds,
    where it came from): a folder added without one has no provenance a reader can find from the index."""
    root = measurements_dir()
    index = (root / "README.md").read_text()
    folders = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))
    assert len(folders) > 20
    assert [name for name in folders if f"\n## `{name}/`" not in index] == []


def test_every_published_table_loads_with_provenance() -> None:
    tables, errors = load_all()
    assert errors == []
    assert set(tables) >= {"paper001_latency", "paper001_cpu", "paper001_memory", "thesis000_response_time",
                           "thesis000_design", "thesis000_factor_influence", "course004_totals",
                           "blog003_curl_times", "blog003_summary"}
    for t in tables.values():
        assert t.meta.get("document") and t.meta.get("tables") and t.meta.get("units"), t.name
    lat = tables["paper001_latency"]
    # 3 rates x 4 percentiles x 5 repetitions x 4 setups
    assert len(lat.rows) == 240
    assert {r["rate_rps"] for r in lat.rows} == {50, 450, 3500}
    assert lat.where(table=1, repetition=1, mesh="istio")[0]["latency_ms"] == 29.33
    assert lat.where(table=16, repetition=5, mesh="linkerd")[0]["latency_ms"] == 168.54
    assert len(tables["paper001_cpu"].rows) == len(tables["paper001_memory"].rows) == 90


def test_blog_summary_is_the_mean_and_sd_of_its_samples() -> None:
    times = load_table("blog003_curl_times")
    for row in load_table("blog003_summary").rows:
        values = [r["time_ms"] for r in times.where(test=row["test"])]
        assert len(values) == 30
        assert statistics.mean(values) == pytest.approx(row["mean_ms"], abs=0.06)
        assert statistics.stdev(values) == pytest.approx(row["stdev_ms"], abs=0.06)


def test_thesis_table4_is_095_times_table3_as_the_index_warns() -> None:
    t = load_table("thesis000_response_time")
    means = {(r["istio_setup"], r["rate_rps"], r["payload_bytes"]): r["response_time_ms"] for r in t.where(table=3)}
    for r in t.where(table=4):
        assert r["response_time_ms"] / means[(r["istio_setup"], r["rate_rps"], r["payload_bytes"])] == \
            pytest.approx(0.95, abs=5e-4)
    assert "0.95" in t.meta["notes"]


def test_istio17_summary_table() -> None:
    t = load_table("istio17_telemetry_lowrate", measurements_dir() / "istio-1.7")
    assert len(t.rows) == 14 and "8a01e6a6fe" in t.meta["document"]
    assert t.meta["units"]["p50"] == "microseconds"


def _copy_published(tmp_path: Path) -> Path:
    folder = tmp_path / "published"
    shutil.copytree(measurements_dir() / "published", folder)
    return folder


def test_csv_missing_column_or_bad_cell_names_file_and_line(tmp_path: Path) -> None:
    folder = _copy_published(tmp_path)
    path = folder / "blog003_summary.csv"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(",".join(c for c in line.split(",")[:3]) for line in lines) + "\n")
    with pytest.raises(ModelError, match=f"{path}: missing column 'stdev_ms'"):
        load_table("blog003_summary", folder)
    cpu = folder / "paper001_cpu.csv"
    rows = cpu.read_text().splitlines()
    rows[1] = rows[1].replace("istio", "consul")
    cpu.write_text("\n".join(rows) + "\n")
    with pytest.raises(ModelError, match=r"paper001_cpu.csv: line 2: column mesh: 'consul' is not one of"):
        load_table("paper001_cpu", folder)
    tables, errors = load_all(folder)
    assert len(errors) == 2 and "paper001_latency" in tables and "blog003_curl_times" in tables
