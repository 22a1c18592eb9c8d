"""Where and what to read from Prometheus, as the command line gives it (checked when built, before any work)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from meshsim.calibrate.measure.prometheus.prom_api import PrometheusApi
from meshsim.calibrate.measure.prometheus.prom_credentials import load_credentials
from meshsim.calibrate.measure.prometheus.prom_metric_sets import metric_set
from meshsim.calibrate.measure.prometheus.prom_window import WindowMeasure, measure_window, parse_end, parse_window


@dataclass(frozen=True)
class PrometheusSource:
    """Where and what to read: the server, the window, the metric set and the traffic (source -> destination)."""

    url: str
    window: str  # a Prometheus duration, e.g. 10m
    end: str | None = None  # Unix seconds or ISO 8601; None: now
    metrics: str = "istio"
    source: str | None = None
    destination: str | None = None
    credentials_file: str | Path | None = None
    ca_file: str | Path | None = None

    def __post_init__(self) -> None:  # bad flags fail before anything is asked or simulated
        parse_window(self.window)
        parse_end(self.end)
        metric_set(self.metrics)

    def read(self) -> WindowMeasure:
        api = PrometheusApi(self.url, load_credentials(self.credentials_file), self.ca_file)
        return measure_window(api, metric_set(self.metrics), source=self.source, destination=self.destination,
                              window_s=parse_window(self.window), end=parse_end(self.end))
