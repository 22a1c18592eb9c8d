"""Envoy bootstrap generation for the lab: static listeners and clusters, no control plane.

A sidecar has an inbound listener (the service's public port, forwarding to the app on loopback) and, when the service
calls another one, an outbound listener the app sends its calls to (forwarding to the next service's inbound
listener, over mutual TLS in mtls mode). The central load balancer is one listener in front of a round-robin cluster.
With tracing every HTTP connection manager samples all requests and reports Zipkin JSON spans to the lab collector.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # certs needs `cryptography` (the lab extra); configs only name its file paths
    from meshsim.calibrate.measure.lab.certs import CertFiles

# The Zipkin reporter buffers spans; a short flush interval lets a probe see every span within a second of its end.
ZIPKIN_FLUSH_MS = 500
ZIPKIN_MIN_FLUSH_SPANS = 5  # Envoy's default
COLLECTOR_PATH = "/api/v2/spans"
# Request-time histograms (downstream_rq_time, upstream_rq_time, in ms) with buckets fine enough for the lab's
# 0.5-10 ms requests: Envoy's default bounds (0.5, 1, 5, 10, 25, ... ms; Istio's too) put most lab requests in the
# bucket (1, 5] ms, and a percentile read from Prometheus is only known to its bucket. Every 0.25 ms to 2 ms, then
# wider; the default bounds above 10 ms are kept. Envoy records these times in whole milliseconds (truncated), so
# the bounds below 1 ms and between integers hold nothing: each bucket up to 8 ms holds one recorded value.
# Histograms reach the admin's /stats/prometheus at each stats flush (Envoy's default every 5 s): a Prometheus window
# of a few seconds at 1 s scrapes (the lab's) would miss its last seconds, or see no request at all. Flushing every
# second raised an idle sidecar's CPU from 1.08 to 1.29-1.38 millicores (20 s idle, 2 workers, busy 2-core machine,
# 2026-11-27).
STATS_FLUSH = "1s"
RQ_TIME_BUCKETS_MS = (0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 5, 6, 7, 8, 10, 12.5, 15, 20, 25, 50,
                      100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000)


@dataclass(frozen=True)
class TlsServer:
    """Downstream (inbound) mTLS: present ``own`` and require a client certificate signed by ``ca``."""

    own: CertFiles
    ca: Path


@dataclass(frozen=True)
class TlsClient:
    """Upstream (outbound) mTLS: present ``own``, verify the peer against ``ca``, send ``sni``."""

    own: CertFiles
    ca: Path
    sni: str


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    endpoints: tuple[int, ...]  # ports on 127.0.0.1
    tls: TlsClient | None = None
    lb_policy: str = "ROUND_ROBIN"


@dataclass(frozen=True)
class ListenerSpec:
    name: str
    port: int
    cluster: str
    direction: str  # INBOUND | OUTBOUND (Envoy's traffic_direction; also the span kind)
    tls: TlsServer | None = None


@dataclass(frozen=True)
class ProxySpec:
    """Everything one Envoy needs; ``to_bootstrap`` renders it."""

    node: str  # service cluster name: Zipkin's localEndpoint.serviceName
    admin_port: int
    listeners: tuple[ListenerSpec, ...]
    clusters: tuple[ClusterSpec, ...]
    collector_port: int | None = None  # tracing on when set
    extra: dict[str, Any] = field(default_factory=dict)


def _tls_certificate(own: CertFiles) -> dict[str, Any]:
    return {"certificate_chain": {"filename": str(own.cert)}, "private_key": {"filename": str(own.key)}}


def _address(port: int) -> dict[str, Any]:
    return {"socket_address": {"address": "127.0.0.1", "port_value": port}}


def _cluster(spec: ClusterSpec) -> dict[str, Any]:
    cluster: dict[str, Any] = {
        "name": spec.name,
        "type": "STATIC",
        "connect_timeout": "1s",
        "lb_policy": spec.lb_policy,
        "load_assignment": {
            "cluster_name": spec.name,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _address(p)}} for p in spec.endpoints]}],
        },
    }
    if spec.tls is not None:
        cluster["transport_socket"] = {
            "name": "envoy.transport_sockets.tls",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
                "sni": spec.tls.sni,
                "common_tls_context": {
                    "tls_certificates": [_tls_certificate(spec.tls.own)],
                    "validation_context": {"trusted_ca": {"filename": str(spec.tls.ca)}},
                },
            },
        }
    return cluster


def _listener(spec: ListenerSpec, collector_port: int | None) -> dict[str, Any]:
    hcm: dict[str, Any] = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": spec.name,
        "codec_type": "AUTO",
        "route_config": {
            "name": spec.name,
            "virtual_hosts": [
                {"name": spec.name, "domains": ["*"], "routes": [{"match": {"prefix": "/"}, "route": {"cluster": spec.cluster}}]}
            ],
        },
        "http_filters": [
            {"name": "envoy.filters.http.router",
             "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}
        ],
    }
    if spec.tls is not None:
        # Like Istio: the inbound sidecar replaces any XFCC with the verified peer's identity.
        hcm["forward_client_cert_details"] = "SANITIZE_SET"
        hcm["set_current_client_cert_details"] = {"subject": True, "uri": True}
    if collector_port is not None:
        hcm["tracing"] = {
            "random_sampling": {"value": 100.0},
            "provider": {
                "name": "envoy.tracers.zipkin",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.config.trace.v3.ZipkinConfig",
                    "collector_cluster": "zipkin_collector",
                    "collector_endpoint": COLLECTOR_PATH,
                    "collector_endpoint_version": "HTTP_JSON",
                    "shared_span_context": False,
                },
            },
        }
    chain: dict[str, Any] = {
        "filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm}],
    }
    if spec.tls is not None:
        chain["transport_socket"] = {
            "name": "envoy.transport_sockets.tls",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
                "require_client_certificate": True,
                "common_tls_context": {
                    "tls_certificates": [_tls_certificate(spec.tls.own)],
                    "validation_context": {"trusted_ca": {"filename": str(spec.tls.ca)}},
                },
            },
        }
    return {
        "name": spec.name,
        "address": _address(spec.port),
        "traffic_direction": spec.direction,
        "filter_chains": [chain],
    }


def to_bootstrap(spec: ProxySpec) -> dict[str, Any]:
    """The Envoy v3 bootstrap for ``spec`` as a plain dict (Envoy reads it as JSON)."""
    clusters = [_cluster(c) for c in spec.clusters]
    bootstrap: dict[str, Any] = {
        "node": {"id": spec.node, "cluster": spec.node},
        "admin": {"address": _address(spec.admin_port)},
        "stats_flush_interval": STATS_FLUSH,
        "stats_config": {"histogram_bucket_settings": [
            {"match": {"safe_regex": {"regex": ".*rq_time"}}, "buckets": list(RQ_TIME_BUCKETS_MS)}]},
        "static_resources": {
            "listeners": [_listener(l, spec.collector_port) for l in spec.listeners],
            "clusters": clusters,
        },
    }
    if spec.collector_port is not None:
        clusters.append(_cluster(ClusterSpec("zipkin_collector", (spec.collector_port,))))
        bootstrap["layered_runtime"] = {
            "layers": [
                {
                    "name": "lab",
                    "static_layer": {
                        "tracing.zipkin.flush_interval_ms": ZIPKIN_FLUSH_MS,
                        "tracing.zipkin.min_flush_spans": ZIPKIN_MIN_FLUSH_SPANS,
                    },
                }
            ]
        }
    bootstrap.update(spec.extra)
    return bootstrap


def write_bootstrap(spec: ProxySpec, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_bootstrap(spec), indent=1), encoding="utf-8")
    return path
