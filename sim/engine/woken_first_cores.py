"""A node's cores where a woken thread runs first (meshsim/woken_first.py): Linux's wakeup preemption, booked in
expectation on a host that announces every finish at arrival.

A woken burst (``run_woken``) waits only for the woken bursts booked before it: first come, first served among them
on the node's cores, as the high class of a preemptive priority queue does. With a tick hold, a woken burst that finds
every core taken (by a burst of either class) counts toward the hold like any such burst, and the one that takes the
count past a whole waits for the next tick first: the running thread kept its core (meshsim/tick_hold.py). Every
other burst (``run``) is booked on the cores first come, first served as in NodeCores, with its work stretched by
``1 / (1 - rho)``, rho the woken class's recent load per core (its work over the window, weighted exponentially,
capped at RHO_CAP): the M/G/1 preemptive-resume completion time of the low class. The woken bursts are not booked on
the intervals the others queue on; the stretch is the room they take there. The node's busy time counts each burst's
own work once.

The compiled engine lowers the same arithmetic (fast_kernels' node_run and _woken_run, in the same order).
"""

from __future__ import annotations

import math
from typing import Callable

from meshsim.tick_hold import TickHold
from meshsim.woken_first import RHO_CAP, WokenFirst
from meshsim.sim.engine.stations import NodeCores


class WokenFirstCores(NodeCores):
    """NodeCores whose woken bursts run ahead of the others (module docstring)."""

    def __init__(self, cores: float, woken_first: WokenFirst, clock: Callable[[], float] = lambda: 0.0,
                 per_core_queues: bool = False, tick_hold: TickHold | None = None) -> None:
        super().__init__(cores, clock, per_core_queues, tick_hold)
        self.window = woken_first.window
        self.woken_last = [-math.inf] * len(self.last)  # per core: when the woken bursts booked on it end
        self.woken_load = 0.0  # the woken bursts' work (core-seconds), decayed over the window to woken_at
        self.woken_at = 0.0

    def recent_load(self, t: float) -> float:
        """The woken class's load per core at ``t`` (bookings ahead of the clock read the latest value)."""
        if t > self.woken_at:
            self.woken_load *= math.exp(-(t - self.woken_at) / self.window)
            self.woken_at = t
        return min(self.woken_load / (self.window * len(self.last)), RHO_CAP)

    def run_woken(self, start: float, work: float) -> float:
        if work <= 0.0:
            return start
        work = self.booked(work)
        hold = self.tick_hold
        if hold is not None and all(max(a, b) > start for a, b in zip(self.last, self.woken_last)):
            self.owed += hold.share  # every core taken: the running thread may keep it till the tick (no preemption)
            if self.owed >= 1.0:
                self.owed -= 1.0
                start = hold.next_tick(start)
        self.recent_load(start)
        self.woken_load += work
        last = self.woken_last
        core = min(range(len(last)), key=last.__getitem__)
        end = last[core] = (start if last[core] <= start else last[core]) + work
        return end

    def run(self, start: float, work: float) -> float:
        if work <= 0.0:
            return start
        return self.place(start, self.booked(work) / (1.0 - self.recent_load(start)))
