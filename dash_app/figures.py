"""Figure builders: pure functions from prediction dicts (``Prediction.to_dict()``) and measured runs to figures.

No I/O, no app state: the same inputs always give the same figure, which is what the tests check.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .measured import MeasuredRun

Curve = Sequence[tuple[float, dict]]  # [(offered rate rps, prediction dict)] sorted by rate
PERCENTILES = (("p50", "solid"), ("p90", "dash"), ("p99", "dot"))
MESH_PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
COMPONENT_PALETTE = (
    "#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#eeca3b", "#9d755d", "#ff9da6", "#bab0ac",
)
VISIBLE_COMPONENTS = 6  # the busiest components are drawn; the rest start hidden in the legend
SATURATION_MARK_REACH = 1.25  # draw the saturation line when it lies within 125 % of the highest rate shown
CDF_RATE_TOLERANCE = 0.15
CI_FLOOR_MS = 1e-3  # a measured run is drawn on the CDF when its rate is within 15 % of the chosen rate


def mesh_colors(meshes: Sequence[str]) -> dict[str, str]:
    return {mesh: MESH_PALETTE[i % len(MESH_PALETTE)] for i, mesh in enumerate(meshes)}


def _rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _empty(title: str, message: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(
        title=title, template="plotly_white", xaxis={"visible": False}, yaxis={"visible": False},
        annotations=[{"text": message, "showarrow": False, "font": {"size": 14, "color": "#666"}}],
        margin={"t": 50, "l": 40, "r": 20, "b": 40},
    )
    return fig


def saturation(curve: Curve) -> tuple[float | None, str | None]:
    """The model's saturation rate and bottleneck for a curve (reported by the highest-rate point)."""
    for _, point in reversed(curve):
        rate = point.get("saturation_rps")
        if isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0:
            return float(rate), point.get("bottleneck")
    return None, (curve[-1][1].get("bottleneck") if curve else None)


def latency_figure(curves: Mapping[str, Curve], measured: Mapping[str, Sequence[MeasuredRun]]) -> go.Figure:
    """p50/p90/p99 against offered rate, one colour per mesh, 95 % confidence bands, measured runs as diamonds."""
    if not any(curves.values()):
        return _empty("Latency percentiles vs rate", "computing ...")
    colors = mesh_colors(list(curves))
    fig = go.Figure()
    for mesh, curve in curves.items():
        color = colors[mesh]
        rates = [r for r, _ in curve]
        for key, dash in PERCENTILES:
            values = [p["latency_ms"][key] for _, p in curve]
            cis = [p.get("latency_ci95_ms", {}).get(key) for _, p in curve]
            if all(ci is not None for ci in cis) and len(curve) > 1:
                lo = [max(ci[0], CI_FLOOR_MS) for ci in cis]  # a CI reaching 0 cannot be drawn on a log axis
                hi = [ci[1] for ci in cis]
                fig.add_trace(go.Scatter(
                    x=rates + rates[::-1], y=hi + lo[::-1], mode="lines", fill="toself", fillcolor=_rgba(color, 0.12),
                    line={"width": 0}, hoverinfo="skip", showlegend=False, legendgroup=mesh,
                    name=f"{mesh} {key} 95% CI",
                ))
            text = [
                f"{mesh} {key} at {r:g} rps: {v:.3g} ms"
                + (f" (95% CI {ci[0]:.3g}-{ci[1]:.3g})" if ci else "")
                + f"<br>achieved {p.get('achieved_rps', float('nan')):.4g} rps"
                + ("<br><b>saturated</b>" if p.get("saturated") else "")
                for r, v, ci, (_, p) in zip(rates, values, cis, curve)
            ]
            fig.add_trace(go.Scatter(
                x=rates, y=values, mode="lines+markers", name=f"{mesh} {key}", legendgroup=mesh,
                line={"color": color, "dash": dash, "width": 2},
                marker={"size": [9 if p.get("saturated") else 5 for _, p in curve],
                        "symbol": ["x" if p.get("saturated") else "circle" for _, p in curve]},
                text=text, hovertemplate="%{text}<extra></extra>",
            ))
        for run in measured.get(mesh, ()):
            keys = [k for k, _ in PERCENTILES if k in run.percentiles_ms]
            fig.add_trace(go.Scatter(
                x=[run.rps_achieved] * len(keys), y=[run.percentiles_ms[k] for k in keys], mode="markers",
                name=f"{mesh} measured", legendgroup=mesh, showlegend=False,
                marker={"symbol": "diamond", "size": 10, "color": color, "line": {"width": 1, "color": "black"}},
                text=[f"measured {k}: {run.percentiles_ms[k]:.3g} ms at {run.rps_achieved:.4g} rps<br>"
                      f"{run.run_id} ({run.source}, {run.connections} conn.)<br>{run.provenance[:90]}" for k in keys],
                hovertemplate="%{text}<extra></extra>",
            ))
    if any(measured.get(m) for m in curves):
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name="measured (fortio)",
                                 marker={"symbol": "diamond", "size": 10, "color": "#888"}))
    fig.update_layout(
        title="Latency percentiles vs offered rate (bands: 95% CI; x: saturated)", template="plotly_white",
        xaxis_title="offered rate (requests/s)", yaxis_title="latency (ms)", yaxis_type="log",
        legend={"groupclick": "toggleitem"}, margin={"t": 50, "l": 60, "r": 20, "b": 50}, hovermode="closest",
    )
    return fig


