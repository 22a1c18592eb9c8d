"""Benchmark (not collected by pytest): a lab fit's wall time, its families side by side against one process.

    .venv/bin/python tests/bench_lab_fit.py [--runs GLOB ...] [--rounds 1]

Fits the same runs (by default the shipped lab calibration's single-topology 1 KB runs: one connection at three
rates, the bursts, the batching probe and the load ladder, what `meshsim lab validate --plan small` fits) with the
three candidate families `meshsim calibrate --lab` uses, three ways in one sitting (order reversed every other
round, medians reported): as shipped (each component's families in forked workers, one per core; model files read
once per content), in one process, and in one process with every model file parsed at each load (the catalog's
cache off). Checks that all three wrote the same model. Listed in docs/performance.md (no figures quoted yet).
"""

from __future__ import annotations

import argparse
import glob
import statistics
import tempfile
import time
from pathlib import Path
from unittest import mock

import yaml

from meshsim import catalog
from meshsim.calibrate.fit import deconvolution
from meshsim.calibrate.fit.families import Family
from meshsim.calibrate.fit_runs import fit_runs

DEFAULT_RUNS = [f"measurements/lab-bursts-2026-11-27/calibration/lab-single-{setup}-q*-b1024-*"
                for setup in ("baseline", "server-sidecar", "sidecar")]
FAMILIES = [Family("lognormal", True), Family("gamma", True), Family("lognormal", True, True)]


def fitted(runs: list[Path], out: Path, mode: str) -> tuple[float, dict]:
    patches = []
    if mode != "workers":
        patches.append(mock.patch.object(deconvolution.os, "sched_getaffinity", lambda _pid: {0}))
    if mode == "one process, no model cache":
        patches.append(mock.patch.object(catalog, "LOADED_KEPT", 0))
    catalog.LOADED_MODELS.clear()
    for patch in patches:
        patch.start()
    try:
        started = time.perf_counter()
        fit_runs(runs, mesh="envoy-lab", out=out, families=FAMILIES)
        wall = time.perf_counter() - started
    finally:
        for patch in patches:
            patch.stop()
    model = yaml.safe_load(out.read_text())
    model.get("calibration", {}).pop("fitted_at", None)
    return wall, model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs="+", default=DEFAULT_RUNS, help="globs of run folders")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    runs = sorted(Path(p) for pattern in args.runs for p in glob.glob(pattern))
    if not runs:
        raise SystemExit(f"bench_lab_fit: no run folder matches {' '.join(args.runs)}")
    modes = ["workers", "one process", "one process, no model cache"]
    walls: dict[str, list[float]] = {m: [] for m in modes}
    models = []
    with tempfile.TemporaryDirectory(prefix="bench-fit-") as folder:
        for round_ in range(args.rounds):
            for mode in (modes if round_ % 2 == 0 else modes[::-1]):
                wall, model = fitted(runs, Path(folder) / "model.yaml", mode)
                walls[mode].append(wall)
                models.append(model)
                print(f"round {round_ + 1}: {mode}: {wall:.1f} s", flush=True)
    assert all(m == models[0] for m in models), "the modes wrote different models"
    reference = statistics.median(walls["one process, no model cache"])
    print(f"\n{len(runs)} runs, {len(FAMILIES)} families, {args.rounds} round(s); the same model every time")
    for mode in modes:
        wall = statistics.median(walls[mode])
        print(f"  {mode:<30} {wall:7.1f} s   {reference / wall:4.2f}x")


if __name__ == "__main__":
    main()
