"""A study's cells: one published number, what meshsim predicts for it, and how the two compare.

A cell is the unit of a study (Ciw's vocabulary would call it an observation of a performance measure): the table it
comes from, the condition it was measured under, the metric, the published value (and the spread of the published
repetitions when the document prints them), the prediction with its 95 % confidence interval, its role, and the
naive forecast's value for it (study_skill). Roles: ``fit`` cells were used to calibrate; ``derived`` cells were
not, but their predicted value follows by construction from a fitted value or from the number it is compared with
(a memory that is the fitted base memory, a header size the model read from the same document); ``predicted`` cells
are neither, and only they count in the medians and the skill. A cell the model cannot predict carries
``predicted=None`` and a note that says why; numbers are never invented.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Mapping

from meshsim.calibrate.studies.study_skill import StudyColumns, skill_summary

ROLES = ("fit", "derived", "predicted")
# Metrics a cell may carry; latency metrics are the ones the study's accuracy target is judged on.
LATENCY_METRICS = ("p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms", "mean_ms", "total_s", "per_request_ms",
                   "added_ms")  # added_ms: latency a component adds over an alternative (grpc-lb's proxy)
OTHER_METRICS = ("cpu_percent", "cpu_cores", "cpu_seconds", "memory_mb", "achieved_rps", "header_bytes",
                 "influence_percent",
                 "balance_ratio")  # grpc-lb: busiest / idlest replica's request rate (1 = perfect balance)
METRICS = LATENCY_METRICS + OTHER_METRICS


@dataclass(frozen=True)
class Cell:
    table: str  # e.g. "Table 13" or "Tabela 3"; the index.yaml names the CSV it was transcribed into
    condition: Mapping[str, Any]  # mesh, rps, payload_bytes, ... exactly what distinguishes this cell
    metric: str
    published: float
    predicted: float | None
    ci95: tuple[float, float] | None = None
    role: str = "predicted"
    note: str = ""
    published_spread: tuple[float, float] | None = None  # min and max of the published repetitions
    naive: float | None = None  # the naive forecast's value (study_skill: the fitted column's value of its row)

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ValueError(f"cell metric {self.metric!r} is not one of {', '.join(METRICS)}")
        if self.role not in ROLES:
            raise ValueError(f"cell role {self.role!r} is not one of {', '.join(ROLES)}")
        if self.role == "predicted" and self.predicted is not None:
            # A prediction equal to a published number is that number copied: it proves nothing about the model.
            for what, value in (("its published value", self.published), ("its naive forecast", self.naive)):
                if value is not None and self.predicted == value:
                    raise ValueError(f"cell {self.table} {dict(self.condition)} {self.metric}: the predicted value "
                                     f"{self.predicted!r} is {what}; a copied value is role 'fit' or 'derived', "
                                     "not 'predicted'")

    @property
    def error(self) -> float | None:
        """(predicted - published) / published, or None when either is missing or the published value is 0."""
        return relative_error(self.predicted, self.published)

    @property
    def naive_error(self) -> float | None:
        """The naive forecast's (naive - published) / published, or None when it has none."""
        return relative_error(self.naive, self.published)

    @property
    def within_spread(self) -> bool | None:
        """Whether the prediction lies inside the published repetitions' range (None if the document has none)."""
        if self.published_spread is None or self.predicted is None:
            return None
        lo, hi = self.published_spread
        return lo <= self.predicted <= hi

    def to_dict(self) -> dict[str, Any]:
        def num(x: float | None) -> float | None:
            return None if x is None or not math.isfinite(x) else round(float(x), 6)

        return {"table": self.table, "condition": dict(self.condition), "metric": self.metric,
                "published": num(self.published), "predicted": num(self.predicted),
                "ci95": None if self.ci95 is None else [num(self.ci95[0]), num(self.ci95[1])],
                "error": num(self.error), "role": self.role, "note": self.note,
                "published_spread": None if self.published_spread is None else list(self.published_spread),
                "within_spread": self.within_spread, "naive": num(self.naive), "naive_error": num(self.naive_error)}


def relative_error(value: float | None, published: float) -> float | None:
    if value is None or not math.isfinite(value) or not published:
        return None
    return (value - published) / abs(published)


def median_abs_error(cells: list[Cell], metrics: tuple[str, ...] = LATENCY_METRICS) -> float | None:
    errors = [abs(c.error) for c in cells if c.role == "predicted" and c.metric in metrics and c.error is not None]
    return statistics.median(errors) if errors else None


@dataclass(frozen=True)
class StudyResult:
    study: str
    title: str
    source: str
    cells: tuple[Cell, ...]
    notes: tuple[str, ...] = ()  # the study's findings: misses explained, claims checked, the document's own errors
    settings: Mapping[str, Any] = field(default_factory=dict)  # how it was made: short or full, seed, replications
    extras: Mapping[str, Any] = field(default_factory=dict)  # study-specific results (time series, factor tables)
    columns: StudyColumns | None = None  # the study's columns and naive forecast (None: no skill is reported)

    def __post_init__(self) -> None:
        if self.columns is not None:  # every predicted cell in a row with a fitted column gets its naive value
            object.__setattr__(self, "cells", self.columns.attach_naive(self.cells))

    def summary(self) -> dict[str, Any]:
        predicted = [c for c in self.cells if c.role == "predicted"]
        spread = [c.within_spread for c in predicted if c.within_spread is not None]
        lat = median_abs_error(list(self.cells))
        other = median_abs_error(list(self.cells), OTHER_METRICS)
        return {"cells": len(self.cells), "fit": sum(1 for c in self.cells if c.role == "fit"),
                "derived": sum(1 for c in self.cells if c.role == "derived"), "predicted": len(predicted),
                "not_predicted": sum(1 for c in predicted if c.predicted is None),
                "median_abs_error_latency": None if lat is None else round(lat, 4),
                "median_abs_error_other": None if other is None else round(other, 4),
                "within_published_spread": f"{sum(spread)} of {len(spread)}" if spread else None,
                **skill_summary(self.cells, self.columns, {"latency": LATENCY_METRICS, "other": OTHER_METRICS})}

    def to_dict(self) -> dict[str, Any]:
        return {"study": self.study, "title": self.title, "source": self.source,
                "cells": [c.to_dict() for c in self.cells], "summary": self.summary(), "notes": list(self.notes),
                "settings": dict(self.settings), "extras": dict(self.extras)}

    def frame(self) -> Any:
        """The cells as a pandas DataFrame, one row per cell, the condition's keys as columns."""
        import pandas as pd

        rows = []
        for c in self.cells:
            d = c.to_dict()
            cond = d.pop("condition")
            rows.append({**{f"condition.{k}": v for k, v in cond.items()}, **d})
        return pd.DataFrame(rows)
