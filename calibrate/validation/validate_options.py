"""What a validation replays and how its result is reported: typed options, checked once when built (as
``PredictOptions`` is for a prediction), shared by ``meshsim validate``, ``meshsim lab validate`` and the lab loop."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from meshsim.calibrate.validation.column_accuracy import COLUMNS
from meshsim.errors import FieldError, MeshsimError

LATENCY_KEYS = ("p50", "p90", "p99", "p999", "max")
SUMMARY_KEYS = (*LATENCY_KEYS, "rps")  # what a validation summarises, and what its gate may name


@dataclass(frozen=True)
class ValidateOptions:
    """The model, the run folders and how each run is replayed (``replications`` x ``sim_duration_s`` at most)."""

    model: str | Path
    run_dirs: tuple[str | Path, ...]
    topology: str | Path | None = None  # replay every run on this topology, not the one its manifest derives
    include_fit_runs: bool = False
    replications: int = 4
    sim_duration_s: float = 20.0
    seed: int = 1
    processes: int | None = None
    per_core_queues: bool = False  # a lab host's cores with Linux's per-CPU run queues (NodeCores)

    def __post_init__(self) -> None:
        object.__setattr__(self, "run_dirs", tuple(self.run_dirs))
        if not self.run_dirs:
            raise MeshsimError("RUN_DIR: give at least one run folder")
        if self.replications < 2:
            raise FieldError("replications", f"need >= 2 for a confidence interval, got {self.replications}")
        if not 0 < self.sim_duration_s < math.inf:
            raise FieldError("sim_duration_s", f"must be > 0 seconds and finite, got {self.sim_duration_s}")


@dataclass(frozen=True)
class ReportOptions:
    """How a finished validation is shown: an HTML file, JSON instead of the table, a gate on the worst error."""

    html: str | Path | None = None
    as_json: bool = False
    fail_above: str | None = None  # ``p50=10%,p99=20%``: parsed when built, so a bad gate fails before any work
    by: str | None = None  # connections, rps or payload: the median |error| per column beside the naive forecast

    def __post_init__(self) -> None:
        self.thresholds()
        if self.by is not None and self.by not in COLUMNS:
            raise FieldError("by", f"must be one of {', '.join(COLUMNS)}, got {self.by!r}")

    def thresholds(self) -> dict[str, float] | None:
        return parse_thresholds(self.fail_above) if self.fail_above is not None else None


def parse_thresholds(text: str) -> dict[str, float]:
    """``p50=10%,p99=20%,rps=10%`` (or fractions, ``p50=0.1``) -> {key: fraction}."""
    out: dict[str, float] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        key = key.strip().lower().replace("p99.9", "p999").replace("saturation", "rps")
        if not sep or key not in SUMMARY_KEYS:
            raise FieldError("fail_above", f"expected KEY=N% with KEY in {', '.join(SUMMARY_KEYS)}, got {item!r}")
        value = value.strip()
        try:
            number = float(value[:-1]) / 100 if value.endswith("%") else float(value)
        except ValueError:
            raise FieldError("fail_above", f"{key}: not a percentage: {value!r}") from None
        if not number > 0:
            raise FieldError("fail_above", f"{key}: must be > 0, got {value!r}")
        out[key] = number
    if not out:
        raise FieldError("fail_above", "no thresholds given (e.g. p50=10%,p99=20%)")
    return out
