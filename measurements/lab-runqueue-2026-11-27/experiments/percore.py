"""SimPy-only experiment (not shipped): a booking that finds no idle core queues on ONE core chosen at its wake-up
(Linux's per-CPU run queues: the wakee's previous core or the waker's), not on whichever core frees first."""
import sys, random, math
from bisect import bisect_right
from pathlib import Path
from meshsim.calibrate.fit.model_file import read_model
from meshsim.calibrate.measure.dataset import load_run
from meshsim.calibrate.validation.replay import replay
from meshsim.sim.experiments.predict import predict_options
from meshsim.sim.engine import stations
from meshsim.calibrate.validation.compare import _measured_latency

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
model = read_model(sys.argv[2])
paths = [Path(p) for p in sys.argv[3:]]
folders = [q.parent for p in paths for q in ([p / "manifest.yaml"] if (p / "manifest.yaml").exists() else sorted(p.glob("*/manifest.yaml")))]
runs = [load_run(f) for f in folders]
for run in runs:
    if run.manifest.setup.path == "baseline":
        continue
    plan, _ = replay(model, run, runs, topology=None, sim_duration_s=5.0, replications=2, seed=1, processes=1)
    pred = predict_options(plan.options.with_changes(mesh=Path(sys.argv[2]), engine="simpy")).to_dict()
    lat = pred["latency_ms"]
    meas, _ = _measured_latency(run)
    print(f"{run.id[4:45]:42} measured p50 {meas['p50']:.2f} p99 {meas['p99']:.2f} rps {run.result.actual_rps:.0f} | predicted p50 {lat['p50']:.2f} p99 {lat['p99']:.2f} rps {pred['achieved_rps']:.0f} cpu wait/req {sum(pred['cpu_wait_ms_per_request'].values()):.2f}")
