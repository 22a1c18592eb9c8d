"""The probe plan of a cluster calibration: data on disk (YAML), frozen and validated once here.

A plan lists configurations (one namespace each: mesh features such as mTLS or tracing, replicas) and for each
the path modes to probe; every probe runs at each connection count and rate of the plan. The default plan
(``default-plan.yaml`` next to this module) mirrors the lab's: baseline, server sidecar only, both sidecars,
mTLS on/off, tracing on/off, proxy-LB vs client-LB, one connection at a few low rates.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from meshsim.errors import FieldError, ModelError
from meshsim.run_folder import PATH_MODES

from .meshes import MeshProfile

SCHEMA = "meshsim/kube-plan/v1"
DEFAULT_PLAN = Path(__file__).with_name("default-plan.yaml")
PROBE_OVERHEAD_S = 2.0  # REST round trip, result transfer and usage sampling per probe (for the time estimate)
_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,18}[a-z0-9])?$")
_TOPOLOGY = re.compile(r"^(single|chain([2-9]))$")


@dataclass(frozen=True)
class Configuration:
    """One namespace: mesh features switched on, replicas of the leaf service, paths probed there."""

    name: str
    features: tuple[str, ...] = ()
    paths: tuple[str, ...] = ("both-sidecars",)
    replicas: int = 1
    without: tuple[str, ...] = ()  # features this configuration exists to switch off (skipped where the mesh cannot)
    connections: tuple[int, ...] | None = None  # this configuration's own connection counts (bursts), else the plan's
    rps: tuple[float, ...] | None = None  # this configuration's own rates, else the plan's


@dataclass(frozen=True)
class KubePlan:
    configurations: tuple[Configuration, ...]
    topology: str = "single"
    image: str = "fortio/fortio:1.68.2"
    duration_s: float = 20.0
    connections: tuple[int, ...] = (1,)
    rps: tuple[float, ...] = (20.0, 100.0, 200.0)
    payload_bytes: int = 1024
    resolution_s: float = 0.00001
    uniform: bool = False
    jitter: bool = False
    ready_timeout_s: float = 300.0
    node_selector: Mapping[str, str] = field(default_factory=dict)
    resources: Mapping[str, Any] = field(default_factory=dict)
    trace_collector: str = ""  # Linkerd: the collector its proxies export spans to (linkerd-jaeger)
    source: str = ""  # the file the plan came from

    @property
    def services(self) -> tuple[str, ...]:
        """Services of the topology, entry first; the last one is the leaf echo."""
        match = _TOPOLOGY.match(self.topology)
        assert match is not None
        n = int(match.group(2) or 0)
        return ("server",) if n == 0 else tuple(f"s{i}" for i in range(1, n + 1))


@dataclass(frozen=True)
class Probe:
    """One fortio run: a path through one configuration's pods at one rate and connection count."""

    configuration: Configuration
    path: str
    features: tuple[str, ...]
    connections: int
    rps: float

    def run_id(self, mesh: str) -> str:
        return f"kube-{mesh}-{self.configuration.name}-{self.path}-c{self.connections}-q{self.rps:g}"


@dataclass(frozen=True)
class Expanded:
    """The probes a plan gives for one mesh, with what was left out and why."""

    probes: tuple[Probe, ...]
    skipped: tuple[str, ...]

    def configurations(self) -> tuple[Configuration, ...]:
        seen: dict[str, Configuration] = {}
        for p in self.probes:
            seen.setdefault(p.configuration.name, p.configuration)
        return tuple(seen.values())

    def probe_seconds(self, duration_s: float) -> float:
        return len(self.probes) * (duration_s + PROBE_OVERHEAD_S)


def _fail(where: str, key: str, problem: str) -> ModelError:
    return ModelError(f"{where}: {key}: {problem}")


def _tuple(value: Any, where: str, key: str, kind: type) -> tuple:
    items = value if isinstance(value, list) else [value]
    try:
        out = tuple(kind(v) for v in items)
    except (TypeError, ValueError):
        raise _fail(where, key, f"expected a list of {kind.__name__}, got {value!r}") from None
    if not out:
        raise _fail(where, key, "must not be empty")
    return out


