"""What runs at several rates add: the wake-up block (per-hop cost falling with rate) and CPU per request.

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
from meshsim.calibrate.wakeup import fit_wakeup, idle_gap

PASSES = {"server-sidecar": 2, "both-sidecars": 4}
# cpu_seconds key -> the fitted component whose two passes it should match
CPU_COMPONENTS = {"server/sidecar": "proxy.inbound_pass", "client/sidecar": "proxy.outbound_pass",
                  "lb:server": "load_balancer.pass"}


@dataclass
class Extra:
    wakeup: dict[str, Any] | None = None
    included_per_pass_s: float = 0.0  # wake-up cost already inside the passes fitted at the reference rate
    cpu: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _per_rate_increments(runs: Sequence[Run], workers: int) -> tuple[str, list[tuple[float, float, float]]]:
    """(path used, [(qps, idle gap s, mean added per pass s)]) from plain runs at each rate."""
    base_by_rate = defaultdict(list)
    for r in runs:
        if r.manifest.setup.path == "baseline" and not r.features:
            base_by_rate[r.qps].append(from_result(r.result).mean)
    for path in ("server-sidecar", "both-sidecars"):
        points = []
        for r in runs:
            if r.manifest.setup.path != path or r.features or r.qps not in base_by_rate or not r.qps:
                continue
            obs = from_result(r.result)
            base_mean = float(np.mean(base_by_rate[r.qps]))
            inc = max((obs.mean - base_mean) / PASSES[path], 0.0)
            gap = idle_gap(r.qps, r.manifest.load.connections, workers, obs.mean)
            points.append((float(r.qps), gap, inc))
        if len({p[0] for p in points}) >= 2:
            return path, points
    return "", []


def analyse(usable: Sequence[Run], ref_runs: Sequence[Run], other: Sequence[Run], workers: int,
            say: Callable[[str], None]) -> Extra:
    """Wake-up block from runs at several rates (before the decomposition, which must know the offset)."""
    extra = Extra()
    path, points = _per_rate_increments(usable, workers)
    if points:
        points.sort()
        rates = ", ".join(f"{q:g} qps: {inc * 1e3:.3f} ms" for q, _, inc in points)
        falls = np.corrcoef([p[1] for p in points], [p[2] for p in points])[0, 1] > 0 if len(points) > 2 else \
            (points[0][2] > points[-1][2])
        spread = (max(p[2] for p in points) - min(p[2] for p in points)) / max(np.mean([p[2] for p in points]), 1e-9)
        if falls and spread > 0.05:
            # The simulator charges max * (1 - exp(-g / tau)) to every pass after its worker idled for g: the
            # request pass after the gap between requests, the response pass after the app's time. So the fit is
            # on the per-request increment of one proxy (two passes) against the request gap; the response-pass
            # share is a constant at every rate.
            fit = fit_wakeup([p[1] for p in points], [2 * p[2] for p in points])
            ref_gap = min(points, key=lambda p: abs(p[0] - (ref_runs[0].qps or 0)))[1]
            # the response pass's worker idled while the app answered: about the baseline's mean time
            bases = [from_result(r.result).mean for r in ref_runs if r.manifest.setup.path == "baseline"]
            resp_gap = float(np.mean(bases)) if bases else 0.0
            extra.wakeup = fit.block(f"fitted by meshsim fit: mean added time per request through one proxy "
                                     f"from {path} runs at {rates}")
            extra.included_per_pass_s = 0.5 * (fit.predict(ref_gap) + fit.predict(resp_gap) - 2 * fit.base_s)
            extra.notes.append(
                f"load dependence: per-pass cost falls with rate ({rates}); wakeup max {fit.max_s * 1e3:.3f} ms, "
                f"tau {fit.tau_s * 1e3:.3f} ms{' (tau fixed)' if fit.tau_fixed else ''}; "
                f"{extra.included_per_pass_s * 1e3:.4f} ms of wake-up per pass at the reference rate removed from "
                "the fitted passes (the simulator adds it back)")
            say(extra.notes[-1])
        else:
            extra.notes.append(f"no load dependence: per-pass cost does not fall with rate ({rates})")
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
