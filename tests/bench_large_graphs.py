"""Benchmark (not collected by pytest): predictions of large generated graphs in the shape of public microservice
traces (tests/large_graphs.py), their wall time and peak memory, and the saturated point against the unsaturated one
measured in the same run.

    .venv/bin/python tests/bench_large_graphs.py [--services 1000] [--layers 6] [--rps 20000] [--duration 0.5]
        [--replications 4] [--seed 1]

Every prediction runs in a process of its own (its VmHWM is its peak, as tests/test_graph_limits.py measures it),
on the compiled engine, one process, the clients outside the mesh (``--scope server``: one client sidecar would be
the bottleneck at 20 000 rps), the saturation search on, with the event budget and the time limit raised so that
every answer is complete (the default 60 s limit would cut the search short on a busy machine). Printed: the unsaturated graph at the
rate, the same graph with its busiest service cut to one replica (saturated), and the unsaturated graph simulated
twice as long (memory must grow with the graph, not with the requests simulated); then the targets: peak under
1 GB, the saturated point at most twice as slow as the unsaturated one, the longer run's peak within 10 % of the
shorter's.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from large_graphs import write_layered_graph  # noqa: E402
from test_graph_limits import measured  # noqa: E402

PEAK_TARGET_MB, SATURATED_RATIO_TARGET, LONGER_RUN_GROWTH = 1024.0, 2.0, 0.10


def timed(topology: Path, rps: float, duration: float, replications: int) -> dict:
    start = time.perf_counter()
    result, peak_mb, _ = measured("cli", "predict", "--topology", str(topology), "--rps", f"{rps:g}",
                                  "--duration", f"{duration:g}", "--replications", str(replications),
                                  "--processes", "1", "--engine", "fast", "--scope", "server",
                                  "--max-events", "1e9", "--time-limit", "1800", "--json")
    return {"process_s": time.perf_counter() - start, "wall_s": result["wall_s"], "peak_mb": peak_mb,
            "requests": result["requests"], "p99_ms": result["latency_ms"]["p99"],
            "saturation_rps": result["saturation_rps"], "warnings": result["warnings"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=1000)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--rps", type=float, default=20000.0)
    parser.add_argument("--duration", type=float, default=0.5)
    parser.add_argument("--replications", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="meshsim-bench-large-"))
    plain = write_layered_graph(folder, args.services, args.layers, args.rps, args.seed)
    saturated = write_layered_graph(folder, args.services, args.layers, args.rps, args.seed, saturate=True)
    print(f"{args.services} services in {args.layers} tiers at {args.rps:g} rps, {args.replications} x "
          f"{args.duration:g} s (graph: {plain})")
    print(f"{'run':<26}{'process s':>10}{'predict s':>10}{'peak MB':>9}{'requests':>10}{'p99 ms':>9}{'sat rps':>9}")
    runs = {}
    for name, topology, duration in (("unsaturated", plain, args.duration), ("saturated", saturated, args.duration),
                                     ("unsaturated, 2x duration", plain, 2 * args.duration)):
        runs[name] = r = timed(topology, args.rps, duration, args.replications)
        print(f"{name:<26}{r['process_s']:>10.1f}{r['wall_s']:>10.1f}{r['peak_mb']:>9.0f}{r['requests']:>10}"
              f"{r['p99_ms']:>9.3g}{r['saturation_rps'] or float('nan'):>9.0f}", flush=True)
        for warning in r["warnings"]:
            print(f"    {warning[:150]}", flush=True)
    ratio = runs["saturated"]["process_s"] / runs["unsaturated"]["process_s"]
    peak = max(r["peak_mb"] for r in runs.values())
    growth = runs["unsaturated, 2x duration"]["peak_mb"] / runs["unsaturated"]["peak_mb"] - 1
    print(f"peak {peak:.0f} MB (target < {PEAK_TARGET_MB:.0f}); saturated / unsaturated {ratio:.2f}x (target <= "
          f"{SATURATED_RATIO_TARGET:g}); 2x duration's peak {growth * 100:+.1f} % (target within "
          f"{LONGER_RUN_GROWTH * 100:.0f} %)")


if __name__ == "__main__":
    main()
