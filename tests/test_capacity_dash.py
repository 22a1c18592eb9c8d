"""The Dash capacity view: its pure figure builder, and its callback over the real ``find_capacity`` (no browser)."""

from __future__ import annotations

import pytest
from dash import no_update

from meshsim.capacity_slo import parse_slo
from meshsim.catalog import list_meshes, list_topologies, load_mesh
from meshsim.dash_app.app import create_app
from meshsim.dash_app.callbacks import Callbacks
from meshsim.dash_app.capacity_view import CapacityView, capacity_bars
from meshsim.dash_app.layout import CONTROL_IDS, DEFAULTS
from meshsim.dash_app.measured import load_measurements
from meshsim.dash_app.sweep import Sweeper
from meshsim.dash_app.what_if import MeshFeatures
from meshsim.sim.experiments.capacity_search import find_capacity
from meshsim.sim.experiments.predict import predict_options
from meshsim.topology import load_topology_text


def test_capacity_bars_show_each_mesh_with_its_interval() -> None:
    results = {"istio": {"max_rps": 900.0, "max_rps_ci95": [850.0, 960.0], "binding": "p99", "bottleneck": "s1"},
               "none": {"max_rps": 2000.0, "max_rps_ci95": [None, None], "binding": "p50", "bottleneck": "app"}}
    bar = capacity_bars(results, SLO).data[0]
    assert list(bar.x) == ["istio", "none"] and list(bar.y) == [900.0, 2000.0]
    assert list(bar.error_y.array) == [60.0, 0] and list(bar.error_y.arrayminus) == [50.0, 0]
    assert [list(c) for c in bar.customdata] == [["p99", "s1"], ["p50", "app"]]
    assert capacity_bars({}).data[0].x == ()


class Recorded:
    """The real find_capacity, recording what it was asked."""

    def __init__(self) -> None:
        self.calls: list = []
        self.results: list = []

    def __call__(self, options, slo, replications, processes):
        self.calls.append((options, slo, replications, processes))
        self.results.append(find_capacity(options, slo, replications, processes))
        return self.results[-1]


SLO = "p99=3ms"


def test_the_view_asks_the_library_once_per_mesh_and_caches() -> None:
    meshes = list_meshes()
    features = MeshFeatures.from_models({m: load_mesh(m) for m in meshes})
    finder = Recorded()
    view = CapacityView(finder, features, replications=2, probe_duration_s=0.2)
    callbacks = Callbacks(sweeper=Sweeper(predictor=predict_options, parse_topology=load_topology_text,
                                          features=features),
                          measured=load_measurements([]), topologies=list_topologies(), meshes=meshes, capacity=view)
    controls = {**DEFAULTS, "features": [], "features_off": [], "topology": "single", "meshes": ["istio", "linkerd"],
                "load": "open", "rate_min": 100, "rate_max": None, "cdf_rate": 1000}
    values = [controls[key] for key in CONTROL_IDS.values()]
    figure, message = callbacks.capacity_bars(SLO, None, *values, None)
    bar = figure.data[0]
    assert list(bar.x) == ["istio", "linkerd"] and "2 mesh(es)" in message
    assert [call[0].mesh for call in finder.calls] == ["istio", "linkerd"]
    # the bars are what the library (the CLI's road) returned for the options the view built from the controls
    assert finder.calls[0][0].topology == "single" and finder.calls[0][1] == parse_slo(SLO)
    assert finder.calls[0][2:] == (2, 1)  # no process pool forked from the threaded web server
    for value, result in zip(bar.y, finder.results):
        assert value == pytest.approx(result.max_rps, abs=0.05) and value > 0
    again, _ = callbacks.capacity_bars(SLO, None, *values, None)
    assert len(finder.calls) == 2 and list(again.data[0].y) == list(bar.y)
    # a bad SLO is a message on the page, not an exception
    _, bad = callbacks.capacity_bars("p99=soon", None, *values, None)
    assert bad == "SLO: expected PERCENTILE=LIMIT like p99=20ms, got 'p99=soon'" and len(finder.calls) == 2
    out = callbacks.capacity_bars(SLO, None, *[v if k != "connections" else -3
                                                     for k, v in zip(CONTROL_IDS.values(), values)], None)
    assert out[0] is no_update and "onnections" in out[1]


def test_the_page_has_the_capacity_view() -> None:
    layout = create_app(include_shipped=False, topologies=["single"], meshes=["none"]).layout()
    text = str(layout)
    assert "capacity-graph" in text and "capacity-slo" in text and "capacity-run" in text
