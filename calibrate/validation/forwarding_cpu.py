"""A lab chain's forwarding apps' CPU from the chain's baseline runs: per request, and in garbage collections
(calibrate/measure/lab/garbage_collections.py; meshsim/garbage_collection.py says what the model does with them).

The apps' CPU per request as their process clocks read it includes their collections; a replay that books the
collections as lumps books the rest per request, so both the block and the share to take out come from here.
"""

from __future__ import annotations

from typing import Any, Sequence

from meshsim.calibrate.measure.dataset import Run
from meshsim.calibrate.measure.lab.garbage_collections import FILE_KEY, collections_per_request
from meshsim.calibrate.validation.run_extras import stored_json


def _readings(run: Run, graph: Sequence[Any]) -> list[tuple[float, float]] | None:
    """(collections per request, mark CPU per collection in ms) of each forwarding app; None unless all have one
    (a run measured before the probe recorded them has none)."""
    forwarders = [f"{svc.name}/app" for svc in graph if svc.calls]
    readings = stored_json(run, FILE_KEY, "a record of the apps' garbage collections",
                           lambda data: [collections_per_request(data, name) for name in forwarders])
    return None if readings is None or any(r is None for r in readings) else readings  # type: ignore[return-value]


def collections_cpu_ms(run: Run, graph: Sequence[Any]) -> float:
    """The forwarding apps' mean collection CPU per request in ``run`` (ms); 0 where it recorded none."""
    readings = _readings(run, graph)
    return sum(rate * cpu for rate, cpu in readings) / len(readings) if readings else 0.0


def forwarding_collection(run: Run, graph: Sequence[Any]) -> dict[str, Any] | None:
    """The forwarding apps' ``garbage_collection`` block as ``run`` measured it (their mean), or None."""
    readings = _readings(run, graph)
    if not readings:
        return None
    rate = sum(r for r, _ in readings) / len(readings)
    cpu = sum(r * c for r, c in readings) / len(readings) / rate
    return {"every_requests": round(1.0 / rate, 3), "cpu_ms": round(cpu, 4),
            "source": f"the forwarding apps' collections in baseline run {run.id} (gctrace): one per "
                      f"{1.0 / rate:.1f} requests, {cpu:.3f} ms of mark CPU each"}


def forwarding_cpu_ms(run: Run, graph: Sequence[Any]) -> float | None:
    """The forwarding apps' mean CPU per request in a baseline run beyond the garbage collections it recorded (ms;
    the replay books those as lumps); None without their readings."""
    costs = [run.cpu_per_request(f"{svc.name}/app") for svc in graph if svc.calls]
    known = [c for c in costs if c is not None]
    if not known or len(known) != len(costs):
        return None
    return sum(known) / len(known) * 1e3 - collections_cpu_ms(run, graph)
