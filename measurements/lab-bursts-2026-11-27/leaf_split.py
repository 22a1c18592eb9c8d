"""The experiment of 2026-11-27 22:30: `meshsim validate` with the derived leaf split (not adopted; README).

The lab replay's topology books the model's whole one-connection baseline (load generator, network, fortio
server) as the leaf app's CPU on the host's cores. Here it is split by the baseline runs' own CPU readings
(``calibration.cpu``, path baseline: the slope of each process's CPU over the rates): the load generator books its
CPU per send before the request leaves, the app its CPU on a core, the rest of the baseline is a delay that holds
no core. The parts add up to the baseline. Run from the repository's root, with validate's arguments:

    python measurements/lab-bursts-2026-11-27/leaf_split.py validate --model M RUN_DIR... --by connections

A refit with the split in the fit's own replays (``sim_check.calibration_topology``) gave this folder's model
back unchanged, so patching the replay alone is the whole change for it.
"""

from __future__ import annotations

import copy
import sys
from typing import Any, Mapping

import meshsim.calibrate.validation.replay as replay
from meshsim.cli.entry_point import main
from meshsim.distribution_spec import parse_distribution

CPU_CV = 0.5  # assumption, as the forwarding hop's


def _slopes(model: Mapping[str, Any]) -> tuple[float, float] | None:
    found = {e["component"]: float(e["cpu_ms_per_request"]) for e in (model.get("calibration") or {}).get("cpu") or ()
             if e.get("path") == "baseline" and not e.get("features")}
    return (found["client/app"], found["server/app"]) if {"client/app", "server/app"} <= set(found) else None


def _scaled(spec: Any, factor: float) -> Any:
    if isinstance(spec, Mapping):
        return {k: (v * factor if k.endswith("_ms") and isinstance(v, (int, float)) else _scaled(v, factor))
                for k, v in spec.items()}
    return [_scaled(v, factor) for v in spec] if isinstance(spec, list) else spec


def _rest(spec: Mapping[str, Any], cpu_ms: float) -> dict[str, Any] | None:
    """The baseline less the CPU: through its shifts where they are long enough, else shrunk in proportion."""
    mean = parse_distribution(spec, "calibration.baseline").mean * 1e3
    if cpu_ms >= mean:
        return None
    out = copy.deepcopy(dict(spec))
    parts = out["components"] if out.get("family") == "mixture" else [out]
    if all(isinstance(p.get("shift_ms"), (int, float)) and p["shift_ms"] >= cpu_ms for p in parts):
        for p in parts:
            p["shift_ms"] -= cpu_ms
        return out
    return _scaled(spec, 1.0 - cpu_ms / mean)


def _cost(mean_ms: float) -> dict[str, Any]:
    return {"family": "lognormal", "mean_ms": mean_ms, "cv": CPU_CV, "source": "leaf_split.py"}


_service, _skeleton = replay._service, replay._skeleton
_SEND: dict[str, float] = {}


def split_service(model: Mapping[str, Any], replicas: int, source: str) -> dict[str, Any]:
    service = _service(model, replicas, source)
    slopes = _slopes(model)
    rest = _rest(service["handler"][0]["compute"], sum(slopes)) if slopes else None
    if slopes and rest is not None:
        service["handler"] = [{"delay": rest}, {"compute": _cost(slopes[1])}]
        _SEND["ms"] = slopes[0]
    return service


def split_skeleton(name: str, entry: str, services: dict[str, Any], source: str) -> dict[str, Any]:
    skeleton = _skeleton(name, entry, services, source)
    if "ms" in _SEND:
        skeleton["client"] = {**skeleton["client"], "cpu_per_call": _cost(_SEND["ms"])}
    return skeleton


replay._service, replay._skeleton = split_service, split_skeleton
sys.exit(main(sys.argv[1:]))
