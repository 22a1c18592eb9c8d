"""Numbers for people: the table, its CSV/JSON exports, and the "what changed" summary between two scenarios.

Pure functions of prediction dicts, like the figure builders.
"""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any, Mapping, Sequence

from .figures import Curve, saturation
from .what_if import WhatIf, input_changes

COLUMNS = (
    "mesh", "offered_rps", "achieved_rps", "p50_ms", "p90_ms", "p99_ms", "p999_ms", "p99_ci95_lo_ms",
    "p99_ci95_hi_ms", "bottleneck", "bottleneck_utilization", "saturation_rps", "saturated", "cpu_cores_total",
)


def _num(value: Any, digits: int = 4) -> float | None:
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(f"{value:.{digits}g}")


def table_rows(curves: Mapping[str, Curve]) -> list[dict[str, Any]]:
    """One row per mesh and rate, in the order of :data:`COLUMNS`."""
    rows = []
    for mesh, curve in curves.items():
        for rate, p in curve:
            latency = p.get("latency_ms", {})
            ci = p.get("latency_ci95_ms", {}).get("p99") or (None, None)
            bottleneck = p.get("bottleneck")
            rows.append({
                "mesh": mesh, "offered_rps": _num(rate), "achieved_rps": _num(p.get("achieved_rps")),
                "p50_ms": _num(latency.get("p50")), "p90_ms": _num(latency.get("p90")),
                "p99_ms": _num(latency.get("p99")), "p999_ms": _num(latency.get("p999")),
                "p99_ci95_lo_ms": _num(ci[0]), "p99_ci95_hi_ms": _num(ci[1]), "bottleneck": bottleneck,
                "bottleneck_utilization": _num(p.get("utilization", {}).get(bottleneck), 3),
                "saturation_rps": _num(p.get("saturation_rps")), "saturated": bool(p.get("saturated")),
                "cpu_cores_total": _num(sum(p.get("cpu_cores", {}).values()), 3),
            })
    return rows


def scenario_warnings(curves: Mapping[str, Curve]) -> list[str]:
    """The warnings every computed point of a mesh's curve carries (about the scenario, not one rate: a fortio load
    driven unlike the model's calibration runs, say), and what its fortio load took from those runs, once per mesh."""
    out = []
    for mesh, curve in curves.items():
        sets = [set(p.get("warnings") or ()) | {p.get("inputs", {}).get("fortio_from")} - {None} for _rate, p in curve]
        out += [f"{mesh}: {w}" for w in sorted(set.intersection(*sets))] if sets else []
    return out


def rows_to_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(COLUMNS), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in COLUMNS})
    return out.getvalue()


def export_json(scenario: WhatIf, curves: Mapping[str, Curve]) -> str:
    """Every prediction of the view, complete with the ``inputs`` that determined it."""
    data = {
        "scenario": {k: v for k, v in scenario.describe().items()},
        "predictions": {mesh: [{"offered_rps": r, **p} for r, p in curve] for mesh, curve in curves.items()},
    }
    return json.dumps(data, indent=1, default=str)


def _pct(before: float, after: float) -> str:
    if before == 0:
        return ""
    return f" ({(after - before) / before:+.0%})"


def what_changed(
    before: WhatIf, before_points: Mapping[str, dict | None],
    after: WhatIf, after_points: Mapping[str, dict | None], rate: float,
) -> list[str]:
    """A short summary, one line per fact: which inputs differ, then per mesh what that did at ``rate``."""
    lines = input_changes(before, after)
    if not lines:
        lines = ["No input differs from the pinned scenario."]
    for mesh in after.meshes:
        if mesh not in before.meshes:
            lines.append(f"{mesh}: not in the pinned scenario, nothing to compare.")
            continue
        a, b = before_points.get(mesh), after_points.get(mesh)
        if a is None or b is None:
            lines.append(f"{mesh}: computing ...")
            continue
        parts = []
        for key in ("p50", "p99"):
            x, y = a["latency_ms"][key], b["latency_ms"][key]
            parts.append(f"{key} {x:.3g} -> {y:.3g} ms{_pct(x, y)}")
        cpu_a, cpu_b = sum(a.get("cpu_cores", {}).values()), sum(b.get("cpu_cores", {}).values())
        parts.append(f"CPU {cpu_a:.3g} -> {cpu_b:.3g} cores{_pct(cpu_a, cpu_b)}")
        sat_a, bottleneck_a = saturation([(rate, a)])
        sat_b, bottleneck_b = saturation([(rate, b)])
        if sat_a is not None and sat_b is not None:
            parts.append(f"saturation {sat_a:,.0f} -> {sat_b:,.0f} rps{_pct(sat_a, sat_b)}")
        if bottleneck_a != bottleneck_b:
            parts.append(f"bottleneck {bottleneck_a} -> {bottleneck_b}")
        else:
            parts.append(f"bottleneck still {bottleneck_b}")
        lines.append(f"{mesh} at {rate:,.0f} rps: " + "; ".join(parts) + ".")
    for mesh in before.meshes:
        if mesh not in after.meshes:
            lines.append(f"{mesh}: dropped from the comparison.")
    return lines
