"""One typed request for a prediction, and the builder every front end uses to make it.

A front end (the CLI, the Dash sweep, validation replay, the simulated checks of a fit) describes what it wants with
:class:`PredictOptions`: plain values, one field per option of ``meshsim predict``. :func:`build_request` validates
them once and makes a :class:`PredictRequest`: the :class:`~meshsim.scenario.Scenario` (what is simulated), the
:class:`~meshsim.workload.Workload` (what the load generator does) and the :class:`~meshsim.workload.RunSettings`
(how long, how many replications, which seed). An option that does not apply to the chosen load is refused, not
ignored. Every error names the option's field (``rps``, ``think_ms``...): the command line maps fields to its flags.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from meshsim.catalog import load_mesh, load_topology
from meshsim.cluster_facts import CLUSTER_CHOICES
from meshsim.distributions import MS, Deterministic
from meshsim.errors import FieldError
from meshsim.limits import MAX_CONNECTIONS
from meshsim.mesh import MeshModel
from meshsim.scenario import Scenario, build_scenario
from meshsim.topology import Topology
from meshsim.workload import (FortioLoad, Load, OpenLoad, RateProfile, RunSettings, SequentialLoad, Workload,
                              Wrk2Load, validate_load)

LOAD_MODELS = ("open", "fortio", "sequential", "wrk2")
FORTIO_FLAGS = ("uniform", "jitter", "nocatchup", "fortio_version", "fortio_warmup")
DEFAULT_CONNECTIONS = {"open": 1000, "fortio": 8, "sequential": 1, "wrk2": 10}  # wrk2: wrk's -c default
DEFAULT_THREADS = 2  # wrk's -t default
DEFAULT_THINK_MS = 50.0


@dataclass(frozen=True)
class PredictOptions:
    """What a user asks for, as plain values (the vocabulary of ``meshsim predict``; None = the default)."""

    topology: str | Path | Topology = "chain3"
    mesh: str | Path | MeshModel = "istio"
    rps: float | None = None  # offered rate; with a profile, the profile sets it
    features: tuple[str, ...] = ()  # NAME turns a feature on, no-NAME turns a default off
    lb: str = "client"
    scope: str = "both"
    load: str = "open"
    connections: int | None = None  # open: client connections; fortio and wrk2: -c; sequential: users
    threads: int | None = None  # wrk2 load: -t, event-loop threads that share the connections and the rate
    uniform: bool | None = None  # fortio load; None: as the calibration cluster's runs drove it, else off
    jitter: bool | None = None  # the same
    nocatchup: bool = False
    fortio_version: str | None = None  # fortio load: the version whose warm-up to reproduce (default: the
    fortio_warmup: str | None = None  # cluster's, else 1.68.2); parallel | sequential | none (default: the version's)
    think_ms: float | None = None
    profile: RateProfile | None = None
    keepalive: bool = True
    tls: bool = False
    payload_bytes: int | None = None
    proxy_workers: int | None = None
    proxy_cpu_limit: float | None = None
    duration_s: float | None = None
    warmup_s: float | None = None
    replications: int | None = None
    min_replications: int | None = None  # replications before the precision rule first looks (None: RunSettings')
    precision: float | None = 0.05
    seed: int = 1
    processes: int | None = None
    saturation: bool = True  # search the saturation rate (costly; sweeps find it from the curve)
    max_events: float | None = None  # cost budget in station visits (None: RunSettings' default)
    time_limit_s: float | None = None  # wall-clock limit on adding replications (None: RunSettings' default)
    timeseries_s: float | None = None  # window of the time series (None: a profile gets a default, else none)
    engine: str | None = None  # 'fast' (compiled) or 'simpy' (reference); None: fast when it covers the request
    cluster: str = "mesh"  # whose network hop and app wake-up: the fitted mesh model's cluster, or the topology's

    def with_changes(self, **changes: Any) -> "PredictOptions":
        return replace(self, **changes)


@dataclass(frozen=True)
class PredictRequest:
    """Everything one prediction needs, validated: the engine executes exactly this."""

    scenario: Scenario
    workload: Workload
    settings: RunSettings = field(default_factory=RunSettings)


def build_request(options: PredictOptions) -> PredictRequest:
    """Validate ``options`` once and build the typed request (FieldError naming the field otherwise)."""
    scenario = build_scenario_of(options)
    options, rate_source = with_entry_rate(options, scenario.topology)
    options, driving_source = with_cluster_fortio(options, scenario)
    return PredictRequest(scenario, Workload(build_load(options), keepalive=options.keepalive, tls=options.tls,
                                             rate_source=rate_source, driving_source=driving_source),
                          build_settings(options))


def with_entry_rate(options: PredictOptions, topology: Topology) -> tuple[PredictOptions, str]:
    """The options with the topology's entry rate as ``rps`` when a load that needs a rate was given none, and where
    that rate comes from ('' when the options' own rate stands)."""
    rate = topology.entry_rate
    if rate is None or options.rps is not None or options.profile is not None or options.load not in LOAD_MODELS \
            or options.load == "sequential":
        return options, ""
    return options.with_changes(rps=rate.rps), f"the topology's entry_rate ({rate.rps:g} rps): {rate.source}"


def with_cluster_fortio(options: PredictOptions, scenario: Scenario) -> tuple[PredictOptions, str]:
    """A fortio load's driving (warm-up, -jitter, -uniform) that the options leave unsaid, taken from how the
    calibration cluster's runs drove fortio (the mesh model's ``cluster.load``, when its cluster applies), and what
    was taken ('' when nothing): a model fitted on a pipeline predicts that pipeline's other runs as it makes them."""
    facts = scenario.cluster_load
    if options.load != "fortio" or facts is None:
        return options, ""
    taken: dict[str, Any] = {}
    if options.fortio_version is None and options.fortio_warmup is None:
        taken.update({"fortio_version": facts.version} if facts.version else {}, fortio_warmup=facts.warmup)
    for name in ("jitter", "uniform"):
        if getattr(options, name) is None:
            taken[name] = getattr(facts, name)
    if not taken:
        return options, ""
    return options.with_changes(**taken), facts.taken_words(taken)


def build_scenario_of(options: PredictOptions) -> Scenario:
    topology = load_topology(options.topology)
    if options.payload_bytes is not None:
        _check_int(options.payload_bytes, "payload_bytes", minimum=0)
        topology = topology.with_payload(options.payload_bytes)
    mesh = load_mesh(options.mesh)
    if options.proxy_workers is not None:
        _check_int(options.proxy_workers, "proxy_workers", minimum=1)
    if options.proxy_cpu_limit is not None:
        _check_positive(options.proxy_cpu_limit, "proxy_cpu_limit", "cores")
    mesh = mesh.with_proxy_overrides(options.proxy_workers, options.proxy_cpu_limit)
    if options.cluster not in CLUSTER_CHOICES:
        raise FieldError("cluster", f"unknown value {options.cluster!r} (known: {', '.join(CLUSTER_CHOICES)})")
    cluster_source, cluster_load = "", None
    if options.cluster == "mesh" and mesh.cluster is not None:
        topology = mesh.cluster.applied_to(topology)
        cluster_source = f"mesh model {mesh.name!r}: {mesh.cluster.source}".rstrip(": ")
        cluster_load = mesh.cluster.load
    features = tuple(options.features)
    if options.scope == "none" and any(not f.startswith("no-") for f in features):
        raise FieldError("features", f"{', '.join(features)} cannot apply with scope 'none' (nobody has a proxy: the "
                                     "baseline runs without the mesh and its features)")
    scenario = build_scenario(topology, mesh, () if options.scope == "none" else features, options.lb, options.scope)
    return replace(scenario, cluster_source=cluster_source, cluster_load=cluster_load)


def build_load(options: PredictOptions) -> Load:
    """The load generator's model; options of another load model are refused."""
    kind = options.load
    if kind not in LOAD_MODELS:
        raise FieldError("load", f"unknown load model {kind!r} (known: {', '.join(LOAD_MODELS)})")
    _refuse_foreign_options(options)
    connections = options.connections if options.connections is not None else DEFAULT_CONNECTIONS[kind]
    _check_int(connections, "connections", minimum=1, maximum=MAX_CONNECTIONS)
    if kind == "sequential":
        think = options.think_ms if options.think_ms is not None else DEFAULT_THINK_MS
        _check_finite(think, "think_ms")
        if think < 0:
            raise FieldError("think_ms", f"must be >= 0 ms, got {think:g}")
        result: Load = SequentialLoad(Deterministic(think * MS), users=connections)
    elif kind == "wrk2":
        threads = options.threads if options.threads is not None else DEFAULT_THREADS
        _check_int(threads, "threads", minimum=1)
        result = Wrk2Load(_rate(options), connections, threads)
    elif kind == "fortio":
        result = FortioLoad(_rate(options), connections, bool(options.uniform), bool(options.jitter),
                            options.nocatchup,
                            **({"version": options.fortio_version} if options.fortio_version else {}),
                            warmup=options.fortio_warmup)
    else:
        profile = options.profile
        if profile is not None:
            profile.validate()
            result = OpenLoad(profile.max_rps, connections, profile)
        else:
            result = OpenLoad(_rate(options), connections)
    validate_load(result)
    return result


def _refuse_foreign_options(options: PredictOptions) -> None:
    kind = options.load
    given_fortio = [f for f in FORTIO_FLAGS if getattr(options, f) not in (None, False) or
                    (f in ("jitter", "uniform") and getattr(options, f) is not None)]  # --no-jitter is said too
    if kind != "fortio" and given_fortio:
        raise FieldError(given_fortio[0], f"applies to the fortio load only, not to load {kind!r}")
    if kind != "sequential" and options.think_ms is not None:
        raise FieldError("think_ms", f"applies to the sequential load only, not to load {kind!r}")
    if kind != "wrk2" and options.threads is not None:
        raise FieldError("threads", f"applies to the wrk2 load only, not to load {kind!r}")
    if kind != "open" and options.profile is not None:
        raise FieldError("profile", f"a rate profile needs the open load (fortio, sequential and wrk2 loads have "
                                    f"none), not load {kind!r}")
    if kind == "sequential" and options.rps is not None:
        raise FieldError("rps", "does not apply to the sequential load: its users and think time set the rate")
    if options.profile is not None and options.rps is not None:
        raise FieldError("rps", "give either a rate or a rate profile, not both (the profile sets the rate)")


def _rate(options: PredictOptions) -> float:
    if options.rps is None:
        raise FieldError("rps", "required (the offered rate in requests per second)")
    return _check_positive(options.rps, "rps", "requests per second")


def build_settings(options: PredictOptions) -> RunSettings:
    if options.processes is not None:
        _check_int(options.processes, "processes", minimum=1)
    if options.min_replications is not None:
        _check_int(options.min_replications, "min_replications", minimum=2)
    for name in ("duration_s", "warmup_s", "precision", "max_events", "time_limit_s", "timeseries_s"):
        value = getattr(options, name)
        if value is not None:
            _check_finite(value, name)
    settings = RunSettings(duration_s=options.duration_s, warmup_s=options.warmup_s,
                           replications=options.replications, seed=options.seed, precision=options.precision,
                           processes=options.processes, saturation_search=options.saturation,
                           timeseries_s=options.timeseries_s,
                           engine=options.engine,
                           **{k: getattr(options, k) for k in ("max_events", "time_limit_s", "min_replications")
                              if getattr(options, k) is not None})
    settings.validate()
    return settings


def _check_finite(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise FieldError(name, f"expected a finite number, got {value!r}")
    return float(value)


def _check_positive(value: float, name: str, unit: str) -> float:
    number = _check_finite(value, name)
    if number <= 0:
        raise FieldError(name, f"must be > 0 {unit}, got {value:g}")
    return number


def _check_int(value: int, name: str, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise FieldError(name, f"expected a whole number, got {value!r}")
    if value < minimum:
        raise FieldError(name, f"must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise FieldError(name, f"must be <= {maximum} (meshsim.limits), got {value}")
    return value
