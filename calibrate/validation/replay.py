"""How a measured run is replayed in the simulator: its topology, path mode, features and fortio workload.

Path modes map to the simulator as: baseline -> scope ``none``; server-sidecar -> ``server``; both-sidecars ->
``both``; proxy-lb -> lb ``proxy`` (no sidecars, as in the lab); client-lb -> lb ``client`` with sidecars.

Topology. A hand-made mesh model is replayed on the manifest's named topology (``models/topologies``). A fitted
model (``meshsim fit``) carries ``calibration.baseline``: network + app + client of its baseline runs, in which
the fitted passes already include the loopback hops. Its runs are replayed on that baseline (the same topology
``meshsim.calibrate.fit.sim_check`` uses), or, for a model fitted on a cluster's runs on one shipped topology
(``calibration.replay_topology``), on that topology with the cluster's hop and wake-up, as the fit did; ``lbN`` gets N replicas of it. A ``chainN`` also needs the cost of the
N-1 forwarding apps, which no single-service calibration run holds: it is taken from a baseline run of the same
chain among the validated runs (that run is then marked ``topology``, not held-out). The lab's ``bookinfo`` call
graph is replayed the same way (forwarding apps productpage and reviews, leaves details and ratings).
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from meshsim.calibrate.measure.dataset import Run
from meshsim.calibrate.measure.lab.host_load import cores_left
from meshsim.calibrate.fit.baseline_cpu import ReadAt, replay_rate
from meshsim.calibrate.validation.forwarding_cpu import forwarding_collection, forwarding_cpu_ms
from meshsim.calibrate.validation.forwarding_wake import SPIN_SHARE, SPIN_SOURCE, WakeSplit, split_cpu
from meshsim.calibrate.validation.hop_spread import fit_hop_cv
from meshsim.calibrate.fit.observations import from_result
from meshsim.calibrate.fit.sim_check import (baseline_mean_ms, baseline_service, fit_topology, host_tick_hold,
                                             host_woken_first, replay_topology_name)
from meshsim.catalog import chain_length, load_topology
from meshsim.errors import MeshsimError, ModelError
from meshsim.fortio_warmup import checked_version
from meshsim.request import PredictOptions
from meshsim.mesh import mesh_from_data
from meshsim.tick_hold import TickHold
from meshsim.topology import Topology, topology_from_data
from meshsim.woken_first import WokenFirst

SCOPE_OF_PATH = {"baseline": "none", "server-sidecar": "server", "both-sidecars": "both", "proxy-lb": "none",
                 "client-lb": "both"}
LB_OF_PATH = {"proxy-lb": "proxy"}
HOP_CV = 0.5  # a forwarding hop step's spread where no baseline run's percentiles fit it (hop_spread)
_LB = re.compile(r"^lb(\d+)$")


@dataclass(frozen=True)
class Replay:
    """The prediction options of one run (its topology as an object, so derived topologies need no file; the mesh
    model is the caller's)."""

    options: PredictOptions
    notes: tuple[str, ...] = ()
    baseline_rate: float | None = None  # the rate its baseline service's CPU was read at (None: one value)

    @property
    def topology(self) -> Topology:
        assert isinstance(self.options.topology, Topology)
        return self.options.topology


class CannotReplay(MeshsimError):
    """This run cannot be simulated with this model (unknown feature, missing chain baseline, ...)."""


def features_for(model: Mapping[str, Any], run: Run) -> list[str]:
    """The run's features plus ``no-X`` for every default-on feature of the model the run did not have."""
    known = model.get("features") or {}
    unknown = sorted(set(run.features) - set(known))
    if unknown:
        raise CannotReplay(f"feature {unknown[0]!r} is not in the model (model features: "
                           f"{', '.join(sorted(known)) or 'none'})")
    defaults = {n for n, f in known.items() if isinstance(f, Mapping) and f.get("default")}
    return sorted(run.features) + [f"no-{n}" for n in sorted(defaults - set(run.features))]


def _skeleton(name: str, entry: str, services: dict[str, Any], source: str) -> dict[str, Any]:
    return {
        "schema": "meshsim/topology/v1", "name": name, "entry": entry, "source": source,
        "description": "fortio client -> lab/cluster services, app + network from measured baseline runs",
        "client": {"overhead": 0, "request_bytes": 100, "source": "included in the measured baseline"},
        "network": {"loopback": 0, "same_node": 0, "cross_node": 0, "bandwidth_gbps": 1000,
                    "source": "included in the measured baseline and in the fitted proxy passes"},
        "services": services,
    }


def baseline_topology(model: Mapping[str, Any], replicas: int = 1, at: ReadAt | None = None) -> Topology:
    """The model's one baseline service (its CPU read at ``at`` = (rate, connections, payload),
    :func:`baseline_service`)."""
    source = f"calibration.baseline of mesh model {model.get('name')!r} (network + app of its baseline runs)"
    name = f"{model.get('name')}-baseline" + (f"-x{replicas}" if replicas > 1 else "")
    data = _skeleton(name, "server", {"server": baseline_service(model, replicas, source, at)}, source)
    return topology_from_data(data, f"<{name}: derived from the mesh model's calibration.baseline>")


def graph_topology(model: Mapping[str, Any], name: str, graph: Sequence[Any], hop_mean_ms: float,
                   hop_source: str, app_cpu_ms: float | None = None, wake: WakeSplit | None = None,
                   hop_cv: float = HOP_CV, leaf_at: ReadAt | None = None,
                   collection: Mapping[str, Any] | None = None) -> Topology:
    """A lab call graph (``calibrate.lab.spec.parse_topology``): every service that calls others is a forwarding app
    costing one hop (half before its calls, half after); every leaf is the model's calibration.baseline.

    ``app_cpu_ms``: the forwarding apps' measured CPU per request; what of it is on the request's path holds the
    app's core and the rest of the hop is a delay that holds none (waking, the kernel). None: the whole hop is CPU.
    ``wake``: that CPU split into work per request (the compute steps) and CPU per wake (the app's
    ``wakeup.resume_cpu``, paid when a job finds its worker idle: per request at a low rate, per batch near
    saturation), of which the spinning threads' share is off the path. ``hop_cv``: each step's spread.
    ``leaf_at``: (rate, connections, payload) to read the leaves' CPU at (:func:`baseline_service`).
    ``collection``: the forwarding apps' garbage collections (``app_cpu_ms`` and ``wake`` are then their CPU beyond)."""
    leaf_source = f"calibration.baseline of mesh model {model.get('name')!r}"
    on_path = app_cpu_ms if wake is None or app_cpu_ms is None else wake.on_path_ms(app_cpu_ms)
    wake = wake.within(hop_mean_ms, app_cpu_ms) if wake is not None and app_cpu_ms is not None else wake
    handler = hop_halves(hop_mean_ms, hop_source, on_path, wake, hop_cv)
    services: dict[str, Any] = {}
    for service in graph:
        if not service.calls:
            services[service.name] = baseline_service(model, 1, leaf_source, leaf_at)
        else:
            services[service.name] = {"replicas": 1, "cores": 2, "request_bytes": 100, "response_bytes": 0,
                                      "handler": [*handler[0], *({"call": c} for c in service.calls),
                                                  *handler[1]],
                                      "source": hop_source, **({"wakeup": wake.wakeup_block()} if wake else {}),
                                      **({"garbage_collection": dict(collection)} if collection else {})}
    full = f"{model.get('name')}-{name}"
    return topology_from_data(_skeleton(full, graph[0].name, services, hop_source),
                              f"<{full}: derived from baseline runs>")


def hop_halves(hop_mean_ms: float, hop_source: str, app_cpu_ms: float | None,
                wake: WakeSplit | None = None, cv: float = HOP_CV) -> tuple[list[dict], list[dict]]:
    """The steps before and after a forwarding app's calls: half its CPU (its work per request, with ``wake``) each,
    and half the rest of the hop beyond ``app_cpu_ms`` (the CPU on the path) as delays, each lognormal with
    coefficient of variation ``cv``."""
    def half(mean_ms: float, what: str) -> dict[str, Any]:
        return {"family": "lognormal", "mean_ms": max(mean_ms / 2, 1e-4), "cv": cv,
                "source": f"half of {what} ({hop_source}); cv {cv:g}"}

    if wake is not None:
        cpu = {"compute": half(wake.work_ms, f"the forwarding apps' work per request, {wake.work_ms:.4f} ms")}
    elif app_cpu_ms is not None and 0 < app_cpu_ms < hop_mean_ms:
        cpu = {"compute": half(app_cpu_ms, f"the forwarding apps' CPU per request, {app_cpu_ms:.4f} ms")}
    else:
        step = {"compute": half(hop_mean_ms, "one forwarding hop")}
        return [step], [step]
    if app_cpu_ms is None or app_cpu_ms >= hop_mean_ms:
        return [cpu], [cpu]
    wait = {"delay": half(hop_mean_ms - app_cpu_ms, "the hop's time beyond the apps' CPU")}
    return [wait, cpu], [cpu, wait]


def _lab_graph(name: str) -> Sequence[Any] | None:
    """The lab's call graph for a chainN or bookinfo run (None for other names)."""
    from meshsim.calibrate.measure.lab.spec import parse_topology

    if chain_length(name) is None and name != "bookinfo":
        return None
    try:
        return parse_topology(name)
    except MeshsimError:
        return None


def _closest(candidates: Sequence[Run], run: Run) -> Run:
    """Same rate and connections first; among repeats, the one measured closest in time (same machine state)."""
    return min(candidates, key=lambda b: (abs((b.rps or 0) - (run.rps or 0)),
                                          abs(b.manifest.load.connections - run.manifest.load.connections),
                                          abs(_when(b) - _when(run))))


def _nearest_in_time(candidates: Sequence[Run], run: Run) -> Run:
    return min(candidates, key=lambda b: abs(_when(b) - _when(run)))


def _when(run: Run) -> float:
    try:
        return dt.datetime.fromisoformat(run.manifest.when.replace("Z", "+00:00")).timestamp()
    except (ValueError, AttributeError):
        return 0.0


@dataclass(frozen=True)
class ReplaySettings:
    """How long and how often each run is simulated (``meshsim validate``'s settings)."""

    sim_duration_s: float = 5.0
    replications: int = 1
    seed: int = 1
    processes: int | None = None
    per_core_queues: bool = False  # a lab host's cores with per-CPU run queues (Topology.per_core_queues)
    baseline_rate: float | None = None  # the rate a saturated replay carried: the baseline's CPU read there


def topology_for(model: Mapping[str, Any], run: Run, runs: Sequence[Run], override: Topology | None,
                 settings: ReplaySettings = ReplaySettings()) -> tuple[Topology, tuple[str, ...], list[str]]:
    """(topology, ids of the baseline runs it was derived from, notes)."""
    if override is not None:
        return override, (), []
    name = run.manifest.setup.topology
    if not (model.get("calibration") or {}).get("baseline"):
        return load_topology(name), (), []
    if replay_topology_name(model) == name:  # fitted on this topology on its cluster, as predict builds it
        return fit_topology(model), (), []
    at = replay_rate(model, run, settings.baseline_rate)
    if name == "single":
        return baseline_topology(model, 1, at), (), []
    lb = _LB.match(name)
    if lb:
        return baseline_topology(model, int(lb.group(1)), at), (), []
    graph = _lab_graph(name)
    if graph is None:
        return load_topology(name), (), [f"topology {name}: app times from models/topologies, not measured"]
    if not any(svc.calls for svc in graph):
        return baseline_topology(model, 1, at), (), []
    return _chain_topology(model, run, runs, name, graph, settings, at)


def _chain_topology(model: Mapping[str, Any], run: Run, runs: Sequence[Run], name: str, graph: Sequence[Any],
                    settings: ReplaySettings, at: ReadAt | None = None,
                    ) -> tuple[Topology, tuple[str, ...], list[str]]:
    """A lab call graph whose forwarding apps cost what the chain's baseline runs measured: the hop's mean from the
    one-connection run closest to ``run``; with a loaded baseline run (more connections) beside it, their CPU per
    request split into work and CPU per wake (``forwarding_wake``)."""
    forwarders = sum(1 for svc in graph if svc.calls)
    leaves = len(graph) - forwarders
    bases = [b for b in runs if b.manifest.setup.topology == name and b.manifest.setup.path == "baseline"
             and b.status != "failed"]
    if not bases:
        raise CannotReplay(f"topology {name}: a fitted model knows one service only; add a baseline {name} run "
                           "(the forwarding apps' cost) to the RUN_DIRs, or pass --topology FILE")
    fewest = min(b.manifest.load.connections for b in bases)
    # the hop's time from an unloaded run: a loaded run's mean latency is mostly queueing
    base = _closest([b for b in bases if b.manifest.load.connections == fewest], run)
    hop = (from_result(base.result).mean * 1e3 - leaves * baseline_mean_ms(model)) / forwarders
    if hop <= 0:
        raise CannotReplay(f"topology {name}: baseline run {base.id} is not slower than its {leaves} leaf "
                           "service(s) at the model's baseline")
    source = (f"mean forwarding hop {hop:.4f} ms = (mean of baseline run {base.id} - {leaves} x the mean of the "
              f"model's calibration.baseline) / {forwarders} forwarding apps (calls are sequential)")
    cpu = forwarding_cpu_ms(base, graph)
    cv, spread = _hop_spread(model, base, leaves, forwarders, hop, source, cpu)
    if cpu is None:
        return graph_topology(model, name, graph, hop, source, None, hop_cv=cv, leaf_at=at), (base.id,), [
            source, f"forwarding hop spread: {spread}", "no CPU readings of the forwarding apps: the whole hop is "
            "booked as their CPU"]
    notes = [source, f"forwarding hop spread: {spread}", f"the forwarding apps burn {cpu:.4f} ms CPU per request in "
             f"{base.id}: " + ("the rest of the hop holds no core" if cpu < hop else "more than the hop lasts: the "
                               "whole hop is their CPU")]
    loaded = [b for b in bases if b.manifest.load.connections > fewest and forwarding_cpu_ms(b, graph) is not None]
    nearest = _nearest_in_time(loaded, run) if loaded else None
    collection = forwarding_collection(nearest or base, graph)  # their CPU readings above are beyond it
    notes.append(f"forwarding apps' garbage collections: {collection['source']}" if collection else
                 "no garbage collections recorded in the chain's baseline runs: the apps' CPU is all per request")
    build = functools.partial(graph_topology, model, name, graph, hop, source, collection=collection)
    if nearest is None:
        notes.append(f"no loaded baseline {name} run (more connections than {fewest}): the apps' CPU per request is "
                     "one constant at every rate")
        return build(cpu, hop_cv=cv, leaf_at=at), (base.id,), notes
    wake = _wake_split(model, name, graph, hop, source, base, nearest, settings, cv, collection)
    if isinstance(wake, str):
        notes.append(wake)
        return build(cpu, hop_cv=cv, leaf_at=at), (base.id,), notes
    on_path = wake.on_path_ms(cpu)
    notes.append(wake.source + ("" if on_path <= hop else f" (x {hop / on_path:.3f}: within the hop)"))
    notes.append(f"Go's spinning threads: {SPIN_SHARE:g} of each wake's CPU booked beside the request "
                 f"({SPIN_SOURCE}); {on_path:.4f} of the {cpu:.4f} ms on {base.id}'s path")
    return build(cpu, wake, cv, at), wake.source_runs, notes


_SPLITS: dict[tuple[str, ...], WakeSplit | str] = {}  # one split per model and pair of baseline runs
MAX_SPLITS = 64
_SPREADS: dict[tuple[str, ...], tuple[float, str]] = {}  # one hop spread per model and baseline run


def _digest(model: Mapping[str, Any]) -> str:
    return hashlib.sha1(json.dumps(model, sort_keys=True, default=str).encode()).hexdigest()


def _hop_spread(model: Mapping[str, Any], base: Run, leaves: int, forwarders: int, hop: float, source: str,
                cpu: float | None) -> tuple[float, str]:
    """The hop's cv fitted to ``base`` (cached: every held-out run of one validation derives its chain from the
    same baseline run)."""
    key = (_digest(model), base.id)
    if key not in _SPREADS:
        if len(_SPREADS) >= MAX_SPLITS:  # a long-lived process (the app) validating many models
            _SPREADS.clear()
        _SPREADS[key] = fit_hop_cv(model["calibration"]["baseline"], base, leaves, forwarders, hop,
                                   lambda c: hop_halves(hop, source, cpu, None, c))
    return _SPREADS[key]


def _wake_split(model: Mapping[str, Any], name: str, graph: Sequence[Any], hop: float, source: str, low: Run,
                loaded: Run, settings: ReplaySettings, hop_cv: float,
                collection: Mapping[str, Any] | None = None) -> WakeSplit | str:
    """The forwarding apps' CPU split into work and CPU per wake from ``low`` and ``loaded`` (cached: every held-out
    run of one validation derives its chain from the same pair)."""
    cpu_low, cpu_loaded = forwarding_cpu_ms(low, graph), forwarding_cpu_ms(loaded, graph)
    assert cpu_low is not None and cpu_loaded is not None
    key = (_digest(model), low.id, loaded.id, str(settings.seed), str(hop_cv))

    def replayer(run: Run, work_ms: float, resume_ms: float) -> PredictOptions:
        wake = WakeSplit(work_ms, resume_ms, "a candidate split", (low.id, loaded.id))
        topology = graph_topology(model, name, graph, hop, source, cpu_low, wake, hop_cv, collection=collection)
        mesh = mesh_from_data(model, "<model>")
        return replay_options(model, run, topology, True, [], settings).with_changes(mesh=mesh)

    if key not in _SPLITS:
        if len(_SPLITS) >= MAX_SPLITS:  # a long-lived process (the app) validating many models
            _SPLITS.clear()
        _SPLITS[key] = split_cpu(low, loaded, cpu_low, cpu_loaded, [f"{s.name}/app" for s in graph if s.calls],
                                 replayer)
    return _SPLITS[key]


def on_one_host(topology: Topology, cores: float, per_core_queues: bool = False, tick_hold: TickHold | None = None,
                woken_first: WokenFirst | None = None) -> Topology:
    """The lab: every process on one machine sharing its cores (:meth:`meshsim.topology.Topology.on_one_host`)."""
    return topology.on_one_host(cores, per_core_queues, tick_hold, woken_first)


def replay(model: Mapping[str, Any], run: Run, runs: Sequence[Run], *,
           topology: Topology | None, sim_duration_s: float, replications: int, seed: int,
           processes: int | None, per_core_queues: bool = False,
           baseline_rate: float | None = None) -> tuple[Replay, tuple[str, ...]]:
    """How to simulate ``run``, and the ids of the baseline runs its topology was derived from; raises CannotReplay
    with the reason when it cannot be. ``baseline_rate``: the rate a replay that saturated the host carried, to read
    the baseline's CPU at (``meshsim fit``'s ``calibration.baseline_cpu.by_rate``; None: the most loaded run's)."""
    if not run.rps:
        raise CannotReplay("no requested rate (fortio ran at max speed): the fortio model needs -qps")
    settings = ReplaySettings(sim_duration_s, replications, seed, processes, per_core_queues, baseline_rate)
    topo, base_ids, notes = topology_for(model, run, runs, topology, settings)
    try:
        delay = run.manifest.load.leaf_delay_s
    except ModelError as exc:
        raise CannotReplay(f"the run's {exc}") from None
    if delay:
        topo = topo.with_leaf_delay(delay)
        notes.append(f"the leaf apps wait {delay * 1e3:g} ms per request (fortio echo delay= in the run's URL), "
                     "holding no core")
    derived = topology is None and bool((model.get("calibration") or {}).get("baseline"))
    at = replay_rate(model, run, baseline_rate) if derived else None
    if at is not None:
        notes.append(f"the baseline's CPU read at {at[0]:.0f} rps, {at[1]} connection(s) and {at[2]} B "
                     "(calibration.baseline_cpu.by_rate)")
    options = replay_options(model, run, topo, derived, notes, settings)
    return Replay(options, tuple(notes), at[0] if at else None), base_ids


def replay_options(model: Mapping[str, Any], run: Run, topo: Topology, derived: bool, notes: list[str],
             settings: ReplaySettings) -> PredictOptions:
    """The prediction options replaying ``run`` on ``topo`` (on the lab's host for a lab run); adds to ``notes``."""
    setup, load = run.manifest.setup, run.manifest.load
    cores = run.lab_host_cores
    if cores is not None:
        # in a saturated run the host was full and the others' cores were the lab's loss; below saturation they ran
        # in the time the lab left idle (a niced neighbour fills it), which took nothing from the lab
        left = cores_left(run.manifest.where) if run.manifest.status == "saturated" else None
        if left is not None and left < cores:
            notes.append(f"saturated lab run: other processes took {cores - left:.2f} of the host's {cores:g} cores "
                         f"during it (where.host_load): the lab's processes share the {left:.2f} they left")
            cores = left
        hold, woken = host_tick_hold(model), host_woken_first(model)
        topo = on_one_host(topo, cores, settings.per_core_queues, hold, woken)
        notes.append(f"lab run: every process shares the host's {cores:g} cores (node CPU contention modelled"
                     + (f", a woken thread first: cluster.woken_first, window {woken.window * 1e3:g} ms)" if woken
                        else ")"))
        if hold is not None and hold.share > 0:
            notes.append(f"the model's tick hold (cluster.tick_hold, fitted on its lab host): {hold.share:g} of the "
                         f"bursts that find the cores taken wait for the next {hold.tick * 1e3:g} ms tick")
    duration = run.result.duration_s if run.result.duration_s == run.result.duration_s else (load.duration_s or 10.0)
    if duration > settings.sim_duration_s:
        notes.append(f"simulated {settings.sim_duration_s:g} s per replication of a {duration:g} s run (max is not "
                     "comparable)")
        duration = settings.sim_duration_s
    if derived and run.manifest.cpu_seconds:
        notes.append("app CPU not comparable: the derived app holds the whole measured baseline (client + network)")
    if setup.path == "client-lb":
        notes.append("client-lb simulated with sidecars on client and servers (the simulator has no client-only scope)")
    return PredictOptions(
        topology=topo, rps=float(run.rps or 0.0), load="fortio",
        connections=run.result.num_threads or load.connections,
        uniform=bool(load.uniform), jitter=bool(load.jitter), nocatchup=bool(load.nocatchup),
        fortio_version=checked_version(run.result.version), fortio_warmup=run.result.warmup,
        scope=SCOPE_OF_PATH[setup.path], lb=LB_OF_PATH.get(setup.path, "client"),
        features=tuple(features_for(model, run)),
        payload_bytes=None if derived else setup.payload_bytes,
        proxy_workers=setup.proxy_workers, proxy_cpu_limit=setup.proxy_cpu_limit,
        duration_s=duration, warmup_s=0.0, replications=settings.replications, precision=None, seed=settings.seed,
        processes=settings.processes, cluster="topology" if derived else "mesh")
