"""A validation as text (the CLI's table and summary line) and as one JSON-ready object."""

from __future__ import annotations

import math
from typing import Any

from meshsim.calibrate.validation.compare_metric import Metric
from meshsim.calibrate.validation.compare import Validation
from meshsim.calibrate.validation.setup_repeats import repeats_lines, setup_repeats
from meshsim.calibrate.validation.validate_options import LATENCY_KEYS, SUMMARY_KEYS

LABELS = {"p50": "p50", "p90": "p90", "p99": "p99", "p999": "p99.9", "max": "max", "rps": "rps"}


def _pct(err: float) -> str:
    return "   -  " if not math.isfinite(err) else f"{err * 100:+5.0f}%"


def _num(x: float, width: int = 8, digits: int = 3) -> str:
    return f"{'-':>{width}}" if not math.isfinite(x) else f"{x:{width}.{digits}f}"


def _ci(m: Metric) -> str:
    if not m.ci95:
        return ""
    return f"[{m.ci95[0]:.3f}, {m.ci95[1]:.3f}]"


def _bucket(m: Metric) -> str:
    """The measured value's bucket: a histogram percentile is known only to lie in it (the comparison's resolution)."""
    if not m.resolution:
        return ""
    lo, hi = m.resolution
    return f"  measured in bucket ({lo:g}, {hi:g}] ms"


def table(v: Validation) -> str:
    what = "Prometheus window(s) simulated at their measured rate" if "prometheus" in v.settings else \
        "run(s) simulated with their own fortio workload"
    lines = [f"model {v.model} ({v.model_name}); {len(v.comparisons)} {what}, "
             f"{v.settings.get('replications')} replications each"]
    for c in v.comparisons:
        flag = "" if c.status == "ok" else " [SATURATED]"
        role = {"held-out": "HELD-OUT", "fit": "FIT (excluded)" if not v.include_fit_runs else "FIT",
                "topology": "TOPOLOGY (excluded)"}[c.role]
        lines.append("")
        lines.append(f"{c.run_id}  {role}{flag}")
        lines.append(f"  {c.setup}, {c.rps:g} rps requested, {c.connections} connection(s)")
        lines.append(f"  {'':10} {'measured':>9} {'predicted':>9} {'error':>7}  simulator 95% CI")
        for key in LATENCY_KEYS:
            m = c.latency_ms[key]
            lines.append(f"  {LABELS[key] + ' ms':10} {_num(m.measured, 9)} {_num(m.predicted, 9)} "
                         f"{_pct(m.rel_error):>7}  {_ci(m)}{_bucket(m)}")
        a = c.achieved_rps
        lines.append(f"  {'rps':10} {_num(a.measured, 9, 1)} {_num(a.predicted, 9, 1)} {_pct(a.rel_error):>7}  "
                     + (f"[{a.ci95[0]:.1f}, {a.ci95[1]:.1f}]" if a.ci95 else ""))
        per_request = c.cpu_ms_per_request
        for comp, m in c.cpu_cores.items():
            r = per_request[comp]
            each = (f"{_num(r.measured, 0, 4)} and {_num(r.predicted, 0, 4)} ms, {_pct(r.rel_error).strip()}"
                    if math.isfinite(r.predicted) else f"{_num(r.measured, 0, 4)} ms measured")
            lines.append(f"  {'cpu ' + comp:10} {_num(m.measured, 9)} {_num(m.predicted, 9)} "
                         f"{_pct(m.rel_error):>7}  (cores); per request {each}")
        if c.saturation_rps:
            lines.append(f"  predicted saturation {c.saturation_rps:g} rps with open (Poisson) arrivals on the run's "
                         f"connections (bottleneck {c.bottleneck}); the rps line is what the run's own load carries")
        if c.role == "held-out" and abs(c.latency_ms["p50"].rel_error) > MISS and c.breakdown_ms:
            lines.append(f"  p50 missed by {_pct(c.latency_ms['p50'].rel_error)}; {breakdown_line(c.breakdown_ms)}")
        for note in c.notes:
            lines.append(f"  note: {note}")
    for s in v.skipped:
        lines.append(f"SKIPPED {s}")
    if v.interrupted:
        lines.append(f"INTERRUPTED {v.interrupted}: the table holds the runs finished before it")
    lines.append("")
    lines.append(summary_line(v))
    return "\n".join(lines)


MISS = 0.10  # a held-out p50 further off than this gets the breakdown of where the predicted time goes


def breakdown_line(parts: dict[str, float] | Any) -> str:
    """``where the predicted time goes: proxy work 0.40 ms (38 %), network 0.30 ms (29 %), ...`` (largest first)."""
    total = sum(v for v in parts.values() if v > 0) or 1.0
    chosen = sorted(((k, v) for k, v in parts.items() if v > 0), key=lambda kv: -kv[1])
    return "where the predicted time goes: " + ", ".join(f"{k} {v:.3f} ms ({v / total:.0%})" for k, v in chosen)


def summary_line(v: Validation) -> str:
    rows = v.summary()
    chosen = v.summarised()
    what = "held-out + fit runs" if v.include_fit_runs else "held-out runs"
    if not rows:
        excluded = sum(1 for c in v.comparisons if c.role != "held-out")
        return (f"summary: no {what} to summarise ({excluded} fit/topology run(s) excluded; "
                "--include-fit-runs to judge the fit)")
    parts = [f"{LABELS[k]} {r.median_abs:.1%}/{r.worst_abs:.1%}" for k, r in rows.items()]
    line = f"summary over {len(chosen)} {what}, |error| median/worst: " + ", ".join(parts)
    repeat = v.repeatability()
    if repeat:
        n = max(r.n for r in repeat.values())
        line += (f"\nmeasurement repeatability ({n} pairs of runs of the same setup), |difference| median/worst: "
                 + ", ".join(f"{LABELS[k]} {r.median_abs:.1%}/{r.worst_abs:.1%}" for k, r in repeat.items()))
    per_setup = repeats_lines(setup_repeats([c.scored() for c in chosen]))
    return "\n".join([line, *per_setup])


def to_json(v: Validation, cdf: bool = False) -> dict[str, Any]:
    return {
        "model": v.model, "model_name": v.model_name, "settings": v.settings,
        "include_fit_runs": v.include_fit_runs,
        "runs": [c.to_dict(cdf) for c in v.comparisons],
        "skipped": list(v.skipped),
        "interrupted": v.interrupted or None,
        "summary": {k: {"n": r.n, "median_abs_error": round(r.median_abs, 4), "worst_abs_error": round(r.worst_abs, 4),
                        "worst_run": r.worst_run} for k, r in v.summary().items()},
        "summary_keys": list(SUMMARY_KEYS),
        "repeatability": {k: {"pairs": r.n, "median_abs_difference": round(r.median_abs, 4),
                              "worst_abs_difference": round(r.worst_abs, 4), "worst_setup": r.worst_run}
                          for k, r in v.repeatability().items()},
        "setup_repeats": [r.to_dict() for r in setup_repeats([c.scored() for c in v.summarised()])],
    }
