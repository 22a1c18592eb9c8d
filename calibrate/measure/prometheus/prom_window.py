"""What Prometheus saw over one time window: the request rate, the latency histogram's increase (and percentiles
from it with their bucket bounds), each container's CPU (cores) and mean working set (MB).

The window is ``--window DURATION`` (Prometheus's syntax: ``10m``, ``90s``, ``1h30m``) ending at ``--end`` (Unix
seconds or ISO 8601; default now). Rates and increases are Prometheus's own ``rate``/``increase`` over the window,
read at its end; the percentiles are interpolated here from the summed buckets so that their bucket is known
(``prom_histogram``), as ``histogram_quantile`` would interpolate them.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import time
from dataclasses import dataclass, field
from typing import Mapping

from meshsim.calibrate.measure.prometheus.prom_api import PrometheusApi
from meshsim.calibrate.measure.prometheus.prom_histogram import Bucket, BucketQuantile, bucket_quantile, parse_le
from meshsim.calibrate.measure.prometheus.prom_components import by_component
from meshsim.calibrate.measure.prometheus.prom_metric_sets import MetricSet, traffic_selector
from meshsim.errors import MeshsimError

PERCENTILES = {"p50": 0.50, "p90": 0.90, "p99": 0.99, "p999": 0.999}
_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0}
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")


def parse_window(text: str) -> float:
    """A Prometheus duration (``10m``, ``1h30m``, ``90s``) in seconds; one-line error naming --window."""
    parts = _DURATION.findall(text or "")
    if not parts or "".join(n + u for n, u in parts) != text:
        raise MeshsimError(f"--window {text!r}: expected a Prometheus duration such as 10m, 90s or 1h30m")
    seconds = sum(int(n) * _UNITS[u] for n, u in parts)
    if not seconds >= 1:
        raise MeshsimError(f"--window {text!r}: must be at least 1s")
    return seconds


def parse_end(text: str | None) -> float:
    """``--end``: Unix seconds or an ISO 8601 time (UTC unless it says otherwise); None is now."""
    if text is None:
        return time.time()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise MeshsimError(f"--end {text!r}: expected Unix seconds or an ISO 8601 time (2026-11-27T10:00:00Z)") from None
    return (when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)).timestamp()


@dataclass(frozen=True)
class WindowMeasure:
    """One window of one source -> destination traffic."""

    url: str
    metrics: MetricSet
    traffic: str  # the selector the traffic was read with
    end: float
    window_s: float
    requests: float  # how many the histogram counted in the window
    rps: float
    buckets_ms: tuple[Bucket, ...]
    cpu_cores: Mapping[str, float] = field(default_factory=dict)
    memory_mb: Mapping[str, float] = field(default_factory=dict)
    unnamed: tuple[str, ...] = ()  # container series (pod/container) no naming rule of the set turned into a component

    def quantile(self, key: str) -> BucketQuantile:
        return bucket_quantile(PERCENTILES[key], self.buckets_ms)

    @property
    def label(self) -> str:
        when = dt.datetime.fromtimestamp(self.end, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return f"prometheus {self.metrics.family}{self.traffic} {self.window_s:g} s to {when}"


def _range(window_s: float) -> str:
    return f"[{int(round(window_s * 1000))}ms]"


def _missing(api: PrometheusApi, metric: str, traffic: str, end: float, window_s: float) -> str:
    """Why a query found nothing: the metric is not there at all, or none of its series match, or no requests."""
    rng = _range(window_s)
    if not api.instant(f"count(last_over_time({metric}{rng}))", end):
        return f"metric {metric} missing: Prometheus has no series of it in the window (is the target scraped?)"
    if traffic and not api.instant(f"count(last_over_time({metric}{traffic}{rng}))", end):
        return f"no series of {metric} match {traffic} in the window (check --source/--destination)"
    return f"no data for {metric}{traffic} in the window"


def _buckets(api: PrometheusApi, metrics: MetricSet, traffic: str, end: float, window_s: float) -> list[Bucket]:
    query = f"sum by (le) (increase({metrics.latency_bucket}{traffic}{_range(window_s)}))"
    samples = api.instant(query, end)
    if not samples:
        raise MeshsimError(f"prometheus {api.url}: {_missing(api, metrics.latency_bucket, traffic, end, window_s)}")
    try:
        return [Bucket(parse_le(s.labels["le"]) * metrics.ms_per_unit, s.value) for s in samples]
    except (KeyError, ValueError):
        raise MeshsimError(f"prometheus {api.url}: {metrics.latency_bucket} has a series without a numeric le "
                           "label: not a histogram's buckets") from None


def measure_window(api: PrometheusApi, metrics: MetricSet, *, source: str | None, destination: str | None,
                   window_s: float, end: float) -> WindowMeasure:
    """Read one window; a one-line error when the metrics are missing or the window holds no requests."""
    traffic = traffic_selector(metrics, source, destination)
    buckets = _buckets(api, metrics, traffic, end, window_s)
    counted = max((b.count for b in buckets), default=0.0)
    if not counted > 0:
        raise MeshsimError(f"prometheus {api.url}: no requests in the {window_s:g} s window ending {end:.0f} "
                           f"({metrics.latency_bucket}{traffic} did not grow)")
    rate = api.instant(f"sum(rate({metrics.requests}{traffic}{_range(window_s)}))", end)
    if not rate:
        raise MeshsimError(f"prometheus {api.url}: {_missing(api, metrics.requests, traffic, end, window_s)}")
    cpu, unnamed = component_cpu(api, metrics, end, window_s)
    memory, _ = _per_component(api, metrics, f"max by ({{by}}) (avg_over_time({metrics.memory}{{sel}}{{rng}}))", end,
                               window_s)
    return WindowMeasure(api.url, metrics, traffic, end, window_s, counted, rate[0].value, tuple(buckets), cpu,
                         {k: v / 1e6 for k, v in memory.items()}, unnamed)


def component_cpu(api: PrometheusApi, metrics: MetricSet, end: float, window_s: float
                  ) -> tuple[dict[str, float], tuple[str, ...]]:
    """Cores each component burned over the window (its containers' CPU counters' rate), and the unnamed series."""
    return _per_component(api, metrics, f"sum by ({{by}}) (rate({metrics.cpu}{{sel}}{{rng}}))", end, window_s)


def _per_component(api: PrometheusApi, metrics: MetricSet, template: str, end: float, window_s: float
                   ) -> tuple[dict[str, float], tuple[str, ...]]:
    """A per-container query (``template`` with {by}, {sel}, {rng}) summed per component by the set's naming: each
    pod's containers are read apart, and the pods of one workload (the replicas of a component) add up."""
    query = template.format(by=", ".join(metrics.naming.group_by), sel=metrics.containers, rng=_range(window_s))
    series = ((s.labels, s.value) for s in api.instant(query, end) if math.isfinite(s.value))
    return by_component(metrics.naming, series)

