"""The kernel's run-queue delay of real processes (calibrate/measure/lab/run_queue.py): two CPU-bound processes
pinned to one core each wait about as long as the other runs; a sleeping one waits almost nothing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from meshsim.calibrate.measure.lab import run_queue
from meshsim.calibrate.measure.lab.run_queue import ThreadSched
from meshsim.calibrate.measure.lab.supervisor import cpu_seconds_of

SPIN = "import os, time\nos.sched_setaffinity(0, {CORE})\nend = time.monotonic() + 30\nwhile time.monotonic() < end: pass\n"
SLEEP = "import time\ntime.sleep(30)\n"


def _start(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL)


def _wait_running(procs: dict[str, subprocess.Popen[bytes]], cpu_s: float = 0.05, limit_s: float = 30.0) -> None:
    """Poll until each spinner has burnt some CPU (started and pinned), with a generous deadline."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if all((cpu_seconds_of(p.pid) or 0.0) >= cpu_s for p in procs.values()):
            return
        time.sleep(0.05)
    raise AssertionError("the spinners did not start")


def _bracketed(pids: dict[str, int]) -> tuple[run_queue.Snapshot, dict[str, tuple[float, float]]]:
    """The scheduler counters, and each process's CPU clock read just before and just after them (a spinner runs on
    while this reads, however long a busy machine keeps the reader off its core)."""
    first = {k: cpu_seconds_of(p) or 0.0 for k, p in pids.items()}
    snap = run_queue.snapshot(pids)
    return snap, {k: (first[k], cpu_seconds_of(p) or 0.0) for k, p in pids.items()}


@pytest.mark.skipif(not os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/schedstat"),
                    reason="a kernel without per-thread schedstat")
def test_two_spinners_on_one_core_wait_for_each_other() -> None:
    core = min(os.sched_getaffinity(0))
    procs = {name: _start(SPIN.replace("CORE", str(core))) for name in ("a", "b")}
    procs["sleeper"] = _start(SLEEP)
    try:
        _wait_running({k: procs[k] for k in ("a", "b")})
        pids = {name: p.pid for name, p in procs.items()}
        before, cpu0 = _bracketed(pids)
        time.sleep(1.0)
        after, cpu1 = _bracketed(pids)
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
    done = run_queue.over_load(before, after)
    a, b, sleeper = done["a"], done["b"], done["sleeper"]
    for name, d in (("a", a), ("b", b)):  # the counters' run time is the CPU clock's (both from the same runtime)
        (low0, high0), (low1, high1) = cpu0[name], cpu1[name]
        assert low1 - high0 - 1e-6 <= d.run_ns / 1e9 <= high1 - low0 + 1e-6
    # each is runnable all along, so it waits at least while the other runs (other load on the core adds to both)
    assert a.wait_ns >= 0.8 * b.run_ns and b.wait_ns >= 0.8 * a.run_ns, (a, b)
    assert a.involuntary > 0 and b.involuntary > 0  # taken off the core while runnable
    assert sleeper.run_ns < 0.01 * a.run_ns and sleeper.wait_ns < 0.05 * a.wait_ns
    summary = run_queue.summary(done, requests=1000)
    assert summary["a"]["wait_ms_per_request"] == pytest.approx(a.wait_ns / 1e6 / 1000, rel=1e-3)
    assert summary["a"]["wait_ms_per_timeslice"] == pytest.approx(a.wait_ns / 1e6 / a.slices, rel=1e-3)


def test_threads_add_up_per_component_and_a_new_thread_counts_from_zero() -> None:
    before = {"s1/app": {1: ThreadSched(10, 5, 1)}, "s1/app#2": {7: ThreadSched(0, 0, 0)}}
    after = {"s1/app": {1: ThreadSched(30, 15, 3, 2, 1), 2: ThreadSched(4, 6, 2)}, "s1/app#2": {7: ThreadSched(1, 1, 1)}}
    done = run_queue.over_load(before, after, lambda name: name.split("#")[0])
    assert done == {"s1/app": ThreadSched(20 + 4 + 1, 10 + 6 + 1, 2 + 2 + 1, 2, 1)}


def test_a_gone_process_reads_as_no_threads_and_the_slice_is_read_or_absent() -> None:
    proc = _start("pass")
    proc.wait()
    assert run_queue.process_threads(proc.pid) == {}
    slice_ms = run_queue.kernel_slice_ms()
    assert slice_ms is None or 0.05 < slice_ms < 100
    assert run_queue.run_files({}, 10, slice_ms) is None


SHIPPED = Path(__file__).resolve().parents[1] / "measurements" / "lab-runqueue-2026-11-27" / "runs" / "chain3-c16-q700"


def test_validate_sets_each_processes_measured_wait_beside_the_models(tmp_path: Path) -> None:
    from meshsim.calibrate.measure.dataset import load_run
    from meshsim.calibrate.validation.run_queue_check import run_queue_metrics
    from meshsim.errors import MeshsimError

    folder = sorted(p.parent for p in SHIPPED.glob("*/manifest.yaml"))[0]
    measured = json.loads((folder / run_queue.FILE_NAME).read_text())["components"]
    pred = {"cpu_wait_ms_per_request": {"s1/app": 0.2, "s1/sidecar": 0.3, "elsewhere": 1.0}}
    metrics, notes = run_queue_metrics(load_run(folder), pred)
    assert set(metrics) == {"s1/app", "s1/sidecar"}  # components both sides have
    assert metrics["s1/app"].measured == measured["s1/app"]["wait_ms_per_request"] and metrics["s1/app"].predicted == 0.2
    assert len(notes) == 1 and "kernel slice" in notes[0]
    copy = tmp_path / "run"
    shutil.copytree(folder, copy)
    (copy / run_queue.FILE_NAME).write_text("{not json")
    with pytest.raises(MeshsimError, match="run-queue.json: not a run-queue file"):
        run_queue_metrics(load_run(copy), pred)
