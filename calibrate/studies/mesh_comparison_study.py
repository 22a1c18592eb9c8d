"""Study ``mesh-comparison``: the three-mesh paper (seed 001, Shulyak & Savenko 2021) re-created in meshsim.

The paper ran the Kinvolk service-mesh-benchmark against 10 Emojivoto instances on 5 Linode workers of 50 cores, at
50, 450 and 3500 rps, 5 repetitions per stage, without a mesh (baseline) and with Istio 1.11.4, Linkerd 2.11.1 and
Traefik Mesh 1.4.4. It prints p50/p90/p99/p100 of each repetition (Tables 1-4, 7-10, 13-16), and the CPU (Tables 5,
11, 17) and memory (Tables 6, 12, 18) of the data plane and the control plane. The load is the benchmark's wrk2 as its
chart runs it (kinvolk_wrk2: -c 96 to each of the 10 instances' URLs, 100 s, the calibration's first 12.4 s not
printed), with what the chart does not say (threads, whether -c counts each URL's connections, the calibration)
labelled as assumptions; the other reading (96 connections in all) is the study's what-if.

What is fitted (role ``fit``): the 50 rps column, and the data-plane CPU at 3500 rps. The baseline's p50/p90/p99/p100
give the network hops (models/topologies/emojivoto-study.yaml), each mesh's latency its pass time, its memory the
proxy's base memory (mesh_comparison_fit). The CPU at 50 rps is nearly all idle CPU, so the CPU per request is
identified by the 3500 rps cell: the two give each proxy's idle CPU, CPU per pass and the part of a pass that holds
its worker (mesh_comparison_cpu; models/meshes/{istio-1.11,linkerd-2.11,traefik-mesh-1.4}.yaml). Everything else at
450 and 3500 rps is predicted by the engine under the same wrk2 load, except the proxies' memory: the model's is the
fitted base memory plus wrk2's connections, open at every rate, so those cells are ``derived``. The naive forecast
copies the 50 rps column into the 450 and 3500 rps cells of its row (mesh, percentile or layer).
"""

from __future__ import annotations

import statistics
from typing import Any, Mapping

from meshsim.progress import Progress
from meshsim.request import PredictOptions

from meshsim.calibrate.measure.tables import load_table
from meshsim.calibrate.studies.kinvolk_wrk2 import BENCHMARK, IN_ALL, Wrk2Run
from meshsim.calibrate.studies.mesh_comparison_cpu import CPU_FIT_RPS
from meshsim.calibrate.studies.mesh_comparison_fit import FIT_RPS, published_column
from meshsim.calibrate.studies.mesh_comparison_misses import miss_mechanisms
from meshsim.calibrate.studies.mesh_comparison_notes import (CONTROL_NOTE, MEMORY_DERIVED, cpu_fit_note, cpu_note,
                                                             little_law, notes)
from meshsim.calibrate.studies.study_catalog import Study, StudySettings, predicted_latency_ms
from meshsim.calibrate.studies.study_cells import Cell, StudyResult
from meshsim.calibrate.studies.study_skill import StudyColumns

TOPOLOGY = "emojivoto-study"
MESH_MODELS = {"baseline": None, "istio": "istio-1.11", "linkerd": "linkerd-2.11",
               "traefik-mesh": "traefik-mesh-1.4"}
RATES = (50.0, 450.0, 3500.0)
METRIC_OF = {"p50": "p50_ms", "p90": "p90_ms", "p99": "p99_ms", "p100": "max_ms"}
# The test suite's runs: same cells, fewer requests. A wrk2 connection sends once per connections / rps seconds (19.2
# s at 50 rps with 960 connections), so a short stage records whole periods: each connection's sends once or twice.
SHORT_PERIODS = {50.0: 1, 450.0: 1, 3500.0: 2}
SHORT_WARMUP_S = 0.5  # after the last connection started (wrk2 connects a thread's connections 5 ms apart)
SIDECAR_REPLICAS = 10
# Full runs: a prediction stops adding replications after this many seconds (unless the study settings say), and at
# 3500 rps two replications of about 314 000 requests each are enough for p99 and needed whole for the maximum.
TIME_LIMIT_S = 30.0


def stage_options(mesh: str, rps: float, settings: StudySettings, load: Wrk2Run = BENCHMARK) -> PredictOptions:
    model = MESH_MODELS[mesh]
    # a full stage is wrk2's run: its calibration is simulated and left out of the recorded window, as wrk2 resets
    # its histograms after it
    warmup = load.stagger_s + SHORT_WARMUP_S if settings.short else load.calibration_s
    duration = warmup + short_measured_s(rps, load) if settings.short else load.duration_s
    return PredictOptions(topology=TOPOLOGY, mesh=model or "none", scope="none" if model is None else "server",
                          rps=rps, load="wrk2", threads=load.threads, connections=load.connections,
                          duration_s=duration, warmup_s=warmup)


def short_measured_s(rps: float, load: Wrk2Run = BENCHMARK) -> float:
    """The recorded seconds of a short stage: whole periods of wrk2's connections."""
    return SHORT_PERIODS[rps] * load.connections / rps


