"""Accuracy per column, beside a naive forecast: a validation as a skeptic reads it.

A validation's summary gives one median |error| over every held-out run. Grouped by a load variable (the column:
the connection count, the rate or the payload) it says where the model holds and where it does not; beside it stands the naive
forecast (persistence): each run is forecast by the measured values of the nearest fit run of the same setup (same
topology, path, features, workers and CPU limit; nearest in connections, then in rate, then in payload; never the
run itself): its latencies copied, its achieved rate and CPU as the same fraction of the requested rate and the same CPU
per request (a copied 200 rps would be a straw man for a 2 000 rps run). It costs nothing and uses only what the fit saw, so a model that does not beat it has not shown that it
predicts anything. A run without a fit run of its setup has no naive forecast; the model's median is given over
every run and over the runs that have one, so that model and naive compare over the same runs, as the studies'
skill does (``calibrate/studies/study_skill.py``).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

COLUMNS = ("connections", "rps", "payload")
RATE_SCALED = ("rps", "cpu")  # keys the naive forecast scales by the requested rate instead of copying
NAIVE_FORECAST = ("naive: the nearest fit run of the same setup (in connections, then rate, then payload) copied, "
                  "its rate and CPU per requested request")


@dataclass(frozen=True)
class ScoredRun:
    """One run (or summary row) as the accuracy table sees it: what a naive copy must share (``setup``), its load,
    its role, and its measured and predicted values by key (p50, p99, rps, cpu, ...)."""

    name: str
    setup: str
    rps: float
    connections: int
    payload_bytes: int
    role: str  # fit | held-out | topology
    measured: Mapping[str, float]
    predicted: Mapping[str, float]

    def column_value(self, column: str) -> float:
        return {"connections": float(self.connections), "rps": self.rps, "payload": float(self.payload_bytes)}[column]

    def distance(self, other: ScoredRun) -> tuple[float, float, float]:
        """How far ``other``'s load is from this run's: in connections, then rate, then payload (log ratios)."""
        return (abs(math.log(other.connections / self.connections)), abs(math.log(other.rps / self.rps)),
                abs(math.log(max(other.payload_bytes, 1) / max(self.payload_bytes, 1))))

    def error(self, key: str, forecast: Mapping[str, float] | None = None) -> float:
        """|forecast - measured| / measured for ``key`` (the model's prediction unless another forecast is given);
        NaN when either is missing."""
        measured = self.measured.get(key, math.nan)
        value = (self.predicted if forecast is None else forecast).get(key, math.nan)
        if not (math.isfinite(measured) and math.isfinite(value)) or measured == 0:
            return math.nan
        return abs(value - measured) / abs(measured)


@dataclass(frozen=True)
class ColumnAccuracy:
    """Medians of |error| in one column (or over all of them: ``label == "overall"``)."""

    label: str
    runs: int
    model: Mapping[str, float]  # over every run of the column
    naive_runs: int
    model_on_naive_runs: Mapping[str, float]  # over the runs with a naive forecast
    naive: Mapping[str, float]

    def to_dict(self) -> dict[str, Any]:
        def rounded(values: Mapping[str, float]) -> dict[str, float]:
            return {k: round(v, 4) for k, v in values.items()}

        return {"column": self.label, "runs": self.runs, "model_median_abs_error": rounded(self.model),
                "naive_runs": self.naive_runs, "model_median_abs_error_on_naive_runs": rounded(self.model_on_naive_runs),
                "naive_median_abs_error": rounded(self.naive)}


def naive_source(run: ScoredRun, pool: Iterable[ScoredRun]) -> ScoredRun | None:
    """The fit run of ``run``'s setup nearest to it in connections, then rate, then payload (None if there is none)."""
    candidates = [p for p in pool if p.role == "fit" and p.setup == run.setup and p.name != run.name]
    return min(candidates, key=run.distance) if candidates else None


def naive_values(run: ScoredRun, source: ScoredRun) -> dict[str, float]:
    """The naive forecast of ``run`` from ``source``: latencies copied, achieved rate and CPU scaled by the rate."""
    scale = run.rps / source.rps
    return {k: v * scale if k in RATE_SCALED else v for k, v in source.measured.items()}


def _medians(runs: Sequence[ScoredRun], keys: Sequence[str],
             forecast: Callable[[ScoredRun], Mapping[str, float] | None]) -> dict[str, float]:
    out = {}
    for key in keys:
        errors = [e for e in (r.error(key, forecast(r)) for r in runs) if math.isfinite(e)]
        if errors:
            out[key] = statistics.median(errors)
    return out


def _accuracy(label: str, runs: Sequence[ScoredRun], keys: Sequence[str],
              naive: Mapping[str, ScoredRun]) -> ColumnAccuracy:
    paired = [r for r in runs if r.name in naive]
    return ColumnAccuracy(label, len(runs), _medians(runs, keys, lambda _r: None), len(paired),
                          _medians(paired, keys, lambda _r: None),
                          _medians(paired, keys, lambda r: naive_values(r, naive[r.name])))


def column_accuracy(runs: Sequence[ScoredRun], counted: Sequence[ScoredRun], column: str,
                    keys: Sequence[str]) -> list[ColumnAccuracy]:
    """One row per value of ``column`` among the ``counted`` runs (ascending), then the overall row; the naive
    forecast of a counted run comes from the fit runs among ``runs``."""
    if column not in COLUMNS:
        raise ValueError(f"column must be one of {', '.join(COLUMNS)}, got {column!r}")
    naive = {r.name: source for r in counted if (source := naive_source(r, runs)) is not None}
    values = sorted({r.column_value(column) for r in counted})
    rows = [_accuracy(f"{column}={v:g}", [r for r in counted if r.column_value(column) == v], keys, naive)
            for v in values]
    return rows + [_accuracy("overall", list(counted), keys, naive)] if counted else []


def _cell(row: ColumnAccuracy, key: str) -> str:
    if key not in row.model:
        return "-"
    text = f"{row.model[key]:.1%}"
    if key in row.naive:
        text += f" ({row.model_on_naive_runs[key]:.1%} / {row.naive[key]:.1%})"
    return text


def accuracy_lines(rows: Sequence[ColumnAccuracy], keys: Sequence[str], labels: Mapping[str, str]) -> str:
    """The per-column block of a validation's text: median |error| of the model over every run, and of the model
    and the naive forecast over the runs that have one."""
    if not rows:
        return "by column: no run to summarise"
    shown = [k for k in keys if any(k in r.model for r in rows)]
    head = ["column", "runs", "naive runs", *(labels.get(k, k) for k in shown)]
    body = [[r.label, str(r.runs), str(r.naive_runs), *(_cell(r, k) for k in shown)] for r in rows]
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]
    lines = [f"median |error| by column: model over every run (model / {NAIVE_FORECAST}, over the naive runs)"]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in [head, *body]]
    return "\n".join(lines)
