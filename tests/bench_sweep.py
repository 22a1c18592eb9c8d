"""Benchmark (not collected by pytest): a 40-rate x 4-mesh sweep locally and on a Dask cluster; speed-up per worker.

    .venv/bin/python tests/bench_sweep.py [--topology chain3] [--rps 100:3000:40] [--duration 0.2] [--workers 2]

Runs the same 160-point grid ``--rounds`` times (the order reversed every other round; medians reported) (meshes none, istio, linkerd, traefik; 2 replications per point, seed 1), each time
with an empty cache: in 1 local process, in N local processes, on a Dask cluster of 1 worker and of N workers
(``distributed.LocalCluster``: one single-threaded worker process each, every socket on 127.0.0.1). Prints each wall
time, the speed-up over one worker and the speed-up per worker (speed-up / N: 1.0 is perfect scaling), and checks
that every run gave the same table. docs/performance.md quotes these figures.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import pandas as pd

from meshsim.request import PredictOptions
from meshsim.sim.experiments.sweep_points import sweep
from meshsim.sweep_grid import SweepGrid, parse_rps_range

MESHES = ("none", "istio", "linkerd", "traefik")


def timed(grid: SweepGrid, folder: Path, name: str, **how: object) -> tuple[float, pd.DataFrame]:
    started = time.perf_counter()
    result = sweep(grid, folder / f"{name}.csv", cache_dir=folder / f"cache-{name}", **how)  # type: ignore[arg-type]
    wall = time.perf_counter() - started
    assert result.computed == result.total, (name, result.computed)
    return wall, result.table


def _one_run(grid: SweepGrid, folder: Path, kind: str, workers: int) -> tuple[float, pd.DataFrame]:
    """One sweep with an empty cache: local processes, or a fresh LocalCluster of single-threaded workers."""
    from distributed import Client, LocalCluster

    folder.mkdir(parents=True, exist_ok=True)
    if kind == "local":
        return timed(grid, folder, f"local{workers}", processes=workers)
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster, Client(cluster) as client:
        client.wait_for_workers(workers)
        return timed(grid, folder, f"dask{workers}", scheduler=cluster.scheduler_address)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", default="chain3")
    parser.add_argument("--rps", default="100:3000:40")
    parser.add_argument("--duration", type=float, default=0.2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    grid = SweepGrid((args.topology,), MESHES, parse_rps_range(args.rps),
                     base=PredictOptions(duration_s=args.duration, replications=2, seed=1))
    points = len(grid.rps) * len(MESHES)
    n = args.workers
    walls: dict[str, list[float]] = {}
    tables = []
    runs = [("local", 1), ("local", n), ("dask", 1), ("dask", n)]
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):  # reverse the order every other round: a shared machine's load drifts
            for kind, workers in (runs if round_ % 2 == 0 else runs[::-1]):
                label = f"{kind}, {workers} " + ("process(es)" if kind == "local" else "worker(s)")
                wall, table = _one_run(grid, Path(tmp) / f"r{round_}", kind, workers)
                walls.setdefault(label, []).append(wall)
                tables.append(table)
    same = all(t.equals(tables[0]) for t in tables[1:])
    print(f"meshsim sweep benchmark: {args.topology}, {len(grid.rps)} rates x {len(MESHES)} meshes = {points} points, "
          f"{args.duration:g} s x 2 replications each; identical tables: {same}")
    median = {label: statistics.median(w) for label, w in walls.items()}
    for label, wall in median.items():
        each = ", ".join(f"{w:.1f}" for w in walls[label])
        print(f"  {label:<24} median {wall:7.1f} s   {points / wall:6.2f} points/s   (rounds: {each} s)")
    for kind, unit in (("local", "process(es)"), ("dask", "worker(s)")):
        speedup = median[f"{kind}, 1 {unit}"] / median[f"{kind}, {n} {unit}"]
        print(f"  {kind}: speed-up with {n} workers {speedup:.2f}x, per worker {speedup / n:.2f}")


if __name__ == "__main__":
    main()
