"""What each service mesh needs from a probe namespace, and how to find it in a cluster.

A profile is data: the injection label or annotation, the annotations that keep a port out of the sidecar's
capture (so a baseline runs on the same pods as the mesh runs, as istio/tools does), which path modes and
features the mesh can do, and how to recognise its control plane (injection webhook, version).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

# Ports inside every probe pod. The mesh path uses MESH_PORT; BYPASS_PORT is excluded from capture on both
# sides (baseline); SERVER_ONLY_PORT is a second Service port onto MESH_PORT that only the client excludes
# from outbound capture, so only the server's sidecar is on the path.
MESH_PORT = 8080
BYPASS_PORT = 8077
SERVER_ONLY_PORT = 8079
REST_PORT = 8080  # the fortio client's REST API (excluded from inbound capture: the API server is not in the mesh)


@dataclass(frozen=True)
class MeshProfile:
    name: str
    namespace_labels: Mapping[str, str] = field(default_factory=dict)
    namespace_annotations: Mapping[str, str] = field(default_factory=dict)
    service_annotations: Mapping[str, str] = field(default_factory=dict)
    inbound_exclude_key: str = ""  # pod annotation listing inbound ports the sidecar must not capture
    outbound_exclude_key: str = ""
    paths: tuple[str, ...] = ("baseline",)
    features: tuple[str, ...] = ()  # features a configuration may switch on or off
    always_on: tuple[str, ...] = ()  # features the mesh cannot switch off
    sidecar_container: str = ""  # name of the injected container; its absence means injection did not happen
    webhook_marker: str = ""  # substring of the MutatingWebhookConfiguration (or webhook) name
    control_plane_marker: str = ""  # substring of the control-plane Deployment's container image
    install_hint: str = ""
    mesh_host_suffix: str = ""  # Traefik Mesh: clients call <svc>.<ns>.traefik.mesh to go through its proxies

    def service_host(self, service: str, namespace: str, path: str) -> str:
        if path == "proxy-lb" and self.mesh_host_suffix:
            return f"{service}.{namespace}.{self.mesh_host_suffix}"
        return f"{service}.{namespace}.svc.cluster.local"


MESHES: dict[str, MeshProfile] = {
    "none": MeshProfile(name="none"),
    "istio": MeshProfile(
        name="istio",
        namespace_labels={"istio-injection": "enabled"},
        inbound_exclude_key="traffic.sidecar.istio.io/excludeInboundPorts",
        outbound_exclude_key="traffic.sidecar.istio.io/excludeOutboundPorts",
        paths=("baseline", "server-sidecar", "both-sidecars", "client-lb"),
        features=("mtls", "tracing"),
        sidecar_container="istio-proxy",
        webhook_marker="istio",
        control_plane_marker="pilot",
        install_hint="istioctl install",
    ),
    "linkerd": MeshProfile(
        name="linkerd",
        namespace_annotations={"linkerd.io/inject": "enabled"},
        inbound_exclude_key="config.linkerd.io/skip-inbound-ports",
        outbound_exclude_key="config.linkerd.io/skip-outbound-ports",
        paths=("baseline", "server-sidecar", "both-sidecars", "client-lb"),
        features=("tracing",),
        always_on=("mtls",),
        sidecar_container="linkerd-proxy",
        webhook_marker="linkerd-proxy-injector",
        control_plane_marker="linkerd",
        install_hint="linkerd install | kubectl apply -f -",
    ),
    "traefik": MeshProfile(
        name="traefik",
        service_annotations={"mesh.traefik.io/traffic-type": "http"},
        paths=("baseline", "proxy-lb"),
        webhook_marker="",  # Traefik Mesh injects nothing; its node proxies are found by image
        control_plane_marker="traefik/mesh",
        install_hint="helm install traefik-mesh traefik/traefik-mesh",
        mesh_host_suffix="traefik.mesh",
    ),
}


def mesh_profile(name: str) -> MeshProfile:
    from meshsim.errors import FieldError, MeshsimError

    try:
        return MESHES[name]
    except KeyError:
        raise FieldError("mesh", f"unknown mesh {name!r} (known: {', '.join(MESHES)})") from None
