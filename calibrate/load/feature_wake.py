"""A feature's CPU per wake of its worker, told from its CPU per pass by runs that wake the worker at different rates.

A feature's extra CPU per request and sidecar (its runs against their plain twins, ``feature_cpu``) was read as
work per pass: the held part of its latency increment on each of the sidecar's two passes, and what is left as work
after the response. In the lab that holds for tracing (about 0.16 ms more per request at one connection and at 16)
but not for mTLS: 0.07-0.10 ms more per request at one connection, where every pass wakes its worker, and under
5 us more at 16 connections and 1 500 rps, where a worker sleeps 0.35-0.45 times per request
(measurements/lab-heldout-2026-11-27). Booked per pass, a chain with mTLS below saturation was given 20-60 % too
much sidecar CPU. (At host saturation mTLS costs nothing measurable even at 0.9 sleeps per request: per wake is
the better booking below saturation, not the whole mechanism.)

The runs that counted their workers' sleeps (``manifest.sleeps``) separate the two. Per matched run, with ``w`` its
sidecar's sleeps per request, ``h`` the side's held fraction and ``m`` the feature's latency increment per pass:

    extra CPU per request = 2 h (m - c) + w c + post

``c`` is the CPU per wake (``features.F.resume_cpu_ms``; the engines add it to the proxy's ``resume_cpu``) and
``post`` the work after the response. Each pass of a one-connection run wakes its worker, so the wake's CPU was
part of the latency increment ``m``, which keeps ``m - c``: the one-connection latencies stay what was fitted.
Bounded least squares over every matched run and sidecar (0 <= c <= m, post >= 0); the wake's CPU is identified
only when the runs' sleeps per request differ by at least ``MIN_SLEEP_SPREAD`` (the calibration's loaded rung of
the feature beside its one-connection runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
from scipy.optimize import lsq_linear

PASSES = 2  # a sidecar's passes per request on the single topology: the request in, the response out
MIN_SLEEP_SPREAD = 0.5  # sleeps per request: one connection wakes ~2 times, a loaded rung 0.3-0.5


@dataclass(frozen=True)
class WakePoint:
    """One matched feature run and sidecar: its extra CPU per request over its plain twins, its sleeps per request,
    the side's held fraction and the feature's latency increment per pass on that side (seconds)."""

    extra_s: float
    sleeps: float
    held: float
    increment_s: float


@dataclass(frozen=True)
class WakeSplit:
    """The feature's CPU per wake and its work after the response (seconds per request and sidecar)."""

    resume_cpu_s: float
    post_s: float
    identified: bool

    def per_pass_share(self, increment_s: float) -> float:
        """What part of the latency increment per pass stays a pass's own (the rest was the wake's CPU)."""
        if increment_s <= 0.0:
            return 1.0
        return max(0.0, increment_s - self.resume_cpu_s) / increment_s


def split(points: Sequence[WakePoint]) -> WakeSplit:
    """The bounded least-squares split (module docstring); without a spread of sleeps, all of it per pass."""
    if not points:
        return WakeSplit(0.0, 0.0, False)
    booked = np.array([PASSES * p.held * p.increment_s for p in points])
    y = np.array([p.extra_s for p in points]) - booked
    sleeps = np.array([p.sleeps for p in points])
    if float(np.ptp(sleeps)) < MIN_SLEEP_SPREAD:
        return WakeSplit(0.0, float(np.mean(y)), False)
    x = np.column_stack([np.ones(len(points)), sleeps - PASSES * np.array([p.held for p in points])])
    ceiling = min(p.increment_s for p in points)
    if ceiling <= 0.0:  # no latency increment to move into the wake: the wake's CPU would be new work
        return WakeSplit(0.0, float(np.mean(y)), False)
    solution = lsq_linear(x, y, bounds=([0.0, 0.0], [np.inf, ceiling]), method="bvls")
    post, per_wake = (float(v) for v in solution.x)
    return WakeSplit(per_wake, post, True)


def thinned(spec: Mapping[str, Any], share: float) -> dict[str, Any]:
    """A distribution spec whose draws are the spec's with probability ``share`` and 0 otherwise: its mean times
    ``share``, the shape of what remains kept."""
    if share >= 1.0:
        return dict(spec)
    zero = {"family": "deterministic", "value_ms": 0.0}
    if share <= 0.0:
        return zero
    body = {k: v for k, v in spec.items() if k not in ("source", "fit")}
    return {"family": "mixture", "components": [{**body, "weight": share}, {**zero, "weight": 1.0 - share}]}
