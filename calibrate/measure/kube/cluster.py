"""What a calibration needs from the cluster: facts for the manifest (version, nodes, mesh version), creating
and deleting its namespaces, waiting for pods to be ready.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any, Callable, Mapping, Sequence

import yaml

from meshsim.calibrate.measure.process_identity import pid_start_ticks, same_process
from meshsim.errors import MeshsimError, RunFailed

from .client import Forbidden, KubeApi, NotFound, object_path
from .meshes import MeshProfile
from .objects import MANAGED_BY, MANAGER, OWNER_ANNOTATION, Manifest, run_selector

PLURALS = {"Namespace": "namespaces", "Deployment": "deployments", "Service": "services",
           "PeerAuthentication": "peerauthentications", "DestinationRule": "destinationrules",
           "Telemetry": "telemetries"}
_FAILING = {"ErrImagePull": "image pull failing", "ImagePullBackOff": "image pull failing",
            "InvalidImageName": "invalid image name", "CrashLoopBackOff": "container keeps crashing",
            "CreateContainerConfigError": "container config error"}


def cluster_facts(api: KubeApi) -> dict[str, Any]:
    """Cluster version and nodes (names and sizes) for the manifest's ``where``."""
    version = api.get("/version")
    nodes: list[dict[str, Any]] = []
    try:
        node_items = api.get("/api/v1/nodes").get("items", [])
    except Forbidden:  # listing nodes is a cluster-scoped right many namespace users lack; not needed to probe
        node_items = []
        nodes.append({"name": "(not allowed to list nodes)"})
    for node in node_items:
        status = node.get("status", {})
        nodes.append({
            "name": node["metadata"]["name"],
            "cpu": status.get("capacity", {}).get("cpu", ""),
            "memory": status.get("capacity", {}).get("memory", ""),
            "instance_type": node["metadata"].get("labels", {}).get("node.kubernetes.io/instance-type", ""),
            "kubelet": status.get("nodeInfo", {}).get("kubeletVersion", ""),
        })
    return {"kubernetes_version": version.get("gitVersion", ""), "api_server": api.target.host,
            "context": api.target.context, "nodes": nodes}


def _image_tag(image: str) -> str:
    name = image.split("@")[0]
    return name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else "latest"


def mesh_version(api: KubeApi, mesh: MeshProfile) -> str:
    """Check the mesh is installed (injection webhook, control plane) and read its version from the cluster.

    Raises RunFailed naming what is missing: a namespace labelled for injection would otherwise get pods
    without sidecars and every "mesh" probe would silently measure the baseline.
    """
    if mesh.name == "none":
        return ""
    if mesh.webhook_marker:
        hooks = api.get("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations").get("items", [])
        names = [h["metadata"]["name"] for h in hooks] + [w.get("name", "") for h in hooks
                                                         for w in h.get("webhooks") or []]
        if not any(mesh.webhook_marker in n for n in names):
            raise RunFailed(f"mesh {mesh.name}: {mesh.name} is not installed in this cluster (no sidecar "
                            f"injection webhook matching {mesh.webhook_marker!r}); install it ({mesh.install_hint})")
    deployments = api.get("/apis/apps/v1/deployments").get("items", [])
    for dep in deployments:
        for c in dep["spec"]["template"]["spec"].get("containers", []):
            if mesh.control_plane_marker in c.get("image", ""):
                return _image_tag(c["image"])
    if not mesh.webhook_marker:
        raise RunFailed(f"mesh {mesh.name}: {mesh.name} is not installed in this cluster (no control-plane "
                        f"deployment with an image matching {mesh.control_plane_marker!r}); install it "
                        f"({mesh.install_hint})")
    return "unknown"


def istio_tracing_provider(api: KubeApi) -> str:
    """The default tracing provider in Istio's mesh config (what Telemetry with no provider exports to).

    Read for the manifest: tracing probes measure span export only when a provider is configured.
    """
    for dep in api.get("/apis/apps/v1/deployments").get("items", []):
        images = [c.get("image", "") for c in dep["spec"]["template"]["spec"].get("containers", [])]
        if not any("pilot" in i for i in images):
            continue
        ns = dep["metadata"]["namespace"]
        try:
            cm = api.get(f"/api/v1/namespaces/{ns}/configmaps/istio")
        except MeshsimError:
            return "unknown (cannot read the istio ConfigMap)"
        try:
            mesh_config = yaml.safe_load((cm.get("data") or {}).get("mesh", "")) or {}
        except yaml.YAMLError:
            return "unknown (mesh config is not YAML)"
        providers = (mesh_config.get("defaultProviders") or {}).get("tracing") or []
        return ", ".join(providers) if providers else "not set (meshConfig.defaultProviders.tracing)"
    return "unknown (no istiod found)"


