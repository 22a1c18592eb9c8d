"""Simulation-based check and refinement: drive the simulator with the calibration runs' own fortio workload.

The simulated system is one fortio client and one echo server whose network + app time is the model's fitted
baseline (``calibration.baseline``); network hops are zero because the fitted passes already include the loopback
hops between app and sidecar. A model fitted on a cluster's runs whose shipped topology they name replays on that
topology instead, on its cluster (``fit_topology``). Every calibration run is replayed (same rate, connections,
-uniform/-jitter, scope and features) and its p50/p90/p99 compared with the measured ones. ``refine`` then moves
each fitted pass's shift until the simulated mean of the run that identified it matches the measured mean: it
removes what the no-queueing deconvolution attributed to the passes but the simulator produces by queueing.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from meshsim.calibrate.fit.baseline_cpu import ReadAt, baseline_cpu_at
from meshsim.calibrate.fit.mode_check import ModeCheck, measured
from meshsim.calibrate.measure.dataset import Run
from meshsim.calibrate.fit.model_file import read_model, write_model
from meshsim.calibrate.fit.observations import from_result
from meshsim.distribution_spec import parse_distribution
from meshsim.errors import MeshsimError
from meshsim.fortio_warmup import checked_version
from meshsim.request import PredictOptions
from meshsim.progress import Progress
from meshsim.tick_hold import TickHold
from meshsim.topology import Topology
from meshsim.woken_first import WokenFirst

SCOPE_OF_PATH = {"baseline": "none", "server-sidecar": "server", "both-sidecars": "both"}
# which passes a run path identifies, in fitting order
REFINED = (("server-sidecar", ("inbound_request", "inbound_response")),
           ("both-sidecars", ("outbound_request", "outbound_response")))


# The baseline is the runs' network + app time, mostly wire and kernel: replayed as a delay, not as work queued on a
# few cores (on 2 cores a burst of 16 requests queued 1 ms of network time that never queues: a c=16 baseline
# replayed at 1.33 ms against the 0.63 ms measured). Whatever a burst really adds to the baseline (every request
# of it waking an idle core) is the cluster's wake-up, ``cluster.wakeup``, which the server then carries.
BASELINE_SERVERS = 256
# A lab host's scheduler runs a woken thread first (meshsim/woken_first.py); the window of the woken bursts' load
# chosen on the lab's held-out collections (1 and 2 ms alike, 10 ms lost a third of the saturated pair's rate)
LAB_WOKEN_WINDOW_MS = 2.0
LAB_WOKEN_SOURCE = ("Linux's wakeup preemption, traced on the lab host (measurements/lab-envoy-sleeps-2026-11-29); "
                    "the window of the woken bursts' recent load compared at 1, 2 and 10 ms on two held-out lab "
                    "collections (measurements/lab-wakeup-priority-2026-11-29)")


def baseline_mean_ms(model: Mapping[str, Any]) -> float:
    """The mean of the model's ``calibration.baseline`` (ms)."""
    spec = (model.get("calibration") or {}).get("baseline")
    return parse_distribution(spec, where="calibration.baseline").mean * 1e3


def baseline_service(model: Mapping[str, Any], replicas: int, source: str,
                     at: ReadAt | None = None) -> dict[str, Any]:
    """The one service of a replay whose time is the model's measured baseline: a station without an artificial
    queue (BASELINE_SERVERS) that wakes as the model's cluster does, holding a core for the baseline's CPU
    (``calibration.baseline_cpu``: the most loaded run's, or read at ``at`` = (rate, connections, payload)) and
    waiting out the rest; without it, for the whole baseline."""
    calibration = model.get("calibration") or {}
    baseline = dict(calibration.get("baseline") or {})
    wakeup = (model.get("cluster") or {}).get("wakeup")
    service = {"replicas": replicas, "cores": BASELINE_SERVERS, "request_bytes": 100, "response_bytes": 0,
               "handler": [{"compute": baseline}], "source": source, **({"wakeup": dict(wakeup)} if wakeup else {})}
    block = calibration.get("baseline_cpu")
    if block and baseline:
        mean_ms = baseline_mean_ms(model)
        cpu_ms, cpu_source = baseline_cpu_at(block, *at) if at else (float(block["cpu_ms"]), block["source"])
        if cpu_ms < mean_ms:
            service["cpu_fraction"] = round(cpu_ms / mean_ms, 5)
            service["cpu_fraction_source"] = (f"calibration.baseline_cpu {cpu_ms:.4g} ms over the baseline's "
                                              f"mean {mean_ms:.4g} ms ({cpu_source})")
    return service


