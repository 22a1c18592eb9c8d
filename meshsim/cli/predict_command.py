"""``meshsim predict``: parse the flags into :class:`~meshsim.request.PredictOptions`, run it, print."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from meshsim.catalog import list_meshes, list_topologies
from meshsim.cli.flags import comma_list
from meshsim.errors import FieldError, MeshsimError
from meshsim.outputs import check_file, print_result, write_file

from meshsim.request import DEFAULT_CONNECTIONS, DEFAULT_THINK_MS, DEFAULT_THREADS, PredictOptions
from meshsim.workload import RateProfile

# the shipped models, listed from models/ (the studies added fitted meshes; a hand-written list fell behind)
MESHES_HELP = ", ".join(list_meshes())
TOPOLOGIES_HELP = ", ".join(list_topologies())


def _profile(text: str) -> RateProfile:
    """``ramp:500:1500:60`` (from, to, seconds) or ``steps:0=500,20=1000,40=1500``; checked by RateProfile."""
    try:
        kind, _, rest = text.partition(":")
        if kind == "ramp":
            start, end, seconds = (float(x) for x in rest.split(":"))
            return RateProfile.ramp(start, end, seconds)
        if kind == "steps":
            points = tuple(sorted((float(t), float(r)) for t, r in (p.split("=") for p in rest.split(","))))
            return RateProfile("steps", points)
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"expected ramp:FROM:TO:SECONDS or steps:T=RPS,..., got {text!r}")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("predict", help="predict latency, CPU and saturation of a meshed call graph",
                       description="Simulate a call graph behind a service mesh and print latency percentiles with "
                                   "95 % confidence intervals, CPU and utilisation per component, the bottleneck "
                                   "and the saturation rate. --rps is required with the open and fortio loads "
                                   "unless the topology has an entry_rate (from-traces writes one).")
    p.add_argument("--topology", default="chain3", help=f"built-in name ({TOPOLOGIES_HELP}) or a topology FILE.yaml "
                   "(default chain3)")
    p.add_argument("--mesh", help=f"built-in mesh: {MESHES_HELP} (default istio)")
    p.add_argument("--mesh-model", help="a mesh model FILE.yaml (instead of --mesh)")
    p.add_argument("--rps", type=float, help="offered rate, requests per second (required for the open and fortio "
                   "loads, unless --profile sets it or the topology has an entry_rate; not with --load sequential)")
    p.add_argument("--features", type=comma_list, default=(), help="comma list added to the mesh's defaults, e.g. "
                   "mtls,tracing; no-NAME turns a default off (istio has telemetry on by default: no-telemetry)")
    p.add_argument("--lb", default="client", choices=("client", "proxy"), help="client-side balancing or a "
                   "central proxy load balancer (default client)")
    p.add_argument("--load", default="open", choices=("open", "fortio", "sequential", "wrk2"),
                   help="open Poisson arrivals (default), fortio's closed loop, sequential users with think time, "
                        "or wrk2's constant throughput (latency from the intended send time)")
    p.add_argument("--connections", type=int, help=f"fortio -c (default {DEFAULT_CONNECTIONS['fortio']}); wrk2 -c "
                   f"(default {DEFAULT_CONNECTIONS['wrk2']}, split over --threads); open: "
                   "client connections requests ride on, each pinned to a proxy worker (default "
                   f"{DEFAULT_CONNECTIONS['open']}); sequential: users (default {DEFAULT_CONNECTIONS['sequential']})")
    p.add_argument("--threads", type=int, help=f"wrk2 load: -t, threads sharing the connections and the rate "
                   f"(default {DEFAULT_THREADS})")
    as_runs = "default: as a fitted mesh model's calibration runs, else off"
    for flag in ("uniform", "jitter"):
        p.add_argument(f"--{flag}", action=argparse.BooleanOptionalAction, help=f"fortio -{flag} (fortio load only; "
                       f"{as_runs})")
    p.add_argument("--nocatchup", action="store_true", help="fortio -nocatchup (fortio load only)")
    p.add_argument("--fortio-version", help="fortio load: the fortio version whose warm-up to reproduce (default: a "
                   "fitted mesh model's calibration runs', else 1.68.2: one untimed call per connection, all at once; "
                   "before 1.21 one after another)")
    p.add_argument("--fortio-warmup", choices=("parallel", "sequential", "none"),
                   help="fortio load: override the version's warm-up (sequential = -sequential-warmup, none = "
                        "-exactly)")
    p.add_argument("--think", type=float, help=f"sequential load: think time in ms (default {DEFAULT_THINK_MS:g})")
    p.add_argument("--profile", type=_profile, help="open load: a rate over time, ramp:FROM:TO:SECONDS or "
                   "steps:T=RPS,... (instead of --rps)")
    p.add_argument("--no-keepalive", action="store_true", help="a new connection per request (+1 RTT, +2 with --tls)")
    p.add_argument("--tls", action="store_true", help="client uses HTTPS to the entry")
    p.add_argument("--scope", default="both", choices=("both", "server", "none"),
                   help="who has proxies: client and services (both, default), services only (server), nobody "
                        "(none: the baseline, no features)")
    p.add_argument("--payload", type=int, help="response bytes of every service (fortio echo ?size=)")
    p.add_argument("--proxy-workers", type=int, help="override the mesh model's proxy worker threads")
    p.add_argument("--proxy-cpu-limit", type=float, help="CPU limit per proxy in cores (CFS quota)")
    p.add_argument("--duration", type=float, help="simulated seconds per replication (default: the profile's length "
                   "with --profile, else ~5000 requests)")
    p.add_argument("--warmup", type=float, help="seconds cut at the start, the run measured from there (default: the "
                   "start-up transient found in the replications' output by MSER-5 and cut; with --timeseries 10 %% "
                   "of the run, 0 for fortio; with --profile 0)")
    p.add_argument("--replications", type=int, help="fixed number of replications (default: until p99 is known "
                   "within --precision)")
    p.add_argument("--min-replications", type=int, metavar="N", help="replications before the precision rule first "
                   "looks (default 4; a later first look makes the reported interval more trustworthy where the p99 "
                   "is noisy, near saturation, and costs easy points replications: docs/model.md, Statistics)")
    p.add_argument("--precision", type=float, default=0.05, help="target p99 95 %% CI half-width / p99 (default "
                   "0.05)")
    p.add_argument("--seed", type=int, default=1, help="root of every random stream (default 1); the same seed "
                   "gives the same numbers")
    p.add_argument("--processes", type=int, help="parallel processes for replications (default: all cores)")
    p.add_argument("--max-events", type=float, help="cost budget in simulated station visits (default 5e7, a "
                   "few minutes of one core): a run estimated above it is refused before it starts")
    p.add_argument("--time-limit", type=float, default=60.0, metavar="S",
                   help="stop adding replications after S seconds of wall clock and report the CI reached "
                        "(default 60)")
    p.add_argument("--timeseries", type=float, metavar="SECONDS", help="also report latency, rate and CPU per "
                   "window of SECONDS (default with --profile: about 36 windows over the profile; else none)")
    p.add_argument("--timeseries-csv", metavar="FILE", help="write the time series as CSV, one row per window")
    p.add_argument("--engine", choices=("fast", "simpy"), help="fast: the compiled (numba) engine; simpy: the "
                   "reference engine (default: fast when it covers the scenario, else simpy with one line saying why)")
    p.add_argument("--cluster", choices=("mesh", "topology"), default="mesh",
                   help="whose cross-node hop and app wake-up: the calibration cluster's, from a fitted mesh model's "
                        "cluster block (default, when it has one), or the topology's as written")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=run)


def chosen_mesh(args: argparse.Namespace) -> str:
    """--mesh NAME or --mesh-model FILE (default istio); both at once is a contradiction, refused."""
    if args.mesh is not None and args.mesh_model is not None:
        raise MeshsimError(f"--mesh-model: give either --mesh {args.mesh} or --mesh-model {args.mesh_model}, not "
                           "both (they name two mesh models)")
    return args.mesh_model if args.mesh_model is not None else args.mesh if args.mesh is not None else "istio"


def options_of(args: argparse.Namespace) -> PredictOptions:
    return PredictOptions(
        topology=args.topology, mesh=chosen_mesh(args), rps=args.rps, features=args.features,
        lb=args.lb, scope=args.scope, load=args.load, connections=args.connections, threads=args.threads,
        uniform=args.uniform, jitter=args.jitter, nocatchup=args.nocatchup, fortio_version=args.fortio_version,
        fortio_warmup=args.fortio_warmup, think_ms=args.think, profile=args.profile,
        keepalive=not args.no_keepalive, tls=args.tls, payload_bytes=args.payload, proxy_workers=args.proxy_workers,
        proxy_cpu_limit=args.proxy_cpu_limit, duration_s=args.duration, warmup_s=args.warmup,
        replications=args.replications, min_replications=args.min_replications, precision=args.precision,
        seed=args.seed, processes=args.processes,
        max_events=args.max_events, time_limit_s=args.time_limit, timeseries_s=args.timeseries,
        engine=args.engine, cluster=args.cluster,
    )


def run(args: argparse.Namespace) -> int:
    from meshsim.cli.prediction_text import prediction_table
    from meshsim.sim.experiments.predict import predict_options

    if args.mesh_model is not None:
        args.flag_overrides = {"mesh": "--mesh-model"}
    progress = None if args.json else (lambda msg: print(f"  {msg}", file=sys.stderr, flush=True))
    if args.timeseries_csv:
        if args.timeseries is None and args.profile is None:
            raise FieldError("timeseries_csv", "this run has no time series: give --timeseries SECONDS or --profile")
        check_file(args.timeseries_csv, "timeseries_csv")  # before the simulation, not after
    prediction = predict_options(options_of(args), progress)
    result = prediction.to_dict()
    try:
        if args.timeseries_csv:
            write_timeseries_csv(prediction.timeseries, args.timeseries_csv)
    finally:  # a CSV that could not be written still leaves the prediction on stdout
        print_result(json.dumps(result, indent=1) if args.json else prediction_table(result))
    return 0


def write_timeseries_csv(series: Any, path: str) -> None:
    """The time series as CSV (FieldError naming --timeseries-csv when there is none or the file cannot be written)."""
    if series is None:
        raise FieldError("timeseries_csv", "this run has no time series: give --timeseries SECONDS or --profile")
    write_file(path, series.to_csv(), "timeseries_csv")
