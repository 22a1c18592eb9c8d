"""Validation of a mesh model against measured runs (``meshsim validate``) and the lab loop (``validate_lab``).

Modules: ``replay`` (a run folder -> the simulator's inputs), ``compare`` (measured vs predicted, summary, gate),
``render`` (table and JSON), ``html`` (plotly report), ``lab`` (calibrate on the lab, measure held-out runs,
validate).
"""

from meshsim.calibrate.validation.compare import (RunComparison, Validation, gate, parse_thresholds,
                                                  validate_runs)

__all__ = ["RunComparison", "Validation", "gate", "parse_thresholds", "validate_runs"]
