"""Experiment (not in the engine): a burst from a thread that slept runs ahead of the others on the node's cores,
as Linux's wakeup preemption lets a woken thread displace the running one; the displaced work is delayed by the
woken work that arrives while it runs, in expectation (preemptive-resume priority: a burst of the other class
completes in work / (1 - rho_woken), M/G/1).

Finishes stay announced at arrival (the model's host): the woken class is booked first come, first served among
woken bursts only; every other burst is booked on the node's cores as before, its work stretched by
1 / (1 - rho_woken), rho_woken the woken class's recent load per core (an exponentially weighted sum of its work
over TAU). Capacity holds in expectation: the stretch is the room the woken bursts take.

Importing this module patches the SimPy engine's Station._book and NodeCores; model_cycles.py --wakeup-priority
uses it. MESHSIM_EXPERIMENT_TAU (seconds, default 2e-3) sets TAU. MESHSIM_EXPERIMENT_WOKEN=all makes the work that
belongs to no station (the kernel's network stack per hop, the load generator's CPU per call) woken too: softirq work
preempts threads, and fortio's goroutine sleeps until its response; by default only a station's pass that found its
worker idle is woken."""

import bisect
import math
import os

from meshsim.sim.engine import stations

TAU = float(os.environ.get("MESHSIM_EXPERIMENT_TAU", "2e-3"))
# MESHSIM_EXPERIMENT_PREEMPT=0: a woken burst does not displace the running one, it only goes ahead of the queued ones
# (waits for the burst running on a core when it wakes: non-preemptive priority)
PREEMPT = os.environ.get("MESHSIM_EXPERIMENT_PREEMPT", "1") != "0"
WOKEN_ALL = os.environ.get("MESHSIM_EXPERIMENT_WOKEN", "") == "all"
RHO_CAP = 0.9
_book = stations.Station._book
_run = stations.NodeCores.run


def _state(node: stations.NodeCores) -> dict:
    state = node.__dict__.get("_woken")
    if state is None:
        state = node.__dict__["_woken"] = {"last": [-math.inf] * len(node.last), "acc": 0.0, "at": 0.0}
    return state


def _rho(node: stations.NodeCores, t: float) -> float:
    state = _state(node)
    if t > state["at"]:
        state["acc"] *= math.exp(-(t - state["at"]) / TAU)
        state["at"] = t
    return min(state["acc"] / (TAU * len(node.last)), RHO_CAP)


def run_woken(node: stations.NodeCores, start: float, work: float) -> float:
    """A woken burst: first come, first served among the woken bursts only."""
    if work <= 0.0:
        return start
    if node.slowdown != 1.0:
        work *= node.slowdown
    if node.recording:
        node.busy += work
    _rho(node, start)
    state = _state(node)
    state["acc"] += work
    last = state["last"]
    if PREEMPT:
        core = min(range(len(last)), key=last.__getitem__)
        begin = start if last[core] <= start else last[core]
    else:
        begin, core = min((max(start, last[c], _running_end(node, c, start)), c) for c in range(len(last)))
    last[core] = begin + work
    return begin + work


def _running_end(node: stations.NodeCores, core: int, t: float) -> float:
    """When the burst booked on ``core`` across ``t`` ends (``t`` when none is)."""
    starts, ends = node.starts[core], node.ends[core]
    i = bisect.bisect_right(ends, t)
    if i < len(starts) and starts[i] <= t:
        return ends[i]
    return t


def run_other(node: stations.NodeCores, start: float, work: float) -> float:
    """Any other burst: first come, first served on the cores, stretched by the woken class's recent load."""
    if work <= 0.0:
        return start
    rho = _rho(node, start)
    if node.recording:  # book the work itself, not its stretch, as the node's busy time
        node.busy -= work * (1.0 / (1.0 - rho) - 1.0) * node.slowdown
    return _run(node, start, work / (1.0 - rho))


def _booking(self, now, work, server, post, timed):
    if server is None:
        server = 0 if self.servers == 1 else self.pick(now)
    node = self.node
    if node is None or self.quota is not None or not isinstance(node, stations.NodeCores):
        return _book(self, now, work, server, post, timed)
    woke = self.free_at[server] < now
    calls = [0]

    def run(start, w):
        calls[0] += 1
        return run_woken(node, start, w) if woke and calls[0] == 1 else run_other(node, start, w)

    node.run = run
    try:
        return _book(self, now, work, server, post, timed)
    finally:
        del node.run


stations.Station._book = _booking
stations.NodeCores.run = run_woken if WOKEN_ALL else run_other
