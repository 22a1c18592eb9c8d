"""The cluster's wake-up, fitted by simulation from its baseline runs at different idle gaps.

A baseline run (no proxy on the path) at one connection and 1000 rps leaves the app idle 0.7 ms between requests;
16 connections firing together at the same rate leave it idle 16 ms, and every request of a burst then finds an
idle core. The Istio 1.2 pipeline's c=16 baseline is 0.34 ms slower at p50 than its c=1 baseline with the same
spread above it (p90 - p50 0.15 against 0.06 ms): a shift every request pays, the mark of waking cold (a vCPU the
hypervisor halted, a core in a deep idle state), not of a queue. Cold wakes have a constant hazard while idle:
after a gap g a request waits ``delay`` with probability 1 - exp(-g / tau) (``meshsim.wakeup.WakeUp``).

Each baseline run is replayed on the topology of the model's replays (``sim_check.fit_topology``: the runs' shipped
topology on the cluster, or the fitted baseline as a delay) with the server waking cold by (delay, tau) from a
grid, with common random numbers, and the pair whose simulated p50/p75/p90 match every baseline run best (least
squares on relative errors; p99 only where the wake-up makes it too high: ``FITTED_LEVELS``) is kept. tau is
identified by the runs' own shapes: a cold fraction of the requests at the short gap shows in the upper
percentiles of the one-connection run, a shift of all of them at the long gap in the burst run's. It is the
cluster's: ``cluster.wakeup`` of the model, which every service of a prediction then wakes with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from meshsim.calibrate.fit.observations import from_result
from meshsim.calibrate.fit.sim_check import fit_topology
from meshsim.calibrate.measure.dataset import Run
from meshsim.progress import Progress

DELAYS_MS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.7)
TAUS_MS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 200.0)
SHAPES = (1.0, 2.0, 4.0)  # constant hazard, and sharper thresholds (the idle governor's target residency)
LEVELS = (0.5, 0.75, 0.9, 0.99)
# The levels fitted both ways: a cold wake shifts the body of a run. Above them (p99) a wake-up may not make a tail
# the runs lack (a cold fraction at the short gap shows there), but is not asked to make one they have: the burst
# runs' p99 carries a tail no wake-up makes (Istio 1.2's c=16 baseline: p99 - p90 0.46 ms against 0.10 at c=1), and
# fitted to it a shift mechanism trades the body for the tail (its p50 20 % low on `single`).
FITTED_LEVELS = 3
MAX_REQUESTS = 6000  # per replayed run and candidate
DELAY_STEP_MS = 0.0125  # the last step of the search around the grid's best delay
MIN_GAP_RATIO = 3.0  # the runs' idle gaps must differ at least this much for tau and delay to be told apart


@dataclass(frozen=True)
class BaselineWakeFit:
    delay_ms: float
    tau_ms: float
    shape: float
    objective: float
    runs: tuple[str, ...]
    measured_ms: tuple[tuple[float, ...], ...]  # per run, the LEVELS' quantiles
    simulated_ms: tuple[tuple[float, ...], ...]
    without_ms: tuple[tuple[float, ...], ...]  # simulated with no wake-up

    def block(self) -> dict[str, Any]:
        pairs = "; ".join(f"{r} p50/p75/p90/p99 measured {'/'.join(f'{v:.3f}' for v in m)}, simulated "
                          f"{'/'.join(f'{v:.3f}' for v in s)} (no wake-up {'/'.join(f'{v:.3f}' for v in w)}) ms"
                          for r, m, s, w in zip(self.runs, self.measured_ms, self.simulated_ms, self.without_ms))
        return {"delay_ms": self.delay_ms, "tau_ms": self.tau_ms, "shape": self.shape,
                "source": f"fitted by meshsim fit (calibrate/load/baseline_wake.py) from baseline runs at different "
                          f"idle gaps, replayed for delay {DELAYS_MS[0]:g}..{DELAYS_MS[-1]:g} ms x tau "
                          f"{TAUS_MS[0]:g}..{TAUS_MS[-1]:g} ms x shape {'/'.join(f'{k:g}' for k in SHAPES)} (the "
                          f"best delay then in steps down to {DELAY_STEP_MS:g} ms), least squares on relative errors "
                          f"of p50/p75/p90 and of p99 where simulated above measured: {pairs}"}


def baseline_runs(runs: Sequence[Run]) -> list[Run]:
    """Plain baseline runs at a fixed rate (no proxy on the path, no features)."""
    return [r for r in runs if r.manifest.setup.path == "baseline" and not r.features and r.rps]


def _gap_s(run: Run) -> float:
    """The app's idle gap between a connection's requests (or between bursts): connections / rate."""
    return run.manifest.load.connections / float(run.rps or 1.0)


def _simulate(model: Mapping[str, Any], run: Run, wakeup: Mapping[str, float] | None,
              seed: int) -> tuple[float, ...]:
    from meshsim.catalog import load_mesh
    from meshsim.fortio_warmup import DEFAULT_VERSION, checked_version
    from meshsim.scenario import build_scenario
    from meshsim.sim.engine.replication_result import Horizon
    from meshsim.sim.engine_choice import run_on_chosen_engine
    from meshsim.workload import FortioLoad, Workload

    changed = {**model, "cluster": {**(model.get("cluster") or {}), "wakeup": wakeup}} if wakeup else {
        **model, "cluster": {k: v for k, v in (model.get("cluster") or {}).items() if k != "wakeup"}}
    # built in memory: hundreds of candidates, each a topology file written and parsed, were half of this fit's time
    topology = fit_topology(changed)
    load = run.manifest.load
    rps = float(run.rps or 0.0)
    duration = min(load.duration_s or 60.0, max(MAX_REQUESTS / rps, 0.5))
    workload = Workload(FortioLoad(rps, load.connections, load.uniform, load.jitter, load.nocatchup,
                                   version=checked_version(run.result.version) or DEFAULT_VERSION,
                                   warmup=run.result.warmup))
    result = run_on_chosen_engine(build_scenario(topology, load_mesh("none"), scope="none"), workload,
                                  Horizon(duration, 0.0), seed, 0)
    if not result.latencies.size:
        return tuple(math.nan for _ in LEVELS)
    return tuple(float(v) * 1e3 for v in np.quantile(result.latencies, LEVELS))


def wake_objective(measured: Sequence[Sequence[float]], simulated: Sequence[Sequence[float]]) -> float:
    return float(sum(((s - m) / m) ** 2 for ms, ss in zip(measured, simulated)
                     for i, (m, s) in enumerate(zip(ms, ss)) if i < FITTED_LEVELS or s > m))


def _refine_delay(model: Mapping[str, Any], chosen: Sequence[Run], measured: Sequence[Sequence[float]],
                  best: tuple[tuple[float, float, float], float, list[tuple[float, ...]]], seed: int,
                  ) -> tuple[tuple[float, float, float], float, list[tuple[float, ...]]]:
    """The grid's best delay refined in halving steps to each side (tau and shape kept) down to DELAY_STEP_MS: the
    grid's 0.1 ms steps move a burst run's p50 by 15 %."""
    (delay, tau, shape), _, _ = best
    if delay <= 0:
        return best
    step = 0.05
    while step >= DELAY_STEP_MS:
        centre = best[0][0]
        for candidate in (centre - step, centre + step):
            if candidate <= 0:
                continue
            sim = [_simulate(model, r, {"delay_ms": candidate, "tau_ms": tau, "shape": shape}, seed) for r in chosen]
            score = wake_objective(measured, sim)
            if score < best[1]:
                best = ((round(candidate, 6), tau, shape), score, sim)
        step /= 2
    return best


def fit_baseline_wake(model: Mapping[str, Any], runs: Sequence[Run], seed: int = 1,
                      progress: Progress | None = None, grid: tuple[Sequence[float], Sequence[float],
                                                              Sequence[float]] = (DELAYS_MS, TAUS_MS, SHAPES),
                      ) -> BaselineWakeFit | None:
    """The cluster's (delay, tau, shape), or None when the baseline runs do not span idle gaps far enough apart
    (``grid``: the delays, taus and shapes tried)."""
    chosen = baseline_runs(runs)
    gaps = [_gap_s(r) for r in chosen]
    if len(chosen) < 2 or max(gaps) < MIN_GAP_RATIO * min(gaps):
        return None
    report_progress = progress or (lambda _m: None)
    report_progress(f"fitting the cluster's wake-up from {len(chosen)} baseline runs (idle gaps "
        f"{', '.join(f'{g * 1e3:.3g}' for g in sorted(set(gaps)))} ms) ...")
    measured = [tuple(from_result(r.result).quantile(p) * 1e3 for p in LEVELS) for r in chosen]
    without = [_simulate(model, r, None, seed) for r in chosen]
    best: tuple[tuple[float, float, float], float, list[tuple[float, ...]]] = (
        (0.0, 1.0, 1.0), wake_objective(measured, without), without)
    delays, taus, shapes = grid
    for delay in (d for d in delays if d > 0):
        for tau in taus:
            for shape in shapes:
                sim = [_simulate(model, r, {"delay_ms": delay, "tau_ms": tau, "shape": shape}, seed)
                       for r in chosen]
                score = wake_objective(measured, sim)
                if score < best[1]:
                    best = ((delay, tau, shape), score, sim)
    best = _refine_delay(model, chosen, measured, best, seed)
    (delay, tau, shape), score, sim = best
    report_progress(f"cluster wake-up: delay {delay:g} ms, tau {tau:g} ms, shape {shape:g} (objective {score:.4f}, without "
        f"{wake_objective(measured, without):.4f})")
    return BaselineWakeFit(delay, tau, shape, score, tuple(r.id for r in chosen), tuple(measured), tuple(sim),
                           tuple(without))