def create_objects(api: KubeApi, objects: list[Manifest]) -> None:
    for obj in objects:
        collection, _ = object_path(obj, PLURALS[obj["kind"]])
        try:
            api.post(collection, obj)
        except NotFound as exc:
            raise RunFailed(f"cannot create {obj['kind']} ({obj['apiVersion']}): the API is not served by this "
                            f"cluster; is the mesh installed? ({exc})") from None


def owner_tag() -> str:
    """This command as a namespace owner: host/pid/start ticks (see ``OWNER_ANNOTATION``)."""
    return f"{socket.gethostname()}/{os.getpid()}/{pid_start_ticks(os.getpid())}"


def owner_is_gone(owner: str) -> bool:
    """The owner ran on this host and is gone; owners elsewhere or unparsable are never judged."""
    parts = owner.split("/")
    if len(parts) != 3 or parts[0] != socket.gethostname() or not (parts[1].isdigit() and parts[2].isdigit()):
        return False
    return not same_process(int(parts[1]), int(parts[2]))


def reap_orphan_namespaces(api: KubeApi, log: Callable[[str], None] = lambda _: None) -> list[str]:
    """Delete (without waiting) the namespaces a killed calibration on this host left behind; return their names."""
    try:
        items = api.get("/api/v1/namespaces", {"labelSelector": f"{MANAGED_BY}={MANAGER}"}).get("items", [])
    except Forbidden:  # a user who may not list namespaces cluster-wide: nothing to reap (creating says why)
        return []
    orphans = [ns["metadata"]["name"] for ns in items
               if owner_is_gone(str((ns["metadata"].get("annotations") or {}).get(OWNER_ANNOTATION, "")))]
    for name in orphans:
        try:
            api.delete(f"/api/v1/namespaces/{name}")
        except NotFound:
            pass
    if orphans:
        log(f"deleting {len(orphans)} namespaces left by a killed calibration on this host: {', '.join(orphans)}")
    return orphans


def run_namespaces(api: KubeApi, run: str) -> list[str]:
    items = api.get("/api/v1/namespaces", {"labelSelector": run_selector(run)}).get("items", [])
    return [ns["metadata"]["name"] for ns in items]


def delete_run_namespaces(api: KubeApi, run: str, wait_s: float = 120.0,
                          log: Callable[[str], None] = lambda _: None, known: Sequence[str] = ()) -> list[str]:
    """Delete exactly the namespaces of this run (selected by its own labels, plus ``known``: the names it created)
    and wait until they are gone.

    Returns the names still terminating after ``wait_s`` (empty when deletion completed). A list by label may be
    served from the API server's watch cache, a moment behind; each name is deleted and then read back by name.
    """
    names = sorted(set(run_namespaces(api, run)) | set(known))
    gone = []
    for name in names:
        try:
            api.delete(f"/api/v1/namespaces/{name}")
        except NotFound:
            gone.append(name)  # never made (an interrupted POST) or already deleted
    if len(gone) < len(names):
        log(f"deleting namespaces {', '.join(n for n in names if n not in gone)}")
    deadline = time.monotonic() + wait_s
    left = [n for n in names if n not in gone]
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = [n for n in left if _namespace_exists(api, n)]
    return left


def _namespace_exists(api: KubeApi, name: str) -> bool:
    try:
        api.get(f"/api/v1/namespaces/{name}")
    except NotFound:
        return False
    return True


def _pod_problem(pod: Mapping[str, Any]) -> str | None:
    name = pod["metadata"]["name"]
    statuses = pod.get("status", {}).get("containerStatuses") or []
    statuses = statuses + (pod.get("status", {}).get("initContainerStatuses") or [])
    for cs in statuses:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason", "")
        if reason in _FAILING:
            msg = (waiting.get("message") or "").splitlines()[0:1]
            detail = f": {msg[0]}" if msg else ""
            return f"{_FAILING[reason]} for pod {name} container {cs.get('name')} (image {cs.get('image')}, {reason}){detail}"
    return None