def calibration_topology(model: dict[str, Any], folder: Path) -> Path:
    """A one-service topology whose app time is the model's fitted baseline (and its cluster's wake-up, if fitted),
    written to ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{model['name']}-calibration.yaml"
    path.write_text(yaml.safe_dump(calibration_topology_data(model), sort_keys=False), encoding="utf-8")
    return path


def calibration_topology_data(model: dict[str, Any]) -> dict[str, Any]:
    """The document of :func:`calibration_topology`."""
    baseline = model.get("calibration", {}).get("baseline")
    if not isinstance(baseline, dict):
        raise MeshsimError(f"mesh model {model.get('name')!r}: no calibration.baseline (not written by meshsim fit)")
    source = "meshsim fit: calibration.baseline of the mesh model (network + app of its baseline runs)"
    topo = {
        "schema": "meshsim/topology/v1", "name": f"{model['name']}-calibration",
        "description": "fortio client -> echo server as in the calibration runs", "source": source,
        "entry": "server",
        "client": {"overhead": 0, "request_bytes": 100, "source": "included in the baseline"},
        "network": {"loopback": 0, "same_node": 0, "cross_node": 0, "bandwidth_gbps": 1000,
                    "source": "included in the baseline and in the fitted passes"},
        "services": {"server": baseline_service(model, 1, source)},
    }
    return topo


def replay_topology_name(model: Mapping[str, Any]) -> str | None:
    """The shipped topology the model's cluster runs were fitted on (``calibration.replay_topology``), if any."""
    name = (model.get("calibration") or {}).get("replay_topology")
    return str(name) if name else None


def fit_topology(model: Mapping[str, Any]) -> Topology:
    """The topology every replay of the model's runs uses (the fit's, ``meshsim validate``'s).

    A model fitted on a cluster's runs whose shipped topology they name (``calibration.replay_topology``) replays on
    that topology on its cluster: the fitted cross-node hop and wake-up in place of the topology's, no wake-up where
    none was fitted; which is what ``meshsim predict --topology NAME`` builds with this model. Bursts then queue on
    the client's and the app's cores in the fit as they do in the prediction, so the wake-up fitted on them is not
    counted twice. Any other model replays on its calibration baseline as one station (:func:`calibration_topology`).
    """
    from meshsim.catalog import load_topology
    from meshsim.cluster_facts import parse_cluster
    from meshsim.topology import topology_from_data
    from meshsim.yamlio import Section

    name = replay_topology_name(model)
    if name is None:
        return topology_from_data(calibration_topology_data(dict(model)), f"{model['name']}-calibration (in memory)")
    cluster = dict(model.get("cluster") or {})
    facts = parse_cluster(Section(cluster, "cluster")) if cluster else None
    topology = load_topology(name)
    if facts is None or facts.wakeup is None:  # the cluster's wake-up is fitted or absent, never the topology's
        topology = replace(topology, services={n: replace(s, wakeup=None) for n, s in topology.services.items()})
    return facts.applied_to(topology) if facts is not None else topology


def host_tick_hold(model: Mapping[str, Any]) -> TickHold | None:
    """The model's fitted tick hold of its lab host (``cluster.tick_hold``), which a replay of a run on that host
    uses whatever topology it replays on."""
    from meshsim.tick_hold import parse_tick_hold
    from meshsim.yamlio import Section

    block = (model.get("cluster") or {}).get("tick_hold")
    return parse_tick_hold(Section(block, "cluster.tick_hold")) if block else None


def host_woken_first(model: Mapping[str, Any]) -> WokenFirst | None:
    """The model's lab host scheduler running a woken thread first (``cluster.woken_first``), which a replay of a run
    on that host uses whatever topology it replays on."""
    from meshsim.woken_first import parse_woken_first
    from meshsim.yamlio import Section

    block = (model.get("cluster") or {}).get("woken_first")
    return parse_woken_first(Section(block, "cluster.woken_first")) if block else None


def with_lab_scheduler(model: dict[str, Any], runs: Sequence[Run]) -> dict[str, Any]:
    """``model`` with ``cluster.woken_first`` when its runs were made on a lab host (Linux: a woken thread displaces
    the running one), so every replay of the fit, and the predictions, book the host's bursts so."""
    if any(r.lab_host_cores is not None for r in runs):
        woken = WokenFirst(LAB_WOKEN_WINDOW_MS * 1e-3, LAB_WOKEN_SOURCE)
        model.setdefault("cluster", {})["woken_first"] = woken.to_yaml()
    return model


