"""Latency objectives (``p99=20ms,p50=5ms``) and the sizing question, as data validated once.

An :class:`Slo` is a set of upper limits on latency percentiles; a rate meets it when every percentile is at or
under its limit. :class:`SizingQuestion` asks what size (every service's replicas, the proxy's CPU limit or its
worker threads) meets the SLO at a target rate (replicas: of the services that limit it; sim/experiments/capacity_sizing.py).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Mapping

from meshsim.distributions import MS
from meshsim.errors import FieldError

SLO_KEYS = ("p50", "p90", "p99", "p999", "max", "mean")
_ALIASES = {"p99.9": "p999", "median": "p50"}
_UNITS = {"us": 1e-6, "ms": MS, "s": 1.0, "": MS}  # a bare number is milliseconds
_LIMIT = re.compile(r"^\s*([0-9.eE+-]+)\s*(us|ms|s|)\s*$")
SIZE_KINDS = ("replicas", "proxy-cpu", "proxy-workers")
# An objective above an hour cannot bind a request through a mesh (Envoy's default route timeout is 15 s, and a
# simulated request past it is a queue growing without bound): a larger limit is a typo or a unit slip.
MAX_LIMIT_S = 3600.0


@dataclass(frozen=True)
class Slo:
    """Upper limits on latency percentiles, in seconds (``limits``: (percentile, seconds) pairs, no duplicates)."""

    limits: tuple[tuple[str, float], ...]

    def __post_init__(self) -> None:
        if not self.limits:
            raise FieldError("slo", "give at least one objective, e.g. p99=20ms")
        keys = [k for k, _ in self.limits]
        for key, seconds in self.limits:
            if key not in SLO_KEYS:
                raise FieldError("slo", f"unknown percentile {key!r} (known: {', '.join(SLO_KEYS)})")
            if not (math.isfinite(seconds) and 0 < seconds <= MAX_LIMIT_S):
                raise FieldError("slo", f"{key}: the limit must be > 0 and at most {MAX_LIMIT_S:g} s, got "
                                        f"{seconds:g} s")
        if len(set(keys)) != len(keys):
            raise FieldError("slo", f"a percentile appears twice in {keys}")

    def ratios(self, latency_s: Mapping[str, float]) -> dict[str, float]:
        """Each objective's measured value / limit (> 1: missed; NaN counts as missed)."""
        return {k: (latency_s[k] / limit if math.isfinite(latency_s[k]) else math.inf) for k, limit in self.limits}

    def met(self, latency_s: Mapping[str, float]) -> bool:
        return all(r <= 1.0 for r in self.ratios(latency_s).values())

    def to_dict(self) -> dict[str, float]:
        return {k: round(v / MS, 6) for k, v in self.limits}


def parse_slo(text: str) -> Slo:
    """``p99=20ms,p50=5ms`` (units us, ms, s; a bare number is ms)."""
    limits = []
    for item in (p.strip() for p in text.split(",") if p.strip()):
        key, sep, value = item.partition("=")
        key = _ALIASES.get(key.strip().lower(), key.strip().lower())
        match = _LIMIT.match(value)
        if not sep or match is None:
            raise FieldError("slo", f"expected PERCENTILE=LIMIT like p99=20ms, got {item!r}")
        try:
            number = float(match.group(1))
        except ValueError:
            raise FieldError("slo", f"expected a number in {item!r}") from None
        limits.append((key, number * _UNITS[match.group(2)]))
    return Slo(tuple(limits))


@dataclass(frozen=True)
class SizingQuestion:
    """What ``kind`` of size meets the SLO at ``target_rps`` (the smallest found by search, up to ``maximum``)."""

    kind: str
    target_rps: float
    maximum: float = 64.0  # replicas, cores or workers past which the search gives up
    cpu_step: float = 0.05  # proxy-cpu resolution, cores

    def __post_init__(self) -> None:
        if self.kind not in SIZE_KINDS:
            raise FieldError("size", f"unknown size {self.kind!r} (known: {', '.join(SIZE_KINDS)})")
        if isinstance(self.target_rps, bool) or not isinstance(self.target_rps, (int, float)) \
                or not math.isfinite(self.target_rps) or self.target_rps <= 0:
            raise FieldError("target_rps", f"must be > 0 requests per second, got {self.target_rps!r}")
