"""The Kubernetes objects of one probe namespace, as plain manifests (dicts).

Per configuration: a labelled Namespace carrying the mesh's injection label/annotation; the mesh's own policy
objects (Istio: PeerAuthentication + DestinationRule for mTLS, Telemetry for tracing); a fortio echo server
(a chain of ``fortio proxies`` hops in front of it for chain topologies) with its Service; and a fortio client
whose REST API runs the probes. The same pods serve every path mode: ports decide what the sidecars capture.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from .meshes import BYPASS_PORT, MESH_PORT, REST_PORT, SERVER_ONLY_PORT, MeshProfile
from .probe_plan import Configuration, KubePlan

MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "meshsim"
RUN_LABEL = "meshsim.io/run"
CONFIG_LABEL = "meshsim.io/configuration"
# host/pid/start-ticks of the command that made a namespace: a later command on the same host deletes the
# namespaces of an owner that is gone (SIGKILL cannot clean up), and leaves a running owner's alone.
OWNER_ANNOTATION = "meshsim.io/owner"
CLIENT = "client"

Manifest = dict[str, Any]


@dataclass(frozen=True)
class NamespaceSpec:
    """Everything that identifies one probe namespace."""

    name: str
    run: str
    configuration: Configuration
    owner: str = ""  # see OWNER_ANNOTATION


def run_selector(run: str) -> str:
    """Label selector of everything one calibration run created (and nothing else)."""
    return f"{MANAGED_BY}={MANAGER},{RUN_LABEL}={run}"


def _labels(ns: NamespaceSpec, app: str | None = None) -> dict[str, str]:
    labels = {MANAGED_BY: MANAGER, RUN_LABEL: ns.run, CONFIG_LABEL: ns.configuration.name}
    if app:
        labels["app.kubernetes.io/name"] = app
    return labels


def namespace(ns: NamespaceSpec, mesh: MeshProfile) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": ns.name,
            "labels": {**_labels(ns), **mesh.namespace_labels},
            "annotations": {**mesh.namespace_annotations, **({OWNER_ANNOTATION: ns.owner} if ns.owner else {})},
        },
    }


def _exclusions(mesh: MeshProfile, inbound: list[int], outbound: list[int]) -> dict[str, str]:
    out: dict[str, str] = {}
    if mesh.inbound_exclude_key and inbound:
        out[mesh.inbound_exclude_key] = ",".join(str(p) for p in inbound)
    if mesh.outbound_exclude_key and outbound:
        out[mesh.outbound_exclude_key] = ",".join(str(p) for p in outbound)
    return out


def _pod_annotations(plan: KubePlan, mesh: MeshProfile, conf: Configuration) -> dict[str, str]:
    if mesh.name == "linkerd" and "tracing" in conf.features and plan.trace_collector:
        return {"config.linkerd.io/trace-collector": plan.trace_collector}
    return {}


def _container(plan: KubePlan, name: str, args: list[str], port: int, http_probe: bool,
               port_name: str = "http") -> Manifest:
    container: Manifest = {
        "name": name,
        "image": plan.image,
        "args": args,
        "ports": [{"name": port_name, "containerPort": port, "protocol": "TCP"}],
    }
    if plan.resources:
        container["resources"] = copy.deepcopy(dict(plan.resources))
    probe = {"httpGet": {"path": "/echo", "port": port}} if http_probe else {"tcpSocket": {"port": port}}
    container["readinessProbe"] = {**probe, "periodSeconds": 2}
    return container


def _fortio_server_args(port: int) -> list[str]:
    # Only the HTTP echo: the other default listeners (gRPC 8079, tcp/udp echo 8078, redirect 8081) would
    # collide between two fortio processes in one pod and open ports the mesh would capture for nothing.
    return ["server", "-http-port", str(port), "-grpc-port", "disabled", "-redirect-port", "disabled",
            "-tcp-port", "disabled", "-udp-port", "disabled"]


def _deployment(ns: NamespaceSpec, plan: KubePlan, app: str, containers: list[Manifest],
                annotations: dict[str, str], replicas: int) -> Manifest:
    pod_spec: Manifest = {"containers": containers, "terminationGracePeriodSeconds": 1}
    if plan.node_selector:
        pod_spec["nodeSelector"] = dict(plan.node_selector)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": app, "namespace": ns.name, "labels": _labels(ns, app)},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app.kubernetes.io/name": app, RUN_LABEL: ns.run}},
            "template": {
                "metadata": {"labels": _labels(ns, app), "annotations": annotations},
                "spec": pod_spec,
            },
        },
    }


def _service(ns: NamespaceSpec, mesh: MeshProfile, app: str, ports: list[tuple[str, int, int]]) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": app, "namespace": ns.name, "labels": _labels(ns, app),
                     "annotations": dict(mesh.service_annotations)},
        "spec": {
            "selector": {"app.kubernetes.io/name": app, RUN_LABEL: ns.run},
            "ports": [{"name": n, "port": p, "targetPort": t, "protocol": "TCP"} for n, p, t in ports],
        },
    }


def workload(ns: NamespaceSpec, plan: KubePlan, mesh: MeshProfile) -> list[Manifest]:
    """Deployments and Services: the chain of services (leaf echo last) and the fortio client."""
    conf = ns.configuration
    services = plan.services
    objs: list[Manifest] = []
    extra = _pod_annotations(plan, mesh, conf)
    for i, svc in enumerate(services):
        leaf = i == len(services) - 1
        if leaf:
            containers = [
                _container(plan, "echo", _fortio_server_args(MESH_PORT), MESH_PORT, True),
                # Same pod, second listener on a port the sidecar does not capture: the baseline path.
                _container(plan, "echo-bypass", _fortio_server_args(BYPASS_PORT), BYPASS_PORT, True,
                           "http-bypass"),
            ]
        else:
            nxt = services[i + 1]
            mesh_host = mesh.service_host(nxt, ns.name, "proxy-lb" if mesh.mesh_host_suffix else "both-sidecars")
            plain_host = mesh.service_host(nxt, ns.name, "baseline")
            containers = [_container(plan, "hop", [
                "proxies", "-M", f"{MESH_PORT} http://{mesh_host}:{MESH_PORT}",
                "-M", f"{BYPASS_PORT} http://{plain_host}:{BYPASS_PORT}"], MESH_PORT, False)]
            containers[0]["ports"].append({"name": "http-bypass", "containerPort": BYPASS_PORT, "protocol": "TCP"})
        annotations = {**_exclusions(mesh, [BYPASS_PORT], [] if leaf else [BYPASS_PORT]), **extra}
        replicas = conf.replicas if leaf else 1
        objs.append(_deployment(ns, plan, svc, containers, annotations, replicas))
        ports = [("http", MESH_PORT, MESH_PORT), ("http-bypass", BYPASS_PORT, BYPASS_PORT)]
        if i == 0:
            ports.insert(1, ("http-srvonly", SERVER_ONLY_PORT, MESH_PORT))
        objs.append(_service(ns, mesh, svc, ports))
    client_annotations = {**_exclusions(mesh, [REST_PORT], [BYPASS_PORT, SERVER_ONLY_PORT]), **extra}
    client = _container(plan, "fortio", _fortio_server_args(REST_PORT), REST_PORT, True)
    objs.append(_deployment(ns, plan, CLIENT, [client], client_annotations, 1))
    objs.append(_service(ns, mesh, CLIENT, [("http-rest", REST_PORT, REST_PORT)]))
    return objs


def mesh_policy(ns: NamespaceSpec, mesh: MeshProfile) -> list[Manifest]:
    """The mesh's own objects that switch features on or off in this namespace (Istio only; Linkerd
    configures per pod annotation, Traefik Mesh has no per-namespace switches)."""
    if mesh.name != "istio":
        return []
    mtls = "mtls" in ns.configuration.features
    meta = lambda name: {"name": name, "namespace": ns.name, "labels": _labels(ns)}  # noqa: E731
    tracing: Manifest = ({"randomSamplingPercentage": 100.0} if "tracing" in ns.configuration.features
                         else {"disableSpanReporting": True})
    return [
        {"apiVersion": "security.istio.io/v1", "kind": "PeerAuthentication", "metadata": meta("default"),
         "spec": {"mtls": {"mode": "STRICT" if mtls else "DISABLE"}}},
        {"apiVersion": "networking.istio.io/v1", "kind": "DestinationRule", "metadata": meta("probe-tls"),
         "spec": {"host": f"*.{ns.name}.svc.cluster.local",
                  "trafficPolicy": {"tls": {"mode": "ISTIO_MUTUAL" if mtls else "DISABLE"}}}},
        {"apiVersion": "telemetry.istio.io/v1", "kind": "Telemetry", "metadata": meta("probe-tracing"),
         "spec": {"tracing": [tracing]}},
    ]


def namespace_objects(ns: NamespaceSpec, plan: KubePlan, mesh: MeshProfile) -> list[Manifest]:
    """Every object of one probe namespace, in creation order (namespace first)."""
    return [namespace(ns, mesh), *mesh_policy(ns, mesh), *workload(ns, plan, mesh)]


def expected_pods(plan: KubePlan, conf: Configuration) -> int:
    return len(plan.services) - 1 + conf.replicas + 1