def predict_stage(options: PredictOptions, settings: StudySettings, progress: Progress | None = None) -> Any:
    """One prediction with the study run's settings; a full run is bounded (see TIME_LIMIT_S)."""
    from meshsim.sim.experiments.predict import predict_options

    chosen = settings.predict_settings()
    if not settings.short:
        chosen["time_limit_s"] = settings.time_limit_s or TIME_LIMIT_S
        if options.rps is not None and options.rps >= 3500:
            chosen.update(replications=2, precision=None)
    return predict_options(options.with_changes(**chosen), progress)


def _spread(values: list[float]) -> tuple[float, float]:
    return (min(values), max(values))


def proxy_cpu_cores(prediction: Any) -> float | None:
    """Cores of one proxy of the busiest kind: web's sidecar (mean of its 10) or the busiest node proxy."""
    per_proxy = []
    for component, cores in prediction.cpu_cores.items():
        if component.endswith("/sidecar"):
            per_proxy.append(cores / SIDECAR_REPLICAS)
        elif component.startswith("node-proxy:"):
            per_proxy.append(cores)
    return max(per_proxy) if per_proxy else None


def proxy_memory_mb(prediction: Any) -> float | None:
    values = [mb for c, mb in prediction.memory_mb.items() if c.endswith("/sidecar") or c.startswith("node-proxy:")]
    return max(values) if values else None


COLUMNS = StudyColumns("rps", FIT_RPS, ("mesh", "percentile", "layer"),
                       "the paper's 50 rps column (the fit column) copied into the 450 and 3500 rps cells of the same "
                       "mesh and percentile (or layer): latencies and CPU that do not move with the rate")


def _latency_cells(rows: list[Mapping[str, Any]], mesh: str, rps: float, prediction: Any) -> list[Cell]:
    cells = []
    role = "fit" if rps == FIT_RPS else "predicted"
    for pct, metric in METRIC_OF.items():
        mine = [r for r in rows if r["percentile"] == pct]
        values = [r["latency_ms"] for r in mine]
        value, ci = predicted_latency_ms(prediction, metric)
        cells.append(Cell(f"Table {mine[0]['table']}", {"mesh": mesh, "rps": rps, "percentile": pct}, metric,
                          statistics.median(values), value, ci, role, published_spread=_spread(values)))
    return cells


def _data_plane_role(metric: str, rps: float) -> tuple[str, str]:
    """A data-plane cell's role and note: CPU at the CPU fit's rates feeds it; memory above 50 rps is derived."""
    if metric == "cpu_cores":
        return ("fit", f"{cpu_note()}; {cpu_fit_note(rps)}") if rps in CPU_FIT_RPS else ("predicted", cpu_note())
    note = "per proxy of the busiest kind (the largest resident set)"
    return ("fit", note) if rps == FIT_RPS else ("derived", f"{note}; {MEMORY_DERIVED}")


def _resource_cells(mesh: str, rps: float, prediction: Any) -> list[Cell]:
    """CPU and memory of the data plane (predicted per proxy) and of the control plane (not modelled)."""
    cells = []
    for table, column, metric, predicted in (("paper001_cpu", "cpu_percent", "cpu_cores", proxy_cpu_cores),
                                             ("paper001_memory", "memory_mb", "memory_mb", proxy_memory_mb)):
        for layer in ("data-plane", "control-plane"):
            rows = load_table(table).where(mesh=mesh, rate_rps=rps, layer=layer)
            values = [r[column] for r in rows]
            cond = {"mesh": mesh, "rps": rps, "layer": layer}
            if layer == "control-plane":
                what = "CPU" if metric == "cpu_cores" else "memory"
                cells.append(Cell(f"Table {rows[0]['table']}", cond, metric, statistics.median(values), None,
                                  role="fit" if rps == FIT_RPS else "predicted", note=CONTROL_NOTE.format(what=what),
                                  published_spread=_spread(values)))
                continue
            role, note = _data_plane_role(metric, rps)
            cells.append(Cell(f"Table {rows[0]['table']}", cond, metric, statistics.median(values),
                              predicted(prediction), role=role, note=note, published_spread=_spread(values)))
    return cells


def connections_needed(prediction: Any, rps: float) -> float:
    """Connections wrk2 needs to hold ``rps`` when each waits for its answer: rps x mean latency (Little's law)."""
    return rps * prediction.latency["mean"].value


def busiest_proxy_utilisation(prediction: Any) -> float | None:
    """The share of its time the busiest worker of any proxy is held (sidecars and node proxies)."""
    values = [u for c, u in prediction.utilization.items() if c.endswith("/sidecar") or c.startswith("node-proxy:")]
    return max(values) if values else None


def within_twice_spread(cell: Cell) -> bool | None:
    """Whether the prediction lies inside the published repetitions' range stretched to twice its width about its
    centre (None without a spread or a prediction)."""
    if cell.published_spread is None or cell.predicted is None:
        return None
    lo, hi = cell.published_spread
    return lo - (hi - lo) / 2 <= cell.predicted <= hi + (hi - lo) / 2


