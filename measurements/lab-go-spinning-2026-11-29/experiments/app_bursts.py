"""Experiment: a Go forwarding app runs each request's compute step in APP_PIECES bursts (env, default 2), each
queueing for a core on its own (the handler's goroutine, then the transport's writeLoop / readLoop: measured 4-5
timeslices a request in the lab's sidecar chains against the model's 2 bursts)."""
import os

from meshsim.topology import Call, Choose, Parallel
from meshsim.sim.engine import system
from meshsim.sim.engine.nested_calls import nested

PIECES = int(os.environ.get("APP_PIECES", "2"))
LEAF = int(os.environ.get("APP_PIECES_LEAF", "1"))


def handle(self, replica, conn, pending):
    env = self.env
    me = self.callers[replica.instance]
    computes, first = replica.computes, replica.first_compute
    forwards = any(isinstance(s, (Call, Choose, Parallel)) for s in replica.service.handler)
    pieces = PIECES if forwards else LEAF
    for i, step in enumerate(replica.service.handler):
        if i in computes:
            if pending > 0:
                yield env.timeout(pending)
            now, station = env.now, replica.station
            if i == first:
                station.start_request(now)
            time = computes[i].draw()
            cpu = time * station.cpu_fraction
            for k in range(pieces):
                if k:
                    gap = t - env.now
                    if gap > 0:
                        yield env.timeout(gap)
                    now = env.now
                t = station.serve(now, cpu / pieces)
            pending = t - env.now + time * (1.0 - station.cpu_fraction)
        elif i in replica.delays:
            pending += replica.delays[i].draw()
        elif isinstance(step, Call):
            yield self.call(me, step.service, conn, pending)
            pending = 0.0
        elif isinstance(step, Choose):
            yield self.call(me, self._choose(replica, i, step), conn, pending)
            pending = 0.0
        elif isinstance(step, Parallel):
            if pending > 0:
                yield env.timeout(pending)
            pending = 0.0
            branches = [env.process(nested(self.call(me, name, conn, 0.0))) for name in step.services]
            yield env.all_of(branches)
    if pending > 0:
        yield env.timeout(pending)


system.System.handle = handle
