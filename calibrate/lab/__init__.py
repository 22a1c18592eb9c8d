"""The local mesh lab: real fortio apps and real Envoy sidecars on 127.0.0.1, measured with real fortio load.

Modules: ``spec`` (what a lab is), ``plan`` (ports, configs, command lines), ``envoy_config`` (bootstraps),
``certs`` (lab CA for mTLS), ``collector`` (Zipkin span counter), ``supervisor`` / ``cpulimit`` (processes by pid,
taskset, cgroup quota), ``lab`` (a running lab and its state file), ``daemon`` (the detached supervisor of
``meshsim lab up``), ``probe`` (fortio runs -> run folders), ``api`` (one function per CLI command) and
``calibrate`` (the standard probe plan of ``meshsim calibrate --lab``).
"""

from meshsim.calibrate.lab.api import DEFAULT_LAB_DIR, lab_down, lab_probe, lab_run, lab_up, read_lab
from meshsim.calibrate.lab.calibrate import LabCalibration, calibrate_lab
from meshsim.calibrate.lab.lab import Lab, LabState
from meshsim.calibrate.lab.probe import ProbeResult, ProbeSettings, probe
from meshsim.calibrate.lab.spec import MODES, LabSpec

__all__ = [
    "DEFAULT_LAB_DIR", "MODES", "Lab", "LabCalibration", "LabSpec", "LabState", "ProbeResult", "ProbeSettings",
    "calibrate_lab", "lab_down", "lab_probe", "lab_run", "lab_up", "probe", "read_lab",
]