def _is_ready(pod: Mapping[str, Any]) -> bool:
    if pod["metadata"].get("deletionTimestamp"):
        return False
    status = pod.get("status", {})
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    return status.get("phase") == "Running" and conditions.get("Ready") == "True"


def pod_events(api: KubeApi, namespace: str, pod: str, limit: int = 4) -> str:
    events = api.get(f"/api/v1/namespaces/{namespace}/events",
                     {"fieldSelector": f"involvedObject.kind=Pod,involvedObject.name={pod}"}).get("items", [])
    events.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    parts = [f"{e.get('reason', '')}: {' '.join(str(e.get('message', '')).split())}" for e in events[-limit:]]
    return "; ".join(parts) if parts else "no events"


def wait_ready(api: KubeApi, namespace: str, expected: int, timeout_s: float, mesh: MeshProfile,
               selector: str) -> list[dict[str, Any]]:
    """Watch the namespace's pods until ``expected`` are Running and Ready; return them.

    Fails fast on image pull errors and crash loops; on timeout names the pods not ready and their events.
    """
    deadline = time.monotonic() + timeout_s
    pods: dict[str, dict[str, Any]] = {}
    listing = api.get(f"/api/v1/namespaces/{namespace}/pods", {"labelSelector": selector})
    for pod in listing.get("items", []):
        pods[pod["metadata"]["name"]] = pod
    version = listing.get("metadata", {}).get("resourceVersion", "")
    while True:
        for pod in pods.values():
            problem = _pod_problem(pod)
            if problem:
                raise RunFailed(f"{problem} (namespace {namespace})")
        ready = [p for p in pods.values() if _is_ready(p)]
        if len(ready) >= expected:
            _check_injection(ready, mesh, namespace)
            return ready
        left = deadline - time.monotonic()
        if left <= 0:
            break
        query = {"labelSelector": selector}
        if version:
            query["resourceVersion"] = version
        try:
            for event in api.watch(f"/api/v1/namespaces/{namespace}/pods", query, timeout_s=max(1.0, left)):
                obj = event.get("object", {})
                if event.get("type") == "ERROR":  # e.g. 410 Gone: resource version too old; list again
                    version = ""
                    break
                name = obj.get("metadata", {}).get("name", "")
                version = obj.get("metadata", {}).get("resourceVersion", version)
                if event.get("type") == "DELETED":
                    pods.pop(name, None)
                else:
                    pods[name] = obj
                if _pod_problem(obj) or sum(_is_ready(p) for p in pods.values()) >= expected:
                    break
                if time.monotonic() >= deadline:
                    break
        except RunFailed:
            if time.monotonic() >= deadline:
                break
            raise
        if not version:
            listing = api.get(f"/api/v1/namespaces/{namespace}/pods", {"labelSelector": selector})
            pods = {p["metadata"]["name"]: p for p in listing.get("items", [])}
            version = listing.get("metadata", {}).get("resourceVersion", "")
    not_ready = [p for p in pods.values() if not _is_ready(p)]
    if not not_ready:
        raise RunFailed(f"pods not ready after {timeout_s:g} s in namespace {namespace}: only {len(pods)} of "
                        f"{expected} pods exist; replica set events: {_namespace_warnings(api, namespace)}")
    first = not_ready[0]
    name = first["metadata"]["name"]
    phase = first.get("status", {}).get("phase", "Unknown")
    raise RunFailed(f"pods not ready after {timeout_s:g} s in namespace {namespace}: {len(not_ready)} not ready; "
                    f"pod {name} is {phase}; events: {pod_events(api, namespace, name)}")


def _namespace_warnings(api: KubeApi, namespace: str) -> str:
    events = api.get(f"/api/v1/namespaces/{namespace}/events", {"fieldSelector": "type=Warning"}).get("items", [])
    parts = [f"{e.get('involvedObject', {}).get('name')}: {e.get('reason')}: {e.get('message')}" for e in events[-3:]]
    return "; ".join(parts) if parts else "none"


def _check_injection(pods: list[dict[str, Any]], mesh: MeshProfile, namespace: str) -> None:
    if not mesh.sidecar_container:
        return
    for pod in pods:
        names = [c["name"] for c in pod["spec"].get("containers", []) + pod["spec"].get("initContainers", [])]
        if mesh.sidecar_container not in names:
            raise RunFailed(f"pod {pod['metadata']['name']} in namespace {namespace} has no {mesh.sidecar_container} "
                            f"container: the {mesh.name} injection webhook did not inject it")
