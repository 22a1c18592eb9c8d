"""``meshsim sweep`` locally: the grid, the rows, the content-hash cache, resuming, interrupts and bad input."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from meshsim.errors import FieldError
from meshsim.request import PredictOptions
from meshsim.sim.experiments.predict import predict_options
from meshsim.sim.experiments.sweep_cache import PointCache, point_key
from meshsim.sim.experiments.sweep_points import point_row, sweep
from meshsim.sweep_grid import SweepGrid, parse_feature_sets, parse_rps_range
from conftest import free_port
from meshsim.cli import main

BASE = PredictOptions(duration_s=0.3, replications=2, seed=3)
KEYS = ["topology", "mesh", "features", "lb", "load", "rps"]


def small_grid(**changes: object) -> SweepGrid:
    fields = dict(topologies=("single",), meshes=("none", "istio"), rps=(200.0, 400.0), base=BASE)
    fields.update(changes)
    return SweepGrid(**fields)  # type: ignore[arg-type]


def test_rps_range_and_feature_sets_parse() -> None:
    assert parse_rps_range("100:400:4") == (100.0, 200.0, 300.0, 400.0)
    assert parse_rps_range("250:250:1") == (250.0,)
    assert parse_feature_sets("none,mtls,mtls+tracing") == ((), ("mtls",), ("mtls", "tracing"))
    for bad in ("100:400", "0:400:3", "400:100:3", "100:400:0", "a:b:c", "100:400:1", "100:inf:3"):
        with pytest.raises(FieldError) as info:
            parse_rps_range(bad)
        assert info.value.field == "rps"


def test_the_grid_is_validated_once_before_any_point_runs(tmp_path: Path) -> None:
    with pytest.raises(FieldError) as info:
        sweep(small_grid(meshes=("istio", "nosuchmesh")), tmp_path / "o.csv", cache_dir=tmp_path / "c")
    assert info.value.field == "mesh"
    with pytest.raises(FieldError) as info:
        sweep(small_grid(feature_sets=(("nosuchfeature",),)), tmp_path / "o.csv", cache_dir=tmp_path / "c")
    assert info.value.field == "features"
    assert not (tmp_path / "c").exists() and not (tmp_path / "o.csv").exists()


def test_rows_are_the_predictions_and_the_cache_resumes(tmp_path: Path) -> None:
    grid = small_grid()
    seen: list[tuple[int, int]] = []
    first = sweep(grid, tmp_path / "a.csv", cache_dir=tmp_path / "cache", processes=2,
                  on_point=lambda d, t: seen.append((d, t)))
    table = pd.read_csv(tmp_path / "a.csv")
    assert (first.total, first.computed, len(table)) == (4, 4, 4) and seen[0] == (0, 4) and seen[-1] == (4, 4)
    assert list(table[KEYS].itertuples(index=False, name=None)) == [
        ("single", "none", "none", "client", "open", 200.0), ("single", "none", "none", "client", "open", 400.0),
        ("single", "istio", "none", "client", "open", 200.0), ("single", "istio", "none", "client", "open", 400.0)]
    for key in ("p50", "p90", "p99", "p999", "max"):
        assert (table[f"{key}_ms_lo"] <= table[f"{key}_ms"]).all() and (table[f"{key}_ms"] <= table[f"{key}_ms_hi"]).all()
    assert {"achieved_rps", "bottleneck", "bottleneck_utilization", "saturated", "cpu_server/sidecar"} <= set(table.columns)
    # the grid's feature set is "none" (the defaults alone); istio's default telemetry is what was on
    assert list(table["active_features"]) == ["none", "none", "telemetry", "telemetry"]
    # a row is exactly the prediction of its options (the same seed gives the same numbers)
    point = grid.points()[3]
    direct = predict_options(point.options)
    assert table.loc[3, "p99_ms"] == pytest.approx(direct.latency["p99"].value * 1e3, rel=1e-12)
    assert table.loc[3, "cpu_server/sidecar"] == pytest.approx(direct.cpu_cores["server/sidecar"], rel=1e-12)
    assert table.loc[3, "p50_ms"] > table.loc[1, "p50_ms"]  # istio's sidecars add latency to the bare service
    again = sweep(grid, tmp_path / "b.csv", cache_dir=tmp_path / "cache")
    assert again.computed == 0
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "b.csv"), table)
    # another seed is another content hash: every point runs again
    assert sweep(small_grid(base=BASE.with_changes(seed=4)), tmp_path / "c.csv", cache_dir=tmp_path / "cache",
                 processes=2).computed == 4


def test_the_cache_key_follows_the_content_not_the_name(tmp_path: Path) -> None:
    options = small_grid().points()[0].options
    assert point_key(options) == point_key(small_grid().points()[0].options)
    assert point_key(options) != point_key(options.with_changes(rps=201.0))
    edited = tmp_path / "single.yaml"
    from meshsim.catalog import builtin_file  # the shipped file, copied and changed by one byte of comment

    text = builtin_file("topologies", "single").read_text(encoding="utf-8")  # type: ignore[union-attr]
    edited.write_text(text, encoding="utf-8")
    same = small_grid(topologies=(str(edited),)).points()[0].options
    edited.write_text(text + "\n# changed\n", encoding="utf-8")
    changed = small_grid(topologies=(str(edited),)).points()[0].options
    assert point_key(same) != point_key(changed)
    cache = PointCache(tmp_path / "c")
    cache.put("ab" * 32, {"p99_ms": 1.5, "x": math.nan})
    assert cache.get("ab" * 32)["p99_ms"] == 1.5 and cache.get("cd" * 32) is None


def test_parquet_and_html_outputs(tmp_path: Path) -> None:
    from meshsim.cli.sweep_page import write_sweep_page

    result = sweep(small_grid(meshes=("none",)), tmp_path / "a.parquet",
                   report=lambda table: write_sweep_page(table, tmp_path / "a.html"), cache_dir=tmp_path / "cache")
    table = pd.read_parquet(tmp_path / "a.parquet")
    assert len(table) == 2 and result.finished == 2
    html = (tmp_path / "a.html").read_text(encoding="utf-8")
    assert "single \\u002f none \\u002f none \\u002f client \\u002f open" in html and "p99 latency (ms)" in html


def _meshsim(*args: str, **kw: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "meshsim", *args], capture_output=True, text=True, timeout=120,
                          **kw)  # type: ignore[call-overload]


@pytest.mark.parametrize("args, flag", [
    (["--rps", "400:100:3"], "--rps"),
    (["--rps", "100:400"], "--rps"),
    (["--rps", "100:400:3", "--mesh", "istio,nosuchmesh"], "--mesh"),
    (["--rps", "100:400:3", "--vary", "features=none,nosuch"], "--vary"),
    (["--rps", "100:400:3", "--vary", "lb=client"], "--vary"),
    (["--rps", "100:400:3", "--out", "x.txt"], "--out"),
    (["--rps", "100:400:3", "--scheduler", "tcp://127.0.0.1:PORT"], "--scheduler"),
])
def test_bad_input_is_one_line_naming_the_flag(tmp_path: Path, args: list[str], flag: str,
                                               capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    # nobody listens there: no need to wait
    monkeypatch.setattr("meshsim.sim.experiments.sweep_points.CONNECT_TIMEOUT_S", 1.0)
    args = [a.replace("PORT", str(free_port())) for a in args]
    if "--out" not in args:
        args += ["--out", str(tmp_path / "o.csv")]
    assert main(["sweep", "--topology", "single", *args, "--cache", str(tmp_path / "c")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"meshsim: error: {flag}:"), lines
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_an_interrupt_keeps_the_finished_points_and_a_rerun_resumes(tmp_path: Path, sig: signal.Signals) -> None:
    cache, out = tmp_path / "cache", tmp_path / "o.csv"
    # 24 points of ~0.1 s each: the sweep cannot end between its first cached point and the signal (8 short points
    # on the compiled engine once did)
    args = ["sweep", "--topology", "single", "--mesh", "istio", "--rps", "100:800:24", "--duration", "1.0",
            "--processes", "1", "--seed", "5", "--out", str(out), "--cache", str(cache), "--no-progress"]
    proc = subprocess.Popen([sys.executable, "-m", "meshsim", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 90
    while not list(cache.rglob("*.json")) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    finished = len(pd.read_csv(out))
    assert 1 <= finished < 24 and f"interrupted after {finished} of 24 points" in err
    assert len(list(cache.rglob("*.json"))) >= finished and not list(cache.rglob("*.tmp"))
    time.sleep(0.5)
    # the worker it started is gone with it: nothing is left in its session
    left = subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert left == [], left
    if sig != signal.SIGTERM:
        return
    rerun = _meshsim(*args)
    assert rerun.returncode == 0, rerun.stderr
    assert "24 of 24 points" in rerun.stdout
    computed = int(rerun.stdout.split("(")[1].split(" computed")[0])
    assert computed <= 24 - finished and len(pd.read_csv(out)) == 24


def test_the_compile_is_announced_and_done_once_before_the_first_point(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh install's first sweep spent 100 s on its first point, silently: every forked worker compiled the
    compiled engine on its own. The sweep loads it in the parent, before the first point and before forking, and
    says so when the compiled loop is not on disk (an empty NUMBA_CACHE_DIR here, where the native module lives too;
    the loop is already loaded in this process, so nothing is actually built)."""
    from meshsim.sim.fast.fast_engine import load_compiled
    from meshsim.sim.engine_choice import COMPILING

    load_compiled()
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "empty-numba-cache"))
    events: list = []
    sweep(small_grid(), cache_dir=tmp_path / "cache", processes=2, on_point=lambda d, t: events.append((d, t)),
          progress=events.append)
    assert events[:2] == [COMPILING, (0, 4)] and events.count(COMPILING) == 1 and events[-1] == (4, 4)
    events.clear()
    sweep(small_grid(), cache_dir=tmp_path / "cache", on_point=lambda d, t: events.append((d, t)),
          progress=events.append)
    assert events == [(4, 4)]  # all from the cache: nothing to compile
    simpy_only = small_grid(base=BASE.with_changes(engine="simpy"))
    sweep(simpy_only, cache_dir=tmp_path / "cache", processes=2, on_point=lambda d, t: None, progress=events.append)
    assert events == [(4, 4)]  # the reference engine needs no compiled code
