"""A woken thread runs first: how a Linux host's scheduler orders the bursts on its cores.

Linux lets a thread that wakes from a sleep displace the one running (wakeup preemption; EEVDF gives the sleeper its
earlier deadline): traced on the lab's host with ``perf`` (measurements/lab-envoy-sleeps-2026-11-29), Envoy's
workers are preempted 1-3.6 times per waking cycle, a woken worker waits 1.6-1.7 times less for a core than a
first-come-first-served queue of the same bursts makes it wait, and the work of a thread that keeps running waits
instead.

The simulated host books every burst's finish when it arrives (sim/engine/stations.py NodeCores), so a later
arrival cannot revise a finish already announced. The preemption is therefore booked in expectation: a burst of a
thread that slept (a pass that found its worker idle, an app's compute that woke it) waits only for the woken bursts
before it (M/G/c of the woken class's own load, as under preemptive priority); every other burst (a pass queued
behind its worker's previous one, work after a response, the kernel's and the load generator's CPU) queues first
come, first served as before, its work stretched by ``1 / (1 - rho)``, rho the woken bursts' recent load per core:
the completion time of preemptive-resume priority, M/G/1. The stretch is the room the woken bursts take, so the
cores' capacity holds in expectation.

``window``: the woken class's recent load is its work over the last ``window`` seconds, weighted exponentially
(a forecast of the woken work that will arrive while a burst of the other class runs). The lab's fit uses 2 ms, about
the host's 1.4 ms slice, chosen before any comparison; on the lab's two held-out collections
(measurements/lab-wakeup-priority-2026-11-29) 1 ms carried the saturated chains within 3 points of it, and 10 ms
carried the saturated pair 43-53 % slow (its fit choosing a tick hold nearly three times the 2 ms one's).
"""

from __future__ import annotations

from dataclasses import dataclass

from meshsim.distributions import MS
from meshsim.yamlio import Section

MAX_WINDOW_MS = 100.0  # beyond ten scheduler periods a "recent" load is the run's mean
RHO_CAP = 0.9  # the stretch of the other class stops at 10x: a woken class at 90 % of the cores starves the rest


@dataclass(frozen=True)
class WokenFirst:
    """``window``: seconds over which the woken bursts' recent load is weighted (exponentially)."""

    window: float
    source: str = ""

    def __post_init__(self) -> None:
        if not 0.0 < self.window <= MAX_WINDOW_MS * MS:
            raise ValueError(f"window must be in (0, {MAX_WINDOW_MS:g}] ms, got {self.window * 1e3:g} ms")

    def to_yaml(self) -> dict[str, object]:
        return {"window_ms": round(self.window / MS, 6), "source": self.source}


def parse_woken_first(section: Section | None) -> WokenFirst | None:
    if section is None:
        return None
    section.reject_unknown(("window_ms", "source", "note"))
    window_ms = section.number("window_ms", strictly_positive=True, maximum=MAX_WINDOW_MS)
    return WokenFirst(window_ms * MS, str(section.get("source", "")))
