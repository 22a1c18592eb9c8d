"""Experiment (not in the engine): a burst that wakes an idle worker preempts. It starts on a core at once -- the
core whose current burst has the most left, as the kernel's wakeup preemption displaces the running thread -- and
that core's later bookings move back by its length, so the displaced work, and all booked behind it, finishes that
much later for whoever books next (the capacity holds; the displaced burst's own finish was already announced and
is not moved: the model's host books finishes at arrival). Importing this module patches the SimPy engine's
Station._book and NodeCores; model_cycles.py --wake-preempts uses it."""

from meshsim.sim.engine import stations

_book = stations.Station._book


def _preempt(node: stations.NodeCores, start: float, work: float) -> float:
    """Book ``work`` from ``start`` on a core at once, moving that core's later intervals back by it."""
    if node.slowdown != 1.0:
        work *= node.slowdown
    if node.recording:
        node.busy += work
    for core, last in enumerate(node.last):  # an idle core: nothing to displace
        if last <= start:
            return _append(node, core, start, work)
    core = max(range(len(node.last)), key=lambda c: node.last[c])  # the longest backlog: the running one goes back
    starts, ends = node.starts[core], node.ends[core]
    moved_s, moved_e = [], []
    for s, e in zip(starts, ends):
        if e <= start:
            moved_s.append(s)
            moved_e.append(e)
        elif s < start:  # the running burst: split at start, its rest after the woken one
            moved_s += [s, start, start + work]
            moved_e += [start, start + work, e + work]
        else:
            moved_s.append(s + work)
            moved_e.append(e + work)
    if not any(s == start and e == start + work for s, e in zip(moved_s, moved_e)):
        merged = sorted(zip(moved_s + [start], moved_e + [start + work]))
        moved_s, moved_e = [m[0] for m in merged], [m[1] for m in merged]
    node.starts[core], node.ends[core] = moved_s, moved_e
    node.last[core] = max(moved_e)
    node.floor[core] = node.floor[core] + work if node.floor[core] > start else node.floor[core]
    if len(moved_e) > stations.PRUNE_AT:
        node._trim(core)
    return start + work


def _append(node: stations.NodeCores, core: int, start: float, work: float) -> float:
    end = node.last[core] = start + work
    node.starts[core].append(start)
    node.ends[core].append(end)
    if len(node.ends[core]) >= stations.PRUNE_AT:
        node._trim(core)
    return end


def _booking(self, now, work, server, post, timed):
    if server is None:
        server = 0 if self.servers == 1 else self.pick(now)
    node = self.node
    woke = self.free_at[server] < now and self.wakeup is not None
    if not woke or node is None or self.quota is not None or not isinstance(node, stations.NodeCores):
        return _book(self, now, work, server, post, timed)
    real = node.run
    calls = [0]

    def run(start, w):
        calls[0] += 1
        return _preempt(node, start, w) if calls[0] == 1 else real(start, w)

    node.run = run
    try:
        return _book(self, now, work, server, post, timed)
    finally:
        del node.run


stations.Station._book = _booking
