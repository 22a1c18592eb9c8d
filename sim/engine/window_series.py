"""Latency, rate and CPU per time window of a run: the time series of a rate profile (``meshsim predict
--timeseries``).

A total hides what a ramp does: a 6-minute ramp from 500 to 1500 rps averages a light start and a hot end into
one p99. The series cuts the measurement window into windows of ``window_s`` seconds and reports, per window, the
offered rate (the profile's exact mean over the window), the rate achieved (answers completed in it), p50/p99/mean of
the requests *sent* in it (so the windows' request counts add up to the prediction's total exactly), the mean number
of requests in the system (the time-average, for Little's law), and the CPU cores and utilisation of every component
and every instance. CPU is booked when a job is booked on its worker (sim/engine/stations.py books a job's whole busy time
at its arrival), so a window's CPU is exact to within one job's service time at each edge.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import simpy

from meshsim.distributions import MS
from meshsim.errors import FieldError
from meshsim.workload import Load

# A profile's default window: about this many windows over its length, rounded to 1, 2 or 5 x 10^k seconds
# (a 6-minute ramp gets 10 s windows, a 20 s ramp 0.5 s).
DEFAULT_WINDOWS = 36
MAX_WINDOWS = 10_000  # memory and output stay small; a finer series is a shorter window on a shorter run


def default_window(duration_s: float) -> float:
    """A round window giving about DEFAULT_WINDOWS windows over ``duration_s``."""
    target = duration_s / DEFAULT_WINDOWS
    decade = 10.0 ** math.floor(math.log10(target))
    return min((m * decade for m in (1.0, 2.0, 5.0, 10.0)), key=lambda w: abs(math.log(w / target)))


def window_for(load: Load, requested_s: float | None, duration_s: float) -> float | None:
    """The series' window: the one asked for, else a default for a rate profile, else None (no series)."""
    if requested_s is None:
        if load.profile is not None:
            return default_window(duration_s)
        return None
    if requested_s > duration_s:
        raise FieldError("timeseries_s", f"a {requested_s:g} s window is longer than the run ({duration_s:g} s)")
    if duration_s / requested_s > MAX_WINDOWS:
        raise FieldError("timeseries_s", f"a {requested_s:g} s window cuts the {duration_s:g} s run into more than "
                                         f"{MAX_WINDOWS} windows")
    return requested_s


def offered_rps(load: Load, start: float, end: float) -> float | None:
    """What the load generator offers over [start, end) (None for sequential users: their rate is an outcome)."""
    return load.offered_between(start, end)


# -- inside one replication ----------------------------------------------------------------------------------------

@dataclass
class CpuSampler:
    """Snapshots of every station's booked busy time and jobs at the window edges (a SimPy process)."""

    edges: np.ndarray  # absolute simulated times
    stations: list[tuple[str, Any, Any]]  # (component, station, proxy or None) from System.stations()
    busy: list[list[float]] = field(default_factory=list)  # per edge, per station: busy seconds booked so far
    jobs: list[list[int]] = field(default_factory=list)

    def run(self, env: simpy.Environment) -> Any:
        for t in self.edges:
            if t > env.now:
                yield env.timeout(t - env.now)
            self.busy.append([sum(s.busy) for _, s, _ in self.stations])
            self.jobs.append([s.jobs for _, s, _ in self.stations])


def start_sampler(env: simpy.Environment, stations: list[tuple[str, Any, Any]], start: float, end: float,
                  window_s: float | None) -> CpuSampler | None:
    """Windows of ``window_s`` from ``start`` to ``end`` (the last one shorter if the run is not a multiple);
    None without a window (no series)."""
    if not window_s:
        return None
    sampler = CpuSampler(window_edges(start, end, window_s), stations)
    env.process(sampler.run(env))
    return sampler


def window_edges(start: float, end: float, window_s: float) -> np.ndarray:
    """Edges every ``window_s`` from ``start``, the last one at ``end`` (the compiled engine's _start_samples
    computes the same edges with the same arithmetic)."""
    count = max(1, math.ceil((end - start) / window_s - 1e-9))
    edges = start + window_s * np.arange(count + 1, dtype=float)
    edges[-1] = end
    return edges


@dataclass(frozen=True)
class ReplicationSeries:
    """One replication's windows (times relative to the load's start)."""

    edges: np.ndarray
    requests: np.ndarray  # measured requests sent in each window
    completed: np.ndarray  # of those measured, answers that arrived in each window
    in_system: np.ndarray  # time-average number of measured requests in the system
    latencies: tuple[np.ndarray, ...]  # seconds, of the requests sent in each window
    instance_cores: dict[str, np.ndarray]
    instance_jobs: dict[str, np.ndarray]
    component_of: dict[str, str]
    capacity: dict[str, float]  # instance -> cores


