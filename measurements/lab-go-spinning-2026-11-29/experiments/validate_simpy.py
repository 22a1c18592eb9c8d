# As run on 27d2868 (before the spin share shipped); on later code the shipped share applies as well.
import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).parent))
from meshsim.cli import main
from meshsim.sim.engine_choice import EngineChoice
from meshsim.sim.experiments import predict
if "--wake-offpath" in sys.argv:
    sys.argv.remove("--wake-offpath")
    import app_wake_offpath  # noqa: F401
if "--app-offpath" in sys.argv:
    sys.argv.remove("--app-offpath")
    import app_offpath  # noqa: F401
if "--app-bursts" in sys.argv:
    sys.argv.remove("--app-bursts")
    import app_bursts  # noqa: F401
if "--side-binding" in sys.argv:
    sys.argv.remove("--side-binding")
    import side_binding  # noqa: F401
predict.choose_engine = lambda requested, scenario, workload, series=False: EngineChoice("simpy")
sys.exit(main(["validate", *sys.argv[1:]]))
