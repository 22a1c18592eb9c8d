"""A simulation objective minimised over a few named, bounded parameters (Nelder-Mead on an unbounded scale).

Each parameter lives in [low, high] (a log scale for both when ``log``): the optimiser moves an unbounded x, and
value = low + (high - low) * sigmoid(x) (on the log scale when ``log``). Simulated objectives are steps, not smooth
(common random numbers make the steps small): Nelder-Mead needs no gradient, and its simplex is restarted once
from the best point found, which helps it out of a step it stalled on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np
from scipy import optimize, special


@dataclass(frozen=True)
class Param:
    name: str
    low: float
    high: float
    start: float
    log: bool = True

    def _scale(self, v: float) -> float:
        return math.log(v) if self.log else v

    def value(self, x: float) -> float:
        lo, hi = self._scale(self.low), self._scale(self.high)
        v = lo + (hi - lo) * float(special.expit(x))
        return math.exp(v) if self.log else v

    def x_of(self, value: float) -> float:
        lo, hi = self._scale(self.low), self._scale(self.high)
        share = (self._scale(min(max(value, self.low), self.high)) - lo) / (hi - lo)
        share = min(max(share, 1e-6), 1 - 1e-6)
        return float(special.logit(share))


@dataclass(frozen=True)
class SearchResult:
    values: dict[str, float]
    objective: float
    evaluations: int


def minimise(objective: Callable[[Mapping[str, float]], float], params: Sequence[Param], max_evaluations: int = 300,
             progress: Callable[[str], None] | None = None, label: str = "") -> SearchResult:
    """The parameter values (by name) with the least objective found within ``max_evaluations``."""
    best: dict[str, object] = {"f": math.inf, "v": {p.name: p.start for p in params}}
    count = [0]

    def f(x: np.ndarray) -> float:
        values = {p.name: p.value(float(xi)) for p, xi in zip(params, x)}
        score = float(objective(values))
        count[0] += 1
        if not math.isfinite(score):
            score = 1e9
        if score < best["f"]:  # type: ignore[operator]
            best.update(f=score, v=values)
            if progress and count[0] > 1:
                progress(f"{label} evaluation {count[0]}: objective {score:.5f} at "
                         + ", ".join(f"{k} {v:.4g}" for k, v in values.items()))
        return score

    x0 = np.array([p.x_of(p.start) for p in params])
    budget = max(max_evaluations // 2, len(params) + 2)
    for _ in range(2):
        optimize.minimize(f, x0, method="Nelder-Mead", options={"maxfev": budget, "xatol": 1e-3, "fatol": 1e-5,
                                                                "initial_simplex": _simplex(x0)})
        x0 = np.array([p.x_of(best["v"][p.name]) for p in params])  # type: ignore[index]
    return SearchResult(dict(best["v"]), float(best["f"]), count[0])  # type: ignore[arg-type]


def _simplex(x0: np.ndarray, step: float = 0.8) -> np.ndarray:
    """A starting simplex a sizeable step wide in every direction (the default 5 % of x is too small near 0)."""
    simplex = np.repeat(x0[None, :], len(x0) + 1, axis=0)
    for i in range(len(x0)):
        simplex[i + 1, i] += step
    return simplex
