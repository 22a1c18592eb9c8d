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
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from meshsim.calibrate.fit.observations import from_result
from meshsim.calibrate.load.wake_gaps import replay_latencies
from meshsim.calibrate.measure.dataset import Run
from meshsim.calibrate.measure.tables import measurements_dir
from meshsim.errors import ModelError
from meshsim.progress import Progress

BURST_CONNECTIONS = (2, 4, 8)  # the burst probes of the lab and kube plans (at a low rate, without -uniform)
GRID = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
MAX_REQUESTS = 4000  # per replayed run and candidate
REFINED = 0.01  # the last step of the search around the grid's best fraction
# the lab's burst fit that one-connection models take as their prior (relative to the shipped measurements)
LAB_PRIOR = "lab-validation-2026-11-23/held-fraction.yaml"


@dataclass(frozen=True)
class HeldFractionFit:
    """One side's fraction (``side`` '' for both sides at once), fitted from its burst runs within ``bound``."""

    side: str
    fraction: float
    objective: tuple[tuple[float, float], ...]  # (candidate fraction, sum of squared relative errors)
    runs: tuple[str, ...]
    measured_ms: tuple[float, ...]
    simulated_ms: tuple[float, ...]  # at the chosen fraction
    bound: float = 1.0  # the CPU-based fraction (CPU per pass / pass time): a worker is held only while it computes
    what: str = ""  # what the fraction is of, where not the side's passes (a feature's per-pass time)
    level: float | None = None  # the quantile of latency compared (None: the mean)

    @property
    def source(self) -> str:
        pairs = ", ".join(f"{r} {m:.3f}/{s:.3f} ms" for r, m, s in zip(self.runs, self.measured_ms, self.simulated_ms))
        where = self.what or (f"{self.side} passes" if self.side else "passes")
        statistic = "mean" if self.level is None else f"p{100 * self.level:g}"
        bounded = (f"; at most {self.bound:.3g}, the CPU-based fraction: a pass holds its worker only while it "
                   "computes" if self.bound < 1.0 else "")
        return (f"cpu_fraction {self.fraction:.3g} of the {where} fitted by simulation from bursts of synchronised "
                f"requests: each burst run replayed for fractions {GRID[0]:g}..{GRID[-1]:g}{bounded}, least squares "
                f"on relative errors of the {statistic} latency (measured/simulated: {pairs})")


def burst_runs(runs: Sequence[Run], path: str | None = None) -> list[Run]:
    """Plain sidecar runs whose connections fire together: more than one connection, no -uniform, a fixed rate."""
    paths = ("server-sidecar", "both-sidecars") if path is None else (path,)
    return [r for r in runs if r.manifest.setup.path in paths and not r.features
            and r.manifest.load.connections > 1 and not r.manifest.load.uniform and r.rps]


def _with_fractions(model: Mapping[str, Any], fractions: Mapping[str, float]) -> dict[str, Any]:
    """``model`` with each side's held fraction set ('' sets the proxy's, for every side without its own)."""
    proxy = dict(model["proxy"])
    sides = {k: dict(v) for k, v in (proxy.get("sides") or {}).items()}
    for side, fraction in fractions.items():
        if side:
            sides[side] = {**sides.get(side, {}), "cpu_fraction": fraction}
        else:
            proxy["cpu_fraction"] = fraction
            sides = {k: {**v, "cpu_fraction": fraction} for k, v in sides.items()}
    if sides:
        proxy["sides"] = sides
    return {**model, "proxy": proxy}


def _simulated_means(model: Mapping[str, Any], runs: Sequence[Run], work: Path, seed: int,
                     level: float | None = None) -> list[float]:
    """Each run's simulated mean latency (s), or its ``level`` quantile."""
    means = []
    for run in runs:  # burst_runs() keeps only sidecar runs with a rate
        latencies = replay_latencies(dict(model), run, work, MAX_REQUESTS, seed)
        if not latencies.size:
            means.append(math.nan)
        else:
            means.append(float(latencies.mean() if level is None else np.quantile(latencies, level)))
    return means


def _objective(measured: Sequence[float], simulated: Sequence[float]) -> float:
    return float(sum(((s - m) / m) ** 2 for m, s in zip(measured, simulated)))


def cpu_bounds(model: Mapping[str, Any]) -> dict[str, float]:
    """The CPU-based fractions a fit wrote from measured CPU (``fit_runs`` writes ``cpu_fraction`` and ``sides``
    only from CPU per request): each side's, and the proxy's under ''. Empty when the runs measured no CPU."""
    proxy = model["proxy"]
    bounds = {side: float(v["cpu_fraction"]) for side, v in (proxy.get("sides") or {}).items()
              if isinstance(v, Mapping) and isinstance(v.get("cpu_fraction"), (int, float))}
    if isinstance(proxy.get("cpu_fraction"), (int, float)):
        bounds[""] = float(proxy["cpu_fraction"])
    return bounds