def replication_series(sampler: CpuSampler | None, origin: float, sent_times: Sequence[float] | None,
                       measured: Sequence[float]) -> ReplicationSeries | None:
    """Cut one replication's measured requests (their send times and latencies, in the same order) and CPU
    snapshots into the sampler's windows; None without a sampler."""
    if sampler is None or sent_times is None:
        return None
    sent, latencies = np.asarray(sent_times, dtype=float), np.asarray(measured, dtype=float)
    edges = sampler.edges
    spans = np.diff(edges)
    order = np.argsort(sent, kind="stable")
    sent, latencies = sent[order], latencies[order]
    done = sent + latencies
    requests = np.histogram(sent, bins=edges)[0]
    completed = np.histogram(done, bins=edges)[0]
    longest = float(latencies.max()) if latencies.size else 0.0
    in_system = np.empty(len(spans))
    for k, (a, b) in enumerate(zip(edges, edges[1:])):  # only requests sent from a - longest on can overlap
        lo, hi = np.searchsorted(sent, a - longest), np.searchsorted(sent, b)
        overlap = np.minimum(done[lo:hi], b) - np.maximum(sent[lo:hi], a)
        in_system[k] = float(np.clip(overlap, 0.0, None).sum()) / (b - a)
    cuts = np.searchsorted(sent, edges)
    per_window = tuple(latencies[cuts[k]:cuts[k + 1]] for k in range(len(spans)))
    busy = np.asarray(sampler.busy, dtype=float)  # edges x stations
    jobs = np.asarray(sampler.jobs, dtype=float)
    cores: dict[str, np.ndarray] = {}
    visits: dict[str, np.ndarray] = {}
    component_of: dict[str, str] = {}
    capacity: dict[str, float] = {}
    for i, (component, station, proxy) in enumerate(sampler.stations):
        idle = proxy.model.idle_cores if proxy is not None else 0.0  # background work, as engine._usage counts it
        cores[station.name] = np.diff(busy[:, i]) / spans + idle
        visits[station.name] = np.diff(jobs[:, i]) / spans
        component_of[station.name] = component
        capacity[station.name] = station.capacity
    return ReplicationSeries(edges - origin, requests, completed, in_system, per_window, cores, visits, component_of,
                             capacity)


# -- over the replications -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Window:
    start_s: float
    end_s: float
    offered_rps: float | None
    achieved_rps: float  # answers completed in the window per second (mean over replications)
    requests: int  # measured requests sent in the window, all replications
    latency: dict[str, float]  # p50, p99, mean in seconds, pooled over the replications
    in_system: float  # mean requests in the system (time-average)
    cpu_cores: dict[str, float]  # component -> cores, all its instances
    utilization: dict[str, float]  # component -> its cores / its capacity
    instance_cores: dict[str, float]
    instance_jobs_per_s: dict[str, float]  # station visits per second (requests for a one-step handler)

    def to_dict(self) -> dict[str, Any]:
        def r(x: float | None, digits: int = 6) -> float | None:
            return None if x is None or not math.isfinite(x) else round(x, digits)

        return {"start_s": r(self.start_s), "end_s": r(self.end_s), "offered_rps": r(self.offered_rps, 3),
                "achieved_rps": r(self.achieved_rps, 3), "requests": self.requests,
                **{f"{k}_ms": r(v / MS) for k, v in self.latency.items()}, "in_system": r(self.in_system, 4),
                "cpu_cores": {k: r(v, 4) for k, v in self.cpu_cores.items()},
                "utilization": {k: r(v, 4) for k, v in self.utilization.items()},
                "instance_cores": {k: r(v, 4) for k, v in self.instance_cores.items()},
                "instance_jobs_per_s": {k: r(v, 3) for k, v in self.instance_jobs_per_s.items()}}


@dataclass(frozen=True)
class TimeSeries:
    window_s: float
    windows: tuple[Window, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"window_s": self.window_s, "windows": [w.to_dict() for w in self.windows]}

    def to_csv(self) -> str:
        """One row per window; per-component CPU and utilisation as ``cpu:NAME`` and ``util:NAME`` columns."""
        rows = [w.to_dict() for w in self.windows]
        components = sorted({c for w in self.windows for c in w.cpu_cores})
        head = ["start_s", "end_s", "offered_rps", "achieved_rps", "requests", "p50_ms", "p99_ms", "mean_ms",
                "in_system"]
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(head + [f"cpu:{c}" for c in components] + [f"util:{c}" for c in components])
        for row in rows:
            writer.writerow([row[k] for k in head] + [row["cpu_cores"].get(c) for c in components]
                            + [row["utilization"].get(c) for c in components])
        return out.getvalue()


def combine(series: Sequence[ReplicationSeries], load: Load, window_s: float) -> TimeSeries:
    """The replications' windows side by side: counts summed, rates and CPU averaged, latencies pooled."""
    first = series[0]
    windows = []
    for k, (a, b) in enumerate(zip(first.edges, first.edges[1:])):
        pooled = np.concatenate([s.latencies[k] for s in series])
        latency = {"p50": float(np.percentile(pooled, 50)), "p99": float(np.percentile(pooled, 99)),
                   "mean": float(pooled.mean())} if pooled.size else dict.fromkeys(("p50", "p99", "mean"), math.nan)
        inst = {name: float(np.mean([s.instance_cores[name][k] for s in series])) for name in first.instance_cores}
        jobs = {name: float(np.mean([s.instance_jobs[name][k] for s in series])) for name in first.instance_jobs}
        cores: dict[str, float] = {}
        capacity: dict[str, float] = {}
        for name, value in inst.items():
            component = first.component_of[name]
            cores[component] = cores.get(component, 0.0) + value
            capacity[component] = capacity.get(component, 0.0) + first.capacity[name]
        windows.append(Window(
            float(a), float(b), offered_rps(load, float(a), float(b)),
            float(np.mean([s.completed[k] for s in series]) / (b - a)), int(sum(int(s.requests[k]) for s in series)),
            latency, float(np.mean([s.in_system[k] for s in series])), cores,
            {c: cores[c] / capacity[c] for c in cores if capacity[c] > 0}, inst, jobs))
    return TimeSeries(window_s, tuple(windows))
