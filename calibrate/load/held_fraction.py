"""What part of a proxy pass holds its worker, fitted by simulation from bursts of synchronised requests.

A pass's latency includes time in which the worker is free to serve others: kernel transfer, loopback hops, waiting on
the upstream. One connection cannot tell the two apart, since a lone request never waits for a worker. A burst can:
fortio without ``-uniform`` fires its c connections together, and on W pinned workers the k-th request of a worker
waits for the held part of the ones before it, so the mean latency grows with c by an amount set by the held
fraction. Each burst run is replayed in the simulator (its own rate, connections, workers; the first-pass model's
passes and baseline) for candidate fractions, with the same seed for every candidate (common random numbers: the
objective moves smoothly with the fraction), and the fraction whose simulated means match the measured means best
(least squares on relative errors) is kept. It becomes the model's ``cpu_fraction`` (the part of a pass the worker
computes; the rest is delay).

A model fitted from one-connection runs cannot identify the fraction. It keeps the CPU-based estimate (CPU per pass
over fitted pass time) when its runs recorded CPU; otherwise it takes the fraction measured with bursts in the lab
(:func:`lab_prior`, a shipped measurement) as a prior, writes it with that source, and its fit says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from meshsim.calibrate.fit.observations import from_result
from meshsim.calibrate.load.wake_gaps import replay_setup
from meshsim.calibrate.measure.dataset import Run
from meshsim.calibrate.measure.tables import measurements_dir
from meshsim.errors import ModelError
from meshsim.progress import Progress

BURST_CONNECTIONS = (2, 4, 8)  # the burst probes of the lab and kube plans (at a low rate, without -uniform)
GRID = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
MAX_REQUESTS = 4000  # per replayed run and candidate
# the lab's burst fit that one-connection models take as their prior (relative to the shipped measurements)
LAB_PRIOR = "lab-validation-2026-11-23/held-fraction.yaml"


@dataclass(frozen=True)
class HeldFractionFit:
    fraction: float
    objective: tuple[tuple[float, float], ...]  # (candidate fraction, sum of squared relative errors)
    runs: tuple[str, ...]
    measured_ms: tuple[float, ...]
    simulated_ms: tuple[float, ...]  # at the chosen fraction

    @property
    def source(self) -> str:
        pairs = ", ".join(f"{r} {m:.3f}/{s:.3f} ms" for r, m, s in zip(self.runs, self.measured_ms, self.simulated_ms))
        return (f"cpu_fraction {self.fraction:.3g} fitted by simulation from bursts of synchronised requests: each "
                f"burst run replayed for fractions {GRID[0]:g}..{GRID[-1]:g}, least squares on relative errors of the "
                f"mean latency (measured/simulated: {pairs})")


def burst_runs(runs: Sequence[Run]) -> list[Run]:
    """Plain sidecar runs whose connections fire together: more than one connection, no -uniform, a fixed rate."""
    return [r for r in runs if r.manifest.setup.path in ("server-sidecar", "both-sidecars") and not r.features
            and r.manifest.load.connections > 1 and not r.manifest.load.uniform and r.rps]


def _simulated_means(model: Mapping[str, Any], runs: Sequence[Run], fraction: float, work: Path,
                     seed: int) -> list[float]:
    from meshsim.sim.engine import Horizon
    from meshsim.sim.fast_coverage import run_on_chosen_engine

    changed = {**model, "proxy": {**model["proxy"], "cpu_fraction": fraction}}
    means = []
    for run in runs:
        setup = replay_setup(changed, run, work, MAX_REQUESTS)
        assert setup is not None  # burst_runs() keeps only sidecar runs with a rate
        scenario, workload, duration = setup
        result = run_on_chosen_engine(scenario, workload, Horizon(duration, 0.0), seed, 0)
        means.append(float(result.latencies.mean()) if result.latencies.size else math.nan)
    return means


def _objective(measured: Sequence[float], simulated: Sequence[float]) -> float:
    return float(sum(((s - m) / m) ** 2 for m, s in zip(measured, simulated)))


def fit_held_fraction(model: Mapping[str, Any], runs: Sequence[Run], work: Path, seed: int = 1,
                      progress: Progress | None = None) -> HeldFractionFit | None:
    """The fraction of a pass that holds the worker, or None when there are no burst runs (or no proxy)."""
    bursts = burst_runs(runs)
    if not bursts or not model.get("proxy"):
        return None
    measured = [from_result(r.result).mean for r in bursts]
    scored = []
    for fraction in GRID:
        scored.append((fraction, _objective(measured, _simulated_means(model, bursts, fraction, work, seed))))
    best = min(scored, key=lambda p: p[1])[0]
    # one refinement halfway to each neighbour: the grid's step is coarse next to the data's resolution
    for fraction in (best - 0.05, best + 0.05):
        if 0.0 < fraction <= 1.0:
            scored.append((fraction, _objective(measured, _simulated_means(model, bursts, fraction, work, seed))))
    best = min(scored, key=lambda p: p[1])[0]
    simulated = _simulated_means(model, bursts, best, work, seed)
    if progress:
        progress(f"held fraction {best:.2f} from {len(bursts)} burst runs "
                 f"({', '.join(f'c={r.manifest.load.connections}' for r in bursts)})")
    return HeldFractionFit(best, tuple(sorted(scored)), tuple(r.id for r in bursts),
                           tuple(m * 1e3 for m in measured), tuple(s * 1e3 for s in simulated))


def apply_held_fraction(model: dict[str, Any], fit: HeldFractionFit, notes: list[str]) -> None:
    """Write the fitted fraction into the model's proxy, with its source (the CPU-based estimate it replaces too)."""
    proxy = model["proxy"]
    measured = proxy.get("cpu_fraction")
    cpu_based = (f"; it replaces the CPU-based estimate (CPU per pass / fitted pass time) {measured:.3g}"
                 if isinstance(measured, (int, float)) else "")
    proxy["cpu_fraction"] = round(fit.fraction, 4)
    why = fit.source + cpu_based
    proxy["source"] = f"{proxy.get('source', '')}; {why}".lstrip("; ")
    notes.append(f"proxy.{why}")


