"""`meshsim calibrate` on the SimPy engine (the experiments patch only it), with an experiment's patch when asked:
with --resume on a copy of a calibration folder, every probe is stored and only the fit runs.

Usage: python calibrate_simpy.py [--wakeup-priority] CALIBRATE_ARGS ..."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from meshsim.cli import main
from meshsim.sim import engine_choice
from meshsim.sim.experiments import predict, saturation_search

if "--wakeup-priority" in sys.argv:
    sys.argv.remove("--wakeup-priority")
    import wakeup_priority  # noqa: F401 (patches Station._book and NodeCores.run)


def simpy_engine(requested, scenario, workload, series=False):
    return engine_choice.EngineChoice("simpy")


engine_choice.choose_engine = predict.choose_engine = saturation_search.choose_engine = simpy_engine
sys.exit(main(["calibrate", *sys.argv[1:]]))
