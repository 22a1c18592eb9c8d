"""A scenario: what is simulated (topology x mesh x features x load-balancing mode x who has sidecars).

Kept apart from the engine so that another engine can run the same description.
"""

from __future__ import annotations

from dataclasses import dataclass

from meshsim.cluster_facts import LoadFacts
from meshsim.errors import FieldError
from meshsim.mesh import MeshModel
from meshsim.topology import Topology

LB_MODES = ("client", "proxy")
# Who has a proxy on the path: both = the client and every service (Istio's "both"), server = services only
# ("serveronly"), none = baseline (the mesh's proxies are bypassed).
MESH_SCOPES = ("both", "server", "none")


@dataclass(frozen=True)
class Scenario:
    topology: Topology
    mesh: MeshModel
    features: tuple[str, ...] = ()
    lb: str = "client"
    scope: str = "both"
    cluster_source: str = ""  # where the cluster facts applied to the topology come from ('': the topology's own)
    cluster_load: LoadFacts | None = None  # how the calibration cluster's runs drove fortio (request.py takes it)

    @property
    def meshed(self) -> bool:
        return self.mesh.proxy is not None and self.scope != "none"


def resolve_features(mesh: MeshModel, requested: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Defaults of the mesh plus ``requested``; ``no-NAME`` turns a default off. Unknown names are errors."""
    active = {name for name, f in mesh.features.items() if f.default}
    said: dict[str, str] = {}  # feature -> how it was asked for: each feature once, on or off, never both
    for raw in requested:
        name = raw.strip()
        if not name:
            continue
        off = name.startswith("no-")
        base = name[3:] if off else name
        if base not in mesh.features:
            known = ", ".join(sorted(mesh.features)) or "none"
            raise FieldError("features", f"mesh {mesh.name!r} has no feature {base!r} (known: {known})")
        if base in said:
            clash = "turned on and off" if said[base] != name else "named twice"
            raise FieldError("features", f"{said[base]} and {name}: {base} is {clash} (name each feature once)")
        said[base] = name
        if off and mesh.features[base].fixed:
            raise FieldError("features", f"{name}: mesh {mesh.name!r} has {base} in its fitted passes (every run it "
                                         f"was fitted from had {base} on), so a prediction without it is not possible")
        (active.discard if off else active.add)(base)
    return tuple(sorted(active))


def build_scenario(topology: Topology, mesh: MeshModel, features: tuple[str, ...] | list[str] = (),
                   lb: str = "client", scope: str = "both") -> Scenario:
    if lb not in LB_MODES:
        raise FieldError("lb", f"unknown mode {lb!r} (known: {', '.join(LB_MODES)})")
    if scope not in MESH_SCOPES:
        raise FieldError("scope", f"unknown value {scope!r} (known: {', '.join(MESH_SCOPES)})")
    if lb == "proxy" and mesh.load_balancer is None:
        raise FieldError("lb", f"proxy: mesh model {mesh.name!r} ({mesh.origin}) has no load_balancer section")
    # the baseline bypasses every proxy, and with them every feature (the mesh's defaults too)
    active = () if scope == "none" else resolve_features(mesh, tuple(features))
    if mesh.proxy is not None and mesh.proxy.loopback_in_passes:
        topology = topology.without_loopback()
    return Scenario(topology, mesh, active, lb, scope)
