"""CPU and memory of the probe's containers: from the metrics API (metrics.k8s.io) when the cluster serves it,
else from each node's kubelet summary through the API server's node proxy. Which one was used is recorded.

The kubelet summary gives cumulative CPU (exact CPU seconds over a probe: after minus before); the metrics API
gives a recent average rate, so its CPU seconds are rate x probe duration (an estimate: say so).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from meshsim.errors import MeshsimError

from .client import KubeApi
from .meshes import MeshProfile

METRICS_API = "metrics.k8s.io"
KUBELET = "kubelet-summary"


@dataclass(frozen=True)
class Sample:
    source: str
    cpu: Mapping[str, float] = field(default_factory=dict)  # component -> cumulative CPU s (kubelet) or cores (metrics)
    memory_mb: Mapping[str, float] = field(default_factory=dict)
    error: str = ""


def cpu_quantity(q: str) -> float:
    """A Kubernetes CPU quantity (``250m``, ``1``, ``5000000n``) in cores."""
    units = {"n": 1e-9, "u": 1e-6, "m": 1e-3}
    return float(q[:-1]) * units[q[-1]] if q and q[-1] in units else float(q)


def _bytes(q: str) -> float:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "k": 1e3, "M": 1e6, "G": 1e9}
    for suffix, factor in units.items():
        if q.endswith(suffix):
            return float(q[: -len(suffix)]) * factor
    return float(q)


def detect_source(api: KubeApi) -> str:
    try:
        api.get("/apis/metrics.k8s.io/v1beta1")
        return METRICS_API
    except MeshsimError:
        return KUBELET


def component(app: str, container: str, mesh: MeshProfile) -> str:
    """Component name used in manifests and by the simulator (``<service>/app``, ``<service>/sidecar``)."""
    kind = "sidecar" if mesh.sidecar_container and container == mesh.sidecar_container else "app"
    return f"{app}/{kind}"


def sample(api: KubeApi, source: str, namespace: str, pods: Iterable[Mapping[str, Any]], mesh: MeshProfile) -> Sample:
    """Per-component CPU and memory of the namespace's pods now; failures are recorded, not raised."""
    apps = {p["metadata"]["name"]: p["metadata"].get("labels", {}).get("app.kubernetes.io/name", "?") for p in pods}
    nodes = sorted({p["spec"].get("nodeName", "") for p in pods} - {""})
    cpu: dict[str, float] = {}
    mem: dict[str, float] = {}
    try:
        if source == METRICS_API:
            data = api.get(f"/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods")
            for item in data.get("items", []):
                app = apps.get(item["metadata"]["name"])
                for c in item.get("containers", []) if app else []:
                    key = component(app, c["name"], mesh)
                    cpu[key] = cpu.get(key, 0.0) + cpu_quantity(c["usage"]["cpu"])
                    mem[key] = mem.get(key, 0.0) + _bytes(c["usage"]["memory"]) / 2**20
        else:
            for node in nodes:
                data = api.get(f"/api/v1/nodes/{node}/proxy/stats/summary", timeout_s=10)
                for pod in data.get("pods", []):
                    ref = pod.get("podRef", {})
                    app = apps.get(ref.get("name")) if ref.get("namespace") == namespace else None
                    for c in pod.get("containers", []) if app else []:
                        key = component(app, c["name"], mesh)
                        ns_cpu = (c.get("cpu") or {}).get("usageCoreNanoSeconds")
                        if ns_cpu is not None:
                            cpu[key] = cpu.get(key, 0.0) + ns_cpu / 1e9
                        ws = (c.get("memory") or {}).get("workingSetBytes")
                        if ws is not None:
                            mem[key] = mem.get(key, 0.0) + ws / 2**20
    except MeshsimError as exc:
        return Sample(source, error=str(exc))
    return Sample(source, cpu, mem)


def cpu_seconds(before: Sample, after: Sample, duration_s: float) -> dict[str, float]:
    """CPU seconds per component over a probe."""
    if after.error or before.error:
        return {}
    if after.source == KUBELET:
        return {k: round(max(0.0, v - before.cpu.get(k, 0.0)), 6) for k, v in after.cpu.items() if k in before.cpu}
    return {k: round(v * duration_s, 6) for k, v in after.cpu.items()}


def describe(source: str) -> str:
    if source == METRICS_API:
        return "CPU from metrics.k8s.io (recent average rate x probe duration: an estimate); memory: working set"
    return "CPU from the kubelet summary via the API server (cumulative counters, after minus before); memory: working set"
