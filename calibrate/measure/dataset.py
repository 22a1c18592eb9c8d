"""Loading run folders (manifest + fortio result + optional access log) into memory, a batch at a time.

A bad run (unreadable manifest, unknown mode, truncated JSON, empty histogram, ...) becomes one error line naming
its file; the other runs of the batch still load. Saturated and failed runs load but carry their flag.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from meshsim.calibrate.measure.fortio_result import FortioResult, read_result
from meshsim.calibrate.measure.physical_sense import check_physical_sense
from meshsim.calibrate.measure.quality import Quality, assess, worst
from meshsim.errors import MeshsimError, ModelError
from meshsim.run_folder import RunManifest, read_manifest
from meshsim.yamlio import input_file_problem
from meshsim.progress import Progress


@dataclass(frozen=True)
class Run:
    """One loaded measurement run."""

    folder: Path
    manifest: RunManifest
    result: FortioResult
    quality: Quality

    @property
    def id(self) -> str:
        return self.manifest.id

    @property
    def status(self) -> str:
        return worst(self.quality.status, self.manifest.status)

    @property
    def features(self) -> frozenset[str]:
        return frozenset(self.manifest.setup.features)

    @property
    def rps(self) -> float | None:
        return self.manifest.load.rps if self.manifest.load.rps is not None else self.result.requested_rps

    def cpu_per_request(self, key: str) -> float | None:
        """CPU seconds per completed request of process ``key`` over the run's window; None without a reading."""
        return self._per_request(self.manifest.cpu_seconds.get(key))

    def sleeps_per_request(self, key: str) -> float | None:
        """How often the worker threads of process ``key`` slept per completed request (``manifest.sleeps``: their
        voluntary context switches over the CPU window); None where the run did not count them."""
        return self._per_request(self.manifest.sleeps.get(key))

    def _per_request(self, total: float | None) -> float | None:
        duration = self.manifest.load.duration_s or self.result.duration_s
        requests = self.result.actual_rps * duration if duration else 0.0
        if total is None or not requests > 0 or not math.isfinite(requests):
            return None
        return total / requests

    @property
    def lab_host_cores(self) -> float | None:
        """A lab run's host cores, which every lab process shared (None for other runs or when not recorded)."""
        cores = self.manifest.where.get("cpus") if self.manifest.source == "lab" else None
        return float(cores) if isinstance(cores, (int, float)) and cores > 0 else None


def access_log_path(folder: Path, files: Mapping[str, str]) -> Path | None:
    """The run's access log: the one the manifest names (or ``access.jsonl``), gzipped as ``NAME.gz`` in shipped
    sets; None when the run has none. A named log that is missing is an error."""
    name = files.get("access_log")
    path = _inside(folder, "access_log", name) if name else None
    if path is None and any((folder / n).is_file() for n in ("access.jsonl", "access.jsonl.gz")):
        path = folder / "access.jsonl"
    if path is not None and not path.is_file() and path.with_name(path.name + ".gz").is_file():
        path = path.with_name(path.name + ".gz")
    if path is not None and not path.is_file():
        raise ModelError(f"{folder / 'manifest.yaml'}: files.access_log: {path.name} does not exist")
    return None if path is None else _inside(folder, "access_log", path.relative_to(folder).as_posix())


def _inside(folder: Path, key: str, name: str) -> Path:
    """``folder / name``, refused when it resolves outside the run folder (``..``, absolute paths, symlinks)."""
    path = folder / name
    if not _resolved(path).is_relative_to(_resolved(folder)):
        raise ModelError(f"{folder / 'manifest.yaml'}: files.{key}: {name!r} points outside the run folder")
    return path


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (RuntimeError, OSError):  # Python raises RuntimeError for a symlink loop
        raise ModelError(f"{path}: is a symlink loop") from None


def load_run(folder: str | Path) -> Run:
    """Load and check one run folder; raises MeshsimError naming the offending file."""
    folder = Path(folder)
    if not folder.is_dir():
        problem = input_file_problem(folder)
        if problem in ("does not exist", "is a symlink loop"):
            raise ModelError(f"{folder}: {problem}")
        raise ModelError(f"{folder}: not a run folder (expected a directory with manifest.yaml)")
    manifest = read_manifest(folder)
    files = dict(manifest.files)
    result_path = _inside(folder, "result", files.get("result", "fortio.json"))
    result = read_result(result_path, access_log_path(folder, files))
    check_physical_sense(result, manifest, str(folder / "manifest.yaml"))
    return Run(folder, manifest, result, assess(result))


@dataclass(frozen=True)
class Batch:
    runs: tuple[Run, ...]
    errors: tuple[str, ...]


def load_runs(folders: Iterable[str | Path], progress: Progress | None = None) -> Batch:
    """Load every folder; a folder holding run folders (no manifest) is searched one level down. A run given
    twice (the same folder spelt two ways, through a symlink, inside a folder also given, or a copy with the same
    run id) is refused: it would count twice."""
    runs: list[Run] = []
    errors: list[str] = []
    for folder in distinct_folders(_expand(folders)):
        try:
            run = load_run(folder)
        except MeshsimError as exc:
            errors.append(str(exc))
            if progress:
                progress(f"skipped: {exc}")
            continue
        runs.append(run)
        if progress:
            flag = "" if run.status == "ok" else f" [{run.status.upper()}: {'; '.join(run.quality.reasons)}]"
            progress(f"loaded {run.id} ({run.manifest.setup.path}, n={run.result.count}){flag}")
    refuse_same_ids(runs)
    return Batch(tuple(runs), tuple(errors))


def distinct_folders(folders: list[Path]) -> list[Path]:
    """The folders, refused when two of them are one folder on disk."""
    seen: dict[str, Path] = {}
    for folder in folders:
        real = os.path.realpath(folder)
        if real in seen:
            twice = f"{folder} is given twice" if seen[real] == folder else \
                f"{seen[real]} and {folder} are the same run folder"
            raise ModelError(f"RUN_DIR: {twice}: each run counts once")
        seen[real] = folder
    return folders


def refuse_same_ids(runs: Sequence[Run]) -> None:
    """Two runs with one id are one run twice (a copied folder): refused, it would count twice."""
    first: dict[str, Run] = {}
    for run in runs:
        if run.id in first:
            raise ModelError(f"RUN_DIR: run id {run.id!r} is in {first[run.id].folder} and in {run.folder}: the "
                             "same run twice (a copy?); each run counts once")
        first[run.id] = run


def _expand(folders: Iterable[str | Path]) -> list[Path]:
    out: list[Path] = []
    for f in folders:
        path = Path(f)
        if path.is_dir() and not (path / "manifest.yaml").exists():
            subs = sorted(p for p in path.iterdir() if p.is_dir() and (p / "manifest.yaml").exists())
            out.extend(subs if subs else [path])
        else:
            out.append(path)
    return out
