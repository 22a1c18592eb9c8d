"""Jain's 2^k r factorial analysis (The Art of Computer Systems Performance Analysis, ch. 17-18), pure.

Input: one row per observation, a column per factor holding its level coded -1 (low) or +1 (high), and the
observed value. Output: the effects q0 (the grand mean), qA, qB, qAB, ... from the sign table, each with a
confidence interval from the t distribution with 2^k (r - 1) degrees of freedom (s_e^2 = SSE / (2^k (r - 1)),
s_q = s_e / sqrt(2^k r)), and the percentage of the total variation SST each explains (SS_j = 2^k r q_j^2; the
rest, SSE, is the experimental error; together they make 100 %). Nothing here runs a simulation: the same analysis
recomputes a published table from its means (r = 1: no error term, no intervals).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations
from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from meshsim.errors import FieldError

VALUE = "value"


@dataclass(frozen=True)
class Effect:
    """One effect: ``factors`` () is q0, the mean; (A,) the main effect of A; (A, B) their interaction."""

    factors: tuple[str, ...]
    value: float
    ci_low: float
    ci_high: float
    variation_percent: float  # SS_j / SST x 100 (nan for q0, which explains no variation)

    @property
    def name(self) -> str:
        return "q0" if not self.factors else "q" + ":".join(self.factors)

    @property
    def significant(self) -> bool:
        """The interval excludes zero (false when there is no interval)."""
        return math.isfinite(self.ci_low) and (self.ci_low > 0 or self.ci_high < 0)


@dataclass(frozen=True)
class FactorialAnalysis:
    factors: tuple[str, ...]
    replications: int
    effects: tuple[Effect, ...]  # q0 first, then main effects, then interactions by size (Jain's sign table)
    error_percent: float  # SSE / SST x 100
    sst: float
    sse: float
    error_dof: int
    confidence: float

    def effect(self, *factors: str) -> Effect:
        key = tuple(f for f in self.factors if f in factors)
        if len(key) != len(factors):
            raise KeyError(f"unknown factor in {factors!r} (factors: {', '.join(self.factors)})")
        return next(e for e in self.effects if e.factors == key)

    def to_dict(self) -> dict[str, Any]:
        def num(x: float) -> float | None:
            return float(x) if math.isfinite(x) else None

        return {
            "factors": list(self.factors), "replications": self.replications, "confidence": self.confidence,
            "effects": [{"name": e.name, "factors": list(e.factors), "value": num(e.value),
                         "ci": [num(e.ci_low), num(e.ci_high)], "variation_percent": num(e.variation_percent),
                         "significant": e.significant} for e in self.effects],
            "error_percent": num(self.error_percent), "sst": num(self.sst), "sse": num(self.sse),
            "error_dof": self.error_dof,
        }


def effect_terms(factors: Sequence[str]) -> list[tuple[str, ...]]:
    """The sign table's columns in Jain's order: I, A, B, ..., AB, AC, ..., ABC..."""
    return [combo for size in range(len(factors) + 1) for combo in combinations(tuple(factors), size)]


def factorial_effects(frame: pd.DataFrame, factors: Sequence[str], confidence: float = 0.95) -> FactorialAnalysis:
    """Effects, intervals and allocation of variation of a balanced 2^k r design (``frame`` as the module says)."""
    factors = tuple(factors)
    levels, cells = _cell_values(frame, factors)
    k, r = len(factors), cells.shape[1]
    means = cells.mean(axis=1)
    terms = effect_terms(factors)
    q = _sign_table(factors, levels).T @ means / 2 ** k
    grand = float(q[0])
    sst = float(((cells - grand) ** 2).sum())
    sse = float(((cells - means[:, None]) ** 2).sum())
    dof = 2 ** k * (r - 1)
    half = float(stats.t.ppf(0.5 + confidence / 2, dof) * math.sqrt(sse / dof / (2 ** k * r))) if dof > 0 \
        else math.nan
    effects = []
    for term, value in zip(terms, q):
        share = 2 ** k * r * value ** 2 / sst * 100 if term and sst > 0 else math.nan
        effects.append(Effect(term, float(value), float(value - half), float(value + half), share))
    return FactorialAnalysis(factors, r, tuple(effects), sse / sst * 100 if sst > 0 else math.nan, sst, sse, dof,
                             confidence)


def _cell_values(frame: pd.DataFrame, factors: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The cells' levels (2^k x k, -1/+1) and their observations (2^k x r replications); a design that is not a
    full balanced 2^k r is refused (FieldError naming what is missing)."""
    if not factors:
        raise FieldError("factors", "name at least one factor")
    missing = [c for c in (*factors, VALUE) if c not in frame.columns]
    if missing:
        raise FieldError("factors", f"no column {', '.join(missing)} in the observations")
    keys = frame[list(factors)].to_numpy()
    if not np.isin(keys, (-1, 1)).all():
        raise FieldError("factors", "levels must be coded -1 (low) and +1 (high)")
    values = frame[VALUE].to_numpy(dtype=float)
    if not np.isfinite(values).all():
        raise FieldError("value", "every observation must be a finite number")
    order = np.lexsort(keys.T[::-1])  # by the first factor, then the next...: the rows of each cell together
    cells, counts = np.unique(keys[order].astype(int), axis=0, return_counts=True)
    if len(cells) != 2 ** len(factors) or len(set(counts.tolist())) != 1:
        raise FieldError("replications", f"a 2^k r design needs all {2 ** len(factors)} cells with the same number "
                                         f"of replications, got {len(cells)} cells with {sorted(set(counts))}")
    return cells, values[order].reshape(len(cells), int(counts[0]))


def _sign_table(factors: tuple[str, ...], levels: np.ndarray) -> np.ndarray:
    """Rows: the cells (levels -1/+1); columns: each term's sign, the product of its factors' levels."""
    index = {f: i for i, f in enumerate(factors)}
    return np.column_stack([np.prod(levels[:, [index[f] for f in term]], axis=1) if term
                            else np.ones(len(levels)) for term in effect_terms(factors)])
