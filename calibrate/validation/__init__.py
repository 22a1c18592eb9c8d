"""Validation of a mesh model against measured runs (``meshsim validate``) and the lab loop (``validate_lab``).

Modules: ``replay`` (a run folder -> the simulator's inputs; ``forwarding_wake`` splits a chain's forwarding apps' CPU), ``validate_options`` (what to replay, how to report, the gate's
thresholds), ``compare`` (measured vs predicted, summary, gate),
``render`` (table and JSON), ``html`` (plotly report), ``lab`` (calibrate on the lab, measure held-out runs,
validate).
"""

from meshsim.calibrate.validation.compare import RunComparison, Validation, gate, validate_runs
from meshsim.calibrate.validation.validate_options import ReportOptions, ValidateOptions, parse_thresholds

__all__ = ["ReportOptions", "RunComparison", "ValidateOptions", "Validation", "gate", "parse_thresholds",
           "validate_runs"]
