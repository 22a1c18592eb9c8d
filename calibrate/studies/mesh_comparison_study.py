"""Study ``mesh-comparison``: the three-mesh paper (seed 001, Shulyak & Savenko 2021) re-created in meshsim.

The paper ran the Kinvolk service-mesh-benchmark: wrk2 with 96 threads against 10 Emojivoto instances on 5 Linode
workers of 50 cores, at 50, 450 and 3500 rps, 5 repetitions per stage, without a mesh (baseline) and with Istio
1.11.4, Linkerd 2.11.1 and Traefik Mesh 1.4.4. It prints p50/p90/p99/p100 of each repetition (Tables 1-4, 7-10,
13-16), and the CPU (Tables 5, 11, 17) and memory (Tables 6, 12, 18) of the data plane and the control plane.

What is fitted (role ``fit``): the 50 rps column only. The baseline's p50/p90/p99 give the network hops
(models/topologies/emojivoto-study.yaml) and its p100 the number of requests a stage measured (the document gives no
run length); each mesh's latency gives its pass time, its CPU the proxy's idle CPU and its memory the proxy's base
memory (models/meshes/{istio-1.11,linkerd-2.11,traefik-mesh-1.4}.yaml; the fits are in mesh_comparison_fit).
Everything at 450 and 3500 rps is predicted by the engine under the same wrk2 load.
"""

from __future__ import annotations

import statistics
from typing import Any, Mapping

from meshsim.progress import Progress
from meshsim.request import PredictOptions

from meshsim.calibrate.measure.tables import load_table
from meshsim.calibrate.studies.mesh_comparison_fit import FIT_RPS
from meshsim.calibrate.studies.study_catalog import Study, StudySettings, predict_cell, predicted_latency_ms
from meshsim.calibrate.studies.study_cells import Cell, StudyResult

TOPOLOGY = "emojivoto-study"
MESH_MODELS = {"baseline": None, "istio": "istio-1.11", "linkerd": "linkerd-2.11",
               "traefik-mesh": "traefik-mesh-1.4"}
RATES = (50.0, 450.0, 3500.0)
METRIC_OF = {"p50": "p50_ms", "p90": "p90_ms", "p99": "p99_ms", "p100": "max_ms"}
THREADS = 96  # 'нагрузочное тестирование идет в 96 потоков'
CONNECTIONS = 96  # wrk2 needs connections >= threads; the document gives no -c, 96 is the least wrk2 accepts
# Requests a stage measured, fitted from the baseline's p100 at 50 rps (mesh_comparison_fit.fit_baseline: the median
# of the maximum of n draws of the fitted baseline is 18.33 ms for n = 737, Table 4 prints 18.13-18.91): 14.74 s.
MEASURED_S = 14.74
# wrk2 discards its ~10 s calibration; the simulated system is in steady state after a second, so 1 s is cut
WARMUP_S = 1.0
SHORT_MEASURED_S = {50.0: 4.0, 450.0: 2.0, 3500.0: 0.4}  # the test suite's runs: same cells, fewer requests
SIDECAR_REPLICAS = 10


def _options(mesh: str, rps: float, settings: StudySettings) -> PredictOptions:
    model = MESH_MODELS[mesh]
    measured = SHORT_MEASURED_S[rps] if settings.short else MEASURED_S
    warmup = 0.5 if settings.short else WARMUP_S
    return PredictOptions(topology=TOPOLOGY, mesh=model or "none", scope="none" if model is None else "server",
                          rps=rps, load="wrk2", threads=THREADS, connections=CONNECTIONS,
                          duration_s=warmup + measured, warmup_s=warmup)


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


CPU_NOTE = ("the paper's unit is printed as '%' and not explained; read as cores of one proxy of the busiest kind "
            "(CPU seconds per second: web's sidecar, Traefik's node proxy). Read as percent of one core, the 50 rps "
            "column (Istio 0.094, Linkerd 0.0036 '%') would leave a proxy passing 6 passes x 5 rps less CPU than "
            "that traffic needs, so that reading is refuted by the fit column itself")
CONTROL_NOTE = ("meshsim models the data plane only: no request passes through istiod, Linkerd's destination/"
                "identity or the Traefik Mesh controller, so their {what} is not predicted")


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


