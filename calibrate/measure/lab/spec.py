"""What a lab is: topology, mode and proxy resources, validated once; plus how modes map to run manifests.

Modes (``--mode``): ``baseline`` (no proxies), ``server-sidecar`` (inbound sidecars only), ``sidecar`` (both sidecars:
every service and the client have an Envoy), ``mtls`` and ``tracing`` (both sidecars plus the feature),
``proxy-lb`` (one central Envoy in front of the replicas) and ``client-lb`` (the client's sidecar balances).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from meshsim.errors import FieldError, MeshsimError

MODES = ("baseline", "server-sidecar", "sidecar", "mtls", "tracing", "proxy-lb", "client-lb")
MODE_PATH = {
    "baseline": "baseline",
    "server-sidecar": "server-sidecar",
    "sidecar": "both-sidecars",
    "mtls": "both-sidecars",
    "tracing": "both-sidecars",
    "proxy-lb": "proxy-lb",
    "client-lb": "client-lb",
}
MODE_FEATURES: dict[str, tuple[str, ...]] = {"mtls": ("mtls",), "tracing": ("tracing",)}
LB_MODES = ("proxy-lb", "client-lb")
# Where tracing mode's Envoys send their Zipkin spans: the lab's span counter, or a real Jaeger (calibrate/measure/lab/
# trace_backend.py) whose query API serves the traces (`meshsim topology from-traces` reads its Jaeger and OTLP JSON).
TRACE_BACKENDS = ("collector", "jaeger")
TOPOLOGY_HELP = ("single, chainN (e.g. chain3, chain5; N = 1..20), lbN (e.g. lb3: one service with N replicas) or "
                 "bookinfo (productpage calls details then reviews; reviews calls ratings)")
DEFAULT_MESH = "envoy-lab"
DEFAULT_WORKERS = 2  # Istio's sidecar default (proxy concurrency 2)
# the standard calibration plan's probes (meshsim.calibrate.lab_calibration; kept here, where the CLI reads its
# defaults without importing the lab's machinery)
DEFAULT_RATES: tuple[float, ...] = (200.0, 500.0, 1000.0)
DEFAULT_PAYLOADS: tuple[int, ...] = (1024, 16384)  # 1 KB as in Istio's own benchmarks, and a 16x larger body
DEFAULT_DURATION_S = 3.0


@dataclass(frozen=True)
class Service:
    name: str
    replicas: int = 1
    calls: tuple[str, ...] = ()  # services it calls, one after the other; none: an echo server (leaf)


def parse_topology(topology: str) -> tuple[Service, ...]:
    """Services, the entry first (the client calls it); each calls the services in its ``calls`` in order."""
    if topology == "single":
        return (Service("server"),)
    if topology == "bookinfo":
        # Istio Bookinfo's call graph with one reviews version that calls ratings (v2/v3); productpage calls
        # details, then reviews, as the real one does.
        return (Service("productpage", calls=("details", "reviews")), Service("details"),
                Service("reviews", calls=("ratings",)), Service("ratings"))
    chain = re.fullmatch(r"chain([0-9]+)", topology)
    if chain and 1 <= int(chain.group(1)) <= 20:
        n = int(chain.group(1))
        return tuple(Service(f"s{i}", calls=(f"s{i + 1}",) if i < n else ()) for i in range(1, n + 1))
    lb = re.fullmatch(r"lb([0-9]+)", topology)
    if lb and 1 <= int(lb.group(1)) <= 16:
        return (Service("server", replicas=int(lb.group(1))),)
    raise FieldError("topology", f"unknown topology {topology!r} (known: {TOPOLOGY_HELP})")


@dataclass(frozen=True)
class LabSpec:
    """A validated lab: which processes, in which mode, with what proxy resources."""

    topology: str = "chain3"
    mode: str = "baseline"
    workers: int = DEFAULT_WORKERS
    cpus: str | None = None  # taskset CPU list for every proxy
    cpu_limit: float | None = None  # cores per proxy (CFS quota)
    mesh: str = DEFAULT_MESH
    trace_backend: str = "collector"  # tracing mode only: see TRACE_BACKENDS

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise FieldError("mode", f"unknown mode {self.mode!r} (known: {', '.join(MODES)})")
        services = parse_topology(self.topology)
        if self.workers < 1 or self.workers > 64:
            raise FieldError("workers", f"must be 1..64, got {self.workers}")
        if self.cpu_limit is not None and not self.cpu_limit > 0:
            raise FieldError("cpu_limit", f"must be > 0 cores, got {self.cpu_limit}")
        if self.cpus is not None and not re.fullmatch(r"[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*", self.cpus):
            raise FieldError("cpus", f"expected a taskset CPU list like 0 or 0,1 or 0-1, got {self.cpus!r}")
        replicated = any(s.replicas > 1 for s in services)
        if self.mode in LB_MODES and len(services) != 1:
            raise FieldError("mode", f"{self.mode}: needs a one-service topology (single or lbN), got {self.topology}")
        if replicated and self.mode not in LB_MODES:
            raise FieldError("topology", f"{self.topology}: replicas need a balancing mode (mode proxy-lb or client-lb), "
                                         f"got {self.mode}")
        if self.trace_backend not in TRACE_BACKENDS:
            raise FieldError("trace_backend", f"unknown trace backend {self.trace_backend!r} "
                                              f"(known: {', '.join(TRACE_BACKENDS)})")
        if self.trace_backend != "collector" and self.mode != "tracing":
            raise FieldError("trace_backend", f"{self.trace_backend}: needs mode tracing, got {self.mode}")
        if not self.mesh or "/" in self.mesh:
            raise FieldError("mesh", f"must be a plain name, got {self.mesh!r}")

    @property
    def services(self) -> tuple[Service, ...]:
        return parse_topology(self.topology)

    @property
    def path(self) -> str:
        return MODE_PATH[self.mode]

    @property
    def features(self) -> tuple[str, ...]:
        return MODE_FEATURES.get(self.mode, ())

    @property
    def has_proxies(self) -> bool:
        return self.mode != "baseline"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LabSpec":
        return cls(**data)
