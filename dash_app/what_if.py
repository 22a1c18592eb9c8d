"""A what-if: the validated state of the app's controls (not the model's ``meshsim.scenario.Scenario``).

The page's controls arrive as loose JSON values; :func:`what_if_from_controls` turns them into one frozen
:class:`WhatIf` or raises a :class:`~meshsim.errors.MeshsimError` whose one-line message names the control.
Everything the simulator needs to reproduce a point is in the what-if, so it doubles as the cache key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from meshsim.catalog import chain_length
from meshsim.errors import ModelError

UPLOADED = "__uploaded__"  # topology dropdown value meaning "the YAML file the user uploaded"
FEATURES = ("mtls", "tracing")  # offered when the mesh models cannot be read
LB_MODES = ("client", "proxy")
LOAD_MODELS = ("open", "fortio")
MAX_UPLOAD_BYTES = 256 * 1024
MAX_CHAIN = 99  # the longest `chainN` (a chain of N services, from the catalog) the app offers


class ControlError(ModelError):
    """A control on the page holds an impossible value (the message names the control)."""


@dataclass(frozen=True)
class MeshFeatures:
    """Which features each mesh model knows and which it turns on by default (from the mesh YAMLs)."""

    known: Mapping[str, tuple[str, ...]]
    defaults: Mapping[str, tuple[str, ...]]

    @classmethod
    def from_models(cls, models: Mapping[str, Any]) -> "MeshFeatures":
        """From loaded mesh models (``meshsim.mesh.MeshModel``: ``features`` name -> Feature with ``default``)."""
        return cls(
            known={m: tuple(sorted(model.features)) for m, model in models.items()},
            defaults={m: tuple(sorted(n for n, f in model.features.items() if f.default))
                      for m, model in models.items()},
        )

    @property
    def all(self) -> tuple[str, ...]:
        names = {f for fs in self.known.values() for f in fs}
        return tuple(sorted(names)) if names else FEATURES

    def active(self, mesh: str, on: Sequence[str], off: Sequence[str] = ()) -> tuple[str, ...]:
        """The features that will be on for ``mesh``: its defaults plus ``on`` minus ``off``, those it models."""
        if mesh not in self.known:
            return tuple(sorted(set(on) - set(off)))
        chosen = (set(self.defaults.get(mesh, ())) | set(on)) - set(off)
        return tuple(sorted(f for f in chosen if f in self.known[mesh]))

    def request(self, mesh: str, on: Sequence[str], off: Sequence[str] = ()) -> tuple[str, ...]:
        """predict's ``features`` argument: ``NAME`` turns a feature on, ``no-NAME`` turns a default off."""
        known = self.known.get(mesh)
        return tuple(f for f in on if known is None or f in known) + tuple(
            f"no-{f}" for f in off if known is None or f in known)

    def ignored(self, meshes: Sequence[str], on: Sequence[str], off: Sequence[str] = ()) -> list[str]:
        """One phrase per chosen feature that a compared mesh does not model (it runs without it)."""
        return [f"{f}: not modelled for {m}" for m in meshes for f in (*on, *off)
                if m in self.known and f not in self.known[m]]


@dataclass(frozen=True)
class WhatIf:
    """Everything that determines the predicted curves, except the mesh, which varies side by side."""

    topology: str  # built-in name, or the uploaded file's name
    topology_text: str | None  # uploaded YAML text; None for a built-in topology
    meshes: tuple[str, ...]
    features: tuple[str, ...] = ()  # turned on (on top of each mesh's defaults)
    features_off: tuple[str, ...] = ()  # defaults turned off
    lb: str = "client"
    load: str = "open"
    connections: int = 16
    rate_min: float = 100.0
    rate_max: float | None = None  # None: up to just past each mesh's saturation rate
    cdf_rate: float = 1000.0
    payload_bytes: int | None = None
    proxy_workers: int | None = None
    proxy_cpu_limit: float | None = None
    seed: int = 1

    @property
    def topology_key(self) -> str:
        """Name of a built-in topology, or a content hash of the uploaded one (the cache must see edits)."""
        if self.topology_text is None:
            return self.topology
        return "upload:" + hashlib.sha256(self.topology_text.encode()).hexdigest()[:16]

    def model_key(self) -> tuple[Any, ...]:
        """The inputs shared by every point of every mesh's curve (rates and mesh list excluded)."""
        return (
            self.topology_key, self.features, self.features_off, self.lb, self.load, self.connections,
            self.payload_bytes, self.proxy_workers, self.proxy_cpu_limit, self.seed,
        )

    def describe(self) -> dict[str, str]:
        """Human-readable inputs, used by the "what changed" summary."""
        load = (f"fortio closed loop, {self.connections} connections" if self.load == "fortio"
                else f"open (Poisson) over {self.connections} connections")
        return {
            "topology": self.topology,
            "meshes": ", ".join(self.meshes),
            "features": "mesh defaults" + "".join(f" + {f}" for f in self.features)
            + "".join(f" - {f}" for f in self.features_off),
            "load balancing": f"{self.lb}-side",
            "load model": load,
            "payload": "model default" if self.payload_bytes is None else f"{self.payload_bytes} B",
            "proxy workers": "model default" if self.proxy_workers is None else str(self.proxy_workers),
            "proxy CPU limit": "none" if self.proxy_cpu_limit is None else f"{self.proxy_cpu_limit:g} cores",
        }

    def with_cdf_rate(self, rate: float) -> "WhatIf":
        return replace(self, cdf_rate=rate)