STAGE_EXTRAS = ("achieved_rps", "mean_latency_ms", "wrk2_connections_needed", "saturated",
                "busiest_proxy_worker_utilisation", "wall_s")


def _record_stage(extras: dict[str, Any], key: str, rps: float, prediction: Any) -> None:
    utilisation = busiest_proxy_utilisation(prediction)
    values = {"achieved_rps": round(prediction.achieved_rps.value, 1),
              "mean_latency_ms": round(prediction.latency["mean"].value * 1e3, 2),
              "wrk2_connections_needed": round(connections_needed(prediction, rps), 1),
              "saturated": bool(prediction.saturated),
              "busiest_proxy_worker_utilisation": None if utilisation is None else round(utilisation, 5),
              "wall_s": round(prediction.wall_s, 1)}
    for name, value in values.items():
        extras[name][key] = value


class MeshComparisonStudy(Study):
    name = "mesh-comparison"
    title = "Istio, Linkerd and Traefik Mesh on 10 Emojivoto instances at 50/450/3500 rps (wrk2)"
    source = ("А.В. Шуляк, А.Г. Савенко, 'Сравнительное исследование производительности систем service mesh для "
              "оркестратора Kubernetes', 2021 (seed 001); tables 1-18 as measurements/published/paper001_*.csv")

    def run(self, settings: StudySettings, progress: Progress | None = None) -> StudyResult:
        latency = load_table("paper001_latency")
        cells: list[Cell] = []
        extras: dict[str, Any] = {name: {} for name in STAGE_EXTRAS}
        extras["what_if_connections_in_all"] = {}
        for rps in RATES:
            for mesh in MESH_MODELS:
                if progress:
                    progress(f"{mesh} at {rps:g} rps")
                prediction = predict_stage(stage_options(mesh, rps, settings), settings, progress)
                _record_stage(extras, f"{mesh}@{rps:g}", rps, prediction)
                cells += _latency_cells(latency.where(mesh=mesh, rate_rps=rps), mesh, rps, prediction)
                if MESH_MODELS[mesh] is not None:
                    cells += _resource_cells(mesh, rps, prediction)
                if not settings.short and rps == RATES[-1]:
                    extras["what_if_connections_in_all"][mesh] = what_if_in_all(mesh, settings, progress)
        top = RATES[-1]
        if extras["what_if_connections_in_all"]:
            extras["what_if_column"] = _what_if_column(extras["what_if_connections_in_all"])
        extras["little_law"] = little_law(top, {m: extras["mean_latency_ms"][f"{m}@{FIT_RPS:g}"] for m in MESH_MODELS})
        extras["within_twice_published_spread"] = {
            f"{c.condition['mesh']}@{top:g} {c.metric}": within_twice_spread(c) for c in cells
            if c.role == "predicted" and c.condition["rps"] == top and c.predicted is not None}
        extras["outside_twice_published_spread"] = miss_mechanisms(cells, top, FIT_RPS)
        return StudyResult(self.name, self.title, self.source, tuple(cells), tuple(notes(extras)),
                           {**settings.to_dict(), **_load_settings(settings)}, extras, COLUMNS)


def _load_settings(settings: StudySettings) -> dict[str, Any]:
    """wrk2's settings as the stages ran them (short runs: the test suite's, per rate)."""
    if settings.short:
        warmup = BENCHMARK.stagger_s + SHORT_WARMUP_S
        return {"threads": BENCHMARK.threads, "connections": BENCHMARK.connections, "warmup_s": warmup,
                "duration_s": {f"{r:g}": round(warmup + short_measured_s(r), 3) for r in RATES}}
    return {"threads": BENCHMARK.threads, "connections": BENCHMARK.connections, "warmup_s": BENCHMARK.calibration_s,
            "duration_s": BENCHMARK.duration_s, "measured_s": BENCHMARK.measured_s}


def what_if_in_all(mesh: str, settings: StudySettings, progress: Progress | None = None) -> dict[str, Any]:
    """Not a cell: the top stage with the other reading of the chart, 96 connections in all, with each percentile's
    relative error against the paper's column (for the notes and the README, not the medians)."""
    rps = RATES[-1]
    if progress:
        progress(f"{mesh} at {rps:g} rps with {IN_ALL.connections} connections (what-if)")
    prediction = predict_stage(stage_options(mesh, rps, settings, IN_ALL), settings, progress)
    published = published_column(mesh, rps)
    out: dict[str, Any] = {"connections": IN_ALL.connections, "achieved_rps": round(prediction.achieved_rps.value, 1),
                           "mean_ms": round(prediction.latency["mean"].value * 1e3, 3), "error": {}}
    for pct, metric in METRIC_OF.items():
        out[metric] = round(predicted_latency_ms(prediction, metric)[0], 3)
        out["error"][metric] = round(out[metric] / published[pct] - 1, 4)
    return out


def _what_if_column(what_if: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The what-if's latency column at the top rate: its median |error| over every mesh's percentiles."""
    errors = [abs(e) for row in what_if.values() for e in row["error"].values()]
    return {"cells": len(errors), "median_abs_error": round(statistics.median(errors), 4) if errors else None}


STUDY = MeshComparisonStudy