@dataclass(frozen=True)
class HeldFractionPrior:
    fraction: float
    source: str


def lab_prior(relative: str = LAB_PRIOR) -> HeldFractionPrior:
    """The held fraction fitted from the lab's burst runs (a shipped measurement with its runs and fit)."""
    import yaml

    path = measurements_dir() / relative
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        fraction = float(data["held_fraction"])
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as exc:
        raise ModelError(f"{path}: cannot read the lab's held fraction ({exc})") from None
    if not 0.0 < fraction <= 1.0:
        raise ModelError(f"{path}: held_fraction must be in (0, 1], got {fraction}")
    return HeldFractionPrior(fraction, f"measurements/{relative}: {data.get('source', '')}".rstrip(": "))


def apply_prior(model: dict[str, Any], notes: list[str], say: Progress) -> None:
    """No bursts among the runs: the CPU-based estimate stays if the runs gave one, else the lab's prior is used."""
    proxy = model["proxy"]
    if isinstance(proxy.get("cpu_fraction"), (int, float)):
        notes.append("no bursts (connections firing together without -uniform): proxy.cpu_fraction is the "
                     "CPU-based estimate; what part of a pass holds its worker is not identified by these runs")
        return
    prior = lab_prior()
    proxy["cpu_fraction"] = round(prior.fraction, 4)
    why = (f"cpu_fraction {prior.fraction:.3g} is a prior, not fitted: these runs have no bursts and no CPU per "
           f"request, so the fraction measured with bursts in the lab is used ({prior.source})")
    proxy["source"] = f"{proxy.get('source', '')}; {why}".lstrip("; ")
    notes.append(f"used a prior: proxy.{why}")
    say(f"used a prior for the held fraction: {prior.fraction:.3g} from the lab's bursts ({LAB_PRIOR})")
