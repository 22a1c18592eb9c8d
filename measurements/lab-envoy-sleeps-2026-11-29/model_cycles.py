"""The model's side of sleeps.py: when the lab model replays a run (the SimPy engine, 2 replications of 3 s, no
saturation search), each sidecar's passes split into those that woke an idle worker and those that found it busy
(queued behind its previous pass), and the time each waited for a core of the host after its worker took it up.

Usage: python model_cycles.py MODEL RUN [BASELINE_FOLDER ...] [--keep-core]

--keep-core: the experiment of keep_core.py (a worker keeps its core for the passes queued behind its last).
--wake-preempts: the experiment of wake_preempts.py (a burst that wakes a worker displaces the running one)."""

import collections
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).parent))

import meshsim.calibrate.validation.replay as replay_module
from meshsim.calibrate.measure.dataset import load_runs
from meshsim.mesh import mesh_from_data
from meshsim.sim.engine import stations
from meshsim.sim.engine_choice import EngineChoice
from meshsim.sim.experiments import predict

if "--keep-core" in sys.argv:
    sys.argv.remove("--keep-core")
    import keep_core  # noqa: F401 (patches Station._book)
if "--wake-preempts" in sys.argv:
    sys.argv.remove("--wake-preempts")
    import wake_preempts  # noqa: F401 (patches Station._book)
predict.choose_engine = lambda requested, scenario, workload, series=False: EngineChoice("simpy")
passes: collections.Counter = collections.Counter()
wakes: collections.Counter = collections.Counter()
core_wait: collections.defaultdict = collections.defaultdict(lambda: [0.0, 0.0])  # woke, queued: seconds
worker_wait: collections.Counter = collections.Counter()
book = stations.Station._book  # after keep_core.py when asked


def counting(self, now, work, server, post, timed):
    server = server if server is not None else (0 if self.servers == 1 else self.pick(now))
    if not (self.recording and timed):
        return book(self, now, work, server, post, timed)
    name = self.name.split("#")[0]
    free = self.free_at[server]
    woke = free < now
    before_woke, before_worked, before_cpu = self.woke, self.worked, self.cpu_waited
    out = book(self, now, work, server, post, timed)
    passes[name] += 1
    wakes[name] += woke
    core_wait[name][0 if woke else 1] += self.cpu_waited - before_cpu
    worker_wait[name] += 0.0 if woke else free - now
    return out


stations.Station._book = counting
model_path, run_path, *others = sys.argv[1:]
model = yaml.safe_load(Path(model_path).read_text())
runs = load_runs([Path(p) for p in [run_path, *others]]).runs
run = next(r for r in runs if r.id == Path(run_path).name)
replayed, _ = replay_module.replay(model, run, runs, topology=None, sim_duration_s=3.0, replications=2, seed=1,
                                   processes=1)
prediction = predict.predict_options(replayed.options.with_changes(mesh=mesh_from_data(model, "<model>"),
                                                                   saturation=False))
requests = passes["client/sidecar"] / 2 / 2  # two passes per request, two replications
print(f"{run.id}: {prediction.achieved_rps.value:.0f} rps predicted ({run.result.actual_rps:.0f} measured)")
for name in sorted(passes):
    if not name.endswith("sidecar"):
        continue
    n, w = passes[name], wakes[name]
    woke_wait, queued_wait = core_wait[name]
    print(f"  {name:15s} passes per wake {n / max(w, 1):.2f}; core wait per pass: after a wake "
          f"{woke_wait / max(w, 1) * 1e6:.0f} us, queued behind its worker's last pass {queued_wait / max(n - w, 1) * 1e6:.0f} us "
          f"(after waiting {worker_wait[name] / max(n - w, 1) * 1e6:.0f} us for the worker); core wait per request "
          f"{(woke_wait + queued_wait) / (n / 2 / (4 if name[:2] in ('s1', 's2') else 2) * 2) * 1e3:.3f} ms")
