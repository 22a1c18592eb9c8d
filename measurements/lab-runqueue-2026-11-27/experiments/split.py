"""SimPy-only experiment (not shipped): each app visit's core work booked as K separate scheduling events (the Go
runtime's thread hand-offs: the kernel saw ~2.7 switch-ins per app visit), each queueing anew on the node's cores."""
import sys
from replay_runs import replayed
from meshsim.sim.engine import system as system_module

K_APP, K_PROXY = int(sys.argv[1]), int(sys.argv[2])

class Split:
    def __init__(self, node, k):
        self.node, self.k = node, k
    def run(self, start, work):
        for _ in range(self.k):
            start = self.node.run(start, work / self.k)
        return start

orig = system_module.System.__init__
def init(self, *a, **kw):
    orig(self, *a, **kw)
    for comp, station, proxy in self.stations():
        k = K_PROXY if proxy is not None else K_APP
        if station.node is not None and k > 1:
            station.node = Split(station.node, k)
system_module.System.__init__ = init
for run, pred in replayed(sys.argv[3], sys.argv[4:]):
    lat = pred["latency_ms"]
    print(f"{run.id[4:45]:42} predicted p50 {lat['p50']:.2f} p99 {lat['p99']:.2f}  cpu wait/req {sum(pred['cpu_wait_ms_per_request'].values()):.2f}")
