"""Calibrate on a cluster and fit the mesh model from the runs, the same fitter as the lab and `meshsim fit`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from meshsim.calibrate.fit_runs import fit_runs
from meshsim.calibrate.measure.kube.runner import KubeCalibration, calibrate_kube
from meshsim.outputs import check_file
from meshsim.progress import Progress


def calibrate_kube_and_fit(model_out: Path | None, progress: Progress | None = None,
                           **kwargs: Any) -> tuple[KubeCalibration, Any]:
    """Run the probe plan (``calibrate_kube``), then fit ``model_out`` from every run of the plan on disk."""
    if model_out is not None and not kwargs.get("dry_run"):
        check_file(model_out, "model_out", parents=True)  # before the cluster is measured, not after
    result = calibrate_kube(**kwargs)
    if kwargs.get("dry_run") or model_out is None:
        return result, None
    folders = list(result.written) + [Path(result.out) / run_id for run_id in result.resumed]
    if not folders:
        return result, None
    return result, fit_runs(folders, result.mesh, model_out, progress=progress)
