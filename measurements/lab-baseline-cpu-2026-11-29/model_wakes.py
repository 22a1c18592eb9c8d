"""The model's wakes, cold wakes and CPU per request of each sidecar when it replays a run (the SimPy engine, 2 replications of
3 s, no saturation search: every booking counted is the run's own), beside the run's measured sleeps (voluntary
switches of the workers) and CPU per request.

Usage (from this folder): python model_wakes.py MODEL RUN [BASELINE_FOLDER ...] [--fortio-cpu FORTIO_MS APP_MS]

--fortio-cpu: an experiment, not in the replay: fortio's CPU per call booked on the host's cores before each request
leaves (the topology's client.cpu_per_call, FORTIO_MS), the baseline service then holding a core for the app's share
(APP_MS) of the baseline CPU only."""

import collections
import json
import sys
from pathlib import Path

import yaml

import meshsim.calibrate.fit.sim_check as sim_check
import meshsim.calibrate.validation.replay as replay_module
from meshsim.calibrate.measure.dataset import load_runs
from meshsim.mesh import mesh_from_data
from meshsim.sim.engine import stations
from meshsim.sim.engine_choice import EngineChoice
from meshsim.sim.experiments import predict

predict.choose_engine = lambda requested, scenario, workload, series=False: EngineChoice("simpy")
args = sys.argv[1:]
if "--fortio-cpu" in args:
    at = args.index("--fortio-cpu")
    fortio_ms, app_ms = float(args[at + 1]), float(args[at + 2])
    del args[at:at + 3]
    skeleton, service = replay_module._skeleton, sim_check.baseline_service

    def with_client(name, entry, services, source):
        data = skeleton(name, entry, services, source)
        data["client"]["cpu_per_call"] = {"family": "deterministic", "value_ms": fortio_ms}
        return data

    def app_only(model, replicas, source):
        s = service(model, replicas, source)
        if "cpu_fraction" in s:
            s["cpu_fraction"] = round(s["cpu_fraction"] * app_ms / (app_ms + fortio_ms), 5)
        return s

    replay_module._skeleton, replay_module.baseline_service = with_client, app_only

passes: collections.Counter = collections.Counter()
wakes: collections.Counter = collections.Counter()
colds: collections.Counter = collections.Counter()
book = stations.Station._book


def counting(self, now, work, server, post, timed):
    server = server if server is not None else (0 if self.servers == 1 else self.pick(now))
    if self.recording and timed:
        name = self.name.split("#")[0]
        passes[name] += 1
        wakes[name] += self.free_at[server] < now
        before = self.cold_wakes
        out = book(self, now, work, server, post, timed)
        colds[name] += self.cold_wakes - before
        return out
    return book(self, now, work, server, post, timed)


stations.Station._book = counting
model_path, run_path, *others = args
model = yaml.safe_load(Path(model_path).read_text())
runs = load_runs([Path(p) for p in [run_path, *others]]).runs
run = next(r for r in runs if r.id == Path(run_path).name)
replayed, _ = replay_module.replay(model, run, runs, topology=None, sim_duration_s=3.0, replications=2, seed=1,
                                   processes=1)
prediction = predict.predict_options(replayed.options.with_changes(mesh=mesh_from_data(model, "<model>"),
                                                                   saturation=False))
measured = json.loads((Path(run_path) / "run-queue.json").read_text())["components"]
done = json.loads((Path(run_path) / "fortio.json").read_text())["DurationHistogram"]["Count"]
requests = passes["client/sidecar"] / 2
print(f"{run.id}: rps {run.result.actual_rps:.0f} measured, {prediction.achieved_rps.value:.0f} predicted")
for name in sorted(passes):
    if name.endswith("sidecar"):
        sleeps = measured.get(name, {}).get("voluntary_switches", float("nan")) / done
        cpu = run.manifest.cpu_seconds.get(name, float("nan")) / done * 1e3
        model_cpu = prediction.cpu_cores[name] / prediction.achieved_rps.value * 1e3
        print(f"  {name:15s} model: {wakes[name] / requests:.2f} wakes, {model_cpu:.3f} ms CPU per request; "
              f"measured: {sleeps:.2f} sleeps, {cpu:.3f} ms; cold wakes {colds[name] / requests:.3f}")
