"""Experiment on the shipped host, SimPy engine only (validate_simpy.py --fair-hold): the tick hold weighted by the burst's thread's recent CPU rate against the mean over
the node's recently active threads (EEVDF: a woken thread that ran more than its share is not eligible and waits;
one that ran less preempts). Weight w = rate / mean rate, the hold's share times w; other bookings weight 1."""
import math
import os
from meshsim.sim.engine.stations import NodeCores, Station
from meshsim.sim.engine.woken_first_cores import WokenFirstCores

WINDOW = float(os.environ.get("FAIR_HOLD_WINDOW_MS", "50")) * 1e-3
_orig_book = Station._book


def _book(self, now, work, server, post, timed):
    node = self.node
    if node is not None:
        node.fair_key = (id(self), self.servers)
    try:
        return _orig_book(self, now, work, server, post, timed)
    finally:
        if node is not None:
            node.fair_key = None


def _usage(self):
    if not hasattr(self, "fair_use"):
        self.fair_use, self.fair_at = {}, 0.0
    return self.fair_use


def _decay(self, t):
    use = _usage(self)
    if t > self.fair_at:
        f = math.exp(-(t - self.fair_at) / WINDOW)
        for k in use:
            use[k] *= f
        self.fair_at = t


def _weight(self):
    key = getattr(self, "fair_key", None)
    use = _usage(self)
    if key is None or key not in use:
        return 1.0
    rates = {k: v / k[1] for k, v in use.items() if v > 1e-7}
    if not rates or key not in rates:
        return 1.0
    mean = sum(rates.values()) / len(rates)
    return rates[key] / mean if mean > 0 else 1.0


def _account(self, start, work):
    _decay(self, start)
    key = getattr(self, "fair_key", None)
    if key is not None:
        use = _usage(self)
        use[key] = use.get(key, 0.0) + work


def _fit(self, start, work):
    hold = self.tick_hold
    if hold is not None:
        self.owed += hold.share * _weight(self)
        if self.owed >= 1.0:
            self.owed -= 1.0
            start = hold.next_tick(start)
        saved, self.tick_hold = self.tick_hold, None
        try:
            return _orig_fit(self, start, work)
        finally:
            self.tick_hold = saved
    return _orig_fit(self, start, work)


_orig_fit = NodeCores._fit
_orig_place = NodeCores.place


def place(self, start, work):
    _account(self, start, work)
    return _orig_place(self, start, work)


def run_woken(self, start, work):
    """The shipped run_woken with its tick hold's share weighted: the hold is made here, then the shipped code runs
    without one."""
    if work <= 0.0:
        return start
    _account(self, start, work)
    hold = self.tick_hold
    if hold is None:
        return _orig_run_woken(self, start, work)
    if all(max(a, b) > start for a, b in zip(self.last, self.woken_last)):
        self.owed += hold.share * _weight(self)
        if self.owed >= 1.0:
            self.owed -= 1.0
            start = hold.next_tick(start)
    self.tick_hold = None
    try:
        return _orig_run_woken(self, start, work)
    finally:
        self.tick_hold = hold


_orig_run_woken = WokenFirstCores.run_woken


Station._book = _book
NodeCores._fit = _fit
NodeCores.place = place
WokenFirstCores.run_woken = run_woken
