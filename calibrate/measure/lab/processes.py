"""Turning a LabSpec into processes: free ports, Envoy bootstraps, certificates and command lines.

Call graph: the client calls services[0]; a service that calls nobody is ``fortio server`` (echo), every other one is
``fortio proxies -M`` forwarding the request (path and query included) to each service it calls, one after the
other (``-multi-serial-mode``). Where a call goes depends on the mode: the callee's app (baseline), the callee's
inbound sidecar (server-sidecar) or the caller's own sidecar's outbound listener for that callee on loopback (both
sidecars, mtls, tracing). Tracing mode's Envoys send their spans to the lab's span counter or to a Jaeger
(``LabSpec.trace_backend``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from meshsim.calibrate.measure.lab.binaries import find_binary
from meshsim.calibrate.measure.lab.envoy_config import (
    ClusterSpec,
    ListenerSpec,
    ProxySpec,
    TlsClient,
    TlsServer,
    write_bootstrap,
)
from meshsim.calibrate.measure.lab.spec import LabSpec, Service
from meshsim.calibrate.measure.lab.supervisor import free_port
from meshsim.calibrate.measure.lab.trace_backend import plan_jaeger


@dataclass(frozen=True)
class ProcessPlan:
    name: str  # component name; replicas carry "#i" (component = name before '#')
    kind: str  # app | sidecar | lb | collector
    argv: tuple[str, ...]
    ports: tuple[int, ...]  # listening ports to wait for
    admin_port: int | None = None  # Envoy admin
    proxy: bool = False  # gets --cpus / --cpu-limit


@dataclass
class LabPlan:
    spec: LabSpec
    entry_port: int
    processes: list[ProcessPlan] = field(default_factory=list)
    collector_port: int | None = None  # the lab's span counter (GET /stats)
    trace_query_port: int | None = None  # Jaeger's query API, when it is the trace backend


def component_of(process_name: str) -> str:
    return process_name.split("#", 1)[0]


def fortio_server(fortio: Path, port: int, data_dir: Path) -> tuple[str, ...]:
    # Every extra fortio server (tcp/udp echo, gRPC, redirect) is off: they would bind all interfaces.
    return (str(fortio), "server", "-http-port", f"127.0.0.1:{port}", "-grpc-port", "disabled",
            "-redirect-port", "disabled", "-tcp-port", "disabled", "-udp-port", "disabled",
            "-data-dir", str(data_dir), "-ui-path", "", "-loglevel", "warning")


def fortio_hop(fortio: Path, port: int, target_ports: list[int]) -> tuple[str, ...]:
    targets = " ".join(f"http://127.0.0.1:{t}" for t in target_ports)
    serial = ("-multi-serial-mode",) if len(target_ports) > 1 else ()  # one call after the other, like Bookinfo
    return (str(fortio), "proxies", *serial, "-M", f"127.0.0.1:{port} {targets}", "-loglevel", "warning")


def envoy_argv(envoy: Path, config: Path, node: str, workers: int) -> tuple[str, ...]:
    return (str(envoy), "-c", str(config), "--concurrency", str(workers), "--disable-hot-restart",
            "--service-cluster", node, "--service-node", node, "-l", "warning")


def collector_process(port: int) -> ProcessPlan:
    """The lab's span collector (tracing mode), a Python process of this package."""
    argv = (sys.executable, "-m", "meshsim.calibrate.measure.lab.collector", "--port", str(port))
    return ProcessPlan("collector", "collector", argv, (port,))


def trace_backend_process(spec: LabSpec, config_dir: Path) -> tuple[ProcessPlan, int, int | None]:
    """Tracing mode's span receiver: (its process, the port Envoys send Zipkin spans to, Jaeger's query port)."""
    if spec.trace_backend == "jaeger":
        jaeger = plan_jaeger(config_dir)
        argv = jaeger.argv(find_binary("jaeger"))
        return ProcessPlan("jaeger", "collector", argv, jaeger.ports), jaeger.zipkin_port, jaeger.query_port
    port = free_port()
    return collector_process(port), port, None


def app_processes(service: Service, ports: list[int], targets: list[int], fortio: Path,
                  data_dir: Path) -> list[ProcessPlan]:
    """One service's app replicas: an echo server when it calls nobody, else a fortio hop to ``targets``."""
    out = []
    for replica, port in enumerate(ports):
        name = f"{service.name}/app" + (f"#{replica}" if service.replicas > 1 else "")
        argv = fortio_hop(fortio, port, targets) if service.calls else fortio_server(fortio, port, data_dir)
        out.append(ProcessPlan(name, "app", argv, (port,)))
    return out


