"""Benchmark: latency of a 3-service chain on the local lab, baseline vs both sidecars vs mTLS, c=1.

Not collected by pytest. Run: python tests/bench_lab_chain3.py [--duration 5] [--rates 200,1000] [--out DIR]
Prints one line per run (p50/p90/p99 in ms, achieved rps, status) and stores the runs as measurement folders.
At c=1 fortio sends one request at a time, so a rate above 1/latency cannot be reached: such runs are marked
``saturated`` (achieved rps shown).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from meshsim.calibrate.measure.lab.commands import lab_run
from meshsim.calibrate.measure.lab.probe import ProbeSettings
from meshsim.calibrate.measure.lab.spec import LabSpec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--rates", default="200,1000")
    parser.add_argument("--modes", default="baseline,sidecar,mtls")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="meshsim-bench-"))
    rates = [float(r) for r in args.rates.split(",")]
    started = time.monotonic()
    print(f"{'mode':10} {'rps':>6} {'p50':>7} {'p90':>7} {'p99':>7} {'achieved':>9} status")
    for mode in args.modes.split(","):
        results = lab_run(LabSpec(topology="chain3", mode=mode),
                          [ProbeSettings(rps=q, connections=1, duration_s=args.duration) for q in rates], out,
                          progress=None)
        for rate, result in zip(rates, results):
            s = result.summary()
            print(f"{mode:10} {rate:6g} {s['p50_ms']:7.3f} {s['p90_ms']:7.3f} {s['p99_ms']:7.3f} "
                  f"{s['achieved_rps']:9.1f} {s['status']}", flush=True)
    print(f"runs in {out}; {time.monotonic() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
