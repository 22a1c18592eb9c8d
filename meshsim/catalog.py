"""Built-in models shipped in ``meshsim.models`` and lookup by name or file path."""

from __future__ import annotations

import re
from collections import OrderedDict
from importlib import resources
from pathlib import Path
from typing import Any, Callable, TypeVar

from meshsim.errors import FieldError
from meshsim.mesh import MeshModel, mesh_from_data
from meshsim.topology import Topology, chain_topology, topology_from_data
from meshsim.yamlio import content_hash, input_file_problem, parse_model_bytes, read_model_bytes

_CHAIN = re.compile(r"^chain(\d+)$")
T = TypeVar("T")
# Models already read, by what they were read as and the digest of their bytes. A fit replays hundreds of
# candidates, each loading the same few files (the "none" mesh, a calibration topology): parsing them again was a
# fifth of a lab fit's time. An edited file has other bytes and is read afresh; the models are frozen, so one object
# can serve every caller.
LOADED_MODELS: OrderedDict[tuple[Callable[..., Any], str, str], Any] = OrderedDict()
LOADED_KEPT = 128


def _dir(kind: str) -> Path:
    return Path(str(resources.files("meshsim.models").joinpath(kind)))


def _names(kind: str) -> list[str]:
    return sorted(p.stem for p in _dir(kind).glob("*.yaml"))


def chain_length(name: str) -> int | None:
    """N of a built-in ``chainN`` topology name (``chain7``: 7), None for any other name."""
    match = _CHAIN.match(name)
    return int(match.group(1)) if match else None


def list_topologies() -> list[str]:
    return _names("topologies") + ["chainN"]


def list_meshes() -> list[str]:
    return _names("meshes")


def _looks_like_path(ref: str) -> bool:
    return ref.endswith((".yaml", ".yml")) or "/" in ref or "\\" in ref


def builtin_file(kind: str, name: str) -> Path | None:
    path = _dir(kind) / f"{name}.yaml"
    return path if path.is_file() else None


def _read_file(ref: str, field: str, from_data: Callable[[Any, str, str], T]) -> T:
    path = Path(ref)
    problem = input_file_problem(path)
    if problem:
        raise FieldError(field, f"file {ref} {problem}")
    return _load(path, str(path), from_data)


def _read_builtin(path: Path, kind: str, from_data: Callable[[Any, str, str], T]) -> T:
    return _load(path, f"models/{kind}/{path.name}", from_data)


def _load(path: Path, where: str, from_data: Callable[[Any, str, str], T]) -> T:
    raw = read_model_bytes(path)
    digest = content_hash(raw)
    key = (from_data, where, digest)
    if key in LOADED_MODELS:
        LOADED_MODELS.move_to_end(key)
        return LOADED_MODELS[key]
    loaded = from_data(parse_model_bytes(raw, path), where, digest)
    LOADED_MODELS[key] = loaded
    while len(LOADED_MODELS) > LOADED_KEPT:
        LOADED_MODELS.popitem(last=False)
    return loaded


def _named(ref: str | Path, field: str) -> str:
    """The name or path as text; an empty one is refused (not read as "no choice")."""
    text = str(ref)
    if not text.strip():
        raise FieldError(field, "empty: give a built-in name or a FILE.yaml")
    return text


def load_topology(ref: str | Path | Topology) -> Topology:
    """A built-in name (``chain3``, ``chain7``, ``bookinfo``...) or a YAML file path."""
    if isinstance(ref, Topology):
        return ref
    ref = _named(ref, "topology")
    if _looks_like_path(ref):
        return _read_file(ref, "topology", topology_from_data)
    path = builtin_file("topologies", ref)
    if path is not None:
        return _read_builtin(path, "topologies", topology_from_data)
    length = chain_length(ref)
    if length is not None:
        return chain_topology(load_topology("chain3"), length)
    raise FieldError("topology", f"unknown topology {ref!r} (known: {', '.join(list_topologies())}, or a FILE.yaml)")


def load_mesh(ref: str | Path | MeshModel) -> MeshModel:
    """A built-in mesh name (``istio``, ``linkerd``...) or a mesh model YAML file path."""
    if isinstance(ref, MeshModel):
        return ref
    ref = _named(ref, "mesh")
    if _looks_like_path(ref):
        return _read_file(ref, "mesh", mesh_from_data)
    path = builtin_file("meshes", ref)
    if path is None:
        raise FieldError("mesh", f"unknown mesh {ref!r} (known: {', '.join(list_meshes())}, or a mesh model FILE.yaml)")
    return _read_builtin(path, "meshes", mesh_from_data)
