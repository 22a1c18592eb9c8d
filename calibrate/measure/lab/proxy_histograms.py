"""Each lab Envoy's own request-duration histogram over a probe's load: its ``downstream_rq_time`` buckets (per
listener) read from the admin's ``/stats/prometheus`` before and after the load, their difference stored with the
run (``proxy-histograms.json``) under the names the model gives the same span (sim/engine/proxy_views.py):
``client/sidecar to s1`` for the client sidecar's ``outbound`` listener, ``s1/sidecar to s2`` for a sidecar's
``outbound_s2``, ``s1/sidecar inbound``, ``lb:s1 balancing``.

Envoy publishes a histogram to the admin at each stats flush (the lab's Envoys flush every second), so the reading
after the load waits for a flush past the load's end: ``FLUSH_WAIT_S`` after it.
"""

from __future__ import annotations

import json
import math
import re
import urllib.request
from typing import Any, Mapping

from meshsim.calibrate.measure.prometheus.prom_histogram import Bucket, parse_le

METRIC = "envoy_http_downstream_rq_time_bucket"
FLUSH_WAIT_S = 1.3  # a flush after the load's end: the lab's Envoys flush every second (envoy_config STATS_FLUSH)
FILE_KEY, FILE_NAME = "proxy_histograms", "proxy-histograms.json"
SOURCE = ("each Envoy's admin /stats/prometheus, envoy_http_downstream_rq_time_bucket per listener (ms), read "
          "before and after the load; the counts are the difference")
_LINE = re.compile(METRIC + r"\{(?P<labels>[^}]*)\} (?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

Snapshot = dict[str, dict[float, float]]  # view -> le (ms) -> cumulative count


def view_of(component: str, listener: str) -> str | None:
    """The model's name of the span a listener's histogram times (None: a listener the model has no view of)."""
    if listener == "inbound":
        return f"{component} inbound"
    if listener == "lb":
        return f"{component} balancing"
    if listener.startswith("outbound_"):
        return f"{component} to {listener[len('outbound_'):]}"
    return None


def parse(text: str, component: str, entry: str) -> Snapshot:
    """A /stats/prometheus page's request-time buckets by view (``entry``: the service the client's ``outbound``
    listener sends to)."""
    out: Snapshot = {}
    for match in _LINE.finditer(text):
        labels = dict(_LABEL.findall(match["labels"]))
        listener = labels.get("envoy_http_conn_manager_prefix", "")
        view = f"{component} to {entry}" if listener == "outbound" else view_of(component, listener)
        if view is None or "le" not in labels:
            continue
        out.setdefault(view, {})[parse_le(labels["le"])] = float(match["value"])
    return out


def read(admin_ports: Mapping[str, int], entry: str, timeout_s: float = 5.0) -> Snapshot:
    """Every Envoy's buckets now (``admin_ports``: component -> its admin port on 127.0.0.1)."""
    out: Snapshot = {}
    for component, port in admin_ports.items():
        url = f"http://127.0.0.1:{port}/stats/prometheus?filter=downstream_rq_time"
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 (loopback, the lab's own Envoy)
            out.update(parse(resp.read().decode(), component, entry))
    return out


def over_load(before: Snapshot, after: Snapshot) -> dict[str, list[Bucket]]:
    """Each view's buckets counted during the load (after minus before; a view first seen after counts from 0)."""
    return {view: [Bucket(le, count - before.get(view, {}).get(le, 0.0)) for le, count in sorted(buckets.items())]
            for view, buckets in sorted(after.items())}


def to_json(views: Mapping[str, list[Bucket]]) -> bytes:
    """The file stored with a run: each view's bounds as Prometheus writes them (``+Inf``) and its counts."""
    data: dict[str, Any] = {"source": SOURCE, "unit": "ms", "views": {
        view: {"le": ["+Inf" if math.isinf(b.upper) else repr(b.upper) for b in buckets],
               "count": [b.count for b in buckets]} for view, buckets in views.items()}}
    return json.dumps(data, indent=1).encode()


def run_files(views: Mapping[str, list[Bucket]]) -> dict[str, tuple[str, bytes]] | None:
    """The file a run folder keeps them in (write_run's ``extra``); None without any view."""
    return {FILE_KEY: (FILE_NAME, to_json(views))} if views else None


def from_json(data: Mapping[str, Any]) -> dict[str, list[Bucket]]:
    return {view: [Bucket(parse_le(str(le)), float(c)) for le, c in zip(v["le"], v["count"], strict=True)]
            for view, v in data["views"].items()}
