"""SimPy-only experiment (not shipped): a booking that finds no idle core queues on ONE core chosen at its wake-up
(Linux's per-CPU run queues: the wakee's previous core or the waker's), not on whichever core frees first."""
import sys, random
from bisect import bisect_right
from replay_runs import replayed
from meshsim.sim.engine import stations
from meshsim.calibrate.validation.compare import measured_latency

rng = random.Random(1)
def _fit(self, start, work):
    core = self.turn = (getattr(self, "turn", -1) + 1) % len(self.last)
    floor, starts, ends = self.floor[core], self.starts[core], self.ends[core]
    t = start if start > floor else floor
    index = bisect_right(ends, t)
    if index < len(starts) and starts[index] - t < work - 1e-15:
        t, index = stations._earliest_gap(starts, ends, ends[index] if ends[index] > t else t, index + 1, work)
    end = t + work
    if index == len(ends):
        self.last[core] = end
    starts.insert(index, t); ends.insert(index, end)
    if len(ends) > stations.PRUNE_AT:
        self._trim(core)
    return end
if sys.argv[1] == "percore":
    stations.NodeCores._fit = _fit
for run, pred in replayed(sys.argv[2], sys.argv[3:]):
    lat = pred["latency_ms"]
    meas, _ = measured_latency(run)
    print(f"{run.id[4:45]:42} measured p50 {meas['p50']:.2f} p99 {meas['p99']:.2f} rps {run.result.actual_rps:.0f} | predicted p50 {lat['p50']:.2f} p99 {lat['p99']:.2f} rps {pred['achieved_rps']:.0f} cpu wait/req {sum(pred['cpu_wait_ms_per_request'].values()):.2f}")
