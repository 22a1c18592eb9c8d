"""CLI glue for ``meshsim calibrate --kube``: parse the flags, call ``meshsim.calibrate.measure.kube.calibrate_kube``.

The lead wires it into ``meshsim calibrate``: ``add_kube_calibrate_options(calibrate_parser)`` and, when
``args.kube`` is set, ``return run_kube_calibrate(args)``.
"""

from __future__ import annotations

import argparse
import sys

from meshsim.outputs import print_result


def add_kube_calibrate_options(parser: argparse.ArgumentParser) -> None:
    """Add the --kube flags; flags the calibrate parser already has (e.g. --mesh, --out, --plan shared with
    --lab) are left as they are, so both option sets can live on one parser."""
    group = parser.add_argument_group("calibrate on a Kubernetes cluster (--kube)")
    existing = set(parser._option_string_actions)

    def add(flag: str, **kwargs: object) -> None:
        if flag not in existing:
            group.add_argument(flag, **kwargs)  # type: ignore[arg-type]

    add("--kube", action="store_true", help="run the probe plan on a real cluster (kubeconfig) instead of the lab")
    add("--kubeconfig", metavar="PATH", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    add("--context", metavar="NAME", help="kubeconfig context (default: the current one)")
    add("--mesh", default=None, metavar="MESH", help="with --kube: istio|linkerd|traefik|none (none: baseline only)")
    add("--namespace-prefix", default="meshsim-probe", metavar="PREFIX",
        help="prefix of the namespaces created (one per configuration; deleted at the end)")
    add("--dry-run", action="store_true", help="print every object as YAML; create nothing")
    add("--resume", action="store_true",
        help="skip probes already stored (--kube: under --out; --lab: under --lab-out, matched on their setup)")
    add("--out", default=None, metavar="DIR", help="where run folders go (with --kube default: measurements/kube)")
    add("--plan", default=None, metavar="FILE",
        help="probe plan YAML (with --kube default: calibrate/kube/default-plan.yaml)")


def run_kube_calibrate(args: argparse.Namespace) -> int:
    """Handler: one library call; user errors propagate as MeshsimError for the CLI to print in one line."""
    from meshsim.calibrate.kube_calibration import calibrate_kube_and_fit

    model_out = getattr(args, "model_out", None)
    if model_out is None and args.mesh and args.mesh != "none":  # mesh none has no proxy to fit
        model_out = f"models/meshes/{args.mesh}-kube.yaml"
    result, fitted = calibrate_kube_and_fit(
        model_out,
        progress=lambda msg: print(msg, file=sys.stderr, flush=True),
        mesh=args.mesh or "none",
        kubeconfig=args.kubeconfig,
        context=args.context,
        namespace_prefix=args.namespace_prefix,
        out=args.out or "measurements/kube",
        plan=args.plan,
        dry_run=args.dry_run,
        resume=args.resume,
    )
    if not args.dry_run:
        lines = [str(folder) for folder in result.written] + ([f"fitted {model_out}"] if fitted is not None else [])
        if lines:
            print_result("\n".join(lines))
    return 1 if result.left_behind else 0
