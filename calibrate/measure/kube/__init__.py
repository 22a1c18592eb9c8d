"""Calibration on a real Kubernetes cluster (``meshsim calibrate --kube``) with the kubernetes Python client."""

from .probe_plan import KubePlan, load_plan
from .runner import KubeCalibration, calibrate_kube

__all__ = ["KubeCalibration", "KubePlan", "calibrate_kube", "load_plan"]
