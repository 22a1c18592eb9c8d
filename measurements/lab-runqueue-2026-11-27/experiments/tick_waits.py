"""SimPy-only experiment (not shipped): every booking on a node's cores waits, with probability P, behind a thread
that keeps the core until the scheduler's next tick (uniform residual of TICK). Replays the runs, prints p50/p99."""
import sys, random
from replay_runs import replayed
from meshsim.sim.engine import stations

P, TICK = float(sys.argv[1]), float(sys.argv[2]) * 1e-3
orig = stations.NodeCores.run
rng = random.Random(1)
def run(self, start, work):
    if work > 0 and P > 0 and rng.random() < P:
        start += rng.random() * TICK
    return orig(self, start, work)
stations.NodeCores.run = run
for run, pred in replayed(sys.argv[3], sys.argv[4:]):
    lat = pred["latency_ms"]
    print(f"{run.id[4:40]:36} predicted p50 {lat['p50']:.2f} p99 {lat['p99']:.2f}")
