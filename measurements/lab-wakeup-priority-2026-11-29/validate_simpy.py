"""`meshsim validate` on the SimPy engine (the experiments patch only it), with an experiment's patch when asked.

Usage: python validate_simpy.py [--wakeup-priority | --random-stretch | --fair-hold] VALIDATE_ARGS ..."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from meshsim.cli import main
from meshsim.sim.engine_choice import EngineChoice
from meshsim.sim.experiments import predict

if "--wakeup-priority" in sys.argv:
    sys.argv.remove("--wakeup-priority")
    import wakeup_priority  # noqa: F401 (patches Station._book and NodeCores.run)
if "--random-stretch" in sys.argv:
    sys.argv.remove("--random-stretch")
    import random_stretch  # noqa: F401 (patches the shipped WokenFirstCores: a drawn stretch)
if "--fair-hold" in sys.argv:
    sys.argv.remove("--fair-hold")
    import fair_hold  # noqa: F401 (patches the tick hold: weighted by the thread's recent CPU rate)
predict.choose_engine = lambda requested, scenario, workload, series=False: EngineChoice("simpy")
sys.exit(main(["validate", *sys.argv[1:]]))
