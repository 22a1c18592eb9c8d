"""What runs at several rates (and with more connections) add: the wake-up block (``cold_wake``: latency and CPU
per request falling with load, fitted on the idle gaps ``wake_gaps`` replays), the baseline's own rate dependence
(``calibration.baseline_wakeup``), CPU per request and from it each proxy's ``cpu_fraction``.

Means add under convolution, so the mean latency one proxy adds per request at each rate is (mean of the mode -
mean of the baseline at the same rate) / proxies: no percentile subtraction is involved.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

import numpy as np

from meshsim.calibrate.load.cold_wake import WakePoint, WakeSeries, fit_cold_wake
from meshsim.calibrate.load.cpu_cost import fit_cpu
from meshsim.calibrate.load.linger_fit import NOT_IDENTIFIED, fit_linger, lingering, sleep_points
from meshsim.calibrate.measure.dataset import Run
from meshsim.calibrate.fit.observations import from_result
from meshsim.calibrate.fit.decomposition import ColdWakes, Decomposition
from meshsim.calibrate.load.wake_gaps import RunGaps
from meshsim.calibrate.load.mean_wakeup import ABS_NOISE_S, RUN_TO_RUN, TAU_GAP_FACTOR, arrival_gap, fit_wakeup, idle_gap
from meshsim.progress import Progress

PASSES = {"server-sidecar": 2, "both-sidecars": 4}
# cpu_seconds key -> the fitted component whose two passes it should match
CPU_COMPONENTS = {"server/sidecar": "proxy.inbound_pass", "client/sidecar": "proxy.outbound_pass",
                  "lb:server": "load_balancer.pass"}
FIT_LINGER = True  # fit wakeup.linger_us from runs that counted their workers' sleeps (linger_fit)
MAX_PASS_FACTOR = 3.0  # a wake-up may cost at most this many times the largest mean added per pass


@dataclass
class LoadDependenceFit:
    wakeup: dict[str, Any] | None = None
    cold: ColdWakes | None = None  # cold wakes inside the reference runs' passes (known parts of the decomposition)
    cpu_without_wake: dict[str, tuple[float, str]] = field(default_factory=dict)  # sidecar -> (CPU/request, why)
    baseline_wakeup: dict[str, Any] | None = None  # the baseline's own rate dependence (network + app)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RatePoint:
    rps: float
    gap_s: float  # idle gap of the worker before the request pass
    arrival_s: float  # 1 / (rate per worker)
    value_s: float  # mean added per pass (proxy) or mean latency (baseline)
    se_s: float  # standard error of value_s


def _sigma(points: Sequence[RatePoint], scale: float) -> list[float]:
    """Per-point uncertainty of ``scale x value``: sampling error plus run-to-run spread and resolution."""
    level = RUN_TO_RUN * scale * float(np.mean([abs(p.value_s) for p in points]))
    return [float(np.sqrt((scale * p.se_s) ** 2 + level**2 + ABS_NOISE_S**2)) for p in points]


def _baseline_points(runs: Sequence[Run]) -> dict[float, tuple[float, float, float]]:
    """rps -> (pooled mean, its standard error, mean connections) of the plain baseline runs at that rate."""
    by_rate: dict[float, list[tuple[float, float, int]]] = defaultdict(list)
    for r in runs:
        if r.manifest.setup.path == "baseline" and not r.features and r.rps:
            obs = from_result(r.result)
            by_rate[float(r.rps)].append((obs.mean, obs.mean_se, r.manifest.load.connections))
    out = {}
    for q, vals in by_rate.items():
        m = float(np.mean([v[0] for v in vals]))
        se = float(np.sqrt(np.sum([v[1] ** 2 for v in vals]))) / len(vals)
        out[q] = (m, se, float(np.mean([v[2] for v in vals])))
    return out


CPU_TICK_S = 0.01  # /proc/<pid>/stat counts CPU in clock ticks (USER_HZ = 100)


def _plain(runs: Sequence[Run], path: str) -> dict[float, list[Run]]:
    by_rate: dict[float, list[Run]] = defaultdict(list)
    for r in runs:
        if r.manifest.setup.path == path and not r.features and r.rps:
            by_rate[float(r.rps)].append(r)
    return by_rate


def _wake_series(runs: Sequence[Run], gaps: Mapping[str, RunGaps]) -> list[WakeSeries]:
    """Series of latency and CPU per request of one proxy from plain sidecar runs, every path and rate; each point
    carries the idle gaps its proxies' passes found (``gaps``, from replaying the run in the simulator).
    Each series keeps its own level (base); resume CPU, cold wake delay, CPU and tau are shared by all.
    """
    base = _baseline_points(runs)
    series: list[WakeSeries] = []
    for path in ("server-sidecar", "both-sidecars"):
        per_proxy = PASSES[path] // 2
        latency: list[WakePoint] = []
        cpu: dict[str, list[WakePoint]] = defaultdict(list)
        for rps, rs in sorted(_plain(runs, path).items()):
            for r in rs:
                seen = gaps.get(r.id)
                proxies = [k for k in ("server/sidecar", "client/sidecar")[:per_proxy] if seen and k in seen.gaps]
                if seen is None or len(proxies) < per_proxy:
                    continue
                if rps in base:  # the latency a proxy adds needs the baseline at the same rate; its CPU does not
                    base_mean, base_se, _ = base[rps]
                    obs = from_result(r.result)
                    value = max((obs.mean - base_mean) / per_proxy, 0.0)
                    se = float(np.hypot(obs.mean_se, base_se)) / per_proxy
                    all_gaps = np.concatenate([seen.gaps[k] for k in proxies])
                    latency.append(WakePoint(float(rps), all_gaps, seen.requests * per_proxy, value, se))
                duration = r.manifest.load.duration_s or r.result.duration_s
                done = (r.result.actual_rps or rps) * (duration or 0.0)
                if not done or not np.isfinite(done):
                    continue
                for key, seconds in r.manifest.cpu_seconds.items():
                    if key in seen.gaps:
                        per_request = seconds / done
                        tick = CPU_TICK_S / math.sqrt(6) / done  # two tick-quantised readings
                        sigma = float(np.hypot(tick, RUN_TO_RUN * per_request))
                        cpu[key].append(WakePoint(float(rps), seen.gaps[key], seen.requests, per_request, sigma))
        if len({p.rps for p in latency}) >= 2:
            level = RUN_TO_RUN * float(np.mean([p.value_s for p in latency]))
            latency = [replace(p, sigma_s=float(np.sqrt(p.sigma_s**2 + level**2 + ABS_NOISE_S**2)))
                       for p in latency]
            series.append(WakeSeries(f"latency per proxy, {path}", "latency", tuple(latency)))
        series += [WakeSeries(f"{k} CPU, {path}", "cpu", tuple(v)) for k, v in sorted(cpu.items())
                   if len({p.rps for p in v}) >= 2]
    return series


def _describe(s: WakeSeries) -> str:
    return f"{s.name} (" + ", ".join(f"{p.rps:g} rps: {p.value_s * 1e3:.3f} ms" for p in s.points) + ")"


def _baseline_wakeup(runs: Sequence[Run], extra: LoadDependenceFit) -> None:
    """The baseline's own load dependence (app and loopback wake-ups), recorded in ``calibration``: from the
    one-connection runs. With more connections firing together (the load ladder's c=16) a request also queues behind
    the others of its burst, which is no wake-up; those runs serve the proxies' CPU fit instead."""
    every = _baseline_points(runs)
    base = {q: v for q, v in every.items() if v[2] == 1}
    if len(every) > len(base):
        extra.notes.append("baseline runs with more than one connection (" + ", ".join(
            f"{q:g} rps" for q in sorted(set(every) - set(base))) + ") left out of the baseline's load dependence: "
            "their requests also queue behind the others of a burst")
    if len(base) < 2:
        return
    pts = [RatePoint(q, idle_gap(q, int(c), int(c), m), arrival_gap(q, int(c), int(c)), m, se)
           for q, (m, se, c) in sorted(base.items())]
    rates = ", ".join(f"{p.rps:g} rps: {p.value_s * 1e3:.4f} ms" for p in pts)
    fit = fit_wakeup([p.gap_s for p in pts], [p.value_s for p in pts], sigma_s=_sigma(pts, 1.0),
                     tau_max_s=TAU_GAP_FACTOR * max(p.arrival_s for p in pts),
                     max_max_s=MAX_PASS_FACTOR * max(p.value_s for p in pts))
    if fit.accepted:
        extra.baseline_wakeup = {
            **fit.block(f"fitted by meshsim fit: mean baseline latency (network + app) per rate, {rates}"),
            "base_ms": round(fit.base_s * 1e3, 4),
            "note": "not applied by the simulator: the baseline distribution holds the reference rate's wake-up; "
                    "this block tells how much of it changes with the idle gap g per connection "
                    "(mean = base_ms + max_ms (1 - exp(-g / tau_ms)))"}
        extra.notes.append(f"baseline load dependence ({rates}): {fit.verdict()}; recorded as "
                           "calibration.baseline_wakeup")
    else:
        extra.notes.append(f"baseline load dependence ({rates}): {fit.verdict()}: no baseline_wakeup written")


def baseline_dependence(usable: Sequence[Run]) -> LoadDependenceFit:
    """The baseline's own rate dependence (recorded, not simulated): the first part of the load-dependence study."""
    extra = LoadDependenceFit()
    _baseline_wakeup(usable, extra)
    return extra


def wake_runs(usable: Sequence[Run]) -> list[Run]:
    """The plain sidecar runs whose idle gaps the cold wake fit needs (replayed by ``wake_gaps``)."""
    return [r for r in usable if r.manifest.setup.path in PASSES and not r.features and r.rps]


def analyse(usable: Sequence[Run], ref_runs: Sequence[Run], other: Sequence[Run], gaps: Mapping[str, RunGaps],
            report_progress: Progress, extra: LoadDependenceFit | None = None) -> LoadDependenceFit:
    """Wake-ups from runs at several rates; ``gaps``: each run's simulated idle gaps (``wake_gaps``)."""
    extra = extra or LoadDependenceFit()
    linger = fit_linger(sleep_points(usable, gaps)) if FIT_LINGER else None
    linger_s = linger.linger_s if linger else 0.0
    series = [replace(s, points=tuple(lingering(p, linger_s, s.kind == "cpu") for p in s.points))
              for s in _wake_series(usable, gaps)]
    if not series:
        if other:
            extra.notes.append("runs at other rates lack a baseline at the same rate: no load-dependence fit")
        return extra
    arrivals = [arrival_gap(p.rps, 1, 1) for s in series for p in s.points]
    fit = fit_cold_wake(series, tau_max_s=TAU_GAP_FACTOR * max(arrivals))
    seen = "; ".join(_describe(s) for s in series)
    if not fit.accepted:
        extra.notes.append(f"load dependence of the proxy ({seen}): {fit.verdict()}: no wakeup block written; "
                           "the passes hold the reference rate's cost")
        report_progress(extra.notes[-1])
        return extra
    extra.wakeup = fit.block(f"fitted by meshsim fit from plain sidecar runs, per request: {seen}; idle gaps of "
                             "every pass from replaying each run in the simulator; cold wake probability "
                             "1 - exp(-g/tau)")
    extra.wakeup.update(linger.block_keys() if linger else {"linger_source": NOT_IDENTIFIED if FIT_LINGER else
                                                            "linger not fitted (FIT_LINGER off)"})
    ref_ids = {r.id for r in ref_runs}
    sides = {}
    for side, key, paths in (("inbound", "server/sidecar", ("server-sidecar", "both-sidecars")),
                             ("outbound", "client/sidecar", ("both-sidecars",))):
        ref = []
        for path in paths:  # the path the side's passes are fitted from first
            ref = [gaps[r.id] for r in ref_runs if r.id in gaps and r.manifest.setup.path == path
                   and not r.features and key in gaps[r.id].gaps]
            if ref:
                break
        if not ref:
            continue
        point = lingering(WakePoint(0.0, np.concatenate([g.gaps[key] for g in ref]), sum(g.requests for g in ref),
                                    0.0, 1.0), linger_s, False)
        sides[side] = (point.resumes, point.colds(fit.tau_s))
    if "inbound" not in sides:
        extra.notes.append(f"load dependence ({seen}): {fit.verdict()}; but no plain sidecar run at the reference "
                           f"rate among {', '.join(sorted(ref_ids))}: no wakeup block written")
        extra.wakeup = None
        report_progress(extra.notes[-1])
        return extra
    inbound = sides["inbound"]
    extra.cold = ColdWakes(fit.delay_s + fit.cpu_s, fit.resume_cpu_s, inbound, sides.get("outbound", inbound))
    for key in ("server/sidecar", "client/sidecar"):  # each measured beside the other first (side_cpu.py)
        mine = [s for s in series if s.kind == "cpu" and s.name.startswith(key)]
        mine.sort(key=lambda s: not s.name.endswith("both-sidecars"))
        if mine:
            s = mine[0]
            extra.cpu_without_wake[key] = (
                fit.bases_s[s.name], f"{key} {fit.bases_s[s.name] * 1e3:.4g} ms CPU per request with no wake-up "
                f"(wake-up fit; {_describe(s)})")
    at_ref = "; ".join(f"{side}: {r:.2f} resumes and {p:.3f} cold wakes per request" for side, (r, p) in sides.items())
    extra.notes.append(
        f"load dependence ({seen}): {fit.verdict()}; at the reference rate {ref_runs[0].rps or 0:g} rps, {at_ref}: "
        "the decomposition takes these wake-ups as known parts (the simulator adds them itself)")
    report_progress(extra.notes[-1])
    return extra


def cpu(runs: Sequence[Run], decomp: Decomposition, notes: list[str]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str, frozenset[str]], list[tuple[float, float]]] = defaultdict(list)
    for r in runs:
        duration = r.manifest.load.duration_s or r.result.duration_s
        if not duration or not np.isfinite(duration):
            continue
        for comp, seconds in r.manifest.cpu_seconds.items():
            groups[(comp, r.manifest.setup.path, r.features)].append((r.result.actual_rps, seconds / duration))
    out = []
    for (comp, path, feats), pts in sorted(groups.items(), key=lambda kv: kv[0][:2]):
        if len({round(p[0], 3) for p in pts}) < 2:
            notes.append(f"CPU of {comp} ({path}) measured at one rate only: per-request cost not separable")
            continue
        fit = fit_cpu(comp, [p[0] for p in pts], [p[1] for p in pts])
        entry: dict[str, Any] = {**fit.to_dict(), "path": path, "features": sorted(feats)}
        fitted = decomp.components.get(CPU_COMPONENTS.get(comp, ""))
        if fitted is not None:
            entry["cross_check"] = fit.cross_check(2 * fitted.best.distribution.mean)
        out.append(entry)
    return out


