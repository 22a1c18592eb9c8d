"""The idle gaps each calibration run's proxy workers found, from a simulation of the run's own setup.

Whether a pass finds its worker idle, and for how long, depends on everything the run did: the rate, how many
connections fortio opened and that they fire together, how connections map to workers, how long the request spent
downstream. Rather than approximate that by formulas, each run is replayed in the simulator (the first-pass model:
fitted passes and baseline; on a lab run, the host's cores) and every pass's idle gap is recorded (0 when the worker
was busy). At low rates the gaps hardly depend on the pass times; at high rates they do (a wake-up's CPU keeps the
worker busy for the next pass), so the fitter replays again with the wake-up it fitted until the fit settles
(``wake_replays.fit_wakeups_on_replays``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from meshsim.calibrate.measure.dataset import Run
from meshsim.calibrate.fit.model_file import write_model
from meshsim.calibrate.fit.sim_check import (SCOPE_OF_PATH, fit_topology, host_tick_hold, host_woken_first,
                                             run_features)
from meshsim.progress import Progress

MAX_REQUESTS = 6000  # per replayed run: enough for the gap distribution, quick to simulate


@dataclass(frozen=True, eq=False)  # holds arrays: compared by identity
class RunGaps:
    requests: int
    gaps: dict[str, np.ndarray]  # proxy component -> the idle gap of every pass through it


def replay_setup(model: dict[str, Any], run: Run, work: Path, max_requests: int = MAX_REQUESTS,
                 ) -> tuple[Any, Any, float] | None:
    """(Scenario, Workload, duration) replaying ``run`` with ``model`` on its calibration topology, or None when the
    run has no sidecar or no fixed rate. The run's own workers and CPU limit replace the model's."""
    from meshsim.catalog import load_mesh
    from meshsim.scenario import build_scenario
    from meshsim.fortio_warmup import DEFAULT_VERSION, checked_version
    from meshsim.workload import FortioLoad, Workload

    scope = SCOPE_OF_PATH.get(run.manifest.setup.path)
    if scope in (None, "none") or not run.rps:
        return None
    work.mkdir(parents=True, exist_ok=True)
    topology = fit_topology(model)
    if run.lab_host_cores is not None:
        # as `meshsim validate` replays it: every lab process shares the host's cores, and a pass that waits for a
        # core keeps its worker busy (fewer, shorter idle gaps at high rates)
        topology = topology.on_one_host(run.lab_host_cores, tick_hold=host_tick_hold(model),
                                        woken_first=host_woken_first(model))
    mesh = load_mesh(str(write_model(model, work / "replayed.yaml")))
    if mesh.proxy is None:
        return None
    setup, load = run.manifest.setup, run.manifest.load
    proxy = replace(mesh.proxy, workers=setup.proxy_workers or mesh.proxy.workers, cpu_limit=setup.proxy_cpu_limit)
    scenario = build_scenario(topology, replace(mesh, proxy=proxy), run_features(model, run), scope=scope)
    rps = float(run.rps)
    duration = min(load.duration_s or 60.0, max(max_requests / rps, 0.5))
    workload = Workload(FortioLoad(rps, load.connections, load.uniform, load.jitter, load.nocatchup,
                                   version=checked_version(run.result.version) or DEFAULT_VERSION,
                                   warmup=run.result.warmup))
    return scenario, workload, duration


def replay_latencies(model: dict[str, Any], run: Run, work: Path, max_requests: int, seed: int) -> np.ndarray:
    """The latencies (s) of one replication replaying ``run`` with ``model`` (:func:`replay_setup`), on the engine
    the scenario chooses; the run must have a sidecar and a fixed rate."""
    from meshsim.sim.engine.replication_result import Horizon
    from meshsim.sim.engine_choice import run_on_chosen_engine

    setup = replay_setup(model, run, work, max_requests)
    assert setup is not None  # callers pick sidecar runs with a rate
    scenario, workload, duration = setup
    return run_on_chosen_engine(scenario, workload, Horizon(duration, 0.0), seed, 0).latencies


def simulate_gaps(model: dict[str, Any], runs: Sequence[Run], work: Path, seed: int = 1,
                  progress: Progress | None = None) -> dict[str, RunGaps]:
    """Run id -> idle gaps of its proxies' passes, for every run with sidecars that the simulator can replay."""
    from meshsim.sim.engine.replication_result import Horizon
    from meshsim.sim.engine.simpy_replication import run_replication

    out: dict[str, RunGaps] = {}
    for run in runs:
        setup = replay_setup(model, run, work)
        if setup is None:
            continue
        scenario, workload, duration = setup
        result = run_replication(scenario, workload, Horizon(duration, 0.0), seed, 0, observe_gaps=True)
        gaps = {c: u.idle_gaps for c, u in result.usage.items()
                if c.endswith("/sidecar") and u.idle_gaps is not None and u.idle_gaps.size}
        out[run.id] = RunGaps(max(result.completed, 1), gaps)
        if progress:
            busy = {c: f"{np.mean(g > 0) * 100:.0f}% of passes woke an idle worker" for c, g in gaps.items()}
            progress(f"replayed {run.id} for its workers' idle gaps: {busy}")
    return out
