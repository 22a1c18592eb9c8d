"""A thread that keeps its core until the scheduler's next tick: the rare millisecond-long run-queue wait.

Linux (EEVDF) lets a running thread that has work queued keep its core past its slice (``se.slice``, 1.4 ms on a
2-CPU host) until the scheduler notices at its next tick (``CONFIG_HZ=250``: every 4 ms). A thread woken meanwhile
waits for that tick even though the work it needs is a few tens of microseconds. Measured on the lab's host with
``perf sched`` (measurements/lab-runqueue-2026-11-27): most waits for a core last microseconds, 2-5 % of them over a
millisecond, up to about a tick and beyond, and those few carry a third to a half of all the waiting; a request
that crosses some twenty switch-ins meets one now and then, which is the tail a first-come-first-served queue of
short bursts does not make.

``share`` is the share of the bursts that find every core of their node taken which wait for the next tick before
they queue. It is a property of the host (how often a thread on a core has a backlog when another wakes, which
follows what else runs there), not of the kernel, so it is fitted on the calibration runs of the host it is used
for and never carried from one host to another (``meshsim fit``, calibrate/load/tick_hold_fit.py). The waits are
spread deterministically: every burst that finds the cores taken adds ``share`` to a count, and the one that takes
the count past a whole waits (a stand-in for the kernel's lottery with the same rate, as NodeCores' per-core
``turn`` stands in for the kernel's choice of core); ticks fall at whole multiples of ``tick`` from the run's start.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from meshsim.distributions import MS
from meshsim.errors import ModelError
from meshsim.yamlio import Section

MAX_TICK_MS = 100.0  # CONFIG_HZ=10 is the slowest tick Linux has had
MAX_SHARE = 0.5  # beyond this the "rare wait" is every other burst: no host measured near it


@dataclass(frozen=True)
class TickHold:
    """``tick``: the scheduler's tick, in seconds; ``share``: of the bursts that find every core of their node
    taken, the share that waits for the next tick before it queues."""

    tick: float
    share: float
    source: str = ""

    def __post_init__(self) -> None:
        if not 0.0 < self.tick <= MAX_TICK_MS * MS:
            raise ValueError(f"tick must be in (0, {MAX_TICK_MS:g}] ms, got {self.tick * 1e3:g} ms")
        if not 0.0 <= self.share <= MAX_SHARE:
            raise ValueError(f"share must be in [0, {MAX_SHARE:g}], got {self.share!r}")

    def next_tick(self, t: float) -> float:
        """The first tick strictly after ``t`` (ticks at whole multiples of ``tick``)."""
        return (math.floor(t / self.tick) + 1.0) * self.tick

    def to_yaml(self) -> dict[str, object]:
        return {"tick_ms": round(self.tick / MS, 6), "share": self.share, "source": self.source}


def parse_tick_hold(section: Section | None) -> TickHold | None:
    if section is None:
        return None
    section.reject_unknown(("tick_ms", "share", "source", "note", "fit"))
    tick_ms = section.number("tick_ms", strictly_positive=True, maximum=MAX_TICK_MS)
    share = section.number("share", maximum=MAX_SHARE)
    return TickHold(tick_ms * MS, share, str(section.get("source", "")))
