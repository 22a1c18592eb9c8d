"""The local mesh lab: real fortio apps and real Envoy sidecars on 127.0.0.1, measured with real fortio load.

Modules: ``spec`` (what a lab is), ``processes`` (ports, configs, command lines), ``envoy_config`` (bootstraps),
``certs`` (lab CA for mTLS), ``collector`` (Zipkin span counter), ``trace_backend`` (a real Jaeger instead),
``supervisor`` / ``cpulimit`` (processes by pid, taskset, cgroup quota), ``running`` (a running lab and its state
file), ``daemon`` (the detached supervisor of ``meshsim lab up``), ``ledger`` (the pids and temporary folders of a
running lab command, so the next one stops what a SIGKILLed one left), ``probe`` (fortio runs -> run folders),
``stored_probes`` (which probes a folder already holds, for ``--resume``) and ``commands`` (one function per CLI
command). The standard calibration plan that measures and then fits is ``meshsim.calibrate.lab_calibration``.
"""

from __future__ import annotations

import importlib
from typing import Any

# Imported on first use (PEP 562): the CLI registers its commands with the defaults of ``spec`` alone, and
# ``meshsim predict`` should not pay for the lab's process machinery.
_HOMES = {
    "DEFAULT_LAB_DIR": "commands", "lab_down": "commands", "lab_probe": "commands", "lab_run": "commands",
    "lab_up": "commands", "read_lab": "commands", "Lab": "running", "LabState": "running",
    "ProbeResult": "probe", "ProbeSettings": "probe", "MODES": "spec", "LabSpec": "spec",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
