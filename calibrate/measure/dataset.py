"""Loading run folders (manifest + fortio result + optional access log) into memory, a batch at a time.

A bad run (unreadable manifest, unknown mode, truncated JSON, empty histogram, ...) becomes one error line naming
its file; the other runs of the batch still load. Saturated and failed runs load but carry their flag.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from meshsim.calibrate.measure.fortio_result import FortioResult, read_result
from meshsim.calibrate.measure.quality import Quality, assess, worst
from meshsim.errors import MeshsimError, ModelError
from meshsim.runs import RunManifest, read_manifest
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
    if not path.resolve().is_relative_to(folder.resolve()):
        raise ModelError(f"{folder / 'manifest.yaml'}: files.{key}: {name!r} points outside the run folder")
    return path


def load_run(folder: str | Path) -> Run:
    """Load and check one run folder; raises MeshsimError naming the offending file."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelError(f"{folder}: not a run folder (expected a directory with manifest.yaml)")
    manifest = read_manifest(folder)
    files = dict(manifest.files)
    result_path = _inside(folder, "result", files.get("result", "fortio.json"))
    result = read_result(result_path, access_log_path(folder, files))
    return Run(folder, manifest, result, assess(result))


@dataclass(frozen=True)
class Batch:
    runs: tuple[Run, ...]
    errors: tuple[str, ...]


def load_runs(folders: Iterable[str | Path], progress: Progress | None = None) -> Batch:
    """Load every folder; a folder holding run folders (no manifest) is searched one level down."""
    runs: list[Run] = []
    errors: list[str] = []
    for folder in _expand(folders):
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
    return Batch(tuple(runs), tuple(errors))


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