def _component_colors(curves: Mapping[str, Curve]) -> dict[str, str]:
    names = sorted({c for curve in curves.values() for _, p in curve for c in p.get("utilization", {})})
    return {name: COMPONENT_PALETTE[i % len(COMPONENT_PALETTE)] for i, name in enumerate(names)}


def _cores(point: Mapping, component: str) -> str:
    """A component's CPU in a hover text; a node's (``node:NAME``) has none of its own: its users' add up there."""
    cores = point.get("cpu_cores", {}).get(component)
    return f" ({cores:.3g} cores)" if cores is not None else ""


def utilization_figure(curves: Mapping[str, Curve]) -> go.Figure:
    """Utilisation per component against rate, one panel per mesh, the saturation rate and bottleneck marked."""
    if not any(curves.values()):
        return _empty("CPU utilisation per component", "computing ...")
    meshes = list(curves)
    fig = make_subplots(rows=1, cols=len(meshes), shared_yaxes=True, subplot_titles=meshes,
                        horizontal_spacing=0.06)
    colors = _component_colors(curves)
    shown: set[str] = set()
    for col, mesh in enumerate(meshes, start=1):
        curve = curves[mesh]
        components = sorted({c for _, p in curve for c in p.get("utilization", {})},
                            key=lambda c: -max(p.get("utilization", {}).get(c, 0.0) for _, p in curve))
        for rank, component in enumerate(components):
            points = [(r, p) for r, p in curve if component in p.get("utilization", {})]
            fig.add_trace(go.Scatter(
                x=[r for r, _ in points], y=[p["utilization"][component] for _, p in points],
                mode="lines+markers", name=component, legendgroup=component, showlegend=component not in shown,
                visible=True if rank < VISIBLE_COMPONENTS else "legendonly",
                line={"color": colors[component]}, marker={"size": 4},
                text=[f"{mesh} {component} at {r:g} rps: {p['utilization'][component]:.0%}" + _cores(p, component)
                      for r, p in points],
                hovertemplate="%{text}<extra></extra>",
            ), row=1, col=col)
            shown.add(component)
        rate, bottleneck = saturation(curve)
        if rate is not None and curve:
            axis = "" if col == 1 else str(col)
            top = max(r for r, _ in curve)
            inside = rate <= SATURATION_MARK_REACH * top  # a line far right of the data would squash the curves
            if inside:
                fig.add_vline(x=rate, line={"dash": "dash", "color": "black", "width": 1}, row=1, col=col)
            fig.add_annotation(
                x=rate if inside else top, y=1.02, xref=f"x{axis}", yref=f"y{axis}", showarrow=False,
                text=f"saturates at {rate:,.0f} rps{'' if inside else ' (beyond this range)'}<br>"
                     f"bottleneck: <b>{bottleneck}</b>",
                xanchor="right", yanchor="bottom", font={"size": 11}, bgcolor="rgba(255,255,255,0.8)",
            )
    fig.add_hline(y=1.0, line={"color": "#999", "width": 1})
    fig.update_yaxes(range=[0, 1.15], tickformat=".0%")
    fig.update_yaxes(title_text="utilisation (busy share of CPU/workers)", row=1, col=1)
    fig.update_xaxes(title_text="offered rate (requests/s)")
    fig.update_layout(title="CPU utilisation per component (dashed: saturation rate)", template="plotly_white",
                      margin={"t": 70, "l": 60, "r": 20, "b": 50}, hovermode="closest")
    return fig


