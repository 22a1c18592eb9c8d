"""A Prometheus window as a summary row (what ``meshsim fit --prometheus`` appends and fits from), read back by
``read_rows`` with its checks; and the flags that describe a window, refused in one line before anything is asked."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from meshsim.calibrate.measure.prometheus.prom_histogram import Bucket
from meshsim.calibrate.measure.prometheus.prom_metric_sets import METRIC_SETS, selector
from meshsim.calibrate.measure.prometheus.prom_rows import RowMeaning, append_rows, window_row, reporter_of
from meshsim.calibrate.measure.prometheus.prom_window import WindowMeasure, parse_end, parse_window
from meshsim.calibrate.measure.summary_rows import read_rows
from meshsim.errors import MeshsimError

REPO = Path(__file__).resolve().parents[1]


def _window(rps: float = 200.0) -> WindowMeasure:
    buckets = (Bucket(1, 300), Bucket(2, 1500), Bucket(4, 1900), Bucket(10, 2000), Bucket(math.inf, 2000))
    return WindowMeasure("http://127.0.0.1:9090", METRIC_SETS["envoy"], '{workload="client"}', 1_800_000_000.0, 10.0,
                         2000, rps, buckets, {"client/sidecar": 0.05, "server/sidecar": 0.04, "server/app": 0.01},
                         {"client/sidecar": 70.0, "server/sidecar": 69.0})


def test_a_window_becomes_a_row_read_rows_accepts(tmp_path):
    csv = tmp_path / "rows.csv"
    append_rows(csv, [window_row(_window(), RowMeaning("none_mtls_baseline", 2))])
    append_rows(csv, [window_row(_window(300.0), RowMeaning("none_mtls_both", 2))])  # appended, header once
    rows, skipped = read_rows([csv])
    assert not skipped and [r.path for r in rows] == ["baseline", "both-sidecars"]
    row = rows[0]
    # Envoy records whole milliseconds (truncated): p50 (rank 1000) lies in (1, 2] ms, which holds the requests
    # recorded as 2 ms, so it is in [2, 3) ms: 2.5; p90 (rank 1800) in (2, 4], recorded 3 or 4: [3, 5) ms, 4.0
    assert row.quantiles_s[0.5] == pytest.approx(2.5e-3, rel=1e-4)
    assert row.quantiles_s[0.9] == pytest.approx(4.0e-3, rel=1e-4)
    assert row.rps == 200 and row.connections == 2 and row.duration_s == 10
    assert row.cpu_cores == pytest.approx({"client/sidecar": 0.05, "server/sidecar": 0.04})
    assert row.memory_mb == pytest.approx({"client/sidecar": 70.0, "server/sidecar": 69.0}, rel=1e-3)
    assert rows[1].rps == 300 and csv.read_text().count("StartTime") == 1


def test_rows_out_with_another_header_is_refused(tmp_path):
    other = tmp_path / "benchmark.csv"
    other.write_text("Labels,p50\nx,1\n")
    with pytest.raises(MeshsimError, match="header"):
        append_rows(other, [window_row(_window(), RowMeaning("none_mtls_both", 2))])
    assert other.read_text() == "Labels,p50\nx,1\n"  # nothing lost


@pytest.mark.parametrize("text, seconds", [("10m", 600), ("90s", 90), ("1h30m", 5400), ("1500ms", 1.5)])
def test_windows(text, seconds):
    assert parse_window(text) == seconds


@pytest.mark.parametrize("text", ["10", "10 m", "m10", "-5m", "0s", "500ms", "", "1h 30m", "10min"])
def test_bad_windows(text):
    with pytest.raises(MeshsimError, match="--window"):
        parse_window(text)


def test_ends_and_selectors():
    assert parse_end("1800000000") == 1.8e9
    assert parse_end("2027-01-15T08:00:00Z") == parse_end("2027-01-15T08:00:00")  # UTC unless it says otherwise
    with pytest.raises(MeshsimError, match="--end"):
        parse_end("yesterday")
    assert selector({"a": 'say "hi"\\'}) == '{a="say \\"hi\\"\\\\"}'


@pytest.mark.parametrize("argv, message", [
    (["validate", "--prometheus", "http://127.0.0.1:9", "--window", "10 minutes", "--model", "models/meshes/istio.yaml",
      "--topology", "single"], "--window '10 minutes'"),
    (["validate", "--prometheus", "http://127.0.0.1:9", "--window", "1m", "--model", "models/meshes/istio.yaml",
      "--topology", "single", "--metrics", "consul"], "--metrics 'consul'"),
    (["validate", "--window", "1m", "--model", "models/meshes/istio.yaml", "measurements"], "--window: applies only"),
    (["validate", "--prometheus", "http://127.0.0.1:9", "--window", "1m", "--model", "models/meshes/istio.yaml",
      "--topology", "single"], "unreachable"),  # port 9 (discard) on loopback: nothing listens
    (["fit", "--prometheus", "http://127.0.0.1:9", "--window", "1m", "--mesh", "m", "--out", "OUT"],
     "--prometheus: give --row-mode"),
])
def test_bad_prometheus_flags_are_one_line(tmp_path, argv, message):
    argv = [str(tmp_path / "m.yaml") if a == "OUT" else a for a in argv]
    out = subprocess.run([sys.executable, "-m", "meshsim", *argv], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2, out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert message in last and "Traceback" not in out.stderr


def test_a_sidecar_windows_row_says_the_callers_sidecar_kept_it(tmp_path):
    """Every shipped metric set is kept by the calling side's proxy: a row with sidecars on the path names the
    client's sidecar as its reporter (the fit compares that sidecar's own view); a bypassed row names none."""
    csv = tmp_path / "rows.csv"
    for mode in ("none_mtls_baseline", "none_mtls_both"):
        append_rows(csv, [window_row(_window(), RowMeaning(mode, 2, reporter=reporter_of(mode)))])
    rows, _ = read_rows([csv])
    assert [(r.path, r.reporter) for r in rows] == [("baseline", ""), ("both-sidecars", "client")]
