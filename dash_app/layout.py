"""The page: controls on the left, the views on the right. Component ids are the contract with callbacks.py."""

from __future__ import annotations

import uuid
from typing import Any, Sequence

from dash import dcc, html

from .capacity_view import capacity_section
from .measured import MeasuredSet
from .what_if import UPLOADED, MeshFeatures

DEFAULTS: dict[str, Any] = {
    "topology": "chain3", "meshes": ["istio", "linkerd"], "lb": "client", "load": "fortio",
    "connections": 16, "rate_min": 100, "rate_max": None, "cdf_rate": 1000, "payload_bytes": None,
    "proxy_workers": None, "proxy_cpu_limit": None,
}
# Control id -> key in the controls dict handed to what_if_from_controls (same order as the callback's States).
CONTROL_IDS = {
    "topology": "topology", "meshes": "meshes", "features": "features", "features-off": "features_off", "lb": "lb",
    "load": "load",
    "connections": "connections", "rate-min": "rate_min", "rate-max": "rate_max", "cdf-rate": "cdf_rate",
    "payload": "payload_bytes", "workers": "proxy_workers", "cpu-limit": "proxy_cpu_limit",
}

LABEL = {"fontWeight": "600", "fontSize": "13px", "marginTop": "10px", "display": "block"}
INPUT = {"width": "100%", "boxSizing": "border-box"}
CARD = {"background": "white", "border": "1px solid #ddd", "borderRadius": "6px", "padding": "8px",
        "marginBottom": "10px"}


def _number(cid: str, label: str, value: Any, placeholder: str, step: Any = "any") -> list:
    return [
        html.Label(label, htmlFor=cid, style=LABEL),
        dcc.Input(id=cid, type="number", value=value, placeholder=placeholder, debounce=True, step=step,
                  style=INPUT),
    ]


def topology_choices(topologies: Sequence[str]) -> list[str]:
    """Built-in names for the dropdown; the catalog's generic ``chainN`` becomes a few concrete chains."""
    names = [t for t in topologies if t != "chainN"]
    if "chainN" in topologies:
        names += [c for c in ("chain5", "chain7", "chain10") if c not in names]
    return names


def controls(topologies: Sequence[str], meshes: Sequence[str], features: MeshFeatures) -> html.Div:
    default_meshes = [m for m in DEFAULTS["meshes"] if m in meshes] or list(meshes[:1])
    defaults = "; ".join(f"{m}: {', '.join(fs)}" for m, fs in features.defaults.items() if fs) or "none"
    switchable = sorted({f for fs in features.defaults.values() for f in fs})
    default_topology = DEFAULTS["topology"] if DEFAULTS["topology"] in topologies else (list(topologies) or [""])[0]
    return html.Div([
        html.H3("What if ...", style={"marginTop": 0}),
        html.Label("Topology", htmlFor="topology", style=LABEL),
        dcc.Dropdown(id="topology", value=default_topology, clearable=False,
                     options=[{"label": t, "value": t} for t in topology_choices(topologies)]
                     + [{"label": "uploaded YAML", "value": UPLOADED}]),
        dcc.Upload(id="upload", children=html.Div(["or drop / ", html.A("choose"), " a topology YAML"]),
                   multiple=False, max_size=256 * 1024,
                   style={"border": "1px dashed #aaa", "borderRadius": "4px", "padding": "6px", "marginTop": "6px",
                          "textAlign": "center", "fontSize": "12px", "cursor": "pointer"}),
        html.Div(id="upload-name", style={"fontSize": "12px", "color": "#555"}),
        html.Label("Meshes (side by side)", style=LABEL),
        dcc.Checklist(id="meshes", options=[{"label": f" {m}", "value": m} for m in meshes], value=default_meshes,
                      inline=True, inputStyle={"marginLeft": "6px"}),
        html.Label("Features: turn on", style=LABEL),
        dcc.Checklist(id="features", options=[{"label": f" {f}", "value": f} for f in features.all],
                      value=[], inline=True, inputStyle={"marginLeft": "6px"}),
        html.Label("... turn off (mesh defaults)", style=LABEL),
        dcc.Checklist(id="features-off", options=[{"label": f" {f}", "value": f} for f in switchable],
                      value=[], inline=True, inputStyle={"marginLeft": "6px"}),
        html.Div(f"defaults: {defaults}", style={"fontSize": "11px", "color": "#666"}),
        html.Label("Load balancing", style=LABEL),
        dcc.RadioItems(id="lb", value=DEFAULTS["lb"], inline=True, inputStyle={"marginLeft": "6px"},
                       options=[{"label": " client-side", "value": "client"},
                                {"label": " proxy LB", "value": "proxy"}]),
        html.Label("Load model", style=LABEL),
        dcc.RadioItems(id="load", value=DEFAULTS["load"], inline=True, inputStyle={"marginLeft": "6px"},
                       options=[{"label": " fortio (closed loop)", "value": "fortio"},
                                {"label": " open (Poisson)", "value": "open"}]),
        *_number("connections", "Connections (fortio -c; open: spread over)", DEFAULTS["connections"], "16", step=1),
        *_number("rate-min", "Rate from (requests/s)", DEFAULTS["rate_min"], "100"),
        *_number("rate-max", "Rate to (requests/s)", DEFAULTS["rate_max"], "auto: past the first saturation"),
        *_number("cdf-rate", "CDF at rate (requests/s)", DEFAULTS["cdf_rate"], "1000"),
        *_number("payload", "Payload (bytes)", DEFAULTS["payload_bytes"], "model default", step=1),
        *_number("workers", "Proxy workers", DEFAULTS["proxy_workers"], "model default", step=1),
        *_number("cpu-limit", "Proxy CPU limit (cores)", DEFAULTS["proxy_cpu_limit"], "no limit"),
        html.Div([
            html.Button("Pin as baseline", id="pin", n_clicks=0, style={"marginRight": "6px"}),
            html.Button("Unpin", id="unpin", n_clicks=0),
        ], style={"marginTop": "14px"}),
        html.Div(id="pinned-label", style={"fontSize": "12px", "color": "#555", "marginTop": "4px"}),
    ], style={"width": "260px", "flex": "0 0 260px", "padding": "12px", "background": "#f7f7f9",
              "borderRight": "1px solid #ddd", "fontFamily": "sans-serif", "fontSize": "13px"})


