"""``meshsim capacity``: parse, call :func:`~meshsim.sim.experiments.capacity_search.find_capacity` (or ``find_size``), print."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from meshsim.capacity_slo import SIZE_KINDS, SizingQuestion, parse_slo
from meshsim.cli.flags import comma_list
from meshsim.cli.predict_command import MESHES_HELP, TOPOLOGIES_HELP
from meshsim.outputs import print_result
from meshsim.errors import FieldError
from meshsim.request import PredictOptions


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("capacity", help="the highest rate that meets latency objectives (with its CI), or the size "
                       "that meets them at a target rate",
                       description="Bisection over the offered rate, once per replication with the same seed at "
                                   "every probed rate (common random numbers); the replications' crossings give the "
                                   "95 %% CI. Reports the binding objective and the bottleneck.")
    p.add_argument("--topology", default="chain3",
                   help=f"built-in topology ({TOPOLOGIES_HELP}) or a FILE.yaml (default chain3)")
    p.add_argument("--mesh", default="istio", help=f"built-in mesh: {MESHES_HELP} (default istio)")
    p.add_argument("--slo", required=True, metavar="p99=20ms[,p50=5ms]", help="latency objectives: every one must "
                   "hold (percentiles p50 p90 p99 p999 max mean; units us, ms, s)")
    p.add_argument("--features", type=comma_list, default=(), help="features (comma list, as meshsim predict)")
    p.add_argument("--lb", default="client", choices=("client", "proxy"))
    p.add_argument("--load", default="open", choices=("open", "fortio", "wrk2"))
    p.add_argument("--connections", type=int, help="connections of the load (see meshsim predict)")
    p.add_argument("--payload", type=int, help="response bytes of every service")
    p.add_argument("--proxy-workers", type=int, help="proxy worker threads (what-if)")
    p.add_argument("--proxy-cpu-limit", type=float, help="proxy CPU limit in cores (what-if)")
    p.add_argument("--rps", type=float, help="first (light) probe rate (default 100)")
    p.add_argument("--target-rps", type=float, help="with --size: the rate the SLO must hold at")
    p.add_argument("--size", choices=SIZE_KINDS, help="with --target-rps: find the fewest replicas (of the services "
                   "that limit it: the bottleneck's, then the next one's), proxy-cpu (cores) or proxy-workers that "
                   "meet the SLO")
    p.add_argument("--duration", type=float, help="simulated seconds per probe (default: ~5000 requests)")
    p.add_argument("--replications", type=int, default=3, help="independent bisections (default 3, at least 2)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--processes", type=int, default=1, help="bisections run in parallel (default 1)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=run)


def options_of(args: argparse.Namespace) -> PredictOptions:
    return PredictOptions(topology=args.topology, mesh=args.mesh, rps=args.rps, features=args.features, lb=args.lb,
                          load=args.load, connections=args.connections, payload_bytes=args.payload,
                          proxy_workers=args.proxy_workers, proxy_cpu_limit=args.proxy_cpu_limit,
                          duration_s=args.duration, seed=args.seed)


def run(args: argparse.Namespace) -> int:
    from meshsim.sim.experiments.capacity_search import CapacityInterrupted, find_capacity
    from meshsim.sim.experiments.capacity_sizing import find_size

    slo = parse_slo(args.slo)
    if (args.size is None) != (args.target_rps is None):
        raise FieldError("size" if args.size is None else "target_rps", "--size and --target-rps go together")
    progress = None if args.json else (lambda msg: print(f"  {msg}", file=sys.stderr, flush=True))
    try:
        if args.size:
            result = find_size(options_of(args), slo, SizingQuestion(args.size, args.target_rps),
                               args.replications, args.processes, progress)
        else:
            result = find_capacity(options_of(args), slo, args.replications, args.processes, progress)
    except CapacityInterrupted as exc:  # what was finished, then the exit code of an interrupt
        for line in exc.done:
            print(f"meshsim capacity: {line}", file=sys.stderr)
        return 130
    out = result.to_dict()
    print_result(json.dumps(out, indent=1) if args.json else capacity_text(out))
    return 0


def capacity_text(d: dict[str, Any]) -> str:
    lo, hi = d["max_rps_ci95"]
    slo = ", ".join(f"{k} <= {v:g} ms" for k, v in d["slo_ms"].items())
    lines = [f"meshsim capacity: {slo}"]
    if "size" in d:
        s = d["size"]
        if s["kind"] == "replicas":
            grown = set(s["grown"])
            lines.append(f"size             replicas meeting it at {s['target_rps']:g} rps "
                         f"(grown: {', '.join(s['grown']) or 'none'})")
            lines += [f"  {name:<14} {count:>3}" + ("   grown" if name in grown else "")
                      for name, count in s["replicas"].items()]
        else:
            lines.append(f"size             {s['kind']} {s['value']:g} meets it at {s['target_rps']:g} rps")
    ci = f"[{lo:.0f}, {hi:.0f}]" if lo is not None and hi is not None else "[-]"
    lines += [f"max rps          {d['max_rps']:.0f}   95% CI {ci} ({len(d['replications'])} bisections)",
              f"binding          {d['binding']}", f"bottleneck       {d['bottleneck']}"]
    lines += [f"note: {n}" for n in d["notes"]]
    return "\n".join(lines)
