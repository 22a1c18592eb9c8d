"""The span collector's CPU per span as work per span + CPU per wake, from traced runs at two loads.

The lab's collector (one Python process) burns about 0.09 ms per span when spans reach it one at a time (one
connection, 200-500 rps) and about 0.055 ms when they queue (a saturated chain): what a wake costs (epoll's return,
the interpreter's switch back in, the syscalls of a wake) is paid per span at a low rate and per batch at a high one.
The one-connection traced runs and the load ladder's traced rung (``calibrate.lab_plan``: tracing with 16
connections) give the collector's CPU per span at two wake frequencies; a replay of each run in the fitted model
says what share of spans find the collector idle (as the proxies' wake-ups are fitted on the model's own idle gaps,
``wake_gaps``), and the two points solve ``cpu = work + resume x wakes per span`` (``wake_split``). The work becomes
``collector.service`` and ``resume`` the collector's ``wakeup.resume_cpu``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from meshsim.calibrate.load.feature_cpu import COLLECTOR_KEY, SPANS_PER_REQUEST, feature_runs
from meshsim.calibrate.load.wake_gaps import replay_setup
from meshsim.calibrate.load.wake_split import split_two_points
from meshsim.calibrate.measure.dataset import Run
from meshsim.progress import Progress

MIN_WAKE_SPREAD = 0.1  # share of spans waking the collector the two loads must differ by
RESUME_TAU_MS = 1.0  # a resume-only wake-up has no cold wake; tau is required by the block and has no effect
MAX_REQUESTS = 3000  # per replay: enough for the share of spans that wake the collector


def wakes_per_span(model: dict[str, Any], run: Run, work: Path, seed: int = 1) -> float | None:
    """The share of the collector's spans that find it idle in a replay of ``run`` (None: not replayable)."""
    from meshsim.sim.engine.replication_result import Horizon
    from meshsim.sim.engine.simpy_replication import run_replication

    setup = replay_setup(model, run, work, MAX_REQUESTS)
    if setup is None:
        return None
    scenario, workload, duration = setup
    result = run_replication(scenario, workload, Horizon(duration, 0.0), seed, 0, observe_gaps=True)
    usage = result.usage.get(COLLECTOR_KEY)
    if usage is None or usage.idle_gaps is None or not usage.idle_gaps.size:
        return None
    return float(np.mean(usage.idle_gaps > 0))


def _per_span_ms(runs: Sequence[Run]) -> float:
    return float(np.mean([r.cpu_per_request(COLLECTOR_KEY) for r in runs])) / SPANS_PER_REQUEST * 1e3


def _with_split(model: dict[str, Any], feature: str, work_ms: float, resume_ms: float, source: str) -> None:
    block = model["features"][feature]["collector"]
    block["service"] = {"family": "deterministic", "value_ms": round(work_ms, 5), "source": source}
    block["wakeup"] = {"resume_cpu_ms": round(resume_ms, 5), "tau_ms": RESUME_TAU_MS, "source": source}


def _mean_wakes(model: dict[str, Any], runs: Sequence[Run], work: Path) -> float | None:
    wakes = [w for w in (wakes_per_span(model, r, work) for r in runs) if w is not None]
    return float(np.mean(wakes)) if wakes else None


def split_collector(model: dict[str, Any], feature: str, low: Sequence[Run], loaded: Sequence[Run],
                    work: Path) -> tuple[float, float, str] | str:
    """(work ms per span, resume ms per wake, source), or why the runs do not separate them."""
    cpu_low, cpu_loaded = _per_span_ms(low), _per_span_ms(loaded)

    def wakes_of(work_ms: float, resume_ms: float) -> tuple[float, float] | None:
        _with_split(model, feature, work_ms, resume_ms, "a candidate split")
        low_wakes, loaded_wakes = _mean_wakes(model, low, work), _mean_wakes(model, loaded, work)
        return None if low_wakes is None or loaded_wakes is None else (low_wakes, loaded_wakes)

    split = split_two_points(cpu_low, cpu_loaded, wakes_of, MIN_WAKE_SPREAD, "the collector")
    if isinstance(split, str):
        return split
    return split.work_ms, split.resume_ms, (
        f"the collector's CPU per span {cpu_low:.4g} ms with one connection ({', '.join(r.id for r in low)}) and "
        f"{cpu_loaded:.4g} ms with more ({', '.join(r.id for r in loaded)}), whose replays wake it for "
        f"{split.low_wakes:.0%} and {split.loaded_wakes:.0%} of spans: {split.work_ms:.4g} ms work per span + "
        f"{split.resume_ms:.4g} ms per wake")


def add_collector_wakeup(model: dict[str, Any], runs: Sequence[Run], notes: list[str],
                         progress: Progress | None = None) -> None:
    """Split each fitted collector's constant CPU per span into work and a wake-up where traced runs with one and
    with more connections both read the collector's CPU; otherwise the constant stays (and a note says why)."""
    for name, feature in (model.get("features") or {}).items():
        if not isinstance(feature, dict) or "collector" not in feature:
            continue
        traced = [r for r in feature_runs(name, runs) if r.cpu_per_request(COLLECTOR_KEY) is not None]
        low = [r for r in traced if r.manifest.load.connections == 1]
        loaded = [r for r in traced if r.manifest.load.connections > 1]
        if not low or not loaded:
            notes.append(f"{name}: collector CPU per span one constant (no traced run with more connections beside "
                         "the one-connection runs: the load ladder's traced rung separates a wake's CPU)")
            continue
        if progress:
            progress(f"{name}: replaying {len(low) + len(loaded)} traced runs for the collector's wake-ups ...")
        before = dict(feature["collector"])
        with tempfile.TemporaryDirectory(prefix="meshsim-collector-") as work:
            split = split_collector(model, name, low, loaded, Path(work))
        if isinstance(split, str):
            feature["collector"] = before
            notes.append(f"{name}: collector CPU per span one constant: {split}")
            continue
        work_ms, resume_ms, source = split
        _with_split(model, name, work_ms, resume_ms, source)
        notes.append(f"{name}: collector {work_ms:.4g} ms per span + {resume_ms:.4g} ms per wake")
