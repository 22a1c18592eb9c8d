"""``meshsim calibrate --lab | --kube``: run a probe plan and fit a mesh model from it.

``--lab`` measures a local lab of real fortio apps and Envoy sidecars (meshsim.calibrate.measure.lab); ``--kube`` measures
a real cluster through the kubernetes client (meshsim.calibrate.measure.kube). Both store run folders and fit.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from meshsim.errors import MeshsimError
from meshsim.outputs import print_result


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from meshsim.cli.kube_options import add_kube_calibrate_options
    from meshsim.cli.lab_command import add_lab_calibrate_options

    p = sub.add_parser("calibrate", help="run a probe plan (local lab or Kubernetes) and fit a mesh model",
                       description="Measure with short fortio probes and fit per-hop service-time distributions.")
    p.add_argument("--lab", action="store_true", help="probe the local lab of real Envoy sidecars")
    p.add_argument("--model-out", type=Path, help="mesh model file to write (default models/meshes/MESH.yaml)")
    add_lab_calibrate_options(p)
    add_kube_calibrate_options(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.lab == args.kube:
        raise MeshsimError("calibrate: give exactly one of --lab or --kube")
    if args.kube:
        from meshsim.cli.kube_options import run_kube_calibrate

        return run_kube_calibrate(args)
    from meshsim.calibrate.lab_calibration import calibrate_lab
    from meshsim.cli.lab_command import LAB_CALIBRATE_FLAGS, lab_plan_of, progress_to_stderr

    # the lab's fields (and the library's out and state_dir) are said as calibrate's --lab-* flags
    args.flag_overrides = {**LAB_CALIBRATE_FLAGS, "out": "--lab-out", "state_dir": "--lab-state-dir"}
    mesh = args.mesh or "envoy-lab"
    model_out = args.model_out or Path("models") / "meshes" / f"{mesh}.yaml"
    result = calibrate_lab(lab_plan_of(args, mesh, model_out), progress_to_stderr)
    print_result(str(getattr(result, "summary", result)))
    return 0
