"""``meshsim validate``: parse, call :func:`meshsim.calibrate.validation.validate.validate`, print what it returns."""

from __future__ import annotations

import argparse
import sys

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
    p.add_argument("--replications", type=int, help="simulator replications per run (default 4)")
    p.add_argument("--sim-duration", type=float, metavar="S",
                   help="cap on the simulated seconds per replication (default 20)")
    p.add_argument("--seed", type=int, help="(default 1)")
    p.set_defaults(handler=run)


def run_rows(args: argparse.Namespace) -> int:
    """``meshsim validate --rows``: summary rows replayed with the settings their fit recorded."""
    from meshsim.calibrate.validation.rows_check import validate_rows

    given = {"RUN_DIR": args.run_dirs, "--topology": args.topology, "--html": args.html,
             "--fail-above": args.fail_above, "--replications": args.replications,
             "--sim-duration": args.sim_duration, "--seed": args.seed}
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

    if args.rows:
        return run_rows(args)
    # a bad gate or column fails here, before any work
    report = ReportOptions(html=args.html, as_json=args.json, fail_above=args.fail_above, by=args.by)
    options = ValidateOptions(args.model, tuple(args.run_dirs), topology=args.topology,
                              include_fit_runs=args.include_fit_runs,
                              replications=4 if args.replications is None else args.replications,
                              sim_duration_s=20.0 if args.sim_duration is None else args.sim_duration,
                              seed=1 if args.seed is None else args.seed)
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
    p.add_argument("--plan", choices=("small", "full"), default="full", help="small: 6 held-out setups, each run "
                   "twice (~2 min); full: 16, twice (~4 min)")
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
                                  progress=lambda msg: print(f"  {msg}", file=sys.stderr, flush=True))
    print_result(outcome.text)
    for line in outcome.failures:
        print(f"meshsim lab validate: FAILED {line}", file=sys.stderr)
    if outcome.output_error:
        raise outcome.output_error
    return 1 if outcome.failures else 0
