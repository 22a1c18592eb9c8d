"""Run a 2^k r factorial design through the engine: one simulated replication per (cell, replication), each with
its own seed, then Jain's analysis (meshsim/factorial_analysis.py) of the chosen metric.

Every observation is an independent replication (seed derived from the base seed, the cell and the replication),
so the experimental errors are independent as the analysis assumes; common random numbers across cells would
shrink the effects' real spread below what SSE says.
"""

from __future__ import annotations

import math
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from meshsim.distributions import MS
from meshsim.errors import FieldError
from meshsim.factorial_analysis import VALUE, FactorialAnalysis, factorial_effects
from meshsim.factorial_design import FEATURES, FactorialDesign, parse_factor
from meshsim.parent_death import Parent, die_with_parent
from meshsim.progress import Progress
from meshsim.request import PredictOptions, build_request
from meshsim.sim.experiments.predict import Prediction, check_request, predict_options


@dataclass(frozen=True)
class FactorialRun:
    design: FactorialDesign
    observations: pd.DataFrame  # factor columns (-1/+1), replication, seed, value
    analysis: FactorialAnalysis
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        names = list(self.design.names)
        cells = []
        for levels, group in self.observations.groupby(names, sort=True):
            signs = levels if isinstance(levels, tuple) else (levels,)
            cells.append({"levels": {f.name: f.describe(int(s)) for f, s in zip(self.design.factors, signs)},
                          "signs": [int(s) for s in signs], "values": [float(v) for v in group[VALUE]],
                          "mean": float(group[VALUE].mean())})
        return {
            "metric": self.design.metric,
            **self.analysis.to_dict(),
            "factors": [{"name": f.name, "option": f.field, "low": f.describe(-1), "high": f.describe(1)}
                        for f in self.design.factors],
            "cells": cells,
            "notes": list(self.notes),
        }


def metric_of(prediction: Prediction, metric: str) -> float:
    """The observed value of one replication: latency in ms, or CPU cores of every component together."""
    if metric == "cpu":
        return float(sum(prediction.cpu_cores.values()))
    return prediction.latency[metric.removesuffix("_ms")].value / MS


def run_factorial(design: FactorialDesign, base: PredictOptions, progress: Progress | None = None,
                  processes: int = 1) -> FactorialRun:
    """Validate the design against ``base`` (FieldError naming the factor or option), run its 2^k r simulations
    (``processes`` in parallel), analyse them."""
    design.validate(base, lambda options: check_request(build_request(_one_replication(options, options.seed))))
    jobs = []
    for index, cell in enumerate(design.cells()):
        options = design.options_for(base, cell)
        for rep in range(design.replications):
            seed = int(np.random.SeedSequence([base.seed, index, rep]).generate_state(1)[0])
            jobs.append(_one_replication(options, seed))
    values = _run_all(jobs, design.metric, processes, progress)
    rows = [{**dict(zip(design.names, cell)), "replication": rep, "seed": job.seed, VALUE: value}
            for (cell, rep), job, value in zip(((c, r) for c in design.cells() for r in range(design.replications)),
                                               jobs, values)]
    frame = pd.DataFrame(rows)
    bad = frame[~np.isfinite(frame[VALUE].to_numpy(dtype=float))]
    if len(bad):
        first = tuple(int(bad.iloc[0][n]) for n in design.names)
        raise FieldError("duration_s", f"cell {design.label(first)}: no request completed inside the measurement "
                                       f"window, so {design.metric} is unknown; give a longer run")
    return FactorialRun(design, frame, factorial_effects(frame, design.names, design.confidence),
                        _notes(design, base))


def _one_replication(options: PredictOptions, seed: int) -> PredictOptions:
    """One observation of a cell: one replication with its own seed, no saturation search."""
    return options.with_changes(seed=seed, replications=1, precision=None, saturation=False, processes=1)


def _run_all(jobs: list[PredictOptions], metric: str, processes: int, progress: Progress | None) -> list[float]:
    if processes <= 1:
        values = []
        for i, job in enumerate(jobs, start=1):
            values.append(metric_of(predict_options(job), metric))
            if progress and (i % max(1, len(jobs) // 10) == 0 or i == len(jobs)):
                progress(f"{i} of {len(jobs)} simulations")
        return values
    with ProcessPoolExecutor(max_workers=processes, mp_context=multiprocessing.get_context("fork"),
                             initializer=die_with_parent, initargs=(Parent.here(),)) as pool:
        values = list(pool.map(_one, [(job, metric) for job in jobs]))
    if progress:
        progress(f"{len(jobs)} of {len(jobs)} simulations")
    return values


def _one(args: tuple[PredictOptions, str]) -> float:
    job, metric = args
    return metric_of(predict_options(job), metric)


def _notes(design: FactorialDesign, base: PredictOptions) -> tuple[str, ...]:
    notes = []
    features = [f.name for f in design.factors if f.field == FEATURES]
    no_proxy = [c for c in design.cells() if features and design.options_for(base, c).features == base.features]
    if no_proxy:
        notes.append(f"feature factor(s) {', '.join(features)} have no proxy to act on in "
                     f"{len(no_proxy)} of {len(design.cells())} cells (scope none or a mesh without proxies): "
                     "their effects there are 0 by construction, which shows as an interaction")
    if not math.isclose(design.confidence, 0.95):
        notes.append(f"intervals at {design.confidence * 100:g} % confidence")
    return tuple(notes)


def factorial(factors: list[str] | tuple[str, ...], base: PredictOptions, replications: int = 3,
              metric: str = "mean_ms", progress: Progress | None = None, processes: int = 1) -> FactorialRun:
    """``meshsim factorial``: factors as written by users (``KEY=LOW,HIGH`` or a feature name), the base options
    every cell shares; the design is validated, simulated and analysed."""
    design = FactorialDesign(tuple(parse_factor(text) for text in factors), replications, metric)
    if processes < 1:
        raise FieldError("processes", f"must be >= 1, got {processes}")
    return run_factorial(design, base, progress, processes)
