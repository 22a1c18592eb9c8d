"""What runs at several rates add: the wake-up block (per-hop cost falling with rate), the baseline's own rate
dependence (``calibration.baseline_wakeup``), CPU per request and from it each proxy's ``cpu_fraction``.

Means add under convolution, so the mean added time per pass at each rate is (mean of the mode - mean of the
baseline at the same rate) / passes: no percentile subtraction is involved.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from meshsim.calibrate.cpu_cost import fit_cpu
from meshsim.calibrate.dataset import Run
from meshsim.calibrate.observations import from_result
from meshsim.calibrate.plan import Decomposition
from meshsim.calibrate.wakeup import ABS_NOISE_S, RUN_TO_RUN, TAU_GAP_FACTOR, arrival_gap, fit_wakeup, idle_gap

PASSES = {"server-sidecar": 2, "both-sidecars": 4}
# cpu_seconds key -> the fitted component whose two passes it should match
CPU_COMPONENTS = {"server/sidecar": "proxy.inbound_pass", "client/sidecar": "proxy.outbound_pass",
                  "lb:server": "load_balancer.pass"}
MAX_PASS_FACTOR = 3.0  # a wake-up may cost at most this many times the largest mean added per pass


@dataclass
class Extra:
    wakeup: dict[str, Any] | None = None
    included_per_pass_s: float = 0.0  # wake-up cost already inside the passes fitted at the reference rate
    baseline_wakeup: dict[str, Any] | None = None  # the baseline's own rate dependence (network + app)
    cpu: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Point:
    qps: float
    gap_s: float  # idle gap of the worker before the request pass
    arrival_s: float  # 1 / (rate per worker)
    value_s: float  # mean added per pass (proxy) or mean latency (baseline)
    se_s: float  # standard error of value_s


def _sigma(points: Sequence[Point], scale: float) -> list[float]:
    """Per-point uncertainty of ``scale x value``: sampling error plus run-to-run spread and resolution."""
    level = RUN_TO_RUN * scale * float(np.mean([abs(p.value_s) for p in points]))
    return [float(np.sqrt((scale * p.se_s) ** 2 + level**2 + ABS_NOISE_S**2)) for p in points]


def _baseline_points(runs: Sequence[Run]) -> dict[float, tuple[float, float, float]]:
    """qps -> (pooled mean, its standard error, mean connections) of the plain baseline runs at that rate."""
    by_rate: dict[float, list[tuple[float, float, int]]] = defaultdict(list)
    for r in runs:
        if r.manifest.setup.path == "baseline" and not r.features and r.qps:
            obs = from_result(r.result)
            by_rate[float(r.qps)].append((obs.mean, obs.mean_se, r.manifest.load.connections))
    out = {}
    for q, vals in by_rate.items():
        m = float(np.mean([v[0] for v in vals]))
        se = float(np.sqrt(np.sum([v[1] ** 2 for v in vals]))) / len(vals)
        out[q] = (m, se, float(np.mean([v[2] for v in vals])))
    return out


def _per_rate_increments(runs: Sequence[Run], workers: int) -> tuple[str, list[Point]]:
    """(path used, points of mean added per pass) from plain runs at each rate."""
    base = _baseline_points(runs)
    for path in ("server-sidecar", "both-sidecars"):
        points = []
        for r in runs:
            if r.manifest.setup.path != path or r.features or r.qps not in base or not r.qps:
                continue
            obs = from_result(r.result)
            base_mean, base_se, _ = base[r.qps]
            inc = max((obs.mean - base_mean) / PASSES[path], 0.0)
            se = float(np.hypot(obs.mean_se, base_se)) / PASSES[path]
            c = r.manifest.load.connections
            points.append(Point(float(r.qps), idle_gap(r.qps, c, workers, obs.mean), arrival_gap(r.qps, c, workers),
                                inc, se))
        if len({p.qps for p in points}) >= 2:
            return path, sorted(points, key=lambda p: p.qps)
    return "", []


def _baseline_wakeup(runs: Sequence[Run], extra: Extra) -> None:
    """The baseline's own load dependence (app and loopback wake-ups), recorded in ``calibration``."""
    base = _baseline_points(runs)
    if len(base) < 2:
        return
    pts = [Point(q, idle_gap(q, int(c), int(c), m), arrival_gap(q, int(c), int(c)), m, se)
           for q, (m, se, c) in sorted(base.items())]
    rates = ", ".join(f"{p.qps:g} qps: {p.value_s * 1e3:.4f} ms" for p in pts)
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


ROOM_QUANTILES = (0.05, 0.1, 0.25, 0.5)


def _room_per_pass(ref_runs: Sequence[Run]) -> float:
    """Largest constant each pass can hold at the reference rate: passes are non-negative and independent of the
    baseline, so every quantile of a mode is at least the baseline's plus the constants of its passes."""
    base = [from_result(r.result) for r in ref_runs if r.manifest.setup.path == "baseline" and not r.features]
    if not base:
        return float("inf")
    b = max(base, key=lambda o: o.n)
    room = float("inf")
    for r in ref_runs:
        if r.manifest.setup.path in PASSES and not r.features:
            obs = from_result(r.result)
            diff = min(obs.quantile(q) - b.quantile(q) for q in ROOM_QUANTILES)
            room = min(room, max(diff, 0.0) / PASSES[r.manifest.setup.path])
    return room


