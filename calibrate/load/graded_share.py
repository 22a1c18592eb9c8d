"""How much of a proxy's cold wake-up is graded rather than a lottery, from its one-connection runs' percentiles.

The wake-up fit (``cold_wake``) works on means -- latency and CPU per request at several rates -- which fix the
cold cost, tau and how many cold wakes each rate's idle gaps bring, but not their spread: a cost that some wakes
pay in full (a lottery: a deep idle state, a descheduled vCPU) and one that every wake pays in part (a cost that
grows with every sleep) have the same mean. The percentiles tell them apart. At one connection a lower
rate leaves each worker idle longer; a lottery then moves the tail and leaves the median, a graded cost moves
both. Each plain one-connection sidecar run is replayed with the fitted model at each graded share of GRID, with
common random numbers, and the share whose p50/p75/p90/p99 match every run best (least squares on relative
errors) is kept (``proxy.wakeup.graded``). Runs at one rate only, or at rates too close to differ in idle gaps,
leave it unidentified: the lottery (0) is kept and the model says so. (The passes were decomposed with the
reference rate's cold wakes as a lottery; at that rate they are few -- 0.03 per request and proxy in the lab -- so the
passes hardly depend on the form.)
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from meshsim.calibrate.fit.observations import from_result
from meshsim.calibrate.load.baseline_wake import LEVELS, MIN_GAP_RATIO
from meshsim.calibrate.load.wake_gaps import replay_setup
from meshsim.calibrate.measure.dataset import Run
from meshsim.progress import Progress

GRID = (0.0, 0.25, 0.5, 0.75, 1.0)
MAX_REQUESTS = 6000  # per replayed run and share
SIDECAR_PATHS = ("server-sidecar", "both-sidecars")


@dataclass(frozen=True)
class GradedShareFit:
    share: float
    objective: float
    runs: tuple[str, ...]
    measured_ms: tuple[tuple[float, ...], ...]  # per run, the LEVELS' quantiles
    simulated_ms: dict[float, tuple[tuple[float, ...], ...]]  # per share tried, per run

    def source(self) -> str:
        lottery, chosen = self.simulated_ms[0.0], self.simulated_ms[self.share]
        pairs = "; ".join(f"{r} measured {_ms(m)}, graded {self.share:g}: {_ms(s)}, lottery: {_ms(w)}"
                          for r, m, s, w in zip(self.runs, self.measured_ms, chosen, lottery))
        return (f"chosen by meshsim fit (calibrate/load/graded_share.py) from the plain one-connection sidecar runs, "
                f"replayed with shares {'/'.join(f'{g:g}' for g in GRID)}, least squares on relative errors of "
                f"p50/p75/p90/p99 (ms): {pairs}")


def _ms(values: Sequence[float]) -> str:
    return "/".join(f"{v:.3f}" for v in values)


def share_runs(runs: Sequence[Run]) -> list[Run]:
    """Plain sidecar runs at one connection and a fixed rate: where a wake's cold cost shows alone."""
    return [r for r in runs if r.manifest.setup.path in SIDECAR_PATHS and not r.features and r.rps
            and r.manifest.load.connections == 1]


def measured_quantiles(run: Run) -> tuple[float, ...]:
    """The LEVELS' quantiles (ms) of the run's own histogram."""
    return tuple(from_result(run.result).quantile(p) * 1e3 for p in LEVELS)


def _objective(measured: Sequence[Sequence[float]], simulated: Sequence[Sequence[float]]) -> float:
    return float(sum(((s - m) / m) ** 2 for ms, ss in zip(measured, simulated) for m, s in zip(ms, ss)))


def _with_share(model: dict[str, Any], share: float) -> dict[str, Any]:
    proxy = model["proxy"]
    return {**model, "proxy": {**proxy, "wakeup": {**proxy["wakeup"], "graded": share}}}


def simulated_quantiles(model: dict[str, Any], run: Run, work: Path, seed: int) -> tuple[float, ...]:
    """The LEVELS' quantiles (ms) of ``run`` replayed with ``model`` on its calibration topology."""
    from meshsim.sim.engine.replication_result import Horizon
    from meshsim.sim.engine_choice import run_on_chosen_engine

    setup = replay_setup(model, run, work, MAX_REQUESTS)
    if setup is None:
        return tuple(math.nan for _ in LEVELS)
    scenario, workload, duration = setup
    result = run_on_chosen_engine(scenario, workload, Horizon(duration, 0.0), seed, 0)
    if not result.latencies.size:
        return tuple(math.nan for _ in LEVELS)
    return tuple(float(v) * 1e3 for v in np.quantile(result.latencies, LEVELS))


def _has_cold_cost(wakeup: Mapping[str, Any] | None) -> bool:
    return bool(wakeup) and bool(float(wakeup.get("cpu_ms", 0.0)) or float(wakeup.get("delay_ms", 0.0)))


def fit_graded_share(model: dict[str, Any], runs: Sequence[Run], seed: int = 1,
                     progress: Progress | None = None) -> GradedShareFit | None:
    """The graded share of ``model``'s proxy cold wake-up, or None when it is not identified (no cold cost, or
    the one-connection sidecar runs do not span idle gaps far enough apart)."""
    if not _has_cold_cost((model.get("proxy") or {}).get("wakeup")):
        return None
    chosen = share_runs(runs)
    gaps = [1.0 / float(r.rps or 1.0) for r in chosen]
    if len(chosen) < 2 or max(gaps) < MIN_GAP_RATIO * min(gaps):
        return None
    report_progress = progress or (lambda _m: None)
    report_progress(f"choosing how much of the proxies' cold wake-up is graded from {len(chosen)} one-connection "
                    f"sidecar runs ({', '.join(sorted({f'{r.rps:g}' for r in chosen}))} rps) ...")
    measured = [measured_quantiles(r) for r in chosen]
    simulated: dict[float, tuple[tuple[float, ...], ...]] = {}
    with tempfile.TemporaryDirectory(prefix="meshsim-graded-") as work:
        for share in GRID:
            simulated[share] = tuple(simulated_quantiles(_with_share(model, share), r, Path(work) / f"g{share:g}", seed)
                                     for r in chosen)
    scores = {share: _objective(measured, sim) for share, sim in simulated.items()}
    scores = {share: score if score == score else math.inf for share, score in scores.items()}  # NaN: no replay
    best = min(GRID, key=lambda s: (scores[s], s))
    report_progress(f"graded share of the cold wake-up: {best:g} (objective {scores[best]:.4f}; lottery "
                    f"{scores[0.0]:.4f}, fully graded {scores[1.0]:.4f})")
    return GradedShareFit(best, scores[best], tuple(r.id for r in chosen), tuple(measured), simulated)


def add_graded_share(model: dict[str, Any], runs: Sequence[Run], notes: list[str],
                     progress: Progress | None = None) -> None:
    """Write the graded share of the proxies' cold wake-up into ``model`` where the runs identify it (a note
    either way when the model has a cold cost)."""
    wakeup = (model.get("proxy") or {}).get("wakeup")
    if not _has_cold_cost(wakeup):
        return
    fit = fit_graded_share(model, runs, progress=progress)
    if fit is None:
        notes.append("proxy cold wake-up kept a lottery (graded 0): no plain one-connection sidecar runs at rates "
                     f"{MIN_GAP_RATIO:g}x apart tell a graded cost from a lottery")
        return
    assert wakeup is not None
    if fit.share:
        wakeup["graded"] = fit.share
    wakeup["graded_source"] = fit.source()
    notes.append(f"proxy cold wake-up: graded share {fit.share:g} (the one-connection runs' percentiles)")
