"""Benchmark (not collected by pytest): what a fresh process pays before the compiled engine simulates, on each of
the loop's paths (sim/fast/fast_native.py).

    .venv/bin/python tests/bench_startup.py [--rounds 5] [--cold]

Fresh interpreters, the paths alternately with references timed in the same run (a busy spell of the shared machine
hits them alike), each figure the median wall time of the whole process:

- references: ``python -c pass``, ``import numpy``, ``import numba``;
- loading the loop (``load_compiled``: the loop, then a tiny replication) from the native module, and from numba's
  JIT cache (``MESHSIM_NATIVE_LOOP=0``); with ``--cold``, once each, the JIT with an empty cache (numba compiles)
  and the native module's first build (numba compiles, numba.pycc links) in an empty NUMBA_CACHE_DIR;
- a whole ``meshsim predict --topology chain3 --rps 3500`` from the native module and from the JIT cache.

Each figure is printed in seconds and as a multiple of ``python -c pass`` and of numba's import: the multiples
travel between machines better than the seconds.
"""

from __future__ import annotations

import argparse
import tempfile

import numpy as np

from bench_engine import FRESH_PREDICT, in_fresh_interpreter

REFERENCES = {"python -c pass": "print('{}')", "import numpy": "import numpy; print('{}')",
              "import numba": "import numba; print('{}')"}
LOAD = ("import json, sys\n"
        "from meshsim.sim.fast.fast_engine import load_compiled\n"
        "load_compiled()\n"
        "print(json.dumps({'numba_imported': 'numba' in sys.modules}))\n")
NATIVE, JIT = {}, {"MESHSIM_NATIVE_LOOP": "0"}


def warm_paths(predict: str) -> dict[str, tuple[str, dict]]:
    """The paths timed every round: label -> (code, environment)."""
    return {**{name: (code, {}) for name, code in REFERENCES.items()},
            "load the loop: native module": (LOAD, NATIVE), "load the loop: numba's JIT cache": (LOAD, JIT),
            "predict chain3: native module": (predict, NATIVE), "predict chain3: numba's JIT cache": (predict, JIT)}


def cold_paths() -> dict[str, float]:
    """The first load with an empty cache, once each (minutes, not seconds): the JIT's compile, the native build."""
    seconds = {}
    for label, env in (("load the loop: numba's JIT, empty cache", JIT),
                       ("load the loop: native module's first build", NATIVE)):
        with tempfile.TemporaryDirectory() as cache:
            seconds[label] = in_fresh_interpreter(LOAD, {**env, "NUMBA_CACHE_DIR": cache})["process_s"]
    return seconds


def report(seconds: dict[str, float]) -> None:
    base, numba = seconds["python -c pass"], seconds["import numba"]
    for label, value in seconds.items():
        print(f"  {label:45s} {value:8.3f} s  {value / base:7.1f} x python -c pass  {value / numba:6.2f} x numba's "
              f"import")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cold", action="store_true", help="also time the first load with an empty cache")
    args = parser.parse_args()
    paths = warm_paths(FRESH_PREDICT.format(topology="chain3", rps=3500.0))
    for code, env in paths.values():  # writes the bytecode cache (and builds the loop if missing); not counted
        in_fresh_interpreter(code, env)
    runs: dict[str, list[float]] = {label: [] for label in paths}
    for _ in range(args.rounds):
        for label, (code, env) in paths.items():
            run = in_fresh_interpreter(code, env)
            runs[label].append(run["process_s"])
            if env is NATIVE and run.get("numba_imported"):
                raise SystemExit(f"{label}: numba was imported (the native module was not loaded)")
    seconds = {label: float(np.median(values)) for label, values in runs.items()}
    if args.cold:
        seconds.update(cold_paths())
    import numba

    print(f"fresh processes, medians of {args.rounds} interleaved rounds (numba {numba.__version__}):")
    report(seconds)


if __name__ == "__main__":
    main()
