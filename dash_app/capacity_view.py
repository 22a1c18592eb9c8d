"""The capacity view: the highest rate that meets an SLO, for each chosen mesh, as bars with 95 % CIs.

It asks the same library function as ``meshsim capacity`` (``meshsim.sim.experiments.capacity_search.find_capacity``), with
the app's short interactive settings; the callback only delegates to :meth:`CapacityView.compute`, and the figure is
built by the pure :func:`capacity_bars`. Results are cached per (scenario, mesh, SLO), so pressing the button again
costs nothing.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import plotly.graph_objects as go
from dash import dcc, html

from meshsim.capacity_slo import Slo, parse_slo
from meshsim.errors import FieldError, MeshsimError
from meshsim.request import PredictOptions

from .what_if import MeshFeatures, WhatIf

CapacityFinder = Callable[..., Any]  # find_capacity(options, slo, replications, processes) -> Capacity
DEFAULT_SLO = "p99=20ms"


def capacity_section(card_style: Mapping[str, str]) -> html.Div:
    """Controls and graph of the view (ids: capacity-slo, capacity-run, capacity-message, capacity-graph)."""
    return html.Div([
        html.H4("Capacity under an SLO", style={"display": "inline-block", "margin": "4px 12px 4px 0"}),
        dcc.Input(id="capacity-slo", type="text", value=DEFAULT_SLO, debounce=True, placeholder="p99=20ms,p50=5ms",
                  style={"width": "180px", "marginRight": "6px"}),
        html.Button("Find max rps", id="capacity-run", n_clicks=0),
        html.Div(id="capacity-message", style={"fontSize": "12px", "color": "#555", "minHeight": "1.2em"}),
        dcc.Loading(dcc.Graph(id="capacity-graph", figure=capacity_bars({}), config={"displaylogo": False})),
    ], style=dict(card_style))


def capacity_bars(results: Mapping[str, Mapping[str, Any]], slo_text: str = "") -> go.Figure:
    """One bar per mesh: ``max_rps`` with its 95 % CI, the binding objective and bottleneck in the hover (pure)."""
    meshes = list(results)
    values = [results[m]["max_rps"] for m in meshes]
    lows = [results[m]["max_rps_ci95"][0] for m in meshes]
    highs = [results[m]["max_rps_ci95"][1] for m in meshes]
    fig = go.Figure(go.Bar(
        x=meshes, y=values, name="max rps",
        error_y={"type": "data", "symmetric": False,
                 "array": [(h - v) if h is not None else 0 for v, h in zip(values, highs)],
                 "arrayminus": [(v - lo) if lo is not None else 0 for v, lo in zip(values, lows)]},
        customdata=[[results[m]["binding"], results[m]["bottleneck"]] for m in meshes],
        hovertemplate="%{x}: %{y:.0f} rps<br>binding %{customdata[0]}<br>bottleneck %{customdata[1]}<extra></extra>"))
    title = f"highest rate meeting {slo_text}" if slo_text else "highest rate meeting the SLO (press Find max rps)"
    fig.update_layout(title=title, yaxis_title="max offered rps (95 % CI)", height=340,
                      margin={"l": 60, "r": 20, "t": 50, "b": 40})
    return fig


@dataclass
class CapacityView:
    """Cached capacity searches for the app (one per app)."""

    finder: CapacityFinder
    features: MeshFeatures
    replications: int = 3  # the CLI's default: with 2, the Student-t factor (12.7) makes every CI span the axis
    probe_duration_s: float = 1.0  # simulated seconds per probe: short, the app is interactive
    max_entries: int = 256
    _cache: "OrderedDict[tuple, dict]" = field(default_factory=OrderedDict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def options(self, scenario: WhatIf, topology: Any, mesh: str) -> PredictOptions:
        return PredictOptions(
            topology=topology, mesh=mesh, lb=scenario.lb, load=scenario.load, connections=scenario.connections,
            features=self.features.request(mesh, scenario.features, scenario.features_off),
            payload_bytes=scenario.payload_bytes, proxy_workers=scenario.proxy_workers,
            proxy_cpu_limit=scenario.proxy_cpu_limit, seed=scenario.seed, rps=scenario.rate_min,
            duration_s=self.probe_duration_s, processes=1)  # no process pool forked from a threaded web server

    def compute(self, scenario: WhatIf, topology: Any, slo_text: str) -> tuple[go.Figure, str]:
        """The figure and a one-line message; a user error (bad SLO, a model that refuses) becomes the message."""
        try:
            slo: Slo = parse_slo(slo_text or "")
        except FieldError as exc:  # parse_slo names the field ``slo``: the page says SLO once, then the problem
            return capacity_bars({}), f"SLO: {exc.problem}"
        results: dict[str, dict] = {}
        failures = []
        for mesh in scenario.meshes:
            key = (scenario.model_key(), scenario.rate_min, mesh, slo.limits)
            with self._lock:
                hit = self._cache.get(key)
            if hit is None:
                try:
                    hit = self.finder(self.options(scenario, topology, mesh), slo, self.replications, 1).to_dict()
                except MeshsimError as exc:
                    failures.append(f"{mesh}: {exc}")
                    continue
                with self._lock:
                    self._cache[key] = hit
                    while len(self._cache) > self.max_entries:
                        self._cache.popitem(last=False)
            results[mesh] = hit
        message = "; ".join(failures) or (f"{len(results)} mesh(es), {self.replications} bisections each "
                                          "(common random numbers across rates)")
        return capacity_bars(results, slo_text), message
