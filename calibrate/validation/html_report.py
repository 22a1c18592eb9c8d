"""The ``--html`` report: one self-contained page (plotly.js inlined once) with measured-vs-predicted CDF overlays per
run and relative error vs requested rate per percentile."""

from __future__ import annotations

import html as _html
import math
from pathlib import Path

from meshsim.errors import ComponentMissing
from meshsim.outputs import write_file

from meshsim.calibrate.validation.compare import Validation
from meshsim.calibrate.validation.validate_options import SUMMARY_KEYS
from meshsim.calibrate.validation.text_report import LABELS, summary_line

ROLE_COLOUR = {"held-out": "#1f77b4", "fit": "#7f7f7f", "topology": "#bcbd22"}


def _figures(v: Validation) -> list[tuple[str, object]]:
    try:
        import plotly.graph_objects as go
    except ImportError as exc:
        raise ComponentMissing(f"the HTML report needs plotly ({exc.name} missing); pip install plotly") from None
    figs: list[tuple[str, object]] = []
    err = go.Figure()
    for key in SUMMARY_KEYS:
        pts = [(c.rps, c.error(key) * 100, f"{c.run_id} ({c.role}{', saturated' if c.status != 'ok' else ''})")
               for c in v.comparisons if math.isfinite(c.error(key))]
        if pts:
            err.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], text=[p[2] for p in pts],
                                     mode="markers", name=LABELS[key], hovertemplate="%{text}<br>%{y:.1f} %"))
    err.add_hline(y=0, line_dash="dot")
    err.update_layout(title="Relative error (predicted - measured) / measured vs requested rate",
                      xaxis_title="requested rps", yaxis_title="error (%)", template="plotly_white", height=420)
    figs.append(("Error vs rate", err))
    for c in v.comparisons:
        fig = go.Figure()
        fig.add_trace(go.Scatter(x=c.measured_cdf[0], y=c.measured_cdf[1], mode="lines", name="measured",
                                 line={"color": "black"}))
        fig.add_trace(go.Scatter(x=c.predicted_cdf[0], y=c.predicted_cdf[1], mode="lines", name="predicted",
                                 line={"color": ROLE_COLOUR.get(c.role, "#1f77b4"), "dash": "dash"}))
        flag = " SATURATED" if c.status != "ok" else ""
        fig.update_layout(title=f"{c.run_id} [{c.role}{flag}]: {c.setup}, {c.rps:g} rps, c={c.connections}",
                          xaxis_title="latency (ms, log)", xaxis_type="log", yaxis_title="fraction of requests",
                          template="plotly_white", height=380)
        figs.append((c.run_id, fig))
    return figs


def _row(c) -> str:  # type: ignore[no-untyped-def]
    cells = [c.run_id, c.role + (" (saturated)" if c.status != "ok" else ""), c.setup, f"{c.rps:g}",
             str(c.connections)]
    for key in ("p50", "p99", "p999"):
        m = c.latency_ms[key]
        e = m.rel_error
        bucket = f", measured in bucket ({m.resolution[0]:g}, {m.resolution[1]:g}]" if m.resolution else ""
        cells.append(f"{m.measured:.3f} / {m.predicted:.3f} ({e * 100:+.0f} %{bucket})" if math.isfinite(e) else "-")
    a = c.achieved_rps
    cells.append(f"{a.measured:.0f} / {a.predicted:.0f} ({a.rel_error * 100:+.0f} %)")
    return "<tr>" + "".join(f"<td>{_html.escape(x)}</td>" for x in cells) + "</tr>"


def write_html(v: Validation, path: Path) -> Path:
    """Write the report atomically (only onto a regular file); returns the path."""
    figs = _figures(v)
    parts = []
    for index, (title, fig) in enumerate(figs):
        body = fig.to_html(full_html=False, include_plotlyjs=(index == 0))  # type: ignore[attr-defined]
        parts.append(f"<h3>{_html.escape(title)}</h3>{body}")
    head = ("<tr><th>run</th><th>role</th><th>setup</th><th>rps</th><th>c</th><th>p50 ms meas / pred</th>"
            "<th>p99 ms</th><th>p99.9 ms</th><th>rps</th></tr>")
    rows = "".join(_row(c) for c in v.comparisons)
    skipped = "".join(f"<li>{_html.escape(s)}</li>" for s in v.skipped)
    notes = "".join(f"<li>{_html.escape(c.run_id)}: {_html.escape(n)}</li>" for c in v.comparisons for n in c.notes)
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>meshsim validate: {_html.escape(v.model_name)}"
            "</title><style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:3px 6px;font-size:13px}</style></head><body>"
            f"<h1>meshsim validate: {_html.escape(v.model)}</h1><p>{_html.escape(summary_line(v)).replace(chr(10), '<br>')}</p>"
            f"<p>Runs marked fit were used to fit the model and are excluded from the summary"
            f"{' (included here: --include-fit-runs)' if v.include_fit_runs else ''}.</p>"
            f"<table>{head}{rows}</table>" + (f"<h3>Notes</h3><ul>{notes}</ul>" if notes else "")
            + (f"<h3>Skipped</h3><ul>{skipped}</ul>" if skipped else "")
            + "".join(parts) + "</body></html>")
    return write_file(path, page, "html")
