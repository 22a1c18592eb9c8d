"""Experiment (not in the engine): a worker that finds its next pass already queued when it finishes one keeps its
core and runs that pass at once, as a running thread does when epoll hands it more work; the pass's CPU is still
booked on the host's cores (at the earliest gap, as before), so their capacity holds. Importing this module patches
the SimPy engine's Station._book."""

from meshsim.sim.engine import stations

_original = stations.Station._book


def _book(self, now, work, server, post, timed):
    if server is None:
        server = 0 if self.servers == 1 else self.pick(now)
    free = self.free_at[server]
    node = self.node
    if free <= now or node is None or self.quota is not None:
        return _original(self, now, work, server, post, timed)
    held = work  # a queued pass: no wake-up (the worker is running)
    node.run(free, held)  # its CPU, booked where the cores have room
    finish = free + held * getattr(node, "slowdown", 1.0)
    released = node.run(finish, post) if post > 0 else finish
    self.last_start = free
    self.free_at[server] = released
    if self.recording:
        self.busy[server] += held + post
        self.jobs += 1
        if self.idle_gaps is not None:
            self.idle_gaps.append(0.0)
        if timed:
            self.waited += free - now
            self.worked += work
    return finish


stations.Station._book = _book