def _resource_cells(mesh: str, rps: float, prediction: Any) -> list[Cell]:
    """CPU and memory of the data plane (predicted per proxy) and of the control plane (not modelled)."""
    cells = []
    role = "fit" if rps == FIT_RPS else "predicted"
    for table, column, metric, predicted in (("paper001_cpu", "cpu_percent", "cpu_cores", proxy_cpu_cores),
                                             ("paper001_memory", "memory_mb", "memory_mb", proxy_memory_mb)):
        for layer in ("data-plane", "control-plane"):
            rows = load_table(table).where(mesh=mesh, rate_rps=rps, layer=layer)
            values = [r[column] for r in rows]
            cond = {"mesh": mesh, "rps": rps, "layer": layer}
            if layer == "control-plane":
                what = "CPU" if metric == "cpu_cores" else "memory"
                cells.append(Cell(f"Table {rows[0]['table']}", cond, metric, statistics.median(values), None,
                                  role=role, note=CONTROL_NOTE.format(what=what), published_spread=_spread(values)))
                continue
            note = CPU_NOTE if metric == "cpu_cores" else "per proxy of the busiest kind (the largest resident set)"
            cells.append(Cell(f"Table {rows[0]['table']}", cond, metric, statistics.median(values),
                              predicted(prediction), role=role, note=note, published_spread=_spread(values)))
    return cells


def connections_needed(prediction: Any, rps: float) -> float:
    """Connections wrk2 needs to hold ``rps`` when each waits for its answer: rps x mean latency (Little's law)."""
    return rps * prediction.latency["mean"].value


class MeshComparisonStudy(Study):
    name = "mesh-comparison"
    title = "Istio, Linkerd and Traefik Mesh on 10 Emojivoto instances at 50/450/3500 rps (wrk2)"
    source = ("А.В. Шуляк, А.Г. Савенко, 'Сравнительное исследование производительности систем service mesh для "
              "оркестратора Kubernetes', 2021 (seed 001); tables 1-18 as measurements/published/paper001_*.csv")

    def run(self, settings: StudySettings, progress: Progress | None = None) -> StudyResult:
        latency = load_table("paper001_latency")
        cells: list[Cell] = []
        extras: dict[str, Any] = {"achieved_rps": {}, "wrk2_connections_needed": {}, "wall_s": {}}
        for rps in RATES:
            for mesh in MESH_MODELS:
                if progress:
                    progress(f"{mesh} at {rps:g} rps")
                prediction = predict_cell(_options(mesh, rps, settings), settings, progress)
                key = f"{mesh}@{rps:g}"
                extras["achieved_rps"][key] = round(prediction.achieved_rps.value, 1)
                extras["wrk2_connections_needed"][key] = round(connections_needed(prediction, rps), 1)
                extras["wall_s"][key] = round(prediction.wall_s, 1)
                cells += _latency_cells(latency.where(mesh=mesh, rate_rps=rps), mesh, rps, prediction)
                if MESH_MODELS[mesh] is not None:
                    cells += _resource_cells(mesh, rps, prediction)
        return StudyResult(self.name, self.title, self.source, tuple(cells), tuple(NOTES),
                           {**settings.to_dict(), "threads": THREADS, "connections": CONNECTIONS,
                            "measured_s": MEASURED_S if not settings.short else SHORT_MEASURED_S,
                            "warmup_s": WARMUP_S}, extras)


NOTES = [
    "Published values are the median of the paper's 5 repetitions; published_spread is their min and max.",
    "Load: wrk2 -t96 as the document says; -c is not printed and wrk2 needs at least one connection per thread, so "
    "96 connections. The run length is not printed either: the baseline's 50 rps maximum (Table 4) gives 737 "
    "measured requests per stage (14.74 s); the maximum of every later stage is that of rps x 14.74 s requests.",
    "Passes per request: the load generator is outside the mesh; sidecar meshes: web inbound (2) + web outbound to "
    "emoji and voting (4) + their inbound (4) = 10; Traefik Mesh's node proxies carry web's outbound calls only (4).",
    "The latency the meshes add (22, 12 and 15 ms at p50) is two orders above a proxy's CPU per pass (~0.1 ms): the "
    "fitted pass time is a delay, and only the CPU part (cpu_fraction, from istio-docs' Envoy cost) holds a worker, "
    "so nothing saturates at 3500 rps and the predicted percentiles stay flat with rate, as the paper's do.",
]

STUDY = MeshComparisonStudy