def views(measured: MeasuredSet) -> html.Div:
    skipped = [html.Li(s) for s in measured.skipped]
    return html.Div([
        html.Div(id="message", role="alert",
                 style={"color": "#a40000", "fontWeight": "600", "minHeight": "1.2em", "whiteSpace": "pre-wrap"}),
        html.Div([
            html.Progress(id="progress", value="0", max="1", style={"width": "240px", "verticalAlign": "middle"}),
            html.Span(id="progress-text", style={"marginLeft": "8px", "fontSize": "12px", "color": "#555"}),
        ]),
        dcc.Interval(id="tick", interval=100, max_intervals=0),  # callbacks.update allows one tick at a time
        dcc.Store(id="pinned", data=None),
        dcc.Store(id="client", data=uuid.uuid4().hex),  # one id per page load (layout is built per request)
        html.Div([dcc.Graph(id="latency-graph", config={"displaylogo": False})], style=CARD),
        html.Div([dcc.Graph(id="util-graph", config={"displaylogo": False})], style=CARD),
        html.Div([
            html.Div([dcc.Graph(id="cdf-graph", config={"displaylogo": False})], style={"flex": "1 1 50%"}),
            html.Div([
                html.H4("What changed (pinned baseline -> current)", style={"margin": "6px 0"}),
                html.Ul(id="summary", children=[html.Li("Pin a scenario as the baseline, then change a control.")],
                        style={"paddingLeft": "18px"}),
            ], style={"flex": "1 1 50%", "fontSize": "13px", "paddingLeft": "8px"}),
        ], style={**CARD, "display": "flex"}),
        html.Div([dcc.Graph(id="proxy-graph", config={"displaylogo": False})], style=CARD),
        html.Div([
            html.Div([
                html.H4("Numbers", style={"display": "inline-block", "margin": "4px 12px 4px 0"}),
                html.Button("Download CSV", id="download-csv", n_clicks=0, style={"marginRight": "6px"}),
                html.Button("Download JSON", id="download-json", n_clicks=0),
                dcc.Download(id="download"),
            ]),
            html.Div(id="table", style={"maxHeight": "340px", "overflowY": "auto"}),
        ], style=CARD),
        capacity_section(CARD),
        html.Div([
            html.H4("Measurements", style={"margin": "4px 0"}),
            html.Div(id="measured-info", style={"fontSize": "12px"}),
            html.Ul(skipped, style={"fontSize": "12px", "color": "#a40000"}) if skipped else None,
            html.H4("Validation", style={"margin": "8px 0 4px"}),
            html.Div(id="validation", style={"fontSize": "12px"}),
        ], style=CARD),
    ], style={"flex": "1 1 auto", "padding": "12px", "minWidth": "0", "fontFamily": "sans-serif",
              "background": "#eef0f3"})


def build_layout(topologies: Sequence[str], meshes: Sequence[str], features: MeshFeatures,
                 measured: MeasuredSet) -> html.Div:
    return html.Div([controls(topologies, meshes, features), views(measured)],
                    style={"display": "flex", "alignItems": "stretch", "minHeight": "100vh", "margin": "-8px"})


def table(rows: Sequence[dict], columns: Sequence[str]) -> html.Table:
    """A plain HTML table of ``rows`` (values already rounded)."""
    cell = {"padding": "2px 6px", "borderBottom": "1px solid #eee", "textAlign": "right", "fontSize": "12px"}
    head = html.Tr([html.Th(c, style={**cell, "position": "sticky", "top": 0, "background": "#fafafa"})
                    for c in columns])
    body = [html.Tr([html.Td("" if r.get(c) is None else str(r.get(c)), style=cell) for c in columns]) for r in rows]
    return html.Table([html.Thead(head), html.Tbody(body)], style={"borderCollapse": "collapse", "width": "100%"})
