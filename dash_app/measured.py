"""Measured runs (and validation results) to overlay on the predicted curves.

Run folders are read with :func:`meshsim.run_folder.read_manifest`, their fortio results with the calibration's reader
(:func:`meshsim.calibrate.measure.fortio_result.read_result`, so the app refuses what calibration refuses). A run is shown
next to a predicted curve only where its setup matches the scenario (see :func:`matches`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from meshsim.calibrate.measure.dataset import access_log_path
from meshsim.calibrate.measure.fortio_result import read_result as read_fortio
from meshsim.errors import MeshsimError
from meshsim.run_folder import MANIFEST, RunManifest, read_manifest

from .what_if import MeshFeatures, WhatIf

# Which measured path through the proxies corresponds to a predicted mesh with sidecars, per LB mode.
MESH_PATHS = {"client": ("both-sidecars", "client-lb"), "proxy": ("proxy-lb",)}
SAMPLE_PERCENTILES = (50, 75, 90, 99, 99.9)  # fortio's default report, computed from raw samples when we have them
CDF_POINTS = 201


@dataclass(frozen=True)
class MeasuredRun:
    """The numbers of one measured run that the app plots, with where they came from."""

    run_id: str
    folder: str
    mesh: str  # "none" for a baseline run (no proxy on the path)
    mesh_version: str
    path: str
    features: tuple[str, ...]
    topology: str
    generator: str
    connections: int
    payload_bytes: int
    proxy_workers: int | None
    proxy_cpu_limit: float | None
    rps_requested: float | None
    rps_achieved: float
    percentiles_ms: dict[str, float]  # "p50", "p90", "p99", "p999" where fortio reported them
    cdf_ms: tuple[tuple[float, float], ...]  # (latency ms, cumulative fraction) at bucket ends
    source: str
    provenance: str
    notes: str
    status: str


@dataclass(frozen=True)
class MeasuredSet:
    runs: tuple[MeasuredRun, ...]
    skipped: tuple[str, ...]  # one line per run folder that could not be read
    validations: tuple[dict, ...]  # parsed validation JSON files (issue 6's `meshsim validate --json`)


def _percentile_key(level: float) -> str:
    return "p" + (f"{level:g}".replace(".", ""))


def read_fortio_result(
    path: Path, access_log: Path | None = None
) -> tuple[float, dict[str, float], tuple[tuple[float, float], ...]]:
    """Achieved rps, percentiles (ms) and the cumulative distribution (ms, fraction) of a fortio result.

    The file is read (and refused when it cannot say how it was made) by the calibration's reader. With an access
    log, percentiles and CDF come from the raw per-request samples; without, the percentiles are fortio's own
    (``DurationHistogram.Percentiles``) and the CDF is fortio's histogram at its bucket ends.
    """
    result = read_fortio(path, access_log)
    if result.samples is not None and len(result.samples):
        samples = np.sort(np.asarray(result.samples, dtype=float)) * 1000.0
        percentiles = {_percentile_key(q): float(np.quantile(samples, q / 100.0)) for q in SAMPLE_PERCENTILES}
        levels = np.linspace(0.0, 1.0, CDF_POINTS)
        cdf = tuple(zip(np.quantile(samples, levels).tolist(), levels.tolist()))
        return result.actual_rps, percentiles, cdf
    try:
        hist = json.loads(path.read_text(encoding="utf-8"))["DurationHistogram"]
        percentiles = {
            _percentile_key(float(p["Percentile"])): 1000.0 * float(p["Value"]) for p in hist.get("Percentiles") or []
        }
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise MeshsimError(f"{path}: DurationHistogram.Percentiles unreadable ({type(exc).__name__})") from None
    total = sum(b.count for b in result.buckets) or 1
    running, cdf_points = 0, []
    for bucket in result.buckets:
        running += bucket.count
        cdf_points.append((1000.0 * bucket.end, running / total))
    return result.actual_rps, percentiles, tuple(cdf_points)


def _run(folder: Path, manifest: RunManifest) -> MeasuredRun:
    rps, percentiles, cdf = read_fortio_result(folder / manifest.files.get("result", "fortio.json"),
                                               access_log_path(folder, manifest.files))
    setup, load = manifest.setup, manifest.load
    # A lab run ran every process on one host over loopback: not the shipped topology of the same name (a cluster
    # with node-to-node hops), so it is only overlaid on a scenario of its own "NAME (lab)" topology.
    topology = f"{setup.topology} (lab)" if manifest.source == "lab" else setup.topology
    return MeasuredRun(
        run_id=manifest.id, folder=str(folder), mesh="none" if setup.path == "baseline" else setup.mesh,
        mesh_version=str(setup.mesh_version or ""), path=setup.path, features=tuple(sorted(setup.features)),
        topology=topology, generator=load.generator, connections=load.connections,
        payload_bytes=setup.payload_bytes, proxy_workers=setup.proxy_workers, proxy_cpu_limit=setup.proxy_cpu_limit,
        rps_requested=load.rps, rps_achieved=rps, percentiles_ms=percentiles, cdf_ms=cdf, source=manifest.source,
        provenance=" ".join(manifest.provenance.split()), notes=manifest.notes, status=manifest.status,
    )


def default_dirs() -> list[Path]:
    """The measurements shipped with the package (``meshsim.measurements``)."""
    try:
        return [Path(str(resources.files("meshsim.measurements")))]
    except (ModuleNotFoundError, TypeError):
        return []


def load_measurements(dirs: Iterable[Path]) -> MeasuredSet:
    """Every readable run folder and validation JSON under ``dirs``; unreadable runs are listed, not fatal."""
    runs: list[MeasuredRun] = []
    skipped: list[str] = []
    validations: list[dict] = []
    seen: set[Path] = set()
    for root in dirs:
        root = Path(root)
        if not root.is_dir():
            skipped.append(f"{root}: not a folder")
            continue
        for manifest_path in sorted(root.rglob(MANIFEST)):
            folder = manifest_path.parent.resolve()
            if folder in seen or any(part.startswith(".") for part in manifest_path.relative_to(root).parts):
                continue  # hidden folders are write_run's temporaries
            seen.add(folder)
            try:
                manifest = read_manifest(manifest_path)
                if manifest.status != "failed":
                    runs.append(_run(manifest_path.parent, manifest))
            except MeshsimError as exc:
                skipped.append(str(exc))
        for path in sorted(root.rglob("validation*.json")):
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                skipped.append(f"{path}: not readable JSON ({exc})")
                continue
            if isinstance(data, dict):
                validations.append({"file": str(path), **data})
    return MeasuredSet(runs=tuple(runs), skipped=tuple(skipped), validations=tuple(validations))


def matches(run: MeasuredRun, scenario: WhatIf, mesh: str, features: MeshFeatures | None = None) -> bool:
    """Does the measured run's setup match the predicted curve of ``mesh`` in ``scenario``?

    Topology, mesh, the features active for that mesh, and path must agree; the load generator must be fortio with
    the same connections when the scenario uses fortio's closed loop (a measured fortio run is not an open-loop
    measurement). Payload, proxy workers and CPU limit are compared only where the scenario sets them (unset means
    "the model's default").
    """
    features = features or MeshFeatures({}, {})
    active = features.active(mesh, scenario.features, scenario.features_off)
    if run.topology != scenario.topology or not same_mesh(run, mesh) or run.features != active:
        return False
    if mesh == "none":
        if run.path != "baseline":
            return False
    elif run.path not in MESH_PATHS[scenario.lb]:
        return False
    if scenario.load == "fortio":
        if run.generator != "fortio" or run.connections != scenario.connections:
            return False
    elif run.generator == "fortio":
        return False
    if scenario.payload_bytes is not None and run.payload_bytes != scenario.payload_bytes:
        return False
    if scenario.proxy_workers is not None and run.proxy_workers != scenario.proxy_workers:
        return False
    if scenario.proxy_cpu_limit is not None and run.proxy_cpu_limit != scenario.proxy_cpu_limit:
        return False
    return True


def same_mesh(run: MeasuredRun, mesh: str) -> bool:
    """``istio`` runs match the ``istio`` model, and the versioned model ``istio-1.2`` when run on Istio 1.2.x."""
    if run.mesh == mesh:
        return True
    family, _, version = mesh.partition("-")
    return (family == run.mesh and bool(version)
            and (run.mesh_version == version or run.mesh_version.startswith(version + ".")))


def matching_runs(measured: Sequence[MeasuredRun], scenario: WhatIf,
                  features: MeshFeatures | None = None) -> dict[str, list[MeasuredRun]]:
    """Measured runs per mesh of the scenario (meshes without a match map to an empty list)."""
    return {mesh: [r for r in measured if matches(r, scenario, mesh, features)] for mesh in scenario.meshes}


def validation_rows(validations: Sequence[dict]) -> list[dict[str, Any]]:
    """Flatten validation results for a table: the scalar fields of each entry of ``runs`` (or of the file)."""
    rows: list[dict[str, Any]] = []
    for data in validations:
        entries = data.get("runs") if isinstance(data.get("runs"), list) else [data]
        for entry in entries:
            if isinstance(entry, dict):
                rows.append({k: v for k, v in entry.items() if isinstance(v, (str, int, float, bool)) or v is None})
    return rows
