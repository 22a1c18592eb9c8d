"""The CPU a service burns per call, for ``meshsim topology from-traces``: traces time a service's own work but cannot
tell its CPU from its waiting (on a disk, a lock, a call no span shows), and a queueing model needs the difference:
only the CPU holds a core. It comes from the user (``--cpu-ms reviews=0.8``) or from the containers' CPU in
Prometheus over the traces' own time span (``--cpu-from-prometheus URL``), divided by the calls the traces saw.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Mapping, Sequence

from meshsim.calibrate.measure.prometheus.prom_api import PrometheusApi
from meshsim.calibrate.measure.prometheus.prom_components import model_workload
from meshsim.calibrate.measure.prometheus.prom_credentials import load_credentials
from meshsim.calibrate.measure.prometheus.prom_metric_sets import metric_set
from meshsim.calibrate.measure.prometheus.prom_window import component_cpu, parse_end, parse_window
from meshsim.calibrate.measure.trace_calls import Invocation
from meshsim.errors import MeshsimError

MIN_WINDOW_S = 1.0  # Prometheus's rate() needs two scrapes in the window


def traces_window(roots: Sequence[Invocation]) -> tuple[float, float]:
    """(the first trace's start, the last one's end) in Unix seconds: the time the traces span."""
    return min(r.start for r in roots), max(r.end for r in roots)


@dataclass(frozen=True)
class CallCpu:
    """CPU seconds one call of a service burns, and where the figure came from."""

    seconds: float
    source: str


@dataclass(frozen=True)
class GivenCpu:
    """CPU per call as the user gave it (``--cpu-ms``)."""

    calls: Mapping[str, CallCpu]

    def read(self, calls_per_s: Mapping[str, float], roots: Sequence[Invocation]) -> tuple[dict[str, CallCpu],
                                                                                            list[str]]:
        unknown = sorted(set(self.calls) - set(calls_per_s))
        if unknown:
            raise MeshsimError(f"--cpu-ms: no service {unknown[0]!r} in the traces (they have "
                               f"{', '.join(sorted(calls_per_s))})")
        return dict(self.calls), []


def cpu_from_flag(text: str) -> GivenCpu:
    """``--cpu-ms reviews=0.8,ratings=0.2`` (milliseconds of CPU per call of each named service)."""
    out = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        service, sep, value = item.partition("=")
        try:
            ms = float(value) if sep and service.strip() else float("nan")
        except ValueError:
            ms = float("nan")
        if not ms >= 0 or ms == float("inf"):
            raise MeshsimError(f"--cpu-ms: {item!r}: expected SERVICE=MILLISECONDS (a number >= 0), e.g. reviews=0.8")
        out[service.strip()] = CallCpu(ms / 1e3, f"--cpu-ms {service.strip()}={value} (given by the user)")
    if not out:
        raise MeshsimError("--cpu-ms: expected SERVICE=MILLISECONDS[,...], e.g. reviews=0.8")
    return GivenCpu(out)


@dataclass(frozen=True)
class PrometheusCpu:
    """Where to read the containers' CPU: the server, the metric set and the window (None: the traces' own span)."""

    url: str
    metrics: str = "istio"
    window: str | None = None
    end: str | None = None
    credentials_file: str | None = None
    ca_file: str | None = None

    def __post_init__(self) -> None:  # bad flags fail before the traces are read
        metric_set(self.metrics)
        if self.window is not None:
            parse_window(self.window)
        parse_end(self.end)

    def span(self, roots: Sequence[Invocation]) -> tuple[float, float]:
        """(window seconds, end as Unix seconds): the flags', or the traces' first start to last end."""
        first, last = traces_window(roots)
        end = parse_end(self.end) if self.end is not None else last
        window = parse_window(self.window) if self.window is not None else end - first
        if window < MIN_WINDOW_S:
            raise MeshsimError(f"--cpu-from-prometheus: the traces span {window:.3g} s, too short a window for "
                               f"Prometheus's rates (at least {MIN_WINDOW_S:g} s); give --window")
        return window, end

    def read(self, calls_per_s: Mapping[str, float], roots: Sequence[Invocation]) -> tuple[dict[str, CallCpu],
                                                                                            list[str]]:
        """Each traced service's app CPU per call (its containers' cores over its calls per second), and notes."""
        window, end = self.span(roots)
        api = PrometheusApi(self.url, load_credentials(self.credentials_file), self.ca_file)
        cores, unnamed = component_cpu(api, metric_set(self.metrics), end, window)
        when = dt.datetime.fromtimestamp(end, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        per_service: dict[str, float] = {}
        for component, value in cores.items():
            workload, _, part = component.partition("/")
            if part == "app":
                name = model_workload(workload, calls_per_s)
                per_service[name] = per_service.get(name, 0.0) + value
        where = f"the {window:.4g} s to {when} ({self.url}, {self.metrics} metric set)"
        out, notes = cpu_per_call(per_service, calls_per_s, where)
        if unnamed:
            notes.append(f"{len(unnamed)} container series no naming rule of the {self.metrics} set reads (e.g. "
                         f"{unnamed[0]}): not used")
        return out, notes


def cpu_per_call(cores: Mapping[str, float], calls_per_s: Mapping[str, float], where: str
                 ) -> tuple[dict[str, CallCpu], list[str]]:
    """Each traced service's CPU per call: its app containers' ``cores`` over ``where`` (a Prometheus window) divided
    by the calls per second the traces saw; a note for each service it cannot give one."""
    out, notes = {}, []
    for service, rate in calls_per_s.items():
        if service not in cores:
            notes.append(f"{service}: no app container CPU in Prometheus: its own time is booked as CPU")
        elif not rate > 0:
            notes.append(f"{service}: the traces span no time, so no calls per second to divide its CPU by: its "
                         "own time is booked as CPU")
        else:
            out[service] = CallCpu(cores[service] / rate, (
                f"prometheus: {service}'s app containers' CPU, {cores[service]:.4g} cores over {where}, over the "
                f"{rate:.4g} calls per second the traces saw"))
    return out, notes
