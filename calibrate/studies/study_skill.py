"""A study's skill: its predicted cells' median |error| per column and per mesh, against a naive forecast.

The naive forecast is persistence along a row: every predicted cell gets the published value of the fitted column
in its row (same metric, same row keys; e.g. mesh-comparison's 50 rps column copied into its 450 and 3500 rps
cells). A study may set a cell's naive value itself where its cells are not laid out as columns (the study says
how in its ``StudyColumns.naive``). The naive forecast costs nothing and uses only what the fit saw, so a model
that does not beat it has not shown that it predicts anything.

Skill is the skill score of forecast verification (Murphy 1988): ``skill = 1 - model / naive``, where ``model``
and ``naive`` are the medians of |relative error| over the same predicted cells (those that have a naive value).
Skill 1 is a perfect model, 0 is no better than the naive forecast, below 0 worse; the model beats the naive
forecast where its median is below the naive one's (skill > 0). A study counts as reproduced only where it does,
on its predicted latency cells.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

if TYPE_CHECKING:
    from meshsim.calibrate.studies.study_cells import Cell

SKILL_DEFINITION = ("skill = 1 - model / naive: the medians of |relative error| of the model and of the naive "
                    "forecast over the same predicted cells (those with a naive value); > 0 beats the naive "
                    "forecast, 0 ties it, 1 is perfect")


@dataclass(frozen=True)
class StudyColumns:
    """How a study's cells are laid out: its column variable, the column that was fitted, the keys of a row, the
    key of the mesh (for per-mesh medians), and its naive forecast in words."""

    column: str  # the condition key of the study's columns: "rps" for most, "network_path", "setup", ...
    fit_column: Any  # that key's value in the fitted column (the naive forecast's source)
    row: tuple[str, ...]  # condition keys that, with the metric, name a row across the columns
    naive: str  # the naive forecast of this study, as its summary prints it
    mesh: str | None = "mesh"  # condition key of the mesh; None when the study compares no meshes

    def column_of(self, cell: Cell) -> str:
        """The label of a cell's column ('rps=450'), or its table when the cell lies outside the columns."""
        return f"{self.column}={label(cell.condition[self.column])}" if self.column in cell.condition else cell.table

    def row_of(self, cell: Cell) -> tuple[Any, ...]:
        return (cell.metric, *(cell.condition.get(k) for k in self.row))

    def attach_naive(self, cells: Iterable[Cell]) -> tuple[Cell, ...]:
        """The cells, each predicted cell outside the fitted column given the fitted column's published value of
        its row as its naive value (a value the study set itself is kept)."""
        cells = tuple(cells)
        fitted: dict[tuple[Any, ...], float] = {}
        for c in cells:
            if c.role == "fit" and c.condition.get(self.column) == self.fit_column:
                if self.row_of(c) in fitted:
                    raise ValueError(f"two fit cells in the row {self.row_of(c)} of column {self.fit_column!r}: "
                                     f"the row keys {self.row} do not name one row")
                fitted[self.row_of(c)] = c.published
        return tuple(dataclasses.replace(c, naive=fitted[self.row_of(c)])
                     if c.role == "predicted" and c.naive is None and self.row_of(c) in fitted
                     and c.condition.get(self.column) != self.fit_column else c for c in cells)

    def to_dict(self) -> dict[str, Any]:
        return {"column": self.column, "fit_column": label(self.fit_column), "row": list(self.row),
                "mesh": self.mesh, "naive_forecast": self.naive}


def label(value: Any) -> str:
    """A column's value as the summary names it (450.0 -> '450')."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def _median(values: Sequence[float]) -> float | None:
    return round(float(statistics.median(values)), 6) if values else None  # 4 would round twice on screen


def group_skill(cells: Sequence[Cell]) -> dict[str, Any]:
    """Medians of one group of predicted cells: the model's over every cell it predicts, and the model's and the
    naive forecast's over the cells that have both (the skill compares those)."""
    scored = [c for c in cells if c.error is not None]
    paired = [c for c in scored if c.naive_error is not None]
    model = _median([abs(c.error) for c in paired])
    naive = _median([abs(c.naive_error) for c in paired])
    skill = None if model is None or not naive else round(1.0 - model / naive, 4)
    return {"cells": len(scored), "model": _median([abs(c.error) for c in scored]), "naive_cells": len(paired),
            "model_on_naive_cells": model, "naive": naive, "skill": skill,
            "beats_naive": None if model is None or naive is None else model < naive}


def _grouped(cells: Sequence[Cell], key: Any) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[Cell]] = {}
    for c in cells:
        name = key(c)
        if name is not None:
            groups.setdefault(name, []).append(c)
    # a group none of whose cells the model predicts (control planes, a misconfigured run) says nothing
    return {name: group_skill(members) for name, members in groups.items()
            if any(c.error is not None for c in members)}


def family_skill(cells: Sequence[Cell], columns: StudyColumns) -> dict[str, Any]:
    """One metric family's predicted cells: overall, per column and per mesh."""
    mesh = columns.mesh
    return {"overall": group_skill(cells), "by_column": _grouped(cells, columns.column_of),
            "by_mesh": {} if mesh is None else
            _grouped(cells, lambda c: label(c.condition[mesh]) if mesh in c.condition else None)}


def skill_summary(cells: Sequence[Cell], columns: StudyColumns | None,
                  families: Mapping[str, tuple[str, ...]]) -> dict[str, Any]:
    """The summary's skill block and its verdict: reproduced only where the predicted latency cells beat the naive
    forecast (``families`` maps a family's name to its metrics; the first family is the one judged)."""
    if columns is None:
        return {"skill": None, "reproduced": None, "reproduced_columns": [], "not_reproduced_columns": []}
    predicted = [c for c in cells if c.role == "predicted"]
    block: dict[str, Any] = {"definition": SKILL_DEFINITION, **columns.to_dict()}
    for name, metrics in families.items():
        block[name] = family_skill([c for c in predicted if c.metric in metrics], columns)
    judged = block[next(iter(families))]
    return {"skill": block, "reproduced": judged["overall"]["beats_naive"] is True,
            "reproduced_columns": [k for k, g in judged["by_column"].items() if g["beats_naive"] is True],
            "not_reproduced_columns": [k for k, g in judged["by_column"].items() if g["beats_naive"] is not True]}
