"""Measured vs predicted for summary rows (``meshsim validate --rows``): a model fitted by ``meshsim fit --rows``
replayed on a pipeline's rows.

Each row is simulated with its own fortio load the way the fit simulated it (``calibrate/fit/row_simulation.py``),
with the settings the fit recorded in the model (``calibration.row_settings``: topology, fortio's pacing and
warm-up, workers, requests per row, seed), and compared on p50/p90/p99 and the two sidecars' CPU. Rows the model
was fitted from are marked fit and left out of the summary unless asked for, as ``meshsim validate`` does for run
folders.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any, Mapping, Sequence

from meshsim.calibrate.fit.model_file import read_model
from meshsim.calibrate.fit.row_simulation import LEVELS, SIDECARS, RowSettings, RowSimulator
from meshsim.calibrate.measure.summary_rows import SummaryRow, read_rows
from meshsim.calibrate.validation.column_accuracy import NAIVE_FORECAST, ScoredRun, accuracy_lines, column_accuracy
from meshsim.errors import FieldError
from meshsim.progress import Progress

ROW_KEYS = ("p50", "p90", "p99", "cpu")
ROW_LABELS = {"p50": "p50", "p90": "p90", "p99": "p99", "cpu": "sidecar cpu"}


def row_settings(model: Mapping[str, Any], path: str | Path) -> RowSettings:
    """The settings ``meshsim fit --rows`` recorded in the model (how the rows' runs were made)."""
    recorded = (model.get("calibration") or {}).get("row_settings")
    if not isinstance(recorded, Mapping):
        raise FieldError("model", f"{path}: no calibration.row_settings: --rows replays a model fitted by "
                                  "meshsim fit --rows")
    version, warmup = recorded.get("fortio_version"), recorded.get("fortio_warmup")
    return RowSettings(topology=str(recorded.get("topology", "single")), jitter=bool(recorded.get("jitter")),
                       uniform=bool(recorded.get("uniform")),
                       fortio_version=None if version in (None, "default") else str(version),
                       fortio_warmup=warmup if warmup in ("parallel", "sequential") else None,
                       workers=int(recorded.get("proxy_workers", 2)),
                       requests=int(recorded.get("requests_per_row", 3000)), seed=int(recorded.get("seed", 1)))


def _values(quantiles_s: Sequence[float], cpu_cores: Mapping[str, float], baseline: bool) -> dict[str, float]:
    values = {f"p{round(level * 100)}": q * 1e3 for level, q in zip(LEVELS, quantiles_s)}
    sides = [cpu_cores.get(s, math.nan) for s in SIDECARS]
    values["cpu"] = math.nan if baseline else sum(sides)  # a bypassed sidecar's CPU is not the model's to predict
    return values


def scored_row(row: SummaryRow, role: str, predicted_quantiles: Sequence[float],
               predicted_cpu: Mapping[str, float]) -> ScoredRun:
    measured = _values([row.quantiles_s[level] for level in LEVELS], row.cpu_cores, row.bypassed)
    return ScoredRun(row.id, row.mode, row.rps, row.connections, row.payload_bytes, role, measured,
                     _values(predicted_quantiles, predicted_cpu, row.bypassed))


def _summary(counted: Sequence[ScoredRun]) -> dict[str, dict[str, float]]:
    out = {}
    for key in ROW_KEYS:
        errors = [e for e in (r.error(key) for r in counted) if math.isfinite(e)]
        if errors:
            out[key] = {"n": len(errors), "median_abs_error": round(statistics.median(errors), 4),
                        "worst_abs_error": round(max(errors), 4)}
    return out


def _text(model: str, scored: Sequence[ScoredRun], counted: Sequence[ScoredRun], by: str | None,
          include_fit: bool) -> str:
    lines = [f"model {model}; {len(scored)} summary row(s) simulated with the fit's row settings",
             f"{'row':56} {'role':8} " + " ".join(f"{ROW_LABELS[k] + ' meas/pred':>24}" for k in ROW_KEYS)]
    for r in scored:
        cells = [f"{r.measured[k]:.3f}/{r.predicted[k]:.3f} {_pct(r, k):>6}" if math.isfinite(r.measured[k]) else "-"
                 for k in ROW_KEYS]
        lines.append(f"{r.name[:56]:56} {r.role:8} " + " ".join(f"{c:>24}" for c in cells))
    what = "held-out + fit rows" if include_fit else "held-out rows"
    summary = _summary(counted)
    lines.append("")
    lines.append(f"summary over {len(counted)} {what}, |error| median/worst: " + ", ".join(
        f"{ROW_LABELS[k]} {s['median_abs_error']:.1%}/{s['worst_abs_error']:.1%}" for k, s in summary.items())
                 if summary else f"summary: no {what} to summarise (--include-fit-runs to judge the fit)")
    if by is not None:
        lines.append(accuracy_lines(column_accuracy(scored, counted, by, ROW_KEYS), ROW_KEYS, ROW_LABELS))
    return "\n".join(lines)


def _pct(r: ScoredRun, key: str) -> str:
    measured, predicted = r.measured[key], r.predicted[key]
    return f"{(predicted - measured) / measured:+.0%}" if measured and math.isfinite(predicted) else "-"


def validate_rows(model: str | Path, csvs: Sequence[str | Path], *, by: str | None = None, as_json: bool = False,
                  include_fit_runs: bool = False, progress: Progress | None = None) -> str:
    """Replay every summary row of ``csvs`` on ``model`` and return the text (or JSON) ``meshsim validate`` prints."""
    report_progress = progress or (lambda _m: None)
    data = read_model(model)
    settings = row_settings(data, model)
    rows, _skipped = read_rows(csvs)
    fitted = set((data.get("calibration") or {}).get("fitted_from") or [])
    simulator = RowSimulator(settings)
    scored = []
    try:
        for index, row in enumerate(rows, 1):
            report_progress(f"[{index}/{len(rows)}] simulating {row.id}")
            simulated = simulator.simulate(data, row)
            scored.append(scored_row(row, "fit" if row.id in fitted else "held-out", simulated.quantiles_s,
                                     simulated.cpu_cores))
    finally:
        simulator.close()
    counted = [r for r in scored if r.role == "held-out" or include_fit_runs]
    if not as_json:
        return _text(str(model), scored, counted, by, include_fit_runs)
    return json.dumps({
        "model": str(model), "include_fit_runs": include_fit_runs,
        "rows": [{"row": r.name, "role": r.role, "rps": r.rps, "connections": r.connections,
                  "measured": _finite(r.measured), "predicted": _finite(r.predicted)} for r in scored],
        "summary": _summary(counted),
        "by_column": None if by is None else {"column": by, "naive_forecast": NAIVE_FORECAST,
                                              "rows": [a.to_dict() for a in column_accuracy(scored, counted, by,
                                                                                            ROW_KEYS)]}},
        indent=1, allow_nan=False)


def _finite(values: Mapping[str, float]) -> dict[str, float | None]:
    return {k: round(v, 5) if math.isfinite(v) else None for k, v in values.items()}