def _fit_side(model: Mapping[str, Any], bursts: Sequence[Run], side: str, fixed: Mapping[str, float], bound: float,
              work: Path, seed: int) -> HeldFractionFit:
    """Grid (then halving steps to each neighbour) over one side's fraction, the other sides at ``fixed``."""
    return search_fraction(lambda f: _with_fractions(model, {**fixed, side: f}), bursts, side, bound, work, seed)


def search_fraction(model_at: Callable[[float], Mapping[str, Any]], bursts: Sequence[Run], side: str, bound: float,
                    work: Path, seed: int, what: str = "", level: float | None = None) -> HeldFractionFit:
    """The fraction in (0, ``bound``] whose model (``model_at(fraction)``) replays ``bursts`` closest to their
    measured means (or their ``level`` quantiles): a grid, then halving steps to each neighbour of the best."""
    measured = [from_result(r.result).mean if level is None else from_result(r.result).quantile(level)
                for r in bursts]

    def score(fraction: float) -> float:
        return _objective(measured, _simulated_means(model_at(fraction), bursts, work, seed, level))

    grid = sorted({min(f, bound) for f in GRID})
    scored = [(f, score(f)) for f in grid]
    best = min(scored, key=lambda p: p[1])[0]
    # the grid's step is coarse next to the data's resolution (a step of 0.05 moved istio-1.2's c=16 means by 3 %):
    # halve it around the best until it is below REFINED
    step = 0.05 if best > 0.1 else 0.025
    while step >= REFINED:
        tried = {round(f, 9) for f, _ in scored}
        scored += [(f, score(f)) for f in (best - step, best + step) if 0.0 < f <= bound and round(f, 9) not in tried]
        best = min(scored, key=lambda p: p[1])[0]
        step /= 2
    simulated = _simulated_means(model_at(best), bursts, work, seed, level)
    return HeldFractionFit(side, best, tuple(sorted(scored)), tuple(r.id for r in bursts),
                           tuple(m * 1e3 for m in measured), tuple(s_ * 1e3 for s_ in simulated), bound, what,
                           level)


def fit_held_fraction(model: Mapping[str, Any], runs: Sequence[Run], work: Path, seed: int = 1,
                      progress: Progress | None = None, bounds: Mapping[str, float] | None = None
                      ) -> list[HeldFractionFit]:
    """Each side's held fraction from its burst runs, in the order a run isolates it: the server's sidecar alone
    shows the inbound passes; both sidecars then show the outbound passes given the inbound. Without server-only
    bursts one fraction serves both sides. Each is bounded by the side's CPU-based fraction when the runs measured
    CPU (``bounds``: side -> CPU-based fraction, '' for the proxy's; see ``cpu_bounds``). Empty when there are no
    burst runs (or no proxy)."""
    if not model.get("proxy") or not burst_runs(runs):
        return []
    report_progress = progress or (lambda _m: None)
    fits: list[HeldFractionFit] = []
    fixed: dict[str, float] = {}
    inbound, both = burst_runs(runs, "server-sidecar"), burst_runs(runs, "both-sidecars")
    plan = [("inbound", inbound), ("outbound", both)] if inbound else [("", both)]
    for side, bursts in plan:
        if not bursts:
            continue
        bound = min(1.0, (bounds or {}).get(side, (bounds or {}).get("", 1.0)))
        if not side and bounds:  # one fraction for both sides: the tighter side bounds it
            bound = min(1.0, *bounds.values())
        fit = _fit_side(model, bursts, side, fixed, bound, work, seed)
        fixed[side] = fit.fraction
        fits.append(fit)
        report_progress(f"held fraction of the {side or 'proxy'} passes {fit.fraction:.3g} from {len(bursts)} burst runs "
            f"({', '.join(f'c={r.manifest.load.connections}' for r in bursts)})")
    return fits


def apply_held_fraction(model: dict[str, Any], fits: Sequence[HeldFractionFit], notes: list[str]) -> None:
    """Write the fitted fractions into the model's proxy (its sides, or the proxy's own), each with its source."""
    proxy = model["proxy"]
    for fit in fits:
        if fit.side:
            sides = proxy.setdefault("sides", {})
            sides[fit.side] = {**sides.get(fit.side, {}), "cpu_fraction": round(fit.fraction, 4),
                               "source": fit.source}
        else:
            proxy["cpu_fraction"] = round(fit.fraction, 4)
            proxy["source"] = f"{proxy.get('source', '')}; {fit.source}".lstrip("; ")
        notes.append(f"proxy.{fit.side + '.' if fit.side else ''}{fit.source}")
    if "inbound" in proxy.get("sides", {}) and "outbound" not in proxy["sides"]:
        proxy["sides"]["outbound"] = dict(proxy["sides"]["inbound"], source="no both-sidecars bursts: as inbound")


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


def apply_prior(model: dict[str, Any], notes: list[str], report_progress: Progress) -> None:
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
    report_progress(f"used a prior for the held fraction: {prior.fraction:.3g} from the lab's bursts ({LAB_PRIOR})")
