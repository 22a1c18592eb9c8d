"""Benchmark (not collected by pytest): a lab fit's wall time, its families side by side against one process, and
its wake-up loop's pass refits warm-started against fitted afresh.

    .venv/bin/python tests/bench_lab_fit.py [--runs GLOB ...] [--rounds 1]

Fits the same runs (by default the shipped lab calibration's single-topology 1 KB runs: one connection at three
rates, the bursts, the batching probe and the load ladder, what `meshsim lab validate --plan small` fits) with the
three candidate families `meshsim calibrate --lab` uses, four ways in one sitting (order reversed every other
round, medians reported): as shipped (each component's families in forked workers, one per core; model files read
once per content; the wake-up loop's refits of the passes warm-started from the last fit, its last refit
exploring), in one process, in one process with every model file parsed at each load (the catalog's cache off),
and in one process with every refit from the families' own starts (as before warm starts). Checks that the first
three wrote the same model, and prints how far the fourth's numbers are from it and each fit's family and AIC
(known parts that moved a little may tip AIC to another near-tied family). Figures in docs/performance.md.
"""

from __future__ import annotations

import argparse
import glob
import tempfile
import time
from pathlib import Path
from unittest import mock

import yaml

from bench_rounds import interleaved, print_medians
from meshsim import catalog
from meshsim.calibrate.fit import deconvolution
from meshsim.calibrate.fit.families import Family
from meshsim.calibrate.fit_runs import fit_runs
from meshsim.calibrate.load import wake_replays

DEFAULT_RUNS = [f"measurements/lab-bursts-2026-11-27/calibration/lab-single-{setup}-q*-b1024-*"
                for setup in ("baseline", "server-sidecar", "sidecar")]
FAMILIES = [Family("lognormal", True), Family("gamma", True), Family("lognormal", True, True)]
COLD_REFITS = "one process, refits from scratch"


def fitted(runs: list[Path], out: Path, mode: str) -> tuple[float, dict]:
    patches = []
    if mode != "workers":
        patches.append(mock.patch.object(deconvolution.os, "sched_getaffinity", lambda _pid: {0}))
    if mode == "one process, no model cache":
        patches.append(mock.patch.object(catalog, "LOADED_KEPT", 0))
    if mode == COLD_REFITS:
        afresh = wake_replays.decompose_with_cold_wakes
        patches.append(mock.patch.object(wake_replays, "decompose_with_cold_wakes",
                                         lambda *args, warm=None, explore=True, **kwargs: afresh(*args, **kwargs)))
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


def largest_difference(a: object, b: object, path: str = "") -> tuple[float, str]:
    """The largest relative difference between two models' numbers, and where (sources and notes left out)."""
    if isinstance(a, dict) and isinstance(b, dict):
        pairs = [largest_difference(a[k], b[k], f"{path}.{k}") for k in a.keys() & b.keys()
                 if k not in ("source", "sources", "notes", "description")]
        return max(pairs, default=(0.0, path))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and abs(a) > 1e-9:
        return abs(b - a) / abs(a), path
    return 0.0, path


def fit_summary(model: dict) -> str:
    """Each fitted component's chosen family and AIC (a refit may pick another near-tied family)."""
    fits = model.get("calibration", {}).get("goodness_of_fit", {})
    return "; ".join(f"{name} {fit.get('family')} AIC {fit.get('aic')}" for name, fit in sorted(fits.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs="+", default=DEFAULT_RUNS, help="globs of run folders")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    runs = sorted(Path(p) for pattern in args.runs for p in glob.glob(pattern))
    if not runs:
        raise SystemExit(f"bench_lab_fit: no run folder matches {' '.join(args.runs)}")
    modes = ["workers", "one process", "one process, no model cache", COLD_REFITS]
    with tempfile.TemporaryDirectory(prefix="bench-fit-") as folder:
        walls, models = interleaved(modes, args.rounds, lambda mode: fitted(runs, Path(folder) / "model.yaml", mode))
    shipped = [model for mode, model in models if mode != COLD_REFITS]
    assert all(m == shipped[0] for m in shipped), "the modes wrote different models"
    difference, where = max(largest_difference(shipped[0], m) for mode, m in models if mode == COLD_REFITS)
    print(f"\n{len(runs)} runs, {len(FAMILIES)} families, {args.rounds} round(s); the same model every time but "
          f"{COLD_REFITS!r}: numbers within {difference:.1%} of it (largest at {where})")
    for mode in (modes[0], COLD_REFITS):
        print(f"  {mode}: {fit_summary(next(m for name, m in models if name == mode))}")
    print_medians(walls, "one process, no model cache")


if __name__ == "__main__":
    main()
