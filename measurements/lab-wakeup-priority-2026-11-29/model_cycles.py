"""../lab-envoy-sleeps-2026-11-29/model_cycles.py (passes per wake and core waits of a lab model's replay), with this
folder's experiment patched in when asked. With the shipped code no patch is needed: a model whose cluster block has
``woken_first`` runs its host's woken threads first (model-cycles.txt was made so).

Usage: python model_cycles.py MODEL RUN [BASELINE_FOLDER ...] [--wakeup-priority] (and the original's flags)"""

import runpy
import sys
from pathlib import Path

here = Path(__file__).parent
sys.path.insert(0, str(here))
if "--wakeup-priority" in sys.argv:
    sys.argv.remove("--wakeup-priority")
    import wakeup_priority  # noqa: F401 (patches Station._book and NodeCores.run)
original = here.parent / "lab-envoy-sleeps-2026-11-29" / "model_cycles.py"
sys.argv[0] = str(original)
runpy.run_path(str(original), run_name="__main__")
