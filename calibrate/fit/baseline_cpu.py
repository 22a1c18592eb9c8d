"""``calibration.baseline_cpu``: the CPU the load generator and the echo app burn per request in the baseline runs,
and the value a replay books at a given rate.

Per request it falls with the rate at a given connection count: both are Go programs whose threads sleep when idle,
and the more requests each wake finds, the fewer wakes a request pays (the lab's pair at 16 connections: 0.113 ms at
1 500 rps, 0.084 at 4 500, 0.066 at 9 000; with one connection 0.36-0.45 ms). A replay that saturates the host
books the value at the rate it carries, read off the baseline runs at the nearest connection count, so a chain
saturating at 1 700 rps is not booked the 9 000 rps rung's (``meshsim validate`` replays such a run again at the
rate it carried); below saturation it books the most loaded run's (``replay_rate``).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from meshsim.calibrate.measure.dataset import Run

BASELINE_CPU_KEYS = ("client/app", "server/app")  # the processes of a baseline run: fortio and the echo app
REPEAT = 0.02  # baseline runs whose carried rates differ by less are repeats of one rate
ReadAt = tuple[float, int, int]  # where a replay reads the baseline's CPU: (rate, connections, payload bytes)


def baseline_cpu(runs: Sequence[Run]) -> dict[str, Any] | None:
    """``calibration.baseline_cpu`` (None without a plain baseline run that read both processes): ``cpu_ms``, the
    baseline run that carried the most (what a host near saturation pays), and ``by_rate``, every such run's."""
    counted = [r for r in runs if r.manifest.setup.path == "baseline" and not r.features and r.result.actual_rps
               and r.manifest.load.duration_s and all(k in r.manifest.cpu_seconds for k in BASELINE_CPU_KEYS)]
    if not counted:
        return None
    points = sorted(({"rps": round(r.result.actual_rps, 1), "connections": r.manifest.load.connections,
                      "payload_bytes": r.manifest.setup.payload_bytes or 0, "cpu_ms": round(_cpu_ms(r), 5), "run": r.id}
                     for r in counted), key=lambda p: (p["connections"], p["payload_bytes"], p["rps"], p["run"]))
    run = max(counted, key=lambda r: r.result.actual_rps)
    return {"cpu_ms": round(_cpu_ms(run), 5),
            "source": f"CPU of {' + '.join(BASELINE_CPU_KEYS)} per request in baseline run {run.id} "
                      f"({run.result.actual_rps:.0f} rps, {run.manifest.load.connections} connection(s)), the "
                      "baseline run that carried the most",
            "by_rate": points,
            "by_rate_source": f"CPU of {' + '.join(BASELINE_CPU_KEYS)} per request in every plain baseline run "
                              "that read both, at the rate it carried"}


def _cpu_ms(run: Run) -> float:
    requests = run.result.actual_rps * run.manifest.load.duration_s
    return sum(run.manifest.cpu_seconds[k] for k in BASELINE_CPU_KEYS) / requests * 1e3


def baseline_cpu_at(block: Mapping[str, Any], rps: float, connections: int,
                    payload_bytes: int | None = None) -> tuple[float, str]:
    """(CPU ms per request, how it was read) of ``block`` at ``rps``, ``connections`` and ``payload_bytes``: from
    the baseline runs at the connection count nearest to ``connections``, and among them at the payload nearest to
    ``payload_bytes`` (both on a log scale, a tie taking the larger), interpolated linearly in log(rate) between
    their rates (repeats within REPEAT of each other averaged) and held at the end rates beyond them. Without
    ``by_rate`` (a model fitted before it) or without a rate: ``cpu_ms``."""
    points = block.get("by_rate") or []
    if not points or not rps > 0:
        return float(block["cpu_ms"]), str(block["source"])
    count = _nearest({int(p["connections"]) for p in points}, connections)
    points = [p for p in points if int(p["connections"]) == count]
    payload = _nearest({int(p.get("payload_bytes") or 0) for p in points}, payload_bytes or 0)
    rates: list[list[float]] = []  # [rate, cpu, ...] of each group of repeats
    for p in sorted((p for p in points if int(p.get("payload_bytes") or 0) == payload), key=lambda p: p["rps"]):
        if rates and p["rps"] <= rates[-1][0] * (1.0 + REPEAT):
            rates[-1].append(float(p["cpu_ms"]))
        else:
            rates.append([float(p["rps"]), float(p["cpu_ms"])])
    cpus = [float(np.mean(g[1:])) for g in rates]
    cpu = float(np.interp(math.log(rps), [math.log(g[0]) for g in rates], cpus))
    where = ", ".join(f"{g[0]:.0f} rps: {c:.4f} ms" for g, c in zip(rates, cpus))
    return cpu, (f"calibration.baseline_cpu at {rps:.0f} rps from its baseline runs at {count} connection(s) and "
                 f"{payload} B ({where}; log-rate interpolation, held beyond the ends)")


def _nearest(values: set[int], wanted: int) -> int:
    """The value nearest to ``wanted`` on a log scale (0 counts as 1), a tie taking the larger."""
    return min(sorted(values), key=lambda v: (abs(math.log(max(v, 1)) - math.log(max(wanted, 1))), -v))


def has_by_rate(model: Mapping[str, Any]) -> bool:
    return bool(((model.get("calibration") or {}).get("baseline_cpu") or {}).get("by_rate"))


def replay_rate(model: Mapping[str, Any], run: Run, rate: float | None) -> ReadAt | None:
    """(rate, connections, payload) at which a replay of ``run`` reads the baseline's CPU: at ``rate``, the rate a
    replay that saturated the host carried, when ``model`` has the CPU by rate; else None (the most loaded run's).

    Only a saturated host pays the rate's own CPU in throughput: below saturation the more that fortio and the app
    burn per request at a lower rate runs on cores that are free, and the kernel runs a woken thread first
    (``measurements/lab-envoy-sleeps-2026-11-29``), which the model's first-come-first-served cores cannot
    represent: booked there, the paced pair's p50 came out 16-19 % high."""
    if rate is None or not has_by_rate(model):
        return None
    return rate, run.result.num_threads or run.manifest.load.connections, run.manifest.setup.payload_bytes
