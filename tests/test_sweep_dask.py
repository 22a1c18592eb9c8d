"""``meshsim sweep --scheduler``: a real Dask scheduler and two real workers on 127.0.0.1, started by the test.

The same grid and seeds give the same table on the cluster as in local processes, to the last digit: a point is a
plain function of its options."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pandas as pd
import pytest

from meshsim.request import PredictOptions
from meshsim.sim.experiments.sweep_points import connect_scheduler, sweep
from meshsim.sweep_grid import SweepGrid
from conftest import free_port

pytest.importorskip("distributed")


def _dask(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_" + args[0], *args[1:]],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    """``dask scheduler`` + 2 single-threaded ``dask worker`` processes, every socket on 127.0.0.1."""
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    procs = [_dask("scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard")]
    procs += [_dask("worker", address, "--host", "127.0.0.1", "--nthreads", "1", "--no-nanny", "--no-dashboard")
              for _ in range(2)]
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                client = connect_scheduler(address)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        client.wait_for_workers(2, timeout=60)
        client.close()
        yield address
    finally:
        for proc in reversed(procs):  # workers first, while their scheduler can still hear them leave
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)


def test_a_sweep_on_dask_gives_the_local_numbers(scheduler: str, tmp_path: Path) -> None:
    grid = SweepGrid(("single",), ("none", "istio"), (200.0, 300.0, 400.0), ((),), base=PredictOptions(
        duration_s=0.3, replications=2, seed=11))
    said: list[str] = []
    remote = sweep(grid, tmp_path / "dask.csv", cache_dir=tmp_path / "dask-cache", scheduler=scheduler,
                   progress=said.append)
    # each worker loads (or builds) the compiled engine before the first point, and the sweep says so
    assert said == ["loading the compiled engine on 2 Dask worker(s) (a worker without it in its cache "
                    "builds it first: up to four minutes)"]
    local = sweep(grid, tmp_path / "local.csv", cache_dir=tmp_path / "local-cache", processes=2)
    assert (remote.computed, local.computed) == (6, 6) and not remote.interrupted
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "dask.csv"), pd.read_csv(tmp_path / "local.csv"),
                                  check_exact=True)
    # the cache is shared by both roads: a rerun on the cluster computes nothing
    assert sweep(grid, tmp_path / "again.csv", cache_dir=tmp_path / "local-cache", scheduler=scheduler).computed == 0
