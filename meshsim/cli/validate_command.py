"""``meshsim validate``: parse, call :func:`meshsim.calibrate.validation.validate.validate`, print what it returns."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from meshsim.cli.flags import comma_list
from meshsim.cli.prometheus_flags import add_source_flags, given_without_url, source_of
from meshsim.errors import MeshsimError
from meshsim.outputs import print_result


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("validate", help="compare a mesh model's predictions with measured run folders",
                       description="Replay every run folder in the simulator with its own setup and fortio workload "
                                   "and compare measured with predicted percentiles, achieved rate and CPU. Runs the "
                                   "model was fitted from are marked FIT and left out of the summary.")
    p.add_argument("run_dirs", nargs="*", metavar="RUN_DIR", help="run folders (manifest.yaml + fortio.json), or "
                   "folders holding run folders (or --rows)")
    p.add_argument("--model", required=True, metavar="FILE", help="mesh model file, e.g. models/meshes/istio-1.2.yaml")
    p.add_argument("--topology", metavar="NAME|FILE", help="replay every run on this topology instead of the one "
                   "derived from the manifests")
    p.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report (CDF overlays, "
                   "error vs rate)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--fail-above", metavar="KEY=N%,...", help="gate: exit 1 when the worst held-out error exceeds a "
                   "threshold; keys p50 p90 p99 p999 max rps, e.g. p50=10%%,p99=20%%")
    p.add_argument("--include-fit-runs", action="store_true", help="count the runs the model was fitted from in the "
                   "summary and the gate")
    p.add_argument("--by", choices=("connections", "rps", "payload"), help="also print the median |error| per "
                   "connection count, rate or payload, beside a naive forecast (the nearest fit run of the same setup, "
                   "copied)")
    p.add_argument("--rows", action="append", default=[], metavar="CSV", help="summary rows (Istio's benchmark.csv) "
                   "instead of run folders, replayed as the model's fit (meshsim fit --rows) did; repeatable")
    _register_prometheus(p)
    p.add_argument("--replications", type=int, help="simulator replications per run (default 4)")
    p.add_argument("--sim-duration", type=float, metavar="S",
                   help="cap on the simulated seconds per replication (default 20)")
    p.add_argument("--seed", type=int, help="(default 1)")
    p.add_argument("--run-queues", choices=("shared", "per-core"), help="a lab host's cores: one run queue for all "
                   "(default), or Linux's per-CPU run queues (a burst that finds no core idle waits on one core)")
    p.set_defaults(handler=run)


def _register_prometheus(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("Prometheus (--prometheus): a time window of a mesh's metrics instead of run folders")
    add_source_flags(g)
    g.add_argument("--connections", type=int, metavar="N", help="simulate fortio's closed load on N connections at "
                   "the measured rate (default: an open load)")
    g.add_argument("--scope", default="both", choices=("none", "server", "both"), help="where the sidecars are "
                   "(default %(default)s)")
    g.add_argument("--features", type=comma_list, default=(), metavar="F,...", help="features of the traffic: NAME "
                   "turns one on, no-NAME turns a default off (as predict's --features)")
    g.add_argument("--payload", type=int, metavar="BYTES", help="the responses' size, when known (default: the "
                   "topology's)")
    g.add_argument("--one-host", type=float, metavar="CORES", help="every process ran on one machine of CORES cores "
                   "(the lab): simulate their contention for them")
    g.add_argument("--proxy-view", metavar="VIEW", help="the predicted proxy view the histogram is compared with, "
                   "e.g. 'productpage/sidecar to reviews' (default: the --source workload's sidecar's calls to "
                   "--destination)")


def run_prometheus(args: argparse.Namespace) -> int:
    """``meshsim validate --prometheus URL --window W``: one window of a mesh's metrics."""
    from meshsim.calibrate.validation.prometheus_check import PrometheusPrediction, validate_prometheus
    from meshsim.calibrate.validation.validate_options import ReportOptions

    for flag, value in {"RUN_DIR": args.run_dirs, "--rows": args.rows, "--by": args.by,
                        "--include-fit-runs": args.include_fit_runs, "--run-queues": args.run_queues}.items():
        if value:
            raise MeshsimError(f"--prometheus: {flag} does not apply to a Prometheus window")
    if args.topology is None:
        raise MeshsimError("--prometheus: give --topology NAME|FILE (the call graph the traffic went through)")
    report = ReportOptions(html=args.html, as_json=args.json, fail_above=args.fail_above)
    source = source_of(args)
    prediction = PrometheusPrediction(args.model, args.topology, args.connections, args.scope, args.features,
                                      args.payload,
                                      4 if args.replications is None else args.replications,
                                      20.0 if args.sim_duration is None else args.sim_duration,
                                      1 if args.seed is None else args.seed, args.one_host, args.proxy_view)
    return _printed(validate_prometheus(source, prediction, report, progress=_progress), "meshsim validate")


