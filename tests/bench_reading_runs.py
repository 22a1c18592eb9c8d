"""Benchmark (not collected by pytest): reading the shipped measurements, as the Dash app does at start-up.

    .venv/bin/python tests/bench_reading_runs.py [--rounds 3]

Three ways in one sitting (order reversed every other round, medians reported): as shipped (access logs by blocks,
each block's fortio lines by one regular expression; manifests through libyaml's parser), with every access-log
line through the JSON parser (as before), and with that and every manifest through PyYAML's Python parser as well.
Checks that all three read the same runs. Figures in docs/performance.md.
"""

from __future__ import annotations

import argparse
import time
from contextlib import ExitStack
from pathlib import Path
from unittest import mock

import yaml

from bench_rounds import interleaved, print_medians
from meshsim import yamlio
from meshsim.calibrate.measure import fortio_access_log
from meshsim.dash_app.measured import default_dirs, load_measurements

MODES = ("as shipped", "log lines by JSON", "log lines by JSON, manifests by Python YAML")


def read(mode: str) -> tuple[float, tuple]:
    with ExitStack() as patches:
        if mode != "as shipped":
            patches.enter_context(mock.patch.object(fortio_access_log, "_block_latencies",
                                                    fortio_access_log.latencies_by_line))
        if mode == MODES[2]:
            # PyYAML's own SafeLoader: the Python parser yamlio's loader had, without its duplicate-key check (a
            # small share of the constructor's work, which is Python either way)
            patches.enter_context(mock.patch.object(yamlio, "StrictSafeLoader", yaml.SafeLoader))
            patches.enter_context(mock.patch.object(yamlio, "_PARSER_LOADER", yaml.SafeLoader))
        started = time.perf_counter()
        measured = load_measurements(default_dirs())
        wall = time.perf_counter() - started
    return wall, measured.runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    walls, results = interleaved(MODES, args.rounds, read)
    runs = [read_runs for _, read_runs in results]
    assert all(r == runs[0] for r in runs), "the modes read different runs"
    folders = {Path(r.folder).parent for r in runs[0]}
    print(f"\n{len(runs[0])} runs in {len(folders)} folders, {args.rounds} round(s); the same runs every time")
    print_medians(walls, MODES[-1])


if __name__ == "__main__":
    main()