def _configuration(rc: Any, key: str, where: str) -> Configuration:
    if not isinstance(rc, Mapping):
        raise _fail(where, key, "expected a mapping")
    bad = sorted(set(rc) - set(Configuration.__dataclass_fields__))
    if bad:
        raise _fail(where, f"{key}.{bad[0]}", f"unknown key (known: {', '.join(Configuration.__dataclass_fields__)})")
    name = str(rc.get("name", ""))
    if not _NAME.match(name):
        raise _fail(where, f"{key}.name", f"must be 1-20 lowercase letters, digits or '-', got {name!r}")
    paths = _tuple(rc.get("paths", ["both-sidecars"]), where, f"{key}.paths", str)
    for p in paths:
        if p not in PATH_MODES:
            raise _fail(where, f"{key}.paths", f"unknown path mode {p!r} (known: {', '.join(PATH_MODES)})")
    features = tuple(str(f) for f in (rc.get("features") or ()))
    off = tuple(str(f) for f in (rc.get("without") or ()))
    for fkey, values in (("features", features), ("without", off)):
        for f in values:
            if f not in ("mtls", "tracing"):
                raise _fail(where, f"{key}.{fkey}", f"unknown feature {f!r} (known: mtls, tracing)")
    if set(features) & set(off):
        raise _fail(where, f"{key}.without", "a feature cannot be both on and off")
    replicas = rc.get("replicas", 1)
    if not isinstance(replicas, int) or not 1 <= replicas <= 10:
        raise _fail(where, f"{key}.replicas", f"must be an integer 1..10, got {replicas!r}")
    if any(p in ("client-lb", "proxy-lb") for p in paths) and replicas < 2:
        raise _fail(where, f"{key}.replicas", "load-balancing paths need replicas >= 2")
    connections = _tuple(rc["connections"], where, f"{key}.connections", int) if "connections" in rc else None
    if connections is not None and any(c < 1 for c in connections):
        raise _fail(where, f"{key}.connections", "must be >= 1")
    rates = _tuple(rc["rps"], where, f"{key}.rps", float) if "rps" in rc else None
    if rates is not None and any(not 0 < q < float("inf") for q in rates):
        raise _fail(where, f"{key}.rps", "rates must be finite and > 0")
    return Configuration(name=name, features=features, paths=paths, replicas=replicas, without=off,
                         connections=connections, rps=rates)


