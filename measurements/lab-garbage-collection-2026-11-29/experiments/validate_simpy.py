"""`meshsim validate` on the SimPy engine (../../lab-wakeup-priority-2026-11-29/validate_simpy.py), with this folder's
patches when asked.

Usage: python validate_simpy.py [--gc] [--pooled] VALIDATE_ARGS ...
--gc: gc_lumps.py (collections as lumps at any compute step, before the shipped code; its K, CPU and pause from the
environment: GC_K_FWD, GC_CPU_FWD, GC_K_LEAF, GC_CPU_LEAF, GC_PAUSE); --pooled: pooled_worker.py."""

import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
for flag, patch in (("--pooled", "pooled_worker"), ("--gc", "gc_lumps")):
    if flag in sys.argv:
        sys.argv.remove(flag)
        __import__(patch)  # patches the SimPy engine's classes in place
runpy.run_path(str(HERE.parent.parent / "lab-wakeup-priority-2026-11-29" / "validate_simpy.py"), run_name="__main__")
