"""``meshsim factorial``: a 2^k r factorial design over simulated predictions (Jain, ch. 17-18).

Parses the factors and the options every cell shares, calls
:func:`meshsim.sim.experiments.factorial_replications.factorial`, prints the effects with their confidence intervals
and the percentage of variation each explains (or JSON).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from meshsim.cli.flags import comma_list
from meshsim.cli.predict_command import MESHES_HELP, TOPOLOGIES_HELP
from meshsim.factorial_design import METRICS
from meshsim.outputs import print_result
from meshsim.request import PredictOptions


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("factorial", help="2^k r factorial design: effects of mesh features, payload, rate, LB "
                                         "mode... with confidence intervals and allocation of variation",
                       description="Simulate every combination of k two-level factors r times (independent seeds) "
                                   "and print Jain's effects (q0, qA, qB, qAB, ...) with t-based confidence "
                                   "intervals and the percentage of the variation each explains.")
    p.add_argument("--factor", action="append", default=[], metavar="SPEC", required=True,
                   help="a factor, repeated for each: KEY=LOW,HIGH with KEY rps, payload, connections, threads, lb, "
                        "scope (scope=none,both: mesh vs none), mesh, load, proxy-workers, proxy-cpu-limit; tls or "
                        "keepalive alone (off/on); or a mesh feature's name alone (mtls, telemetry: off/on)")
    p.add_argument("--replications", "-r", type=int, default=3, help="replications of each cell (default 3, at "
                   "least 2: the error term has 2^k (r - 1) degrees of freedom)")
    p.add_argument("--metric", default="mean_ms", choices=METRICS, help="what is analysed (default mean_ms; cpu = "
                   "cores of every component together)")
    p.add_argument("--topology", default="chain3",
                   help=f"built-in topology ({TOPOLOGIES_HELP}) or a FILE.yaml (default chain3)")
    p.add_argument("--mesh", default="istio", help=f"built-in mesh: {MESHES_HELP} (default istio)")
    p.add_argument("--rps", type=float, help="offered rate of every cell (unless rps is a factor)")
    p.add_argument("--features", type=comma_list, default=(), help="features every cell has (comma list)")
    p.add_argument("--lb", default="client", choices=("client", "proxy"))
    p.add_argument("--scope", default="both", choices=("both", "server", "none"))
    p.add_argument("--load", default="open", choices=("open", "fortio", "sequential", "wrk2"))
    p.add_argument("--connections", type=int, help="connections of the load (see meshsim predict)")
    p.add_argument("--threads", type=int, help="wrk2 load: threads")
    p.add_argument("--payload", type=int, help="response bytes of every service")
    p.add_argument("--duration", type=float, help="simulated seconds of each replication (default: ~5000 "
                   "requests)")
    p.add_argument("--warmup", type=float, help="seconds cut at the start of each replication")
    p.add_argument("--seed", type=int, default=1, help="root of every replication's seed (default 1)")
    p.add_argument("--processes", type=int, default=1, help="simulations run in parallel (default 1)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=run)


def base_options(args: argparse.Namespace) -> PredictOptions:
    return PredictOptions(topology=args.topology, mesh=args.mesh, rps=args.rps, features=args.features, lb=args.lb,
                          scope=args.scope, load=args.load, connections=args.connections, threads=args.threads,
                          payload_bytes=args.payload, duration_s=args.duration, warmup_s=args.warmup,
                          seed=args.seed)


def run(args: argparse.Namespace) -> int:
    from meshsim.sim.experiments.factorial_replications import factorial

    progress = None if args.json else (lambda msg: print(f"  {msg}", file=sys.stderr, flush=True))
    result = factorial(args.factor, base_options(args), args.replications, args.metric, progress,
                       args.processes).to_dict()
    print_result(json.dumps(result, indent=1) if args.json else effects_table(result))
    return 0


def _num(x: float | None, width: int = 10) -> str:
    return f"{x:{width}.4g}" if x is not None and math.isfinite(x) else f"{'-':>{width}}"


def effects_table(d: dict[str, Any]) -> str:
    k, r = len(d["factors"]), d["replications"]
    lines = [f"meshsim factorial: 2^{k} x {r} design, {2 ** k * r} simulations, metric {d['metric']}",
             "factors: " + "; ".join(f"{f['name']} ({f['low']} / {f['high']})" for f in d["factors"]), "",
             f"{'effect':<28}{'value':>10}   {d['confidence'] * 100:g}% CI{'':<16}{'variation':>10}"]
    for e in d["effects"]:
        name = "q0 (mean)" if not e["factors"] else e["name"]
        ci = f"[{_num(e['ci'][0], 0)}, {_num(e['ci'][1], 0)}]"
        share = f"{e['variation_percent']:9.2f} %" if e["variation_percent"] is not None else ""
        lines.append(f"{name:<28}{_num(e['value'])}   {ci:<24}{share}{'  *' if e['significant'] and e['factors'] else ''}")
    lines.append(f"{'error (SSE)':<28}{'':>10}   {'':<24}{_num(d['error_percent'], 9)} %")
    lines += ["", "* the interval excludes 0", "", "cells (mean of the replications):"]
    for cell in d["cells"]:
        levels = ", ".join(f"{name}={value}" for name, value in cell["levels"].items())
        lines.append(f"  {levels:<44}{_num(cell['mean'])}")
    lines += [f"note: {n}" for n in d["notes"]]
    return "\n".join(lines)
