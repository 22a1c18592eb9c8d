"""One compared quantity: measured beside predicted, with the simulator's interval and the measurement's bucket."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Metric:
    measured: float
    predicted: float
    ci95: tuple[float, float] | None = None
    # the measured value's bucket (lower, upper) when it was interpolated in a histogram (Prometheus): the
    # measurement is only known to lie somewhere in it
    resolution: tuple[float, float] | None = None

    @property
    def rel_error(self) -> float:
        """(predicted - measured) / measured; NaN when there is nothing to compare."""
        if not (math.isfinite(self.measured) and math.isfinite(self.predicted)) or self.measured == 0:
            return float("nan")
        return (self.predicted - self.measured) / self.measured

    def to_dict(self) -> dict[str, Any]:
        err = self.rel_error
        out = {"measured": _round(self.measured), "predicted": _round(self.predicted),
               "ci95": [_round(v) for v in self.ci95] if self.ci95 else None,
               "rel_error": None if not math.isfinite(err) else round(err, 4)}
        if self.resolution is not None:
            out["resolution"] = [_round(v) for v in self.resolution]
        return out


def _round(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), 5)
