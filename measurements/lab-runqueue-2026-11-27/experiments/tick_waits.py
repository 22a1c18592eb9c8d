"""SimPy-only experiment (not shipped): every booking on a node's cores waits, with probability P, behind a thread
that keeps the core until the scheduler's next tick (uniform residual of TICK). Replays the runs, prints p50/p99."""
import sys, random
from pathlib import Path
import numpy as np
from meshsim.calibrate.fit.model_file import read_model
from meshsim.calibrate.measure.dataset import load_run
from meshsim.calibrate.validation.replay import replay
from meshsim.sim.experiments.predict import predict_options
from meshsim.sim.engine import stations

P, TICK = float(sys.argv[1]), float(sys.argv[2]) * 1e-3
orig = stations.NodeCores.run
rng = random.Random(1)
def run(self, start, work):
    if work > 0 and P > 0 and rng.random() < P:
        start += rng.random() * TICK
    return orig(self, start, work)
stations.NodeCores.run = run
model = read_model(sys.argv[3])
paths = [Path(p) for p in sys.argv[4:]]
folders = [q.parent for p in paths for q in ([p / "manifest.yaml"] if (p / "manifest.yaml").exists() else sorted(p.glob("*/manifest.yaml")))]
runs = [load_run(f) for f in folders]
for run in runs:
    if run.manifest.setup.path == "baseline":
        continue
    plan, _ = replay(model, run, runs, topology=None, sim_duration_s=5.0, replications=2, seed=1, processes=1)
    pred = predict_options(plan.options.with_changes(mesh=Path(sys.argv[3]), engine="simpy")).to_dict()
    lat = pred["latency_ms"]
    m = run.result
    print(f"{run.id[4:40]:36} measured p50/p99 {run.percentiles_ms()['p50'] if hasattr(run,'percentiles_ms') else '':} predicted p50 {lat['p50']:.2f} p99 {lat['p99']:.2f}")
