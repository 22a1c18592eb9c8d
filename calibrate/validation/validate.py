"""``validate``: the one library call behind ``meshsim validate`` (compare, render, report, gate)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from meshsim.calibrate.validation.column_accuracy import NAIVE_FORECAST, accuracy_lines
from meshsim.calibrate.validation.compare import Validation, gate, validate_runs
from meshsim.calibrate.validation.text_report import LABELS, table, to_json
from meshsim.calibrate.validation.validate_options import SUMMARY_KEYS, ReportOptions, ValidateOptions
from meshsim.errors import Interrupted, MeshsimError
from meshsim.outputs import OutputError, check_file, check_folder
from meshsim.progress import Progress


@dataclass(frozen=True)
class Outcome:
    validation: Validation
    text: str  # what the CLI prints on stdout: the table, or one JSON object
    failures: tuple[str, ...]  # gate violations (empty: passed or no gate)
    html: Path | None = None
    lab: Any = None  # the LabValidation (runs and model folders) behind ``meshsim lab validate``
    # the HTML report could not be written: the CLI prints the text (what was computed stays), then this error
    output_error: OutputError | None = None


def validate(options: ValidateOptions, report: ReportOptions = ReportOptions(),
             progress: Progress | None = None) -> Outcome:
    """Replay and compare (``validate_runs``), then gate, write and render as ``report`` says."""
    if report.html is not None:
        check_file(report.html, "html")  # before minutes of replaying, not after
    v = validate_runs(options, progress)
    if v.interrupted and not v.comparisons:
        raise Interrupted(f"validate: {v.interrupted}; nothing to report")
    if not v.comparisons:  # exit 0 after skipping every run would read as "validated"
        first = v.skipped[0] if v.skipped else "no runs"
        raise MeshsimError(f"RUN_DIR: no run could be validated ({len(v.skipped)} skipped; first: {first})")
    return render(v, report)


def render(v: Validation, report: ReportOptions) -> Outcome:
    """Gate, HTML report and the text to print, for a finished validation."""
    thresholds, html, as_json, by = report.thresholds(), report.html, report.as_json, report.by
    failures = tuple(gate(v, thresholds)) if thresholds is not None else ()
    written = None
    output_error = None
    if html is not None:
        from meshsim.calibrate.validation.html_report import write_html

        try:
            written = write_html(v, Path(html))
        except OutputError as exc:  # e.g. the disk filled during the validation: the comparisons are still shown
            output_error = exc
    if as_json:
        data = to_json(v)
        data["gate"] = None if thresholds is None else {"thresholds": thresholds, "failures": list(failures),
                                                        "passed": not failures}
        data["html"] = str(written) if written else None
        data["by_column"] = None if by is None else {"column": by, "naive_forecast": NAIVE_FORECAST,
                                                     "rows": [r.to_dict() for r in v.by_column(by)]}
        text = json.dumps(data, indent=1, allow_nan=False)
    else:
        text = table(v) + (f"\nwrote {written}" if written else "")
        if by is not None:
            text += "\n" + accuracy_lines(v.by_column(by), SUMMARY_KEYS, LABELS)
        if thresholds is not None:
            text += "\ngate: " + ("passed" if not failures else "FAILED: " + "; ".join(failures))
    return Outcome(v, text, failures, written, output_error=output_error)


def validate_lab_report(out_dir: str | Path, plan: str = "full", *, mesh: str = "envoy-lab",
                        report: ReportOptions = ReportOptions(), replications: int = 4,
                        progress: Progress | None = None) -> Outcome:
    """``meshsim lab validate``: the lab loop (``validate_lab``), then the same output as ``meshsim validate``."""
    from meshsim.calibrate.validation.lab_loop import validate_lab

    check_folder(out_dir, "out")
    if report.html is not None:
        check_file(report.html, "html")
    result = validate_lab(out_dir, plan, mesh=mesh, replications=replications, progress=progress)
    outcome = render(result.validation, report)
    if report.as_json:
        data = json.loads(outcome.text)
        data["host_drift"] = result.drift.to_dict()
        text = json.dumps(data, indent=1, allow_nan=False)
    else:
        text = f"{outcome.text}\n{result.drift.line()}"
    return replace(outcome, text=text, lab=result)