def plan_from_dict(data: Any, where: str) -> KubePlan:
    if not isinstance(data, Mapping):
        raise _fail(where, "(top level)", "expected a mapping")
    if data.get("schema", SCHEMA) != SCHEMA:
        raise _fail(where, "schema", f"expected {SCHEMA!r}, got {data.get('schema')!r}")
    known = set(KubePlan.__dataclass_fields__) - {"source"} | {"schema"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise _fail(where, unknown[0], f"unknown key (known: {', '.join(sorted(known))})")
    raw_confs = data.get("configurations")
    if not isinstance(raw_confs, list) or not raw_confs:
        raise _fail(where, "configurations", "must be a non-empty list")
    confs = [_configuration(rc, f"configurations[{i}]", where) for i, rc in enumerate(raw_confs)]
    names = [c.name for c in confs]
    if len(set(names)) != len(names):
        raise _fail(where, "configurations", "configuration names must be unique")
    body = {k: v for k, v in data.items() if k not in ("schema", "configurations")}
    plan = KubePlan(configurations=tuple(confs), source=where)
    try:
        plan = KubePlan(
            configurations=tuple(confs),
            topology=str(body.get("topology", plan.topology)),
            image=str(body.get("image", plan.image)),
            duration_s=float(body.get("duration_s", plan.duration_s)),
            connections=_tuple(body.get("connections", list(plan.connections)), where, "connections", int),
            rps=_tuple(body.get("rps", list(plan.rps)), where, "rps", float),
            payload_bytes=int(body.get("payload_bytes", plan.payload_bytes)),
            resolution_s=float(body.get("resolution_s", plan.resolution_s)),
            uniform=bool(body.get("uniform", False)),
            jitter=bool(body.get("jitter", False)),
            ready_timeout_s=float(body.get("ready_timeout_s", plan.ready_timeout_s)),
            node_selector={str(k): str(v) for k, v in (body.get("node_selector") or {}).items()},
            resources=dict(body.get("resources") or {}),
            trace_collector=str(body.get("trace_collector", "")),
            source=where,
        )
    except (TypeError, ValueError, AttributeError) as exc:
        raise _fail(where, "(top level)", f"bad value ({exc})") from None
    if not _TOPOLOGY.match(plan.topology):
        raise _fail(where, "topology", f"must be single or chain2..chain9, got {plan.topology!r}")
    if not 1 <= plan.duration_s <= 600:
        raise _fail(where, "duration_s", f"must be 1..600 seconds, got {plan.duration_s}")
    if any(q <= 0 for q in plan.rps):
        raise _fail(where, "rps", "rates must be > 0 (the plan measures at fixed low rates, not at max speed)")
    if any(c < 1 for c in plan.connections):
        raise _fail(where, "connections", "must be >= 1")
    if plan.ready_timeout_s <= 0:
        raise _fail(where, "ready_timeout_s", "must be > 0")
    if plan.payload_bytes < 0:
        raise _fail(where, "payload_bytes", "must be >= 0")
    return plan


def load_plan(path: str | Path | None = None) -> KubePlan:
    """Read a plan file (the default plan when ``path`` is None); errors name the file and key."""
    path = Path(path) if path is not None else DEFAULT_PLAN
    where = str(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise FieldError("plan", f"cannot read {where} ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        raise ModelError(f"{where}: invalid YAML ({getattr(exc, 'problem', exc)})") from None
    return plan_from_dict(data, where)


def expand(plan: KubePlan, mesh: MeshProfile) -> Expanded:
    """The probes this mesh can run; configurations or paths it cannot do are skipped with the reason."""
    probes: list[Probe] = []
    skipped: list[str] = []
    chain = plan.topology != "single"
    for conf in plan.configurations:
        wanted = set(conf.features)
        unsupported = sorted(wanted - set(mesh.features) - set(mesh.always_on))
        forced_on = sorted(set(mesh.always_on) & set(conf.without))
        mesh_paths = [p for p in conf.paths if p != "baseline"]
        if mesh_paths and unsupported:
            skipped.append(f"{conf.name}: {mesh.name} cannot switch on {', '.join(unsupported)}")
            mesh_paths = []
        if mesh_paths and forced_on:
            skipped.append(f"{conf.name}: {mesh.name} cannot switch off {', '.join(forced_on)}")
            mesh_paths = []
        if "tracing" in wanted and mesh.name == "linkerd" and not plan.trace_collector and mesh_paths:
            skipped.append(f"{conf.name}: linkerd tracing needs trace_collector in the plan")
            mesh_paths = []
        paths = [p for p in conf.paths if p == "baseline"]
        for p in mesh_paths:
            if p not in mesh.paths:
                skipped.append(f"{conf.name}/{p}: not a path {mesh.name} offers")
            elif chain and p == "server-sidecar":
                skipped.append(f"{conf.name}/{p}: only defined for the single topology")
            elif p == "server-sidecar" and "mtls" in wanted and "mtls" in mesh.features:
                # Strict mTLS (Istio PeerAuthentication STRICT) refuses the plaintext of a client that
                # bypasses its own sidecar; this path is probed in a configuration with mTLS off.
                skipped.append(f"{conf.name}/{p}: strict mTLS refuses a client without sidecar")
            else:
                paths.append(p)
        features = tuple(sorted(wanted | set(mesh.always_on))) if mesh.name != "none" else ()
        for path in paths:
            # One proxy on the path cannot do mTLS: the server's sidecar receives the client's plaintext.
            path_features = {"baseline": (), "server-sidecar": tuple(f for f in features if f != "mtls")}
            for c in conf.connections or plan.connections:
                for q in conf.rps or plan.rps:
                    probes.append(Probe(conf, path, path_features.get(path, features), c, q))
    return Expanded(tuple(probes), tuple(skipped))
