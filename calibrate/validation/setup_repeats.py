"""Setup by setup: the prediction's error from the mean of a setup's repeats beside how far the repeats differ.

The summary puts the median |error| over the runs beside the median |difference| between repeats of one setup. A
skeptic asks the same setup by setup: where a setup (its path, features, payload, rate and connections) was measured
more than once, is the prediction further from the repeats' mean than the repeats are from each other? The spread
is the repeats' range over their mean (for two runs: the summary's |a - b| / mean); a key whose error exceeds
``FAR`` times it, and ``FLOOR``, is named (a paced run's rate is its load's: repeats that agree to 0.1 % do not make
a 0.3 % error news). A setup measured once has no line: one run is no measure of the noise. The runs are those the
summary speaks of (held out, and fit runs with ``--include-fit-runs``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from meshsim.calibrate.validation.column_accuracy import ScoredRun

KEYS = ("p50", "p99", "rps")
FAR = 2.0  # the lab's bound on accuracy: within twice the measurement's own repeatability
FLOOR = 0.02  # an error under 2 % is not named, however close the repeats (the report prints whole per cents)


@dataclass(frozen=True)
class RepeatedValue:
    """One quantity of a repeated setup: each repeat's measured value and the mean of their predictions."""

    measured: tuple[float, ...]
    predicted: float

    @property
    def mean(self) -> float:
        return float(np.mean(self.measured))

    @property
    def spread(self) -> float:
        """The repeats' range over their mean."""
        return (max(self.measured) - min(self.measured)) / self.mean

    @property
    def error(self) -> float:
        """(predicted - the repeats' mean) / that mean."""
        return (self.predicted - self.mean) / self.mean

    @property
    def beyond(self) -> bool:
        """Whether the error exceeds ``FAR`` times the spread (and ``FLOOR``)."""
        return abs(self.error) > max(FAR * self.spread, FLOOR)

    def to_dict(self) -> dict[str, Any]:
        return {"measured": [round(v, 5) for v in self.measured], "predicted": round(self.predicted, 5),
                "error": round(self.error, 4), "spread": round(self.spread, 4), "beyond_twice_the_spread": self.beyond}


@dataclass(frozen=True)
class SetupRepeat:
    """A setup measured more than once, and each of ``KEYS`` it has."""

    setup: str
    payload_bytes: int
    rps: float
    connections: int
    runs: tuple[str, ...]
    values: Mapping[str, RepeatedValue]

    @property
    def label(self) -> str:
        return f"{self.setup} {self.payload_bytes} B, {self.rps:g} rps, c{self.connections}"

    def to_dict(self) -> dict[str, Any]:
        return {"setup": self.setup, "payload_bytes": self.payload_bytes, "rps": self.rps,
                "connections": self.connections, "runs": list(self.runs),
                **{key: value.to_dict() for key, value in self.values.items()}}


def _value(members: Sequence[ScoredRun], key: str) -> RepeatedValue | None:
    pairs = [(r.measured.get(key, math.nan), r.predicted.get(key, math.nan)) for r in members]
    pairs = [(m, p) for m, p in pairs if math.isfinite(m) and math.isfinite(p) and m > 0]
    if len(pairs) < 2:
        return None
    return RepeatedValue(tuple(m for m, _ in pairs), float(np.mean([p for _, p in pairs])))


def setup_repeats(runs: Sequence[ScoredRun]) -> list[SetupRepeat]:
    """Every setup ``runs`` hold more than once, in the order each first appears."""
    groups: dict[tuple[str, int, float, int], list[ScoredRun]] = {}
    for run in runs:
        groups.setdefault((run.setup, run.payload_bytes, run.rps, run.connections), []).append(run)
    out = []
    for (setup, payload, rps, connections), members in groups.items():
        values = {key: v for key in KEYS if (v := _value(members, key)) is not None}
        if values:
            out.append(SetupRepeat(setup, payload, rps, connections, tuple(r.name for r in members), values))
    return out


def repeats_lines(repeats: Sequence[SetupRepeat]) -> list[str]:
    """The text block: a line per repeated setup, naming the keys beyond ``FAR`` times the spread."""
    if not repeats:
        return []
    lines = ["per setup measured more than once: the prediction's error from the repeats' mean (in brackets how "
             "far the repeats differ)"]
    for r in repeats:
        parts = ", ".join(f"{key} {v.error * 100:+.0f}% ({v.spread:.0%})" for key, v in r.values.items())
        beyond = [key for key, v in r.values.items() if v.beyond]
        tail = f": {', '.join(beyond)} beyond twice the repeats' difference" if beyond else ""
        lines.append(f"  {r.label}, {len(r.runs)} runs: {parts}{tail}")
    named = sum(v.beyond for r in repeats for v in r.values.values())
    total = sum(len(r.values) for r in repeats)
    lines.append(f"  {named} of {total} beyond twice the repeats' difference")
    return lines
