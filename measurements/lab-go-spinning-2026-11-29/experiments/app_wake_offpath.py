"""Experiment: a Go app's CPU per wake is partly spent by the threads the runtime wakes alongside (a spinning thread
on each idle P), off the request's path: WAKE_OFFPATH (env, default 0.44, measured with GOMAXPROCS=1 beside the
default) of an app's wake CPU is booked as its own burst on the node's cores, the rest on the woken thread as before."""
import os

from meshsim.sim.engine import components, stations

SHARE = float(os.environ.get("WAKE_OFFPATH", "0.44"))
_build_app = components.build_app


def build_app(service, replica, node, streams):
    app = _build_app(service, replica, node, streams)
    app.station.off_path_wake = SHARE
    return app


components.build_app = build_app
from meshsim.sim.engine import system  # noqa: E402
system.build_app = build_app


def _book(self, now, work, server, post, timed):
    if server is None:
        server = 0 if self.servers == 1 else self.pick(now)
    free = self.free_at[server]
    recording = self.recording
    if recording and self.idle_gaps is not None:
        self.idle_gaps.append(now - free if free < now else 0.0)
    wake_delay = wake_cpu = lingered = 0.0
    wake = self.wakeup
    if wake is not None and free < now:
        slept = wake.slept(now - free)
        lingered = now - free - slept
        if slept > 0.0:
            wake_cpu = wake.resume_cpu
            cold = wake.cold_share(slept, self._wake_next)
            if cold > 0.0:
                wake_delay = wake.delay * cold
                wake_cpu += wake.cpu * cold
                if recording:
                    self.cold_wakes += cold
    off = getattr(self, "off_path_wake", 0.0) * wake_cpu
    if off > 0.0 and self.node is not None:
        wake_cpu -= off
        self.node.run(now, off)  # the spinning thread: its own burst, on no request's path
        if recording:
            self.busy[server] += off
    start = (now if free <= now else free) + wake_delay
    self.last_start = start + wake_cpu
    held = work + wake_cpu
    node = self.node
    if self.quota is not None:
        finish = self._run(start, held)
        released = self._run(finish, post) if post > 0 else finish
    elif node is not None:
        finish = node.run_woken(start, held) if free < now else node.run(start, held)
        released = node.run(finish, post) if post > 0 else finish
    else:
        finish = start + held
        released = finish + post
    self.free_at[server] = released
    if recording:
        self.busy[server] += held + post + lingered
        self.jobs += 1
        if timed:
            self.waited += start - wake_delay - now
            self.woke += wake_delay + wake_cpu
            self.worked += work
            self.cpu_waited += finish - start - work - wake_cpu
    return finish


stations.Station._book = _book