def _number(value: Any, control: str, *, integer: bool = False, optional: bool = False) -> float | int | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        if optional:
            return None
        raise ControlError(f"{control}: a value is required")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ControlError(f"{control}: {value!r} is not a number") from None
    if not math.isfinite(number):
        raise ControlError(f"{control}: {value!r} is not a finite number")
    if integer:
        if number != int(number):
            raise ControlError(f"{control}: {value!r} must be a whole number")
        return int(number)
    return number


def _positive(value: Any, control: str, **kw: Any) -> Any:
    number = _number(value, control, **kw)
    if number is not None and number <= 0:
        raise ControlError(f"{control}: must be greater than 0, got {value!r}")
    return number


def _features(values: Any, control: str, known: Sequence[str]) -> tuple[str, ...]:
    chosen = set(values or ())
    unknown = sorted(chosen - set(known))
    if unknown:
        raise ControlError(f"{control}: unknown {unknown[0]!r} (known: {', '.join(known)})")
    return tuple(f for f in known if f in chosen)


def decode_upload(contents: str | None, filename: str | None) -> str:
    """Text of a ``dcc.Upload`` data URL (``data:...;base64,....``); errors name the file."""
    name = filename or "uploaded file"
    if not contents:
        raise ControlError("topology: 'uploaded YAML' is selected but no file was uploaded")
    _, _, payload = contents.partition(",")
    if len(payload) > (MAX_UPLOAD_BYTES + 2) // 3 * 4 + 4:  # refused before decoding: base64 is 4 chars per 3 bytes
        raise ControlError(f"{name}: about {len(payload) * 3 // 4} bytes is larger than the "
                           f"{MAX_UPLOAD_BYTES // 1024} KiB limit")
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ControlError(f"{name}: the upload is not valid base64 data") from None
    if len(raw) > MAX_UPLOAD_BYTES:
        raise ControlError(f"{name}: {len(raw)} bytes is larger than the {MAX_UPLOAD_BYTES // 1024} KiB limit")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ControlError(f"{name}: not UTF-8 text (expected a topology YAML file)") from None


def _is_chain(topology: str) -> bool:
    """A catalog ``chainN`` name with N in 1..MAX_CHAIN."""
    length = chain_length(topology)
    return length is not None and 1 <= length <= MAX_CHAIN


def what_if_from_controls(
    controls: Mapping[str, Any], known_topologies: Sequence[str], known_meshes: Sequence[str],
    known_features: Sequence[str] = FEATURES,
) -> WhatIf:
    """Validate the page's control values into a WhatIf; raise ControlError naming the first bad control."""
    topology = controls.get("topology") or ""
    text: str | None = None
    if topology == UPLOADED:
        text = decode_upload(controls.get("upload_contents"), controls.get("upload_filename"))
        topology = controls.get("upload_filename") or "uploaded.yaml"
    elif topology not in known_topologies and not (_is_chain(topology) and "chainN" in known_topologies):
        raise ControlError(f"topology: unknown {topology!r} (known: {', '.join(known_topologies)})")

    meshes = tuple(m for m in known_meshes if m in set(controls.get("meshes") or ()))
    unknown = sorted(set(controls.get("meshes") or ()) - set(known_meshes))
    if unknown:
        raise ControlError(f"meshes: unknown {unknown[0]!r} (known: {', '.join(known_meshes)})")
    if not meshes:
        raise ControlError("meshes: pick at least one mesh to compare")

    features = _features(controls.get("features"), "features on", known_features)
    features_off = _features(controls.get("features_off"), "features off", known_features)
    both = sorted(set(features) & set(features_off))
    if both:
        raise ControlError(f"features: {both[0]!r} is ticked both on and off")
    lb = controls.get("lb") or "client"
    if lb not in LB_MODES:
        raise ControlError(f"load balancing: unknown {lb!r} (known: {', '.join(LB_MODES)})")
    load = controls.get("load") or "open"
    if load not in LOAD_MODELS:
        raise ControlError(f"load model: unknown {load!r} (known: {', '.join(LOAD_MODELS)})")

    connections = _positive(controls.get("connections", 16), "connections", integer=True)
    rate_min = _positive(controls.get("rate_min"), "rate from (rps)")
    rate_max = _positive(controls.get("rate_max"), "rate to (rps)", optional=True)
    if rate_max is not None and rate_max <= rate_min:
        raise ControlError(f"rate to (rps): must be above 'rate from' ({rate_min:g}), got {rate_max:g}")
    cdf_rate = _positive(controls.get("cdf_rate"), "CDF at rate (rps)")
    payload = _number(controls.get("payload_bytes"), "payload (bytes)", integer=True, optional=True)
    if payload is not None and payload < 0:
        raise ControlError(f"payload (bytes): must be 0 or more, got {payload}")
    workers = _positive(controls.get("proxy_workers"), "proxy workers", integer=True, optional=True)
    cpu = _positive(controls.get("proxy_cpu_limit"), "proxy CPU limit (cores)", optional=True)
    return WhatIf(
        topology=topology, topology_text=text, meshes=meshes, features=features, features_off=features_off, lb=lb,
        load=load,
        connections=int(connections), rate_min=float(rate_min), rate_max=None if rate_max is None else float(rate_max),
        cdf_rate=float(cdf_rate), payload_bytes=payload, proxy_workers=workers, proxy_cpu_limit=cpu,
    )


def input_changes(before: WhatIf, after: WhatIf) -> list[str]:
    """One phrase per input that differs, e.g. ``features: mesh defaults -> mesh defaults + tracing``."""
    a, b = before.describe(), after.describe()
    changes = [f"{key}: {a[key]} -> {b[key]}" for key in a if a[key] != b[key]]
    if before.topology == after.topology and before.topology_key != after.topology_key:
        changes.append(f"topology: {after.topology} (file content changed)")
    return changes
