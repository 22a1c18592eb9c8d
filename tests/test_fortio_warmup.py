"""fortio's warm-up calls: the version table, exact timelines, nothing of them measured, and real fortio agreeing."""

from __future__ import annotations

import json
import re
import subprocess
from datetime import datetime
from pathlib import Path

import pytest
from conftest import fortio_echo_server, require_component

from meshsim.calibrate.measure.fortio_result import parse_result
from meshsim.calibrate.measure.tables import measurements_dir
from meshsim.distributions import Deterministic
from meshsim.errors import FieldError
from meshsim.fortio_warmup import FORTIO_WARMUP, warmup_mode
from meshsim.sim.engine.replication_result import Horizon
from meshsim.sim.engine.simpy_replication import run_replication
from meshsim.sim.experiments.predict import predict
from meshsim.workload import FortioLoad, Workload, validate_load
from simkit import plain, station_topology
from test_loadgen import fortio_calls

# -- the version table ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version, mode", [("1.3.1", "sequential"), ("1.11.0", "sequential"),
                                           ("1.20.1", "sequential"), ("1.21.0", "parallel"),
                                           ("v1.60.3", "parallel"), ("1.68.2", "parallel")])
def test_default_warmup_per_version(version, mode):
    assert warmup_mode(version) == mode


def test_requested_warmups_only_where_fortio_has_them():
    assert warmup_mode("1.68.2", "sequential") == "sequential"  # -sequential-warmup
    assert warmup_mode("1.3.1", "none") == warmup_mode("1.68.2", "none") == "none"  # -exactly runs
    with pytest.raises(FieldError, match=r"^fortio_warmup: fortio 1.21.0 has no sequential warm-up"):
        warmup_mode("1.21.0", "sequential")
    with pytest.raises(FieldError, match=r"^fortio_warmup: fortio 1.3.1 has no parallel warm-up .*came in 1.21"):
        warmup_mode("1.3.1", "parallel")
    with pytest.raises(FieldError, match=r"^fortio_warmup: 'eager' is not a warm-up"):
        warmup_mode("1.68.2", "eager")


def test_bad_versions_name_the_flag():
    with pytest.raises(FieldError, match=r"^fortio_version: 'latest' is not a fortio version") as bad:
        validate_load(FortioLoad(100, 4, version="latest"))
    assert bad.value.field == "fortio_version"  # the CLI says it as --fortio-version
    with pytest.raises(FieldError, match=r"^fortio_version: fortio 1.2.0 is older than .*\(1.3.1\)"):
        validate_load(FortioLoad(100, 4, version="1.2.0"))


def test_table_rows_are_ordered_and_sourced():
    assert [r.since for r in FORTIO_WARMUP] == sorted(r.since for r in FORTIO_WARMUP)
    assert all(re.search(r"v\d+\.\d+\.\d+ .*httprunner\.go", r.source) for r in FORTIO_WARMUP)


def test_results_say_which_warmup_fortio_did():
    lab = next((measurements_dir() / "lab-envoy-2026-11-22").rglob("fortio.json"))
    data = json.loads(lab.read_text())
    assert (data["Version"], data["Exactly"], data["SequentialWarmup"]) == ("1.68.2", 0, False)
    r = parse_result(data, str(lab))
    assert (r.version, r.warmup) == ("1.68.2", None)  # the version's default: parallel
    assert parse_result({**data, "SequentialWarmup": True}, str(lab)).warmup == "sequential"
    assert parse_result({**data, "Exactly": 300}, str(lab)).warmup == "none"
    old = parse_result(json.loads(next((measurements_dir() / "istio-1.2.0").rglob("fortio.json")).read_text()), "x")
    assert (old.version, old.warmup) == ("1.3.1", None) and warmup_mode(old.version, old.warmup) == "sequential"


# -- exact timelines (deterministic 5 ms server) -------------------------------------------------------------------

def test_parallel_warmup_is_one_call_then_all_threads_start():
    # 200 rps, 4 threads, 0.1 s: 5 calls per thread at 0, 25, 50, 75, 100 ms from the timed start
    threads, origin, recorded = fortio_calls(FortioLoad(200, 4), 0.1, service=0.005, servers=4)
    assert origin == 5.0  # every warm-up sent at 0, back at 5 ms
    for tid in range(4):
        assert threads[tid] == [(0.0, 5.0), (5.0, 5.0), (30.0, 5.0), (55.0, 5.0), (80.0, 5.0), (105.0, 5.0)]
    assert len(recorded) == 20 and min(s for s, _ in recorded) == pytest.approx(0.005)  # warm-ups not recorded


def test_parallel_warmups_queue_on_one_core():
    threads, origin, _ = fortio_calls(FortioLoad(200, 4), 0.1, service=0.005, servers=1)
    assert [threads[tid][0] for tid in range(4)] == [(0.0, 5.0), (0.0, 10.0), (0.0, 15.0), (0.0, 20.0)]
    assert origin == 20.0  # errgroup.Wait(): the timed run waits for the last warm-up
    assert [threads[tid][1][0] for tid in range(4)] == [20.0] * 4


@pytest.mark.parametrize("load", [FortioLoad(200, 4, version="1.3.1"), FortioLoad(200, 4, warmup="sequential")])
def test_sequential_warmup_is_one_call_after_another(load):
    threads, origin, recorded = fortio_calls(load, 0.1, service=0.005, servers=4)
    assert [threads[tid][0] for tid in range(4)] == [(0.0, 5.0), (5.0, 5.0), (10.0, 5.0), (15.0, 5.0)]
    assert origin == 20.0
    assert [[s for s, _ in threads[tid][1:]] for tid in range(4)] == [[20.0, 45.0, 70.0, 95.0, 120.0]] * 4
    assert len(recorded) == 20


