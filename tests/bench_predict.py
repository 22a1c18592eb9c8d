"""Benchmark (not collected by pytest): wall time and simulated requests per second of the default predict.

    .venv/bin/python tests/bench_predict.py [--rps 3500] [--topology chain3] [--mesh istio]

Prints the wall time, the number of replications and requests, simulated requests per wall second, and the p99's
95 % CI half-width relative to p99 -- the figures quoted in docs/performance.md.

    .venv/bin/python tests/bench_predict.py --reference CHECKOUT [--reference ...] [--rounds 5]
        [--case chain3:3500 ...]

compares this tree with another checkout of meshsim (installed in its own ``CHECKOUT/.venv``, e.g.
``git worktree add /tmp/ref REV && python3 -m venv /tmp/ref/.venv && /tmp/ref/.venv/bin/pip install -e /tmp/ref``).
Each round runs every case once in each tree, rotating which goes first, in fresh processes: the engine alone
(``--replications`` replications of the case in one process, seeds 0..n-1, CPU seconds: on a shared machine CPU
time is steadier than wall time) and the default prediction (all cores, wall seconds). It prints the medians and
the ratio reference / this tree (above 1: this tree is faster).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from meshsim.sim.experiments.predict import predict

DEFAULT_CASES = ("chain3:3500", "single:3500", "bookinfo:40")

# Run inside the tree under test (its own interpreter and install): times one case, prints one JSON line.
CHILD = r"""
import json, sys, time
from meshsim.request import PredictOptions, build_request
from meshsim.sim.engine.simpy_replication import run_replication
from meshsim.sim.experiments.predict import horizon_for, predict
topology, mesh, rps, replications = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
request = build_request(PredictOptions(topology=topology, mesh=mesh, rps=rps))
horizon = horizon_for(request.workload.load, request.settings)
cpu, requests = time.process_time(), 0
for r in range(replications):
    requests += run_replication(request.scenario, request.workload, horizon, 1, r).completed
engine = time.process_time() - cpu
wall = time.perf_counter()
p = predict(topology, mesh, rps=rps)
print(json.dumps({"engine_cpu": engine, "engine_requests": requests, "predict_wall": time.perf_counter() - wall,
                  "predict_replications": p.replications}))
"""


def _child(python: str, case: str, mesh: str, replications: int) -> dict[str, float]:
    topology, rps = case.split(":")
    out = subprocess.run([python, "-c", CHILD, topology, mesh, rps, str(replications)], check=True,
                         capture_output=True, text=True, cwd="/")  # cwd: import the installed tree, not ./
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare(references: list[Path], cases: list[str], mesh: str, rounds: int, replications: int) -> None:
    trees = {"this": sys.executable}
    for ref in references:
        python = ref / ".venv" / "bin" / "python"
        if not python.exists():
            sys.exit(f"--reference: {python} not found (install the checkout in its own .venv)")
        trees[str(ref)] = str(python)
    runs: dict[tuple[str, str], list[dict[str, float]]] = {}
    for i in range(rounds):
        for case in cases:
            order = list(trees)[i % len(trees):] + list(trees)[:i % len(trees)]  # rotate who goes first
            for tree in order:
                r = runs.setdefault((case, tree), [])
                r.append(_child(trees[tree], case, mesh, replications))
                print(f"round {i + 1} {case} {tree}: {json.dumps(r[-1])}", file=sys.stderr, flush=True)
    print(f"{os.cpu_count()} cores, {rounds} rounds, mesh {mesh}, engine = {replications} replications in one "
          "process (CPU s), predict = the default prediction (wall s); medians; ratio = reference / this tree")
    for ref in trees:
        if ref == "this":
            continue
        print(f"reference {ref}")
        for case in cases:
            this, other = runs[(case, "this")], runs[(case, ref)]

            def med(rs: list[dict[str, float]], key: str) -> float:
                return statistics.median(r[key] for r in rs)

            e_this, e_ref = med(this, "engine_cpu"), med(other, "engine_cpu")
            p_this, p_ref = med(this, "predict_wall"), med(other, "predict_wall")
            print(f"  {case:<13} engine {e_this:.2f} / {e_ref:.2f} s, ratio {e_ref / e_this:.2f}; predict "
                  f"{p_this:.2f} / {p_ref:.2f} s, ratio {p_ref / p_this:.2f} (replications "
                  f"{this[0]['predict_replications']:g} / {other[0]['predict_replications']:g})")


def single_run(args: argparse.Namespace) -> None:
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topology", default="chain3")
    ap.add_argument("--mesh", default="istio")
    ap.add_argument("--rps", type=float, default=3500)
    ap.add_argument("--load", default="open")
    ap.add_argument("--reference", type=Path, action="append",
                    help="another checkout to compare with (its own .venv); may be repeated")
    ap.add_argument("--case", action="append", help="TOPOLOGY:RPS to compare (default: chain3, single, bookinfo)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--replications", type=int, default=2, help="replications timed for the engine alone")
    args = ap.parse_args()
    if args.reference is None:
        single_run(args)
    else:
        compare(args.reference, args.case or list(DEFAULT_CASES), args.mesh, args.rounds, args.replications)


if __name__ == "__main__":
    main()
