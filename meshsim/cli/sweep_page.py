"""The HTML page of a sweep (``meshsim sweep --html``): latency-vs-rate curves from the sweep's table (a pure
function of the table), written by the front end once the sweep returns its table.

One panel per percentile (p50, p99), one curve per combination of the non-rate axes, the 95 % CI as error bars;
saturated points are drawn hollow. Plotly is imported here only (extra ``.[dash]`` or ``.[fit]``).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from meshsim.errors import FieldError
from meshsim.outputs import check_file, write_file

CURVE_KEYS = ("topology", "mesh", "features", "lb", "load")
PANELS = ("p50", "p99")


def curve_label(row: pd.Series | dict) -> str:
    return " / ".join(str(row[k]) for k in CURVE_KEYS)


def sweep_figure(table: pd.DataFrame) -> "object":
    """A plotly Figure: for each panel's percentile, value vs offered rps with CI error bars, by curve."""
    from plotly.subplots import make_subplots
    import plotly.graph_objects as go

    fig = make_subplots(rows=1, cols=len(PANELS), subplot_titles=[f"{p} latency (ms)" for p in PANELS])
    for n, (keys, curve) in enumerate(table.groupby(list(CURVE_KEYS), sort=False)):
        curve = curve.sort_values("rps")
        label = " / ".join(str(k) for k in keys)
        symbols = ["circle-open" if s else "circle" for s in curve["saturated"]]
        for col, key in enumerate(PANELS, start=1):
            value = curve[f"{key}_ms"]
            fig.add_trace(go.Scatter(
                x=curve["rps"], y=value, name=label, legendgroup=label, showlegend=col == 1, mode="lines+markers",
                marker={"symbol": symbols}, line={"color": _color(n)},
                error_y={"type": "data", "symmetric": False, "array": curve[f"{key}_ms_hi"] - value,
                         "arrayminus": value - curve[f"{key}_ms_lo"]}), row=1, col=col)
    fig.update_xaxes(title_text="offered rps")
    fig.update_layout(title="meshsim sweep (hollow markers: saturated)", height=480)
    return fig


def _color(n: int) -> str:
    palette = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
    return palette[n % len(palette)]


def check_sweep_page(path: str | Path) -> None:
    """Before any point runs: plotly is installed and ``path`` can be written (FieldError on ``html``)."""
    try:
        import plotly  # noqa: F401
    except ModuleNotFoundError:
        raise FieldError("html", "the report needs the Python package 'plotly': pip install 'meshsim[dash]'") \
            from None
    check_file(path, "html")


def write_sweep_page(table: pd.DataFrame, path: str | Path) -> None:
    """A self-contained HTML page (plotly.js inlined, opens offline) with the curves and the table."""
    figure = sweep_figure(table)
    body = figure.to_html(full_html=False, include_plotlyjs=True)  # type: ignore[attr-defined]
    html = ("<!doctype html><html><head><meta charset='utf-8'><title>meshsim sweep</title></head><body>"
            f"<h1>meshsim sweep</h1><p>{len(table)} points</p>{body}"
            f"{table.to_html(index=False, float_format=lambda v: f'{v:.4g}')}</body></html>")
    write_file(path, html, "html")
