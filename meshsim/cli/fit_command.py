"""``meshsim fit``: parse, call :func:`meshsim.calibrate.fit_runs.fit_runs`, print its summary table."""

from __future__ import annotations

import argparse
import sys

from meshsim.cli.flags import comma_list
from meshsim.cli.prometheus_flags import add_source_flags, given_without_url, source_of
from meshsim.errors import MeshsimError
from meshsim.outputs import check_file, print_result

BASES = ("lognormal", "gamma", "weibull")


def _families(text: str) -> list[str]:
    names = list(comma_list(text))
    bad = [n for n in names if n not in BASES]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown family {bad[0] if bad else text!r} (known: {', '.join(BASES)})")
    return names


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("fit", help="fit a mesh model's per-pass distributions from fortio run folders",
                       description="Fit proxy passes, feature increments and proxy-LB passes to fortio runs "
                                   "(interval-censored MLE on the histograms, deconvolution by likelihood) and write "
                                   "a mesh model file in the meshsim/mesh/v1 schema.")
    p.add_argument("run_dirs", nargs="*", metavar="RUN_DIR", help="run folders (manifest.yaml + fortio.json), or "
                   "folders holding run folders (or --rows)")
    p.add_argument("--mesh", required=True, help="name of the fitted mesh model (e.g. istio-1.2)")
    p.add_argument("--out", required=True, help="model file to write, e.g. models/meshes/NAME.yaml")
    p.add_argument("--report", metavar="DIR", help="also write measured-vs-fitted CDF plots (PNG and HTML)")
    p.add_argument("--include-flagged", action="store_true", help="also fit runs flagged saturated or failed "
                   "(they are listed as such in the output and the model file)")
    p.add_argument("--default-on", action="append", default=[], metavar="FEATURE",
                   help="feature that is on by default in the mesh (repeatable), e.g. telemetry for Istio 1.2")
    p.add_argument("--families", type=_families, default=list(BASES),
                   help="comma list of base families to try (default lognormal,gamma,weibull)")
    p.add_argument("--no-mixtures", action="store_true", help="do not try two-component mixtures")
    p.add_argument("--refine", action="store_true", help="simulation-based refinement: adjust pass shifts until "
                   "the simulator under the runs' fortio workload reproduces their mean latencies")
    p.add_argument("--check", action="store_true", help="simulate every run with the fitted model and print "
                   "measured vs simulated p50/p90/p99")
    p.add_argument("--describe", action="append", default=[], metavar="FEATURE=TEXT",
                   help="description of a fitted feature written into the model (repeatable)")
    p.add_argument("--description", help="one paragraph describing the fitted model")
    p.add_argument("--version-label", help="version string written into the model (default: from the manifests)")
    p.add_argument("--connection-balance", type=_balances, default=["hash"],
                   help="how the proxy's listener hands connections to its workers: hash (one socket per worker, "
                        "Envoy >= 1.20's default), round_robin (Envoy's exact_balance), shared_listener (one socket "
                        "all workers wait on: Envoy before 1.20, e.g. Istio 1.2-1.11); the burst replays use it. "
                        "With --rows a comma list: each is fitted and the one the rows fit best is kept")
    rows = p.add_argument_group("summary rows (--rows): a pipeline's p50/p90/p99 and CPU per run instead of run folders")
    rows.add_argument("--rows", action="append", default=[], metavar="CSV",
                      help="a CSV of summary rows (Istio's perf pipeline benchmark.csv format; repeatable)")
    rows.add_argument("--reference-mode", default="none_mtls_both",
                      help="the rows' mode that defines the proxy; other both-sidecars modes add their features "
                           "(default %(default)s)")
    rows.add_argument("--jitter", action="store_true", help="the rows' fortio ran with -jitter")
    rows.add_argument("--fortio-version", help="the rows' fortio version (its warm-up; default 1.68.2)")
    rows.add_argument("--fortio-warmup", choices=("parallel", "sequential"),
                      help="the rows' fortio warm-up, when the version is not known (fortio < 1.21: sequential)")
    rows.add_argument("--proxy-workers", type=int, default=2, help="the rows' proxy worker threads (default 2)")
    rows.add_argument("--evaluations", type=int, default=240,
                      help="simulations per stage's search (default %(default)s; about 1 s each)")
    _register_prometheus(p)
    p.set_defaults(handler=run)


