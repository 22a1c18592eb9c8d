"""Per component of each run: the kernel's timeslices and run-queue wait per request and per timeslice beside the
model's jobs and core wait per request and per job (one SimPy replication of validate's replay of the run).
Usage: python per_event.py MODEL BASELINE_DIR RUN_DIR... (prints a markdown table)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from meshsim.calibrate.fit.model_file import read_model
from meshsim.calibrate.measure.dataset import load_run
from meshsim.calibrate.validation.replay import replay
from meshsim.request import build_request
from meshsim.sim.engine.simpy_replication import run_replication
from meshsim.sim.experiments.predict import horizon_for


def folders(paths: list[str]) -> list[Path]:
    out = []
    for p in map(Path, paths):
        out += [p] if (p / "manifest.yaml").exists() else sorted(q.parent for q in p.glob("*/manifest.yaml"))
    return out


def main() -> None:
    model = read_model(sys.argv[1])
    runs = [load_run(f) for f in folders(sys.argv[2:])]
    print("| run | other cores | component | slices/req | wait ms/slice | wait ms/req | model jobs/req | "
          "model wait ms/job | model wait ms/req |")
    print("|---|---|---|---|---|---|---|---|---|")
    for run in runs:
        name = run.manifest.files.get("run_queue")
        if name is None:
            continue
        measured = json.loads((run.folder / name).read_text())
        plan, _ = replay(model, run, runs, topology=None, sim_duration_s=5.0, replications=1, seed=1, processes=1)
        request = build_request(plan.options.with_changes(mesh=Path(sys.argv[1])))
        result = run_replication(request.scenario, request.workload, horizon_for(request.workload.load,
                                 request.settings), 1, 0)
        n = max(result.started, 1)
        other = run.manifest.where.get("host_load", {}).get("other_cores")
        for comp, m in measured["components"].items():
            u = result.usage.get(comp)
            slices = m["timeslices"] / measured["requests"]
            jobs = u.jobs / n if u else float("nan")
            wait = u.cpu_waited / n * 1e3 if u else float("nan")
            print(f"| {run.id[4:-19]} {run.id[-9:]} | {other} | {comp} | {slices:.2f} | {m['wait_ms_per_timeslice']:.3f} | "
                  f"{m['wait_ms_per_request']:.3f} | {jobs:.2f} | {wait / max(jobs, 1e-9):.3f} | {wait:.3f} |")


if __name__ == "__main__":
    main()
