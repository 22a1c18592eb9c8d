"""Study ``bookinfo-course``: the KuberNerds course project measuring Istio's overhead with 1500 sequential requests.

Wei, Zhang and Zhao sent 1500 requests one at a time, 50 ms after each answer, to Istio's Bookinfo on minikube
(6 cores, 10 GB) and on AWS EKS (2 m5 nodes), and to a compute-less service with 3 replicas on EKS, each with and
without Istio; they report the total time spent waiting for answers, idle and peak CPU, CPU seconds, idle and loaded
memory of the application's namespace, and the size of a "GET /productpage" request packet.

Scenarios: ``course-bookinfo-minikube``, ``course-bookinfo-eks`` and ``course-simple-eks`` (models/topologies), the
sequential load (1 user, 50 ms think time, a new connection per request: a Python script), mesh ``none`` for the
standalone rows and the shipped ``istio`` mesh with mutual TLS (the authors saw TLS between pods) for the Istio rows,
reached through the Istio ingress gateway (appendix D): an Envoy hop in front of the entry, in istio-system, so not
in the measured namespace. Only sidecars are in the application's pods (the control plane has its own namespace).

Fit (the standalone rows only): the simple service's total gives the EKS client's round trip; each Bookinfo total
gives its environment's application time (the shape's computes scaled by one factor). The standalone CPU and memory
are the application's, which meshsim does not model: they are the baseline the mesh's predicted CPU and memory are
added to. Every Istio cell is predicted, except the request's size through the mesh: the istio model read the
header sizes it adds from this document (``derived``).

The study's columns are its setups (standalone, Istio), not rates; the naive forecast copies each standalone row's
published value into the Istio cell of the same environment, application and state: a mesh that adds nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from meshsim.catalog import load_topology
from meshsim.distributions import MS
from meshsim.progress import Progress
from meshsim.request import PredictOptions, build_scenario_of
from meshsim.topology import Call, Choose, Compute, Parallel, Topology

from meshsim.calibrate.measure.tables import load_table
from meshsim.calibrate.studies.study_catalog import Study, StudySettings, predict_cell, predicted_latency_ms
from meshsim.calibrate.studies.study_cells import Cell, StudyResult
from meshsim.calibrate.studies.study_skill import StudyColumns

REQUESTS = 1500
THINK_MS = 50.0
GATEWAY = "istio-ingressgateway"
MESH = "istio"
FEATURES = ("mtls",)  # telemetry is the mesh's default; mTLS: the authors captured TLS handshakes between pods
SIMPLE_ROW = ("aws-eks", "simple-service")
HEALTH_CHECK_PERIOD_S = 2.0  # section 4.2.1: a health check between the gateway and each pod every two seconds
COLUMNS = StudyColumns("setup", "standalone", ("environment", "app", "state"),
                       "the columns are setups, not rates: each standalone row's published value (the fit column) "
                       "copied into the Istio cell of the same environment, application and state, as if the mesh "
                       "added nothing", mesh=None)


@dataclass(frozen=True)
class Setup:
    environment: str
    app: str
    topology: str


SETUPS = (
    Setup("local-minikube", "example-app", "course-bookinfo-minikube"),
    Setup("aws-eks", "bookinfo", "course-bookinfo-eks"),
    Setup("aws-eks", "simple-service", "course-simple-eks"),
)


# -- the fit: mean time of one request with no queueing (one user at a time: nothing queues) ----------------------

def _hop_ms(topology: Topology, src: str, dst: str, nbytes: int) -> float:
    net = topology.network
    if net.client_rtt is not None and topology.client.node in (src, dst):
        base = 0.5 * net.client_rtt.mean
    else:
        base = (net.same_node if src == dst else net.cross_node).mean
    return (base + nbytes * 8.0 / net.bandwidth_bps) / MS


def service_ms(topology: Topology, name: str) -> tuple[float, float]:
    """(compute, everything else) in ms of one request to ``name`` with its calls, weighted over choices."""
    svc = topology.services[name]
    node = topology.node_of(name)
    compute = other = 0.0

    def call(target: str, weight: float = 1.0) -> None:
        nonlocal compute, other
        callee = topology.services[target]
        sub_compute, sub_other = service_ms(topology, target)
        hops = _hop_ms(topology, node, topology.node_of(target), callee.request_bytes) + \
            _hop_ms(topology, topology.node_of(target), node, callee.response_bytes)
        compute += weight * sub_compute
        other += weight * (sub_other + hops)

    for step in svc.handler:
        if isinstance(step, Compute):
            compute += step.time.mean / MS
        elif isinstance(step, Call):
            call(step.service)
        elif isinstance(step, Choose):
            for target, weight in zip(step.services, step.weights):
                call(target, weight)
        elif isinstance(step, Parallel):  # not in these topologies; the slowest branch would set the time
            raise ValueError(f"{topology.name}: fork/join is not part of the course's applications")
    return compute, other


def client_part_ms(topology: Topology) -> float:
    """The client's share of one request: its overhead, the TCP handshake's round trip (a new connection per
    request) and the hops to and from the entry."""
    entry = topology.services[topology.entry]
    node = topology.node_of(topology.entry)
    client = topology.client
    handshake = (topology.network.client_rtt.mean / MS if topology.network.client_rtt is not None
                 else 2 * _hop_ms(topology, client.node, node, 0))
    overhead = client.overhead.mean / MS if client.overhead is not None else 0.0
    return overhead + handshake + _hop_ms(topology, client.node, node, entry.request_bytes) + \
        _hop_ms(topology, node, client.node, entry.response_bytes)


def fit_client_rtt_ms(total_s: float, topology: Topology) -> float:
    """The client's round trip such that the compute-less service's mean request takes ``total_s`` / 1500: 2 round
    trips (handshake, request) plus the client's overhead and the server's work (transfer of a few hundred bytes
    is microseconds)."""
    compute, other = service_ms(topology, topology.entry)
    overhead = topology.client.overhead.mean / MS if topology.client.overhead is not None else 0.0
    return round((total_s / REQUESTS / MS - overhead - compute - other) / 2.0, 3)


def fit_compute_scale(total_s: float, topology: Topology, shape: Topology) -> float:
    """The factor on ``shape``'s computes such that ``topology``'s mean request (its network, client and nodes,
    the shape's call graph) takes ``total_s`` / 1500."""
    compute, _ = service_ms(shape, shape.entry)
    _, other = service_ms(topology, topology.entry)
    return round((total_s / REQUESTS / MS - client_part_ms(topology) - other) / compute, 4)


def scaled_computes(shape: Topology, scale: float) -> dict[str, tuple[float, ...]]:
    """Each service's compute means (ms) in ``shape`` times ``scale``, rounded as shipped."""
    return {name: tuple(round(step.time.mean / MS * scale, 3) for step in svc.handler if isinstance(step, Compute))
            for name, svc in shape.services.items()}


def shipped_computes(topology: Topology) -> dict[str, tuple[float, ...]]:
    return {name: tuple(round(step.time.mean / MS, 3) for step in svc.handler if isinstance(step, Compute))
            for name, svc in topology.services.items()}


# -- the scenarios ------------------------------------------------------------------------------------------------

def setup_topology(base: Topology, meshed: bool) -> Topology:
    """Standalone: the service reached directly; Istio: through the ingress gateway (the edge hop)."""
    edge = tuple(hop for hop in base.network.edge if meshed and hop.name == GATEWAY)
    return replace(base, network=replace(base.network, edge=edge))


def setup_options(base: Topology, meshed: bool, settings: StudySettings) -> PredictOptions:
    # 1500 requests of 25-80 ms after 50 ms of waiting: a run of 110-190 s; short settings simulate ~600 requests
    duration = 50.0 if settings.short else 150.0
    topology = setup_topology(base, meshed)
    mesh = dict(mesh=MESH, scope="server", features=FEATURES) if meshed else dict(mesh="none", scope="none")
    return PredictOptions(topology=topology, load="sequential", connections=1, think_ms=THINK_MS, keepalive=False,
                          duration_s=duration, warmup_s=1.0, **mesh)


@dataclass(frozen=True)
class MeshShare:
    """What the sidecars of one Istio prediction add: mean cores during the run, idle cores, memory idle and
    loaded (MB, all sidecars), their number, and the wire bytes of the entry request."""

    cores: float
    idle_cores: float
    memory_idle_mb: float
    memory_loaded_mb: float
    proxies: int
    entry_request_bytes: float


def mesh_share(options: PredictOptions, prediction: Any) -> MeshShare:
    scenario = build_scenario_of(options)
    proxy = scenario.mesh.proxy
    features_mb = sum(scenario.mesh.features[f].memory_mb for f in scenario.features)
    sidecars = {c for c in prediction.cpu_cores if c.endswith("/sidecar")}  # the gateway is not in the namespace
    replicas = {f"{name}/sidecar": svc.replicas for name, svc in scenario.topology.services.items()}
    proxies = sum(replicas[c] for c in sidecars)
    return MeshShare(
        cores=sum(prediction.cpu_cores[c] for c in sidecars),
        idle_cores=sum(prediction.idle_cores.get(c, 0.0) for c in sidecars),
        memory_idle_mb=proxies * proxy.memory.resident_mb(0.0, 0.0, features_mb),
        memory_loaded_mb=sum(prediction.memory_mb.get(c, 0.0) * replicas[c] for c in sidecars),
        proxies=proxies, entry_request_bytes=prediction.wire_bytes.get("entry_request", math.nan))


def run_seconds(total_s: float) -> float:
    """How long the 1500-request run lasts: the waits for answers plus the think time between them."""
    return total_s + REQUESTS * THINK_MS * MS


# -- the cells ----------------------------------------------------------------------------------------------------

TOTALS = "Sections 4.2.1-4.2.2 (course004_totals)"


def _idle(row: Mapping[str, Any]) -> tuple[float, tuple[float, float] | None]:
    low, high = float(row["cpu_idle_low_cores"]), float(row["cpu_idle_high_cores"])
    return (low + high) / 2.0, ((low, high) if high > low else None)


def standalone_cells(setup: Setup, row: Mapping[str, Any], prediction: Any) -> list[Cell]:
    cond = {"environment": setup.environment, "app": setup.app, "setup": "standalone"}
    total, ci = predicted_latency_ms(prediction, "mean_ms")
    base = "baseline: the application's own CPU and memory, which meshsim does not model, taken from this row"
    idle, spread = _idle(row)
    app_cpu_s = sum(v for c, v in prediction.cpu_cores.items() if c.endswith("/app")) * run_seconds(
        float(row["response_wait_total_s"]))
    return [
        Cell(TOTALS, cond, "total_s", float(row["response_wait_total_s"]), total * REQUESTS * MS,
             None if ci is None else (ci[0] * REQUESTS * MS, ci[1] * REQUESTS * MS), "fit",
             "fitted: " + ("the EKS client's round trip" if (setup.environment, setup.app) == SIMPLE_ROW
                           else "the application's compute scale") + " (1500 x the simulated mean)"),
        Cell(TOTALS, {**cond, "state": "idle"}, "cpu_cores", idle, idle, None, "fit", base, spread),
        Cell(TOTALS, {**cond, "state": "peak"}, "cpu_cores", float(row["cpu_peak_cores"]),
             float(row["cpu_peak_cores"]), None, "fit", base),
        Cell(TOTALS, cond, "cpu_seconds", float(row["cpu_seconds_total"]), float(row["cpu_seconds_total"]), None,
             "fit", f"{base}; the simulated on-path application CPU is {app_cpu_s:.1f} CPU-s, the rest is work "
                    "off the response path (runtimes, GC, JIT) or outside the requests"),
        Cell(TOTALS, {**cond, "state": "idle"}, "memory_mb", float(row["memory_idle_mb"]),
             float(row["memory_idle_mb"]), None, "fit", base),
        Cell(TOTALS, {**cond, "state": "loaded"}, "memory_mb", float(row["memory_loaded_mb"]),
             float(row["memory_loaded_mb"]), None, "fit", base),
    ]


def istio_cells(setup: Setup, std: Mapping[str, Any], row: Mapping[str, Any], prediction: Any,
                share: MeshShare) -> list[Cell]:
    cond = {"environment": setup.environment, "app": setup.app, "setup": "istio", "features": "telemetry, mtls",
            "access": "istio ingress gateway"}
    mean_ms, ci = predicted_latency_ms(prediction, "mean_ms")
    d_std, d_istio = run_seconds(float(std["response_wait_total_s"])), run_seconds(mean_ms * REQUESTS * MS)
    idle_std, _ = _idle(std)
    idle, spread = _idle(row)
    app_request_cpu = float(std["cpu_seconds_total"]) - idle_std * d_std  # the application's work for 1500 requests
    cpu_s = app_request_cpu + (idle_std + share.cores) * d_istio
    peak = (float(std["cpu_peak_cores"]) - idle_std) * d_std / d_istio + idle_std + share.cores
    how = f"standalone row + {share.proxies} sidecars predicted"
    return [
        Cell(TOTALS, cond, "total_s", float(row["response_wait_total_s"]), mean_ms * REQUESTS * MS,
             None if ci is None else (ci[0] * REQUESTS * MS, ci[1] * REQUESTS * MS), "predicted",
             "1500 x the simulated mean (sidecar passes with telemetry and mTLS, cold wake-ups at ~13 rps, the "
             "gateway hop)"),
        Cell(TOTALS, {**cond, "state": "idle"}, "cpu_cores", idle, idle_std + share.idle_cores, None, "predicted",
             f"{how}: idle_millicores each ({share.idle_cores * 1000:.1f} m), health checks included", spread),
        Cell(TOTALS, {**cond, "state": "peak"}, "cpu_cores", float(row["cpu_peak_cores"]), peak, None, "predicted",
             f"{how}: the application's cores at the slower request rate + the sidecars' mean cores "
             f"({share.cores:.4f}); a peak read as the run's mean"),
        Cell(TOTALS, cond, "cpu_seconds", float(row["cpu_seconds_total"]), cpu_s, None, "predicted",
             f"{how}: the application's CPU for 1500 requests + (idle + sidecars) x the longer run ({d_istio:.0f} s)"),
        Cell(TOTALS, {**cond, "state": "idle"}, "memory_mb", float(row["memory_idle_mb"]),
             float(std["memory_idle_mb"]) + share.memory_idle_mb, None, "predicted",
             f"{how}: {share.memory_idle_mb / max(share.proxies, 1):.1f} MB each (mesh model: base + features)"),
        Cell(TOTALS, {**cond, "state": "loaded"}, "memory_mb", float(row["memory_loaded_mb"]),
             float(std["memory_loaded_mb"]) + share.memory_loaded_mb, None, "predicted",
             f"{how}: their simulated resident memory under this load"),
    ]


PACKETS = "Appendix D (course004_packets)"


def packet_cells(packets: Sequence[Mapping[str, Any]], standalone: Any, istio: Any) -> list[Cell]:
    """The size of the GET /productpage request the entry pod receives, with and without the mesh."""
    cells = []
    for row in packets:
        cond = {"environment": row["environment"], "app": row["app"], "setup": row["setup"], "access": row["access"],
                "request": row["request"]}
        if row["access"] == "exposed-service":
            cells.append(Cell(PACKETS, cond, "header_bytes", float(row["packet_bytes"]),
                              standalone.wire_bytes.get("entry_request"), None, "fit",
                              "the topology's productpage request size is this row's ~500 B (an input)"))
        elif row["setup"] == "istio":
            cells.append(Cell(PACKETS, cond, "header_bytes", float(row["packet_bytes"]),
                              istio.wire_bytes.get("entry_request"), None, "derived",
                              "request + the mesh model's proxy headers (150 B) + mTLS's x-forwarded-client-cert "
                              "(251 B); derived, not predicted: the istio model read both sizes from its "
                              "section 4.2.2 and appendix D. Section 4.2.2's '+30-50 %' (650-750 B) and this row's "
                              "~1000 B disagree; the prediction lies between"))
        else:
            cells.append(Cell(PACKETS, cond, "header_bytes", float(row["packet_bytes"]), None, None, "predicted",
                              "not predicted: an ingress gateway in front of pods without sidecars leaves its "
                              "x-envoy-peer-metadata (1041 B) on the request (no sidecar strips it); meshsim has "
                              "no gateway-only mesh, and the authors call this run a misconfiguration"))
    return cells


def study_notes(cells: Sequence[Cell], extras: Mapping[str, Any]) -> tuple[str, ...]:
    by = {(c.condition["environment"], c.condition["app"], c.condition["setup"], c.condition.get("state"),
           c.metric): c for c in cells if c.table == TOTALS}

    def added_ms(env: str, app: str) -> str:
        std, ist = by[(env, app, "standalone", None, "total_s")], by[(env, app, "istio", None, "total_s")]
        return (f"{env}/{app} +{(ist.predicted - std.published) / REQUESTS / MS:.1f} ms predicted vs "
                f"+{(ist.published - std.published) / REQUESTS / MS:.1f} ms published")

    checks = ", ".join(f"{k}: {v['health_checks_per_s']:.1f}/s" for k, v in extras.items())
    return (
        "Added time per request with Istio: " + "; ".join(added_ms(s.environment, s.app) for s in SETUPS) + ". "
        "The mesh adds sidecar passes (telemetry, mTLS records), cold wake-ups (a request every ~80 ms finds every "
        "proxy idle) and the gateway hop: 1-6 ms. The simple service's published +11 ms for one compute-less call is "
        "not explained by these mechanisms: on the same cluster Bookinfo, whose requests cross 3-4 sidecars (8-12 "
        "proxy passes each way and back), adds "
        "+5.5 ms. The document gives neither the Istio runs' external path (gateway behind a cloud load balancer "
        "or a node port) nor whether connections were reused, the likely seat of the difference.",
        "CPU and memory: the standalone rows are the application's (baseline, fit); the Istio rows add what the "
        "mesh model predicts for the sidecars in the application's pods (6 for Bookinfo, 3 for the simple "
        "service). The shipped istio model's sidecar memory (69.2 MiB base, fitted on the Istio 1.7 pipeline's "
        "sidecars) is above what these runs show (~43 MB per pod between the idle rows); the course's Istio version "
        "and Prometheus memory metric are not given, so memory is over-predicted by ~26 MB per sidecar; the "
        "loaded-minus-idle growth (+11 MB with Istio on minikube, +1 MB on EKS) is not in the model (0.06 MiB per connection).",
        "Idle CPU: the sidecars' idle_millicores (3.13 m each, from the Istio 1.7 pipeline's bypassed sidecars, whose "
        "health checks it includes) reach the output as Prediction.idle_cores. Health-check traffic with Istio: one "
        f"HTTP exchange per pod every {HEALTH_CHECK_PERIOD_S:g} s (section 4.2.1): {checks}; with the 1500 "
        "requests at ~13 rps it is a small part of the traffic, but at idle it is all of it. The published idle "
        "values have one or two significant digits ('about 0.008 cpu'), so the EKS differences (+0.002 and +0.007 "
        "cores for 3 and 6 sidecars, 0.7-1.2 m each) are within their rounding of the model's 3.13 m each; "
        "minikube's +0.027 (4.6 m each) is above it.",
        "Peak CPU is one reading of a Prometheus rate; it is predicted as the run's mean cores (the application's at "
        "the slower request rate plus the sidecars'), so it cannot show a short burst.",
    )


class BookinfoCourseStudy(Study):
    name = "bookinfo-course"
    title = "Istio's overhead on Bookinfo and a 3-replica service, 1500 sequential requests (course project)"
    source = ("A. Wei, L. Zhang, X. Zhao, 'Service Mesh Overhead Measurement in Kubernetes Container Networks' "
              "(course project, KuberNerds; seed 004); measurements/published/course004_totals.csv and "
              "course004_packets.csv")

    def run(self, settings: StudySettings, progress: Progress | None = None) -> StudyResult:
        rows = {(r["environment"], r["app"], r["setup"]): r for r in load_table("course004_totals").rows}
        packets = load_table("course004_packets").rows
        cells: list[Cell] = []
        extras: dict[str, Any] = {}
        for setup in SETUPS:
            if progress is not None:
                progress(f"bookinfo-course: {setup.environment} {setup.app}")
            base = load_topology(setup.topology)
            std_options, istio_options = setup_options(base, False, settings), setup_options(base, True, settings)
            standalone, istio = predict_cell(std_options, settings), predict_cell(istio_options, settings)
            share = mesh_share(istio_options, istio)
            std_row, istio_row = (rows[(setup.environment, setup.app, s)] for s in ("standalone", "istio"))
            cells += standalone_cells(setup, std_row, standalone)
            cells += istio_cells(setup, std_row, istio_row, istio, share)
            if setup.topology == "course-bookinfo-eks":
                cells += packet_cells(packets, standalone, istio)
            extras[f"{setup.environment}/{setup.app}"] = {
                "wire_bytes_per_request": {"standalone": standalone.wire_bytes, "istio": istio.wire_bytes},
                "sidecars": share.proxies, "sidecar_idle_cores": share.idle_cores,
                "health_checks_per_s": share.proxies / HEALTH_CHECK_PERIOD_S}
        return StudyResult(self.name, self.title, self.source, tuple(cells), study_notes(cells, extras),
                           settings.to_dict(), extras, COLUMNS)


STUDY = BookinfoCourseStudy
