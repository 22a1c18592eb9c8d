"""Benchmark (not collected by pytest): wall time and simulated requests per second of the default predict.

    .venv/bin/python tests/bench_predict.py [--rps 3500] [--topology chain3] [--mesh istio]

Prints the wall time, the number of replications and requests, simulated requests per wall second, and the p99's
95 % CI half-width relative to p99 -- the figures quoted in the README.
"""

from __future__ import annotations

import argparse
import os
import time

from meshsim.sim.predict import predict


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topology", default="chain3")
    ap.add_argument("--mesh", default="istio")
    ap.add_argument("--rps", type=float, default=3500)
    ap.add_argument("--load", default="open")
    args = ap.parse_args()
    t0 = time.perf_counter()
    p = predict(args.topology, args.mesh, rps=args.rps, load=args.load)
    wall = time.perf_counter() - t0
    d = p.to_dict()
    lo, hi = d["latency_ci95_ms"]["p99"]
    p99 = d["latency_ms"]["p99"]
    print(f"predict --topology {args.topology} --mesh {args.mesh} --rps {args.rps:g} --load {args.load} "
          f"on {os.cpu_count()} cores")
    print(f"wall {wall:.2f} s, {d['replications']} replications, {d['requests']} requests measured, "
          f"{d['requests'] / wall:.0f} simulated requests per wall second")
    print(f"p99 {p99:.3f} ms, 95% CI half-width {(hi - lo) / 2 / p99 * 100:.1f} % of p99; "
          f"saturation {d['saturation_rps']} rps; bottleneck {d['bottleneck']} at "
          f"{d['utilization'][d['bottleneck']] * 100:.0f} %")


if __name__ == "__main__":
    main()
