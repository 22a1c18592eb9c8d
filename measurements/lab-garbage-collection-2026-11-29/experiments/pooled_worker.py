"""Experiment (SimPy only): a proxy that does not face the load generator takes each request on a worker drawn per
request (its callers' pooled connections, reused most recently freed first, each hashed to a worker when it opened),
not on the worker bound to the load generator's connection id."""
from meshsim.sim.engine.components import ProxyInstance

_orig = ProxyInstance.worker_for


def worker_for(self, conn, now=0.0):
    if self.faces_load_generator or not self.station.pinned:
        return _orig(self, conn, now)
    return int(self.rng.integers(self.station.servers))


ProxyInstance.worker_for = worker_for