def run_features(model: dict[str, Any], run: Run) -> list[str]:
    """The run's features for --features: its own, and "no-F" for every default-on feature it did not run."""
    defaults = {n for n, f in (model.get("features") or {}).items() if f.get("default")}
    return sorted(run.features) + [f"no-{n}" for n in sorted(defaults - set(run.features))]


def simulate_runs(model_path: Path, runs: Sequence[Run], seed: int = 1,
                  duration_s: float | None = None, progress: Progress | None = None) -> list[ModeCheck]:
    """Simulated vs measured p50/p90/p99 for every run whose path the simulator can reproduce."""
    from meshsim.sim.experiments.predict import predict_options

    model = read_model(model_path)
    topo = fit_topology(model)
    out = []
    for run in runs:
        scope = SCOPE_OF_PATH.get(run.manifest.setup.path)
        if scope is None or not run.rps:
            continue
        load = run.manifest.load
        options = replay_options(topo, model_path, model, run, scope, seed,
                                 duration_s or load.duration_s or 60.0)
        pred = predict_options(options).to_dict()
        values, cis = measured(from_result(run.result))
        simulated = tuple(float(pred["latency_ms"][k]) for k in ("p50", "p90", "p99"))
        out.append(ModeCheck(run.id, values, simulated, cis))
        if progress:
            progress(f"simulated {run.id}: p50/p90/p99 {simulated} ms vs measured {values}")
    return out


def replay_options(topo: Path | Topology, model_path: Path, model: dict[str, Any], run: Run, scope: str, seed: int,
                   duration_s: float) -> PredictOptions:
    """One replication of ``run``'s own fortio workload on the model's replay topology (``fit_topology``)."""
    load = run.manifest.load
    return PredictOptions(topology=topo, mesh=model_path, rps=run.rps, load="fortio", connections=load.connections,
                          uniform=load.uniform, jitter=load.jitter, nocatchup=load.nocatchup,
                          fortio_version=checked_version(run.result.version), fortio_warmup=run.result.warmup,
                          scope=scope,
                          features=tuple(run_features(model, run)), warmup_s=0.0, duration_s=duration_s,
                          replications=1, processes=1, seed=seed, saturation=False, cluster="topology")


def _mean_of(model_path: Path, topo: Topology, run: Run, model: dict[str, Any], seed: int) -> float:
    from meshsim.sim.experiments.predict import predict_options

    options = replay_options(topo, model_path, model, run, SCOPE_OF_PATH[run.manifest.setup.path], seed, 60.0)
    return float(predict_options(options).to_dict()["latency_ms"]["mean"])


def refine(model_path: Path, runs: Sequence[Run], out: Path, work: Path, iterations: int = 2,
           progress: Progress | None = None) -> dict[str, float]:
    """Adjust the shift of the inbound and outbound passes until simulated means match measured ones."""
    model = copy.deepcopy(read_model(model_path))
    changes: dict[str, float] = {}
    if not model.get("proxy"):
        return changes
    topo = fit_topology(model)
    current = model_path
    for path, kinds in REFINED:
        chosen = [r for r in runs if r.manifest.setup.path == path and not r.features and r.rps]
        if not chosen:
            continue
        run = max(chosen, key=lambda r: r.result.count)
        for _ in range(iterations):
            delta_ms = (from_result(run.result).mean * 1e3 - _mean_of(current, topo, run, model, 7)) / len(kinds)
            for kind in kinds:
                spec = model["proxy"]["passes"][kind]
                targets = spec["components"] if spec.get("family") == "mixture" else [spec]
                for t in targets:
                    t["shift_ms"] = max(float(t.get("shift_ms", 0.0)) + delta_ms, 0.0)
                changes[kind] = changes.get(kind, 0.0) + delta_ms
            current = work / "refined.yaml"
            write_model(model, current)
            if progress:
                progress(f"refine {path}: shift {delta_ms:+.4f} ms per pass")
    model["calibration"]["refinement"] = {
        "method": "simulation-based: pass shifts moved until the simulated mean under the runs' fortio workload "
                  "matches the measured mean", "shift_change_ms": {k: round(v, 5) for k, v in changes.items()}}
    write_model(model, out)
    return changes