def plan_lab(spec: LabSpec, work_dir: Path, fortio: Path, envoy: Path) -> LabPlan:
    """Allocate ports, write configs (and the lab CA in mtls mode) under ``work_dir``; return what to start."""
    services = spec.services
    config_dir = work_dir / "config"
    data_dir = work_dir / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    processes: list[ProcessPlan] = []
    mode = spec.mode
    both = spec.path == "both-sidecars"
    inbound = mode in ("server-sidecar", "sidecar", "mtls", "tracing")

    zipkin_port = query_port = None
    if mode == "tracing":
        receiver, zipkin_port, query_port = trace_backend_process(spec, config_dir)
        processes.append(receiver)
    pki = None
    if mode == "mtls":
        from meshsim.calibrate.measure.lab.certs import make_lab_pki  # needs `cryptography` (the lab extra)

        pki = make_lab_pki(work_dir / "certs", ["client", *(s.name for s in services)])

    def tls_server(name: str) -> TlsServer | None:
        return TlsServer(pki[1][name], pki[0]) if pki else None

    def tls_client(own: str, peer: str) -> TlsClient | None:
        return TlsClient(pki[1][own], pki[0], sni=peer) if pki else None

    app_ports = {s.name: [free_port() for _ in range(s.replicas)] for s in services}
    inbound_ports = {s.name: free_port() for s in services} if inbound else {}
    outbound_ports = {(s.name, c): free_port() for s in services for c in s.calls} if both else {}

    def front_port(name: str) -> int:
        """Where a caller sends to reach service ``name`` (before any caller-side sidecar)."""
        return inbound_ports[name] if inbound else app_ports[name][0]

    # Apps, leaves first; a caller sends to its own sidecar's outbound listener (both sidecars) or the callee's front.
    for service in reversed(services):
        targets = [outbound_ports[(service.name, c)] if both else front_port(c) for c in service.calls]
        processes.extend(app_processes(service, app_ports[service.name], targets, fortio, data_dir))

    def add_envoy(name: str, kind: str, node: str, listeners: list[ListenerSpec], clusters: list[ClusterSpec]) -> None:
        admin = free_port()
        proxy = ProxySpec(node, admin, tuple(listeners), tuple(clusters), zipkin_port)
        config = write_bootstrap(proxy, config_dir / f"{name.replace('/', '_').replace(':', '_')}.json")
        processes.append(ProcessPlan(name, kind, envoy_argv(envoy, config, node, spec.workers),
                                     tuple(l.port for l in listeners), admin_port=admin, proxy=True))

    # Service sidecars.
    if inbound:
        for service in services:
            listeners = [ListenerSpec("inbound", inbound_ports[service.name], "local_app", "INBOUND",
                                      tls_server(service.name))]
            clusters = [ClusterSpec("local_app", tuple(app_ports[service.name]))]
            for peer in service.calls if both else ():
                listeners.append(ListenerSpec(f"outbound_{peer}", outbound_ports[(service.name, peer)], f"to_{peer}",
                                              "OUTBOUND"))
                clusters.append(ClusterSpec(f"to_{peer}", (inbound_ports[peer],), tls_client(service.name, peer)))
            add_envoy(f"{service.name}/sidecar", "sidecar", service.name, listeners, clusters)

    # The client's side: its own sidecar, or a central load balancer, or nothing.
    first = services[0]
    if both or mode == "client-lb":
        entry_port = free_port()
        endpoints = tuple(app_ports[first.name]) if mode == "client-lb" else (front_port(first.name),)
        add_envoy("client/sidecar", "sidecar", "client",
                  [ListenerSpec("outbound", entry_port, f"to_{first.name}", "OUTBOUND")],
                  [ClusterSpec(f"to_{first.name}", endpoints, tls_client("client", first.name))])
    elif mode == "proxy-lb":
        entry_port = free_port()
        add_envoy(f"lb:{first.name}", "lb", f"lb-{first.name}",
                  [ListenerSpec("lb", entry_port, first.name, "INBOUND")],
                  [ClusterSpec(first.name, tuple(app_ports[first.name]))])
    else:
        entry_port = front_port(first.name)
    counter_port = zipkin_port if query_port is None else None
    return LabPlan(spec, entry_port, processes, counter_port, query_port)
