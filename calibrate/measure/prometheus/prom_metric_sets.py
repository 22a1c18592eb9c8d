"""The standard metrics of each mesh family, as data: which counter counts requests, which histogram holds their
latency (and its unit), which labels name the calling and the called workload, and the container metrics for CPU
and memory (cAdvisor's names, which the kubelet serves and the lab's process exporter imitates).

Sources: Istio's standard metrics (istio.io, "Istio Standard Metrics": ``istio_requests_total``,
``istio_request_duration_milliseconds``, labels ``reporter``, ``source_workload``, ``destination_workload``);
Linkerd's proxy metrics (linkerd.io, "Proxy Metrics": ``request_total``, ``response_latency_ms``, labels
``direction``, ``deployment``, ``dst_deployment``); Envoy's admin ``/stats/prometheus`` (statistics
``http.<prefix>.downstream_rq_time`` and ``cluster.<name>.upstream_rq_time`` in ms, tags
``envoy_http_conn_manager_prefix`` and ``envoy_cluster_name``; which Envoy a series came from is the scrape's
``workload`` target label, as the lab's Prometheus configuration sets it); cAdvisor
(``container_cpu_usage_seconds_total``, ``container_memory_working_set_bytes``, labels ``pod`` and ``container``),
whose series become the model's components as ``prom_components`` says.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from meshsim.calibrate.measure.prometheus.prom_components import ComponentNaming, ContainerIsComponent, PodWorkload
from meshsim.errors import MeshsimError


@dataclass(frozen=True)
class MetricSet:
    family: str
    requests: str  # a counter of requests
    latency_bucket: str  # the latency histogram's cumulative ``_bucket`` series
    ms_per_unit: float  # the histogram's unit in ms
    source_label: str  # the label naming the calling workload
    destination_label: str  # ... and the called one
    matchers: Mapping[str, str] = field(default_factory=dict)  # fixed label matchers (e.g. which side reports)
    cpu: str = "container_cpu_usage_seconds_total"
    memory: str = "container_memory_working_set_bytes"
    # which component a CPU or memory series is of (prom_components): the lab's container label names it already
    naming: ComponentNaming = ContainerIsComponent()
    # cAdvisor's pod-level totals (container="") and pause containers ("POD") would count a pod twice
    containers: str = '{container!="",container!="POD"}'
    # the histogram records whole units, truncated (Envoy's request times: whole milliseconds), so a percentile is
    # known to the integers its bucket holds (prom_histogram.whole_units)
    whole_units: bool = False


METRIC_SETS: dict[str, MetricSet] = {
    # a cluster's containers by pod: every sidecar container has the one name, its workload is its pod's. A
    # ``workload`` label (relabelled onto cAdvisor's series) names it outright; ``app`` does not, as Bookinfo's
    # app=reviews spans reviews-v1..v3, which the model keeps apart
    "istio": MetricSet("istio", "istio_requests_total", "istio_request_duration_milliseconds_bucket", 1.0,
                       "source_workload", "destination_workload", {"reporter": "source"},
                       naming=PodWorkload("istio-proxy", ("workload",))),
    "linkerd": MetricSet("linkerd", "request_total", "response_latency_ms_bucket", 1.0,
                         "deployment", "dst_deployment", {"direction": "outbound"},
                         naming=PodWorkload("linkerd-proxy", ("workload",))),
    # the lab's plain Envoy: the entry listener's time (destination = the listener's stat prefix, ``outbound`` on
    # a client sidecar) or the time of one upstream cluster (destination = the cluster, ``to_server``)
    "envoy": MetricSet("envoy", "envoy_http_downstream_rq_total", "envoy_http_downstream_rq_time_bucket", 1.0,
                       "workload", "envoy_http_conn_manager_prefix", whole_units=True),
    "envoy-upstream": MetricSet("envoy-upstream", "envoy_cluster_upstream_rq_total",
                                "envoy_cluster_upstream_rq_time_bucket", 1.0, "workload", "envoy_cluster_name",
                                whole_units=True),
}


def metric_set(name: str) -> MetricSet:
    try:
        return METRIC_SETS[name]
    except KeyError:
        raise MeshsimError(f"--metrics {name!r}: unknown metric set (known: {', '.join(METRIC_SETS)})") from None


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def selector(labels: Mapping[str, str]) -> str:
    """``{a="x",b="y"}`` with PromQL's string escapes (empty: no braces)."""
    return "{" + ",".join(f"{k}={_quoted(v)}" for k, v in sorted(labels.items())) + "}" if labels else ""


def traffic_selector(metrics: MetricSet, source: str | None, destination: str | None) -> str:
    """The set's fixed matchers plus the chosen source and destination workloads."""
    labels = dict(metrics.matchers)
    if source:
        labels[metrics.source_label] = source
    if destination:
        labels[metrics.destination_label] = destination
    return selector(labels)