def _register_prometheus(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("Prometheus (--prometheus): a window of a mesh's metrics, appended as a summary row to "
                             "--rows-out, then fitted with the --rows given")
    add_source_flags(g)
    g.add_argument("--row-mode", metavar="MODE", help="what the window was, as a row's mode: none_mtls_both, "
                   "v2-stats-nullvm_both, or a *_baseline mode for sidecars bypassed")
    g.add_argument("--connections", type=int, metavar="N", help="the connections the window's traffic came on")
    g.add_argument("--payload", type=int, default=1024, metavar="BYTES", help="its payload (default %(default)s)")
    g.add_argument("--client-container", default="client/sidecar", help="the client sidecar's container label "
                   "(default %(default)s, the lab's)")
    g.add_argument("--server-container", default="server/sidecar", help="the server sidecar's container label "
                   "(default %(default)s)")
    g.add_argument("--rows-out", metavar="CSV", help="the CSV the window's row is appended to (made when missing)")


def _balances(text: str) -> list[str]:
    names = list(comma_list(text))
    known = ("hash", "round_robin", "shared_listener")
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown balance {bad[0] if bad else text!r} (known: {', '.join(known)})")
    return names


def run(args: argparse.Namespace) -> int:
    from meshsim.calibrate.fit_runs import fit_runs
    from meshsim.calibrate.fit.families import Family

    check_file(args.out, "out")  # the command, unlike the library, does not make a missing folder
    stray = None if args.prometheus else given_without_url(args, {"--row-mode": args.row_mode, "--connections":
                                                                  args.connections, "--rows-out": args.rows_out})
    if stray:
        raise MeshsimError(f"{stray}: applies only with --prometheus URL")
    if args.prometheus or args.rows:
        return run_rows(args)
    if not args.run_dirs:
        raise MeshsimError("meshsim fit: give RUN_DIRs, or summary rows with --rows")
    if len(args.connection_balance) != 1:
        raise MeshsimError("--connection-balance: one value for run folders (a list is for --rows)")
    families = [Family(b, s) for b in args.families for s in (False, True)]
    if not args.no_mixtures:
        families += [Family(b, True, True) for b in args.families]
    descriptions = {}
    for item in args.describe:
        name, sep, text = item.partition("=")
        if not sep or not name.strip():
            raise MeshsimError(f"--describe: expected FEATURE=TEXT, got {item!r}")
        descriptions[name.strip()] = text.strip()
    summary = fit_runs(
        args.run_dirs, args.mesh, args.out, args.report,
        progress=lambda msg: print(f"  {msg}", file=sys.stderr, flush=True),
        include_flagged=args.include_flagged, default_features=args.default_on, families=families,
        version=args.version_label, feature_descriptions=descriptions, description=args.description,
        refine=args.refine, check=args.check, connection_balance=args.connection_balance[0],
    )
    print_result(summary.table())
    if summary.errors:
        print(f"meshsim fit: {len(summary.errors)} run folder(s) skipped (see SKIPPED above)", file=sys.stderr)
    if not summary.rows:
        raise MeshsimError("meshsim fit: nothing was fitted")
    return 0


def run_rows(args: argparse.Namespace) -> int:
    """``meshsim fit --rows``: summary rows instead of run folders (calibrate/summary_fit.py)."""
    from meshsim.calibrate.fit.row_simulation import RowSettings
    from meshsim.calibrate.summary_fit import fit_prometheus_window, fit_summary_rows

    if args.run_dirs:
        raise MeshsimError("meshsim fit: give either RUN_DIRs or --rows/--prometheus, not both")
    if args.proxy_workers < 1:
        raise MeshsimError(f"--proxy-workers: must be >= 1, got {args.proxy_workers}")
    if args.evaluations < 10:
        raise MeshsimError(f"--evaluations: must be >= 10, got {args.evaluations}")
    settings = RowSettings(jitter=args.jitter, fortio_version=args.fortio_version, fortio_warmup=args.fortio_warmup,
                           workers=args.proxy_workers)
    fit_args = {"reference_mode": args.reference_mode, "balances": args.connection_balance,
                "evaluations": args.evaluations, "description": args.description or "",
                "version": args.version_label or ""}
    if args.prometheus:
        fit = fit_prometheus_window(*_prometheus_row(args), args.rows, args.mesh, args.out, settings, _progress,
                                    **fit_args)
    else:
        fit = fit_summary_rows(args.rows, args.mesh, args.out, settings, _progress, **fit_args)
    print_result(fit.table())
    return 0


def _progress(msg: str) -> None:
    print(f"  {msg}", file=sys.stderr, flush=True)


def _prometheus_row(args: argparse.Namespace) -> tuple[object, object, str]:
    """(PrometheusSource, RowMeaning, rows_out) from the flags; each missing one named."""
    from meshsim.calibrate.measure.prometheus.prom_rows import RowMeaning, reporter_of

    for flag, value in (("--row-mode", args.row_mode), ("--connections", args.connections),
                        ("--rows-out", args.rows_out)):
        if value is None:
            raise MeshsimError(f"--prometheus: give {flag}")
    source = source_of(args)
    meaning = RowMeaning(args.row_mode, args.connections, args.payload, args.client_container,
                         args.server_container, reporter=reporter_of(args.row_mode))
    return source, meaning, args.rows_out
