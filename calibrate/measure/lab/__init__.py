"""The local mesh lab: real fortio apps and real Envoy sidecars on 127.0.0.1, measured with real fortio load.

Modules: ``spec`` (what a lab is), ``processes`` (ports, configs, command lines), ``envoy_config`` (bootstraps),
``certs`` (lab CA for mTLS), ``collector`` (Zipkin span counter), ``supervisor`` / ``cpulimit`` (processes by pid,
taskset, cgroup quota), ``running`` (a running lab and its state file), ``daemon`` (the detached supervisor of
``meshsim lab up``), ``ledger`` (the pids and temporary folders of a running lab command, so the next one stops
what a SIGKILLed one left), ``probe`` (fortio runs -> run folders), ``stored_probes`` (which probes a folder already
holds, for ``--resume``) and ``commands`` (one function per CLI command). The
standard calibration plan that measures and then fits is ``meshsim.calibrate.lab_calibration``.
"""

from meshsim.calibrate.measure.lab.commands import DEFAULT_LAB_DIR, lab_down, lab_probe, lab_run, lab_up, read_lab
from meshsim.calibrate.measure.lab.running import Lab, LabState
from meshsim.calibrate.measure.lab.probe import ProbeResult, ProbeSettings, probe
from meshsim.calibrate.measure.lab.spec import MODES, LabSpec

__all__ = [
    "DEFAULT_LAB_DIR", "MODES", "Lab", "LabSpec", "LabState", "ProbeResult", "ProbeSettings",
    "lab_down", "lab_probe", "lab_run", "lab_up", "probe", "read_lab",
]