def analyse(usable: Sequence[Run], ref_runs: Sequence[Run], other: Sequence[Run], workers: int,
            say: Callable[[str], None]) -> Extra:
    """Wake-up block from runs at several rates (before the decomposition, which must know the offset)."""
    extra = Extra()
    _baseline_wakeup(usable, extra)
    path, points = _per_rate_increments(usable, workers)
    if points:
        rates = ", ".join(f"{p.qps:g} qps: {p.value_s * 1e3:.3f} ms" for p in points)
        # The simulator charges max * (1 - exp(-g / tau)) to every pass after its worker idled for g: the
        # request pass after the gap between requests, the response pass after the app's time. So the fit is
        # on the per-request increment of one proxy (two passes) against the request gap; the response-pass
        # share is a constant at every rate.
        fit = fit_wakeup([p.gap_s for p in points], [2 * p.value_s for p in points], sigma_s=_sigma(points, 2.0),
                         tau_max_s=TAU_GAP_FACTOR * max(p.arrival_s for p in points),
                         max_max_s=MAX_PASS_FACTOR * max(p.value_s for p in points))
        if fit.accepted:
            ref_gap = min(points, key=lambda p: abs(p.qps - (ref_runs[0].qps or 0))).gap_s
            # the response pass's worker idled while the app answered: about the baseline's mean time
            bases = [from_result(r.result).mean for r in ref_runs if r.manifest.setup.path == "baseline"]
            resp_gap = float(np.mean(bases)) if bases else 0.0
            included = 0.5 * (fit.predict(ref_gap) + fit.predict(resp_gap) - 2 * fit.base_s)
            room = _room_per_pass(ref_runs)
            if included > room + ABS_NOISE_S:
                extra.notes.append(
                    f"load dependence of the proxy passes ({rates}): wake-up {fit.verdict()}, but its fixed cost at "
                    f"the reference rate ({included * 1e3:.4f} ms per pass) exceeds what the reference runs' faster "
                    f"requests leave room for ({room * 1e3:.4f} ms per pass, from quantile differences with the "
                    "baseline): the cost is not a fixed function of the idle gap; no wakeup block written")
                say(extra.notes[-1])
                return extra
            extra.wakeup = fit.block(f"fitted by meshsim fit: mean added time per request through one proxy "
                                     f"from {path} runs at {rates}")
            extra.included_per_pass_s = included
            extra.notes.append(
                f"load dependence: per-pass cost varies with rate ({rates}); wakeup {fit.verdict()}; "
                f"{extra.included_per_pass_s * 1e3:.4f} ms of wake-up per pass at the reference rate removed from "
                "the fitted passes (the simulator adds it back)")
        else:
            extra.notes.append(f"load dependence of the proxy passes ({rates}): wake-up {fit.verdict()}: "
                               "no wakeup block written; the passes hold the reference rate's cost")
        say(extra.notes[-1])
    elif other:
        extra.notes.append("runs at other rates lack a baseline at the same rate: no load-dependence fit")
    return extra


def cpu(runs: Sequence[Run], decomp: Decomposition, notes: list[str]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str, frozenset[str]], list[tuple[float, float]]] = defaultdict(list)
    for r in runs:
        duration = r.manifest.load.duration_s or r.result.duration_s
        if not duration or not np.isfinite(duration):
            continue
        for comp, seconds in r.manifest.cpu_seconds.items():
            groups[(comp, r.manifest.setup.path, r.features)].append((r.result.actual_qps, seconds / duration))
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
    "proxy": (("server/sidecar", ("proxy.inbound_pass", "proxy.pass"), "server-sidecar"),
              ("client/sidecar", ("proxy.outbound_pass", "proxy.pass"), "both-sidecars")),
    "load_balancer": (("lb:server", ("load_balancer.pass",), "proxy-lb"),),
}


def cpu_fractions(cpu_entries: Sequence[dict[str, Any]], decomp: Decomposition,
                  notes: list[str]) -> dict[str, tuple[float, str]]:
    """``cpu_fraction`` per model section: measured CPU per pass / fitted mean pass time, capped at 1.

    A pass's fitted time includes kernel and scheduling delay that does not hold the worker; the measured CPU
    per request (slope of cores vs rate, plaintext runs) over its two passes is the part that does. Sidecars
    with CPU data are pooled (total CPU over total pass time). No post-response work is fitted, so none is
    deducted. Sections without CPU data get no entry (the loader's default 1 applies).
    """
    out: dict[str, tuple[float, str]] = {}
    for section, sources in FRACTION_SOURCES.items():
        cpu_total = pass_total = 0.0
        used = []
        for key, comps, path in sources:
            fitted = next((decomp.components[c] for c in comps if c in decomp.components), None)
            entries = [e for e in cpu_entries if e["component"] == key and not e["features"]]
            entries.sort(key=lambda e: e["path"] != path)  # the path the pass was fitted from first
            if fitted is None or not entries:
                continue
            e = entries[0]
            cost_ms = float(e["cpu_ms_per_request"])
            pass_ms = fitted.best.distribution.mean * 1e3
            if not cost_ms > 0:
                notes.append(f"CPU per request of {key} ({e['path']}) is {cost_ms:.4g} ms (not positive): "
                             f"not used for {section}.cpu_fraction")
                continue
            cpu_total += cost_ms
            pass_total += 2 * pass_ms
            rates = "/".join(f"{q:.0f}" for q in e["rates"])
            used.append(f"{key} {cost_ms:.4g} ms CPU per request ({e['path']} runs at {rates} qps, "
                        f"r2 {e['r2']}) over 2 x {pass_ms:.4g} ms fitted mean pass")
        if pass_total > 0 and used:
            frac = min(1.0, cpu_total / pass_total)
            src = (f"cpu_fraction = min(1, measured CPU per pass / fitted mean pass time) = {frac:.4g}: "
                   + "; ".join(used) + " (linear fit of cores vs rate from the manifests' cpu_seconds)")
            out[section] = (frac, src)
            notes.append(f"{section}.{src}")
    return out