def cdf_figure(points: Mapping[str, dict | None], rate: float,
               measured: Mapping[str, Sequence[MeasuredRun]]) -> go.Figure:
    """Latency CDF of each mesh at one rate; measured runs within 15 % of that rate as dashed steps."""
    title = f"Latency CDF at {rate:,.0f} rps"
    if not any(points.values()):
        return _empty(title, "computing ...")
    colors = mesh_colors(list(points))
    fig = go.Figure()
    for mesh, point in points.items():
        if point is None:
            continue
        cdf = point.get("latency_cdf_ms") or {}
        fig.add_trace(go.Scatter(
            x=cdf.get("ms", []), y=cdf.get("q", []), mode="lines", name=f"{mesh} predicted",
            line={"color": colors[mesh], "width": 2},
            hovertemplate=f"{mesh}: %{{y:.3f}} of requests within %{{x:.3g}} ms<extra></extra>",
        ))
        for run in measured.get(mesh, ()):
            if run.cdf_ms and abs(run.rps_achieved - rate) <= CDF_RATE_TOLERANCE * rate:
                fig.add_trace(go.Scatter(
                    x=[ms for ms, _ in run.cdf_ms], y=[q for _, q in run.cdf_ms], mode="lines",
                    line={"color": colors[mesh], "dash": "dash", "shape": "hv", "width": 1.5},
                    name=f"{mesh} measured: {run.run_id}",
                    hovertemplate=f"{run.run_id}: %{{y:.3f}} within %{{x:.3g}} ms<extra></extra>",
                ))
    fig.update_layout(title=title, template="plotly_white", xaxis_title="latency (ms)", xaxis_type="log",
                      yaxis_title="fraction of requests", yaxis_range=[0, 1.01],
                      legend={"orientation": "h", "yanchor": "top", "y": -0.2, "x": 0},
                      margin={"t": 50, "l": 60, "r": 20, "b": 50}, hovermode="closest")
    return fig


END_TO_END = "caller end-to-end"
NO_PROXY_VIEWS = "no sidecar or load balancer on this path, so no proxy histogram to show"
ViewBar = tuple[str, "float | None", "float | None", str]  # label, p50 ms, p99 ms, hover text


def _view_hover(label: str, values: Mapping, cis: Mapping) -> str:
    lines = [f"<b>{label}</b>"]
    for key in ("p50", "p99", "mean"):
        value, ci = values.get(key), cis.get(key)
        lines.append(f"{key} " + ("n/a" if value is None else f"{value:.3g} ms")
                     + (f" (95% CI {ci[0]:.3g}-{ci[1]:.3g})" if ci and None not in ci else ""))
    return "<br>".join(lines)


def proxy_view_bars(point: Mapping) -> list[ViewBar]:
    """The bars of one prediction: the caller's end-to-end first, then each proxy view (``proxy_latency_ms``) from
    the longest p50 to the shortest, which puts the outer proxies first along a chain."""
    views = point.get("proxy_latency_ms") or {}
    cis = point.get("proxy_latency_ci95_ms") or {}
    order = sorted(views, key=lambda name: (-(views[name].get("p50") or 0.0), name))
    labelled = [(END_TO_END, point.get("latency_ms") or {}, point.get("latency_ci95_ms") or {})]
    labelled += [(name, views[name], cis.get(name) or {}) for name in order]
    return [(label, values.get("p50"), values.get("p99"), _view_hover(label, values, ci))
            for label, values, ci in labelled]


def proxy_views_figure(points: Mapping[str, dict | None], rate: float) -> go.Figure:
    """What each proxy sees at one rate: per mesh, a horizontal p50 and p99 bar per proxy view (the span its own
    request-duration histogram times, as Prometheus shows it), under the caller's end-to-end p50/p99."""
    title = f"What each proxy sees at {rate:,.0f} rps (its request-duration histogram)"
    drawn = {mesh: point for mesh, point in points.items() if point is not None}
    if not drawn:
        return _empty(title, "computing ...")
    if not any(point.get("proxy_latency_ms") for point in drawn.values()):
        return _empty(title, NO_PROXY_VIEWS[:1].upper() + NO_PROXY_VIEWS[1:] + ".")
    bars = {mesh: proxy_view_bars(point) for mesh, point in drawn.items()}
    colors = mesh_colors(list(points))
    fig = make_subplots(rows=len(bars), cols=1, shared_xaxes=True, subplot_titles=list(bars),
                        row_heights=[len(b) for b in bars.values()], vertical_spacing=0.3 / len(bars))
    for row, (mesh, rows) in enumerate(bars.items(), start=1):
        labels = [label for label, *_ in rows]
        for key, index, alpha in (("p50", 1, 1.0), ("p99", 2, 0.4)):
            fig.add_trace(go.Bar(
                y=labels, x=[r[index] for r in rows], orientation="h", name=f"{mesh} {key}", legendgroup=mesh,
                marker={"color": _rgba(colors[mesh], alpha)}, text=[r[3] for r in rows],
                hovertemplate=f"{mesh} %{{text}}<extra></extra>", textposition="none",
            ), row=row, col=1)
        if len(rows) == 1:
            fig.add_annotation(text=NO_PROXY_VIEWS, showarrow=False, xref="x domain", yref="y domain",
                               x=0.98, y=0.5, xanchor="right", font={"color": "#666"}, row=row, col=1)
    fig.update_yaxes(autorange="reversed", automargin=True)  # the first bar (end-to-end) on top
    fig.update_xaxes(title_text="latency (ms)", row=len(bars), col=1)
    fig.update_layout(title=title, template="plotly_white", barmode="group", hovermode="closest",
                      height=140 + 34 * sum(len(b) for b in bars.values()),
                      margin={"t": 70, "l": 60, "r": 20, "b": 50})
    return fig
