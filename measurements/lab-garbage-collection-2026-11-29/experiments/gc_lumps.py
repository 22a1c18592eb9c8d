"""Experiment (SimPy only), before the shipped code: Go's garbage collection in the apps. Every K requests of an app
(counted in its compute steps) the compute step that reaches the count books a collection after its own work: all
the app's cores stop for PAUSE (no CPU), then one of them burns CPU on the host's cores. Each compute step gives up
CPU / K of its work (carried over when a step is shorter), so the CPU per request stays what was fitted. Forwarding
apps (a service that calls others) and leaves (in the lab replay: the calibration's baseline, standing for fortio and
the echo app) have their own K and CPU, from the environment (defaults: the gctrace of a saturated sidecar chain at
09:36, forwarding 48 requests and 2.0 ms, the echo app 489 and 1.6 ms, pause 0.9 ms). Used by validate_simpy.py --gc.
"""
import os
from meshsim.sim.engine import components, system
from meshsim.sim.engine.stations import Station
from meshsim.handler_steps import Call, Parallel, Choose

FWD = (float(os.environ.get("GC_K_FWD", 48)), float(os.environ.get("GC_CPU_FWD", 2.0)) / 1e3, float(os.environ.get("GC_PAUSE", 0.9)) / 1e3)
LEAF = (float(os.environ.get("GC_K_LEAF", 489)), float(os.environ.get("GC_CPU_LEAF", 1.6)) / 1e3, float(os.environ.get("GC_PAUSE", 0.9)) / 1e3)
_orig_build = components.build_app
_orig_serve = Station.serve


def build_app(service, replica, node, streams):
    app = _orig_build(service, replica, node, streams)
    calls = any(isinstance(s, (Call, Parallel, Choose)) for s in service.handler)
    k, cpu, pause = FWD if calls else LEAF
    computes = sum(1 for s in service.handler if type(s).__name__ == "Compute")
    app.station.gc = (k * computes, cpu, pause)  # K counted in compute steps
    app.station.gc_count = 0
    app.station.gc_debt = 0.0
    return app


def serve(self, now, work, server=None, post=0.0):
    gc = getattr(self, "gc", None)
    if gc is None:
        return _orig_serve(self, now, work, server, post)
    k, cpu, pause = gc
    self.gc_debt += cpu / k  # the collection's CPU is part of what was fitted per request: taken out exactly
    take = min(work, self.gc_debt)
    work -= take
    self.gc_debt -= take
    finish = _orig_serve(self, now, work, server, post)
    self.gc_count += 1
    if self.gc_count >= k:
        self.gc_count -= k
        for i in range(self.servers):  # stop the world
            self.free_at[i] = max(self.free_at[i], now) + pause
        self.add_background(now, cpu)
    return finish


components.build_app = build_app
system.build_app = build_app
Station.serve = serve
