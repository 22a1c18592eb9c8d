"""Small scenarios built in code for the theory tests: queues with nothing but the service under test."""

from __future__ import annotations

from meshsim.distributions import Deterministic, Distribution
from meshsim.mesh import MeshModel
from meshsim.scenario import Scenario
from meshsim.topology import Call, Client, Compute, Network, Service, Topology

ZERO = Deterministic(0.0)
NO_NETWORK = Network(loopback=ZERO, same_node=ZERO, cross_node=ZERO, bandwidth_bps=1e30)
NO_MESH = MeshModel(name="none", proxy=None, features={}, load_balancer=None)


def station_topology(service: Distribution, servers: int = 1) -> Topology:
    """client -> one service centre with ``servers`` cores, no network, no client overhead."""
    svc = Service("q", handler=(Compute(service),), cores=servers, request_bytes=0, response_bytes=0)
    return Topology("station", "q", {"q": svc}, NO_NETWORK, Client(request_bytes=0))


def tandem_topology(services: list[Distribution]) -> Topology:
    """q1 -> q2 -> ... each doing its work before calling the next: a tandem of single-server queues."""
    out: dict[str, Service] = {}
    for i, dist in enumerate(services, start=1):
        handler: tuple = (Compute(dist),) if i == len(services) else (Compute(dist), Call(f"q{i + 1}"))
        out[f"q{i}"] = Service(f"q{i}", handler=handler, cores=1, request_bytes=0, response_bytes=0)
    return Topology("tandem", "q1", out, NO_NETWORK, Client(request_bytes=0))


def plain(topology: Topology) -> Scenario:
    return Scenario(topology, NO_MESH)
