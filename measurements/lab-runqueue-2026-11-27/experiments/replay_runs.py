"""What the experiments share: every non-baseline run under PATHS (run folders or folders of them) replayed on the
SimPy engine with the model file, two 5 s replications, as ``meshsim validate`` replays it."""
from pathlib import Path
from typing import Iterator

from meshsim.calibrate.fit.model_file import read_model
from meshsim.calibrate.measure.dataset import load_run
from meshsim.calibrate.validation.replay import replay
from meshsim.sim.experiments.predict import predict_options


def run_folders(paths: list[str]) -> list[Path]:
    """The run folders under PATHS: each a run folder or a folder of them."""
    return [q.parent for p in map(Path, paths)
            for q in ([p / "manifest.yaml"] if (p / "manifest.yaml").exists() else sorted(p.glob("*/manifest.yaml")))]


def replayed(model_path: str, paths: list[str]) -> Iterator[tuple[object, dict]]:
    """(run, prediction as a dict) for each run that has a mesh on its path."""
    model = read_model(model_path)
    runs = [load_run(f) for f in run_folders(paths)]
    for run in runs:
        if run.manifest.setup.path == "baseline":
            continue
        plan, _ = replay(model, run, runs, topology=None, sim_duration_s=5.0, replications=2, seed=1, processes=1)
        yield run, predict_options(plan.options.with_changes(mesh=Path(model_path), engine="simpy")).to_dict()