def _progress(msg: str) -> None:
    print(f"  {msg}", file=sys.stderr, flush=True)


def _printed(outcome: Any, command: str) -> int:
    """Print a validation's text and gate failures; its exit status (1 when the gate failed)."""
    print_result(outcome.text)
    for line in outcome.failures:
        print(f"{command}: FAILED {line}", file=sys.stderr)
    if outcome.output_error:
        raise outcome.output_error
    return 1 if outcome.failures else 0


def run_rows(args: argparse.Namespace) -> int:
    """``meshsim validate --rows``: summary rows replayed with the settings their fit recorded."""
    from meshsim.calibrate.validation.rows_check import validate_rows

    given = {"RUN_DIR": args.run_dirs, "--topology": args.topology, "--html": args.html,
             "--fail-above": args.fail_above, "--replications": args.replications,
             "--sim-duration": args.sim_duration, "--seed": args.seed, "--run-queues": args.run_queues}
    for flag, value in given.items():
        if value:
            raise MeshsimError(f"--rows: {flag} does not apply to summary rows (they are replayed with the settings "
                               "the model's fit recorded)")
    print_result(validate_rows(args.model, args.rows, by=args.by, as_json=args.json,
                               include_fit_runs=args.include_fit_runs,
                               progress=lambda msg: print(f"  {msg}", file=sys.stderr, flush=True)))
    return 0


def run(args: argparse.Namespace) -> int:
    from meshsim.calibrate.validation.validate import validate
    from meshsim.calibrate.validation.validate_options import ReportOptions, ValidateOptions

    if args.prometheus:
        return run_prometheus(args)
    stray = given_without_url(args, {"--connections": args.connections, "--one-host": args.one_host,
                                     "--proxy-view": args.proxy_view,
                                     "--features": args.features or None, "--payload": args.payload})
    if stray:
        raise MeshsimError(f"{stray}: applies only with --prometheus URL")
    if args.rows:
        return run_rows(args)
    # a bad gate or column fails here, before any work
    report = ReportOptions(html=args.html, as_json=args.json, fail_above=args.fail_above, by=args.by)
    options = ValidateOptions(args.model, tuple(args.run_dirs), topology=args.topology,
                              include_fit_runs=args.include_fit_runs,
                              replications=4 if args.replications is None else args.replications,
                              sim_duration_s=20.0 if args.sim_duration is None else args.sim_duration,
                              seed=1 if args.seed is None else args.seed,
                              per_core_queues=args.run_queues == "per-core")
    outcome = validate(options, report, progress=lambda msg: print(f"  {msg}", file=sys.stderr, flush=True))
    print_result(outcome.text)
    for line in outcome.failures:
        print(f"meshsim validate: FAILED {line}", file=sys.stderr)
    if outcome.output_error:
        raise outcome.output_error
    if outcome.validation.interrupted:
        print(f"meshsim validate: {outcome.validation.interrupted}; the table above holds those", file=sys.stderr)
        return 130
    return 1 if outcome.failures else 0


def register_lab(lab_sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``meshsim lab validate``: called by meshsim/cli/lab_command.py's register() with the lab's own subparsers."""
    p = lab_sub.add_parser("validate", help="calibrate on the lab at c=1 and low rates, measure held-out runs "
                           "(more connections, higher rates, a CPU-limited proxy past saturation, chain5), validate")
    p.add_argument("--out", default="lab-validation", help="folder for the runs, the fitted model and the report "
                   "(default lab-validation)")
    p.add_argument("--plan", choices=("small", "full"), default="full", help="small: 7 held-out setups, each run "
                   "twice (~3 min); full: 15, twice (~5 min)")
    p.add_argument("--mesh", default="envoy-lab", help="name of the fitted model (default envoy-lab)")
    p.add_argument("--html", metavar="FILE", help="also write the HTML report")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--fail-above", metavar="KEY=N%,...", help="gate on the worst held-out error, e.g. p50=10%%")
    p.add_argument("--replications", type=int, default=4)
    p.set_defaults(handler=run_lab)


def run_lab(args: argparse.Namespace) -> int:
    from meshsim.calibrate.validation.validate import validate_lab_report
    from meshsim.calibrate.validation.validate_options import ReportOptions

    report = ReportOptions(html=args.html, as_json=args.json, fail_above=args.fail_above)
    outcome = validate_lab_report(args.out, args.plan, mesh=args.mesh, report=report, replications=args.replications,
                                  progress=_progress)
    return _printed(outcome, "meshsim lab validate")
