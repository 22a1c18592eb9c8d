"""``meshsim fit``: parse, call :func:`meshsim.calibrate.fit_runs.fit_runs`, print its summary table."""

from __future__ import annotations

import argparse
import sys

from meshsim.cli.flags import comma_list
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
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run folders (manifest.yaml + fortio.json), or "
                   "folders holding run folders")
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
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from meshsim.calibrate.fit_runs import fit_runs
    from meshsim.calibrate.fit.families import Family

    check_file(args.out, "out")  # the command, unlike the library, does not make a missing folder
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
        refine=args.refine, check=args.check,
    )
    print_result(summary.table())
    if summary.errors:
        print(f"meshsim fit: {len(summary.errors)} run folder(s) skipped (see SKIPPED above)", file=sys.stderr)
    if not summary.rows:
        raise MeshsimError("meshsim fit: nothing was fitted")
    return 0