# component of the mesh model -> (cpu_seconds key, fitted pass components it may match, preferred run path)
FRACTION_SOURCES = {
    "proxy": (("server/sidecar", ("proxy.inbound_pass", "proxy.pass"), "both-sidecars"),
              ("client/sidecar", ("proxy.outbound_pass", "proxy.pass"), "both-sidecars")),
    "load_balancer": (("lb:server", ("load_balancer.pass",), "proxy-lb"),),
}


def preferred_cpu_entry(cpu_entries: Sequence[dict[str, Any]], key: str, path: str) -> dict[str, Any] | None:
    """The plaintext CPU-per-request entry of ``key`` (a cpu_seconds key), from runs of ``path`` when there are
    some, else from another path's; None without one."""
    entries = [e for e in cpu_entries if e["component"] == key and not e["features"]]
    entries.sort(key=lambda e: e["path"] != path)
    return entries[0] if entries else None


def cpu_fractions(cpu_entries: Sequence[dict[str, Any]], decomp: Decomposition, notes: list[str],
                  without_wake: dict[str, tuple[float, str]] | None = None) -> dict[str, tuple[float, str]]:
    """``cpu_fraction`` per model section: measured CPU per pass / fitted mean pass time, capped at 1.

    A pass's fitted time includes kernel and scheduling delay that does not hold the worker; the measured CPU
    per request (slope of cores vs rate, plaintext runs) over its two passes is the part that does. Sidecars
    with CPU data are pooled (total CPU over total pass time). No post-response work is fitted, so none is
    deducted. Sections without CPU data get no entry (the loader's default 1 applies). ``without_wake``: CPU per
    request with no cold wake (from the cold wake fit) replaces the linear slope, which averages cold wakes in.
    """
    without_wake = without_wake or {}
    out: dict[str, tuple[float, str]] = {}
    for section, sources in FRACTION_SOURCES.items():
        cpu_total = pass_total = 0.0
        used = []
        for key, comps, path in sources:
            fitted = next((decomp.components[c] for c in comps if c in decomp.components), None)
            if fitted is None:
                continue
            pass_ms = fitted.best.distribution.mean * 1e3
            if key in without_wake:
                cost_s, why = without_wake[key]
                cpu_total += cost_s * 1e3
                pass_total += 2 * pass_ms
                used.append(f"{why} over 2 x {pass_ms:.4g} ms fitted mean pass")
                continue
            e = preferred_cpu_entry(cpu_entries, key, path)
            if e is None:
                continue
            cost_ms = float(e["cpu_ms_per_request"])
            if not cost_ms > 0:
                notes.append(f"CPU per request of {key} ({e['path']}) is {cost_ms:.4g} ms (not positive): "
                             f"not used for {section}.cpu_fraction")
                continue
            cpu_total += cost_ms
            pass_total += 2 * pass_ms
            rates = "/".join(f"{q:.0f}" for q in e["rates"])
            used.append(f"{key} {cost_ms:.4g} ms CPU per request ({e['path']} runs at {rates} rps, "
                        f"r2 {e['r2']}) over 2 x {pass_ms:.4g} ms fitted mean pass")
        if pass_total > 0 and used:
            frac = min(1.0, cpu_total / pass_total)
            src = (f"cpu_fraction = min(1, measured CPU per pass / fitted mean pass time) = {frac:.4g}: "
                   + "; ".join(used) + " (CPU from the manifests' cpu_seconds)")
            out[section] = (frac, src)
            notes.append(f"{section}.{src}")
    return out
