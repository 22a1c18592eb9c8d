"""Experiment: part of a Go forwarding app's CPU per request is off its requests' path (threads woken to look for
work, wakep's spinning Ms): each compute step books APP_ONPATH (env, default 0.5) of its CPU on the request's path
and the rest as a separate burst on the node's cores at the same moment (the app's background, like a collection)."""
import os

from meshsim.topology import Call, Choose, Parallel
from meshsim.sim.engine import system
from meshsim.sim.engine.nested_calls import nested

ONPATH = float(os.environ.get("APP_ONPATH", "0.5"))
LEAF = os.environ.get("APP_ONPATH_LEAF", "0") == "1"


def handle(self, replica, conn, pending):
    env = self.env
    me = self.callers[replica.instance]
    computes, first = replica.computes, replica.first_compute
    forwards = any(isinstance(s, (Call, Choose, Parallel)) for s in replica.service.handler)
    share = ONPATH if (forwards or LEAF) else 1.0
    for i, step in enumerate(replica.service.handler):
        if i in computes:
            if pending > 0:
                yield env.timeout(pending)
            now, station = env.now, replica.station
            if i == first:
                station.start_request(now)
            time = computes[i].draw()
            cpu = time * station.cpu_fraction
            if share < 1.0:
                node = station.node
                if node is not None:
                    node.run(now, cpu * (1.0 - share))
                    if station.recording:
                        station.busy[0] += cpu * (1.0 - share)
            pending = station.serve(now, cpu * share) - now + time * (1.0 - station.cpu_fraction)
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
