"""The model's wakes per request of each sidecar when it replays a run (SimPy engine, one process), beside the
measured sleeps (voluntary switches) per request in the run's run-queue.json.

Usage (from this folder): python wakes_per_request.py MODEL BASELINES_FOLDER RUN_FOLDER
A wake is a pass that found its worker asleep (it paid the resume CPU); requests are the caller's sidecar's passes
over two (its request pass and its response pass)."""

import collections
import json
import sys
from pathlib import Path

from meshsim.calibrate.validation.compare import validate_runs
from meshsim.calibrate.validation.validate_options import ValidateOptions
from meshsim.sim.engine import stations
from meshsim.sim.engine_choice import EngineChoice
from meshsim.sim.experiments import predict

predict.choose_engine = lambda requested, scenario, workload, series=False: EngineChoice("simpy")
counts: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0, 0.0])  # passes, wakes, cold wakes
serve = stations.Station.serve


def counting_serve(self, now, work, server=None, post=0.0):
    woke, cold = self.woke, self.cold_wakes
    finish = serve(self, now, work, server, post)
    if self.recording:
        c = counts[self.name.split("#")[0]]
        c[0] += 1
        c[1] += self.woke > woke
        c[2] += self.cold_wakes - cold
    return finish


stations.Station.serve = counting_serve
model, baselines, run = sys.argv[1:4]
validate_runs(ValidateOptions(model=model, run_dirs=(baselines, run), replications=2, sim_duration_s=3.0,
                              processes=1))
requests = counts["client/sidecar"][0] / 2
measured = json.loads((Path(run) / "run-queue.json").read_text())["components"]
done = json.loads((Path(run) / "fortio.json").read_text())["DurationHistogram"]["Count"]
for name, (passes, wakes, cold) in sorted(counts.items()):
    if name.endswith("/sidecar"):
        sleeps = measured.get(name, {}).get("voluntary_switches", float("nan")) / done
        print(f"{name:16s} model: {passes / requests:.2f} passes, {wakes / requests:.2f} wakes, "
              f"{cold / max(wakes, 1):.3f} cold share per wake; measured {sleeps:.2f} sleeps per request")
