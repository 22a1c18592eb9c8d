"""A measurement run: one load-generator result plus the manifest saying how it was made.

On disk a run is a folder holding ``manifest.yaml``, the load generator's result (``fortio.json``) and, when fortio
wrote one, its per-request access log (``access.jsonl``). The format is documented in measurements/README.md.
Writing is atomic (a temporary folder renamed into place) so an interrupted calibration never leaves half a run.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from dataclasses import MISSING, asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Mapping

import yaml

from meshsim.errors import ModelError
from meshsim.outputs import write_folder_with
from meshsim.yamlio import input_file_problem, parse_yaml_text

SCHEMA = "meshsim/run/v1"
PATH_MODES = ("baseline", "server-sidecar", "both-sidecars", "proxy-lb", "client-lb")
SOURCES = ("lab", "kube", "istio-tools", "published")
STATUSES = ("ok", "saturated", "failed")
MANIFEST = "manifest.yaml"
# A manifest is a page of YAML; anything this large is not one (and is not read into memory).
MAX_MANIFEST_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Setup:
    """What was measured: mesh, path through the proxies, features and shape of the call graph."""

    mesh: str
    path: str
    features: tuple[str, ...] = ()
    topology: str = "single"
    mesh_version: str = ""
    proxy_workers: int | None = None
    proxy_cpu_limit: float | None = None
    replicas: int = 1
    payload_bytes: int = 0


_DELAY = re.compile(r"[?&]delay=([^&]*)")  # fortio echo's delay query parameter
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}


@dataclass(frozen=True)
class LoadSettings:
    """How the load generator was driven (fortio's own flags where it was fortio)."""

    generator: str = "fortio"
    rps: float | None = None
    connections: int = 1
    duration_s: float | None = None
    uniform: bool = False
    jitter: bool = False
    nocatchup: bool = False
    resolution_s: float | None = None
    url: str = ""

    @property
    def leaf_delay_s(self) -> float:
        """The wait fortio echo's ``delay=`` in the URL puts in every leaf app's answer (0 without one). Raises
        ModelError for a distribution of delays (``delay=1ms:50,5ms:10``): only one Go duration is one wait."""
        found = _DELAY.search(self.url)
        if not found:
            return 0.0
        match = re.fullmatch(r"([0-9]*\.?[0-9]+)(ns|us|µs|ms|s)", found.group(1))
        if match is None:
            raise ModelError(f"load.url: delay={found.group(1)}: one Go duration (e.g. 10ms) is one wait per "
                             "request; a distribution of delays is not")
        return float(match.group(1)) * _GO_UNITS[match.group(2)]


@dataclass(frozen=True)
class RunManifest:
    """Provenance and setup of one run; every measured number in a run folder is explained here."""

    id: str
    source: str
    provenance: str
    when: str
    where: Mapping[str, Any]
    setup: Setup
    load: LoadSettings
    cpu_seconds: Mapping[str, float] = field(default_factory=dict)
    memory_mb: Mapping[str, float] = field(default_factory=dict)
    # per component: how often its worker threads slept (voluntary context switches) over the CPU window
    sleeps: Mapping[str, float] = field(default_factory=dict)
    files: Mapping[str, str] = field(default_factory=lambda: {"result": "fortio.json"})
    status: str = "ok"
    notes: str = ""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["setup"]["features"] = list(self.setup.features)
        data["where"] = dict(self.where)
        data["cpu_seconds"] = dict(self.cpu_seconds)
        data["memory_mb"] = dict(self.memory_mb)
        data["sleeps"] = dict(self.sleeps)
        if not self.sleeps:  # runs that did not count them keep their manifests as they were
            del data["sleeps"]
        data["files"] = dict(self.files)
        return {"schema": SCHEMA, **data}


def _fail(where: str, key: str, problem: str) -> ModelError:
    return ModelError(f"{where}: {key}: {problem}")


def _take(data: Mapping[str, Any], cls: type, where: str, prefix: str) -> Any:
    """Build dataclass ``cls`` from ``data``, raising on unknown or missing keys."""
    fields = cls.__dataclass_fields__
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise _fail(where, f"{prefix}{unknown[0]}", f"unknown key (known: {', '.join(fields)})")
    required = [n for n, f in fields.items() if f.default is MISSING and f.default_factory is MISSING]
    missing = [n for n in required if n not in data]
    if missing:
        raise _fail(where, f"{prefix}{missing[0]}", "missing")
    return cls(**data)


def manifest_from_dict(data: Any, where: str) -> RunManifest:
    """Validate a parsed manifest; every error names the file (``where``) and the key."""
    if not isinstance(data, Mapping):
        raise _fail(where, "(top level)", "expected a mapping")
    if data.get("schema", SCHEMA) != SCHEMA:
        raise _fail(where, "schema", f"expected {SCHEMA!r}, got {data.get('schema')!r}")
    body = {k: v for k, v in data.items() if k != "schema"}
    for key in ("setup", "load"):
        if not isinstance(body.get(key), Mapping):
            raise _fail(where, key, "missing or not a mapping")
    setup_data = dict(body["setup"])
    features = setup_data.get("features") or ()
    if not isinstance(features, (list, tuple)) or not all(isinstance(f, str) for f in features):
        raise _fail(where, "setup.features", f"expected a list of feature names, got {features!r}")
    setup_data["features"] = tuple(features)
    body["setup"] = _take(setup_data, Setup, where, "setup.")
    load = dict(body["load"])
    if "qps" in load and "rps" not in load:  # run folders written before the rate had one name (meshsim 0.1)
        load["rps"] = load.pop("qps")
    body["load"] = _take(load, LoadSettings, where, "load.")
    manifest = _take(body, RunManifest, where, "")
    _check_types(manifest, where)
    _check(manifest, where)
    return manifest


# Expected kind of every typed key (None allowed where the dataclass default is None); a manifest is written by
# hand or by another tool, so "connections: many" or "id: 7" must be one error line, not a TypeError later.
_KINDS: dict[str, str] = {
    "id": "text", "source": "text", "provenance": "text", "status": "text", "notes": "text",
    "setup.mesh": "text", "setup.path": "text", "setup.topology": "text", "setup.proxy_workers": "int?",
    "setup.proxy_cpu_limit": "number?", "setup.replicas": "int", "setup.payload_bytes": "int",
    "load.generator": "text", "load.rps": "number?", "load.connections": "int", "load.duration_s": "number?",
    "load.uniform": "bool", "load.jitter": "bool", "load.nocatchup": "bool", "load.resolution_s": "number?",
    "load.url": "text",
}


def _kind_ok(value: Any, kind: str) -> bool:
    if value is None:
        return kind.endswith("?")
    kind = kind.rstrip("?")
    if kind == "text":
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return isinstance(value, int) if kind == "int" else math.isfinite(value)


def _check_types(m: RunManifest, where: str) -> None:
    for key, kind in _KINDS.items():
        obj: Any = m
        for part in key.split("."):
            obj = getattr(obj, part)
        if not _kind_ok(obj, kind):
            expected = {"text": "text", "bool": "true or false", "int": "an integer", "number": "a finite number"}
            raise _fail(where, key, f"expected {expected[kind.rstrip('?')]}, got {obj!r}")
    for section in ("where", "cpu_seconds", "memory_mb", "sleeps", "files"):
        if not isinstance(getattr(m, section), Mapping):
            raise _fail(where, section, f"expected a mapping, got {getattr(m, section)!r}")
    for section in ("cpu_seconds", "memory_mb", "sleeps"):
        for name, value in getattr(m, section).items():
            if not _kind_ok(value, "number") or value < 0:
                raise _fail(where, f"{section}.{name}", f"must be a finite number >= 0, got {value!r}")
    for name, value in m.files.items():
        if not isinstance(value, str) or not _inside(value):
            raise _fail(where, f"files.{name}", f"must be a file name inside the run folder, got {value!r}")


def _inside(name: str) -> bool:
    """A relative path that cannot leave its folder (no absolute path, no '..', no drive) and prints on one line
    (no control characters: hypothesis found a manifest naming its result "\\n", whose error took two lines)."""
    path = PurePosixPath(name.replace("\\", "/"))
    return (bool(name) and not path.is_absolute() and ".." not in path.parts and ":" not in name
            and not any(ord(c) < 32 or ord(c) == 127 for c in name))


def _check(m: RunManifest, where: str) -> None:
    if not m.id or "/" in m.id:
        raise _fail(where, "id", f"must be a non-empty name without '/', got {m.id!r}")
    if m.source not in SOURCES:
        raise _fail(where, "source", f"unknown source {m.source!r} (known: {', '.join(SOURCES)})")
    if not str(m.provenance).strip():
        raise _fail(where, "provenance", "empty: a run without provenance is not used")
    if m.setup.path not in PATH_MODES:
        raise _fail(where, "setup.path", f"unknown mode {m.setup.path!r} (known: {', '.join(PATH_MODES)})")
    if m.status not in STATUSES:
        raise _fail(where, "status", f"unknown status {m.status!r} (known: {', '.join(STATUSES)})")
    if m.load.connections < 1:
        raise _fail(where, "load.connections", f"must be >= 1, got {m.load.connections}")
    if m.load.rps is not None and m.load.rps < 0:
        raise _fail(where, "load.rps", f"must be >= 0, got {m.load.rps}")


def read_manifest(folder_or_file: str | Path) -> RunManifest:
    """Read and validate ``manifest.yaml`` of a run folder (or the file itself)."""
    path = Path(folder_or_file)
    if path.is_dir():
        path = path / MANIFEST
    where = str(path)
    problem = input_file_problem(path)
    if problem:
        raise ModelError(f"{where}: {problem}")
    try:
        if path.stat().st_size > MAX_MANIFEST_BYTES:
            raise ModelError(f"{where}: larger than {MAX_MANIFEST_BYTES} bytes: not a run manifest")
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ModelError(f"{where}: cannot read manifest ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise ModelError(f"{where}: not UTF-8 text (byte {exc.object[exc.start]:#x} at offset {exc.start})") from None
    return manifest_from_dict(parse_yaml_text(text, where), where)


def write_run(
    folder: str | Path,
    manifest: RunManifest,
    result_json: Mapping[str, Any] | bytes | None,
    access_log: str | Path | None = None,
    extra: Mapping[str, tuple[str, bytes]] | None = None,
) -> Path:
    """Write a run folder atomically: everything lands in a temp folder that is renamed into place (OutputError
    naming ``out``, the option that holds run folders, when it cannot be written). ``extra``: more files, each
    listed in the manifest's ``files`` under its key (key -> (file name, content))."""
    folder = Path(folder)
    manifest_from_dict(manifest.to_dict(), str(folder / MANIFEST))  # refuse to write what we could not read back

    def fill(tmp: Path) -> None:
        files = dict(manifest.files)
        if result_json is not None:
            raw = result_json if isinstance(result_json, bytes) else json.dumps(result_json, indent=1).encode()
            (tmp / files.get("result", "fortio.json")).write_bytes(raw)
        if access_log is not None:
            files.setdefault("access_log", "access.jsonl")
            shutil.copyfile(access_log, tmp / files["access_log"])
        for key, (name, content) in (extra or {}).items():
            files[key] = name
            (tmp / name).write_bytes(content)
        data = manifest.to_dict()
        data["files"] = files
        (tmp / MANIFEST).write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")

    return write_folder_with(folder, "out", fill)
