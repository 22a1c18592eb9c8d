"""How often a thread keeps a core of the lab's host until the scheduler's next tick, fitted by simulation.

A run whose processes share one host's cores meets, now and then, a wait for a core that lasts up to a scheduler
tick (meshsim/tick_hold.py; measured with perf in measurements/lab-runqueue-2026-11-27): the tail of its latency
rises where its cores are busy (many connections, high rates) and nowhere else. How often that happens is a fact of
the host and of what else runs on it, not of the kernel, so it is fitted on the host's own calibration runs: each run
with sidecars and several connections is replayed on the host's cores for a ladder of shares (common random numbers:
one seed for every candidate) and the share whose simulated p99 matches the measured p99 best (least squares on log
ratios) is kept, refined once between the best and its neighbours; a best at the top of the ladder is no fit, so the
ladder doubles upward until the objective stops falling (a busy host's share can lie above it). One-connection runs
are not used: their bursts hardly find the cores taken, so they cannot show it. The tick is the kernel's
(``run-queue.json`` records CONFIG_HZ since 2026-11-28); runs that did not record it are fitted with 4 ms,
CONFIG_HZ=250, and the model says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from meshsim.calibrate.fit.observations import from_result
from meshsim.calibrate.load.wake_gaps import replay_latencies
from meshsim.calibrate.measure.dataset import Run
from meshsim.calibrate.measure.lab import run_queue
from meshsim.progress import Progress
from meshsim.tick_hold import MAX_SHARE

GRID = (0.0, 0.00025, 0.0005, 0.001, 0.002, 0.004, 0.008, 0.016)
MAX_REQUESTS = 20000  # per replayed run and candidate: p99 rests on its 200 slowest
ASSUMED_TICK_MS = 4.0  # CONFIG_HZ=250: Debian's and Ubuntu's kernels, and the lab host's measured one (2026-11-27)
LEVEL = 0.99


@dataclass(frozen=True)
class TickHoldFit:
    share: float
    tick_ms: float
    tick_source: str
    objective: tuple[tuple[float, float], ...]  # (candidate share, sum of squared log ratios of p99)
    runs: tuple[str, ...]
    measured_ms: tuple[float, ...]
    simulated_ms: tuple[float, ...]  # p99 at the chosen share
    without_ms: tuple[float, ...]  # p99 at share 0

    @property
    def highest(self) -> float:
        """The highest candidate tried (the ladder's top, or beyond where the best lay at it)."""
        return max(share for share, _ in self.objective)

    def block(self) -> dict[str, Any]:
        pairs = "; ".join(f"{r} {m:.3f}/{s:.3f} (none {n:.3f})" for r, m, s, n
                          in zip(self.runs, self.measured_ms, self.simulated_ms, self.without_ms))
        return {"tick_ms": self.tick_ms, "share": float(f"{self.share:.4g}"), "source": (
            f"fitted by meshsim fit (calibrate/load/tick_hold_fit.py): the share of bursts that find every core of the "
            f"host taken and wait for the next tick, chosen among {GRID[0]:g}..{self.highest:g} (then refined) by least "
            f"squares on log ratios of p99 over the runs with sidecars and several connections, replayed on the "
            f"host's cores; tick {self.tick_ms:g} ms ({self.tick_source}). p99 measured/simulated ms: {pairs}. A "
            "property of this host and what else ran on it: not for other hosts")}


def tick_hold_runs(runs: Sequence[Run], model: Mapping[str, Any]) -> list[Run]:
    """Lab runs (one host's cores shared) with sidecars, several connections and a fixed rate, not saturated, whose
    features the model carries (a feature the fit left out cannot be replayed)."""
    carried = set(model.get("features") or {})
    return [r for r in runs if r.lab_host_cores is not None and r.manifest.setup.path != "baseline" and r.rps
            and r.manifest.load.connections > 1 and r.manifest.status != "saturated" and r.features <= carried]


def recorded_tick(runs: Sequence[Run]) -> tuple[float, str]:
    """The kernel tick the runs recorded (ms) and where it came from; the assumed 4 ms when none did."""
    ticks = {run_queue.recorded_tick_ms(r.folder, r.manifest.files) for r in runs}
    ticks.discard(None)
    if len(ticks) == 1:
        return float(ticks.pop()), "CONFIG_HZ of the runs' kernel, recorded in their run-queue.json"
    if ticks:
        return float(max(ticks)), f"the runs recorded ticks {sorted(ticks)} ms: the longest"
    return ASSUMED_TICK_MS, "assumed: CONFIG_HZ=250; the runs did not record their kernel's tick"


def with_tick_hold(model: Mapping[str, Any], tick_ms: float, share: float) -> dict[str, Any]:
    cluster = {**(model.get("cluster") or {}), "tick_hold": {"tick_ms": tick_ms, "share": share}}
    return {**model, "cluster": cluster}


def simulated_p99(model: Mapping[str, Any], runs: Sequence[Run], work: Path, seed: int) -> list[float]:
    """Each run's simulated p99 latency (ms); tick_hold_runs() keeps only sidecar runs with a rate."""
    out = []
    for run in runs:
        latencies = replay_latencies(dict(model), run, work, MAX_REQUESTS, seed)
        out.append(float(np.quantile(latencies, LEVEL)) * 1e3 if latencies.size else math.nan)
    return out


def _objective(measured: Sequence[float], simulated: Sequence[float]) -> float:
    return float(sum(math.log(s / m) ** 2 for m, s in zip(measured, simulated) if s > 0 and m > 0))


def fit_tick_hold(model: Mapping[str, Any], runs: Sequence[Run], work: Path, seed: int = 1,
                  progress: Progress | None = None) -> TickHoldFit | None:
    """The fitted share (None without runs that can show it)."""
    report_progress = progress or (lambda _m: None)
    chosen = tick_hold_runs(runs, model)
    if not chosen:
        return None
    tick_ms, tick_source = recorded_tick(chosen)
    measured = [from_result(r.result).quantile(LEVEL) * 1e3 for r in chosen]
    tried: dict[float, list[float]] = {}

    def score(share: float) -> float:
        if share not in tried:
            tried[share] = simulated_p99(with_tick_hold(model, tick_ms, share), chosen, work, seed)
            report_progress(f"tick hold share {share:g}: p99 {_objective(measured, tried[share]):.4g} (sum of "
                            f"squared log ratios over {len(chosen)} runs)")
        return _objective(measured, tried[share])

    best = min(GRID, key=score)
    while best == max(tried) and best * 2 <= MAX_SHARE and score(best * 2) < score(best):
        best *= 2  # the best at the top of what was tried: the optimum may lie further up
    ladder = sorted(tried)
    i = ladder.index(best)
    neighbours = [ladder[j] for j in (i - 1, i + 1) if 0 <= j < len(ladder)]
    for other in neighbours:  # one step between the best and each neighbour (geometric; from 0 the half of the next)
        middle = other / 2 if min(best, other) == 0.0 else math.sqrt(best * other)
        score(middle)
    best = min(tried, key=lambda s: (_objective(measured, tried[s]), s))
    return TickHoldFit(best, tick_ms, tick_source, tuple(sorted((s, _objective(measured, p)) for s, p in tried.items())),
                       tuple(r.id for r in chosen), tuple(measured), tuple(tried[best]), tuple(tried[0.0]))