def test_no_warmup_for_exactly_runs():
    threads, origin, recorded = fortio_calls(FortioLoad(200, 4, warmup="none"), 0.1, service=0.005, servers=4)
    assert origin == 0.0 and sum(len(c) for c in threads.values()) == len(recorded) == 20


# -- the measured run ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("version, start", [("1.68.2", 0.005), ("1.3.1", 0.020)])
def test_warmups_are_outside_count_rate_and_busy_time(version, start):
    scenario = plain(station_topology(Deterministic(0.005), servers=4))
    r = run_replication(scenario, Workload(FortioLoad(200, 4, version=version)), Horizon(1.0), 1, 0)
    assert r.load_start == pytest.approx(start)
    assert r.completed == 200 and r.in_flight == 0  # int(200 * 1) timed calls; the 4 warm-ups are not in
    # elapsed from the timed start to the last thread's end: last call sent 1 s after the start, 5 ms long
    assert r.window == pytest.approx(1.005) and r.achieved_rps == pytest.approx(200 / 1.005)
    assert r.busy_window == pytest.approx(1.0)
    bare = run_replication(scenario, Workload(FortioLoad(200, 4, warmup="none")), Horizon(1.0), 1, 0)
    assert bare.load_start == 0.0 and list(bare.latencies) == pytest.approx(list(r.latencies))
    # the busy window holds the same timed calls with and without warm-up: the warm-ups' work is not in it
    assert r.started == bare.started >= 196 and r.usage["q/app"].jobs == bare.usage["q/app"].jobs == r.started
    assert r.usage["q/app"].cpu_seconds == pytest.approx(r.started * 0.005)


@pytest.mark.slow
def test_short_and_long_runs_agree_with_64_mtls_connections():
    """Issue 12: a short default run booked all 64 handshakes in the timed window (p99 ~4x the long run's). Since
    2026-11-25 a proxy pair makes one mTLS session whatever the client's connections (tests/test_mtls_sessions.py,
    where the model of a session per client connection fails), and fortio's warm-up makes it before the window."""
    kwargs = dict(rps=1000, load="fortio", features=["mtls"], connections=64, replications=4, processes=1,
                  saturation=False)
    short = predict("single", "istio", **kwargs).latency["p99"]  # the default: 5000 requests, 5 s
    long = predict("single", "istio", duration_s=15.0, **kwargs).latency["p99"]
    assert abs(short.value - long.value) <= short.half_width + long.half_width, (short, long)


# -- real fortio ---------------------------------------------------------------------------------------------------


def _fortio_run(fortio: Path, port: int, extra: list[str]) -> tuple[dict, str]:
    done = subprocess.run([str(fortio), "load", "-c", "4", "-qps", "40", "-t", "1s", "-json", "-", *extra,
                           f"http://127.0.0.1:{port}/echo?delay=150ms"],
                          check=True, capture_output=True, text=True, timeout=60)
    return json.loads(done.stdout), done.stderr


def _warmup_seconds(result: dict, log: str) -> float:
    """From fortio's 'Starting http test' log line (just before the warm-up) to its timed run's StartTime."""
    began = next(json.loads(line)["ts"] for line in log.splitlines()
                 if line.startswith("{") and '"Starting http test"' in line)
    stamp = re.sub(r"(\.\d{6})\d*", r"\1", result["StartTime"]).replace("Z", "+00:00")
    return datetime.fromisoformat(stamp).timestamp() - began


@pytest.mark.lab
def test_real_fortio_counts_and_times_like_the_model(tmp_path: Path) -> None:
    """fortio 1.68.2 with a 150 ms echo and 4 connections: 1 s gives 7 timed calls per thread (sent at 0, 150, ...,
    900 ms of the timed run; 1050 ms is past the deadline) only if the deadline counts from after the warm-ups."""
    fortio = require_component("fortio")
    with fortio_echo_server(fortio, tmp_path) as port:
        runs = {mode: _fortio_run(fortio, port, flags) for mode, flags in
                (("parallel", []), ("sequential", ["-sequential-warmup"]))}
    scenario = plain(station_topology(Deterministic(0.150), servers=4))
    measured, modelled = {}, {}
    for mode, (result, log) in runs.items():
        assert result["Version"] == "1.68.2" and warmup_mode(result["Version"]) == "parallel"
        model = run_replication(scenario, Workload(FortioLoad(40, 4, warmup=mode)), Horizon(1.0), 1, 0)
        assert model.completed == result["DurationHistogram"]["Count"] == 28, mode
        assert "All done 28 calls (plus 4 warmup)" in log
        assert parse_result(result, mode).warmup == (None if mode == "parallel" else "sequential")
        # real time only adds to the model's (process start-up, connects, a loaded 2-core machine)
        measured[mode], modelled[mode] = _warmup_seconds(result, log), model.load_start
        assert modelled[mode] - 0.005 <= measured[mode] <= modelled[mode] + 0.25, (mode, measured[mode])
        assert model.window - 0.005 <= result["ActualDuration"] / 1e9 <= model.window + 0.1, mode
    assert modelled == pytest.approx({"parallel": 0.15, "sequential": 0.6})  # 1 vs 4 warm-ups of 150 ms
    assert measured["sequential"] - measured["parallel"] >= 0.3, measured
