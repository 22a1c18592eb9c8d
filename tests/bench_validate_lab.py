"""Accuracy benchmark (not collected by pytest): the full lab validation plan, printed as a Markdown table.

    python tests/bench_validate_lab.py [OUT_DIR]      # ~3 min on 2 cores; keeps runs, model and report.html

Calibrates envoy-lab on one connection at 200/500/1000 rps (baseline, server sidecar, both sidecars) plus the
batching probe, measures the held-out runs of ``FULL_PLAN`` twice each (4 and 16 connections, a 1-worker 0.1-core
proxy up to 3000 rps, chain5) and validates; prints the errors and the measurement's own repeatability. Numbers depend on the machine and on what else runs on it: state both with the table.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from meshsim.calibrate.validation.validate import ReportOptions, validate_lab_report


def markdown(outcome) -> str:  # type: ignore[no-untyped-def]
    def cell(m, digits: int = 3) -> str:  # type: ignore[no-untyped-def]
        e = m.rel_error
        return f"{m.measured:.{digits}f} / {m.predicted:.{digits}f} ({e * 100:+.0f} %)" if e == e else "-"

    lines = ["| run | role | rps | c | p50 ms meas / pred | p90 | p99 | achieved rps |", "|---|---|---|---|---|---|---|---|"]
    for c in outcome.validation.comparisons:
        role = c.role + (" (saturated)" if c.status != "ok" else "")
        lines.append(f"| {c.setup} | {role} | {c.rps:g} | {c.connections} | {cell(c.latency_ms['p50'])} | "
                     f"{cell(c.latency_ms['p90'])} | {cell(c.latency_ms['p99'])} | {cell(c.achieved_rps, 0)} |")
    for key, row in outcome.validation.summary().items():
        lines.append(f"- {key}: median |error| {row.median_abs:.1%}, worst {row.worst_abs:.1%} over {row.n} held-out runs")
    for key, row in outcome.validation.repeatability().items():
        lines.append(f"- {key} repeatability: median |difference| {row.median_abs:.1%}, worst {row.worst_abs:.1%} "
                     f"over {row.n} pairs of runs of one setup")
    return "\n".join(lines)


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="meshsim-lab-validation-"))
    outcome = validate_lab_report(out, "full", report=ReportOptions(html=out / "report.html"),
                                  progress=lambda m: print(m, file=sys.stderr, flush=True))
    print(markdown(outcome))
    print(f"\nload average before/after: {os.getloadavg()}; runs, model and report in {out}")


if __name__ == "__main__":
    main()
