"""The Dash app's road into the simulator: cached, budgeted, coarse-then-fine rate sweeps over the real predict."""

from __future__ import annotations

import pytest

from meshsim.catalog import load_mesh
from meshsim.dash_app.what_if import MeshFeatures, WhatIf
from meshsim.dash_app.sweep import AUTO_RANGE_FACTOR, PointSettings, Sweeper, grid, nice_rate
from dataclasses import asdict

from meshsim.sim.experiments.predict import predict_options
from meshsim.topology import load_topology_text

SETTINGS = PointSettings(replications=2, requests_per_replication=300, min_duration_s=0.2, max_duration_s=2.0,
                         coarse_points=3, fine_points=5)


class Recorded:
    """The real predict_options, remembering the options of every call (as a dict)."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def __call__(self, options):
        self.calls.append(asdict(options))
        return predict_options(options)


@pytest.fixture
def sweeper() -> tuple[Sweeper, Recorded]:
    recorded = Recorded()
    features = MeshFeatures.from_models({m: load_mesh(m) for m in ("istio", "none")})
    return Sweeper(predictor=recorded, parse_topology=load_topology_text, settings=SETTINGS,
                   features=features), recorded


def scenario(**changes) -> WhatIf:
    base = dict(topology="single", topology_text=None, meshes=("istio", "none"), load="fortio", connections=4,
                rate_min=100.0, rate_max=None, cdf_rate=400.0)
    return WhatIf(**{**base, **changes})


def test_first_points_come_first_and_an_automatic_range_follows_the_first_saturation(sweeper):
    sw, recorded = sweeper
    s = scenario()
    plan = sw.plan(s, None)
    assert [(m, r) for _, m, r in plan[:2]] == [("istio", 100.0), ("none", 100.0)]
    assert sw.rates(s, "istio") is None  # the range waits for the first points
    total = len(plan)
    view = sw.advance(s, None, budget_s=0.0)
    assert view.done == 1 and len(recorded.calls) == 1  # a zero budget still makes progress, one point
    view = sw.advance(s, None, budget_s=0.0)
    assert view.done == 2 and view.total == total  # placeholders kept the total steady
    first = {m: sw.cached(s, m, 100.0) for m in s.meshes}
    estimates = []
    for point in first.values():
        busiest = max(point["utilization"].values())
        estimates.append(point["saturation_rps"] or point["achieved_rps"] / busiest)
    top = nice_rate(AUTO_RANGE_FACTOR * min(estimates))
    assert sw.rates(s, "istio") == sw.rates(s, "none") == grid(100.0, top, SETTINGS.fine_points)
    coarse = grid(100.0, top, SETTINGS.coarse_points)
    order = [(m, r) for _, m, r in sw.plan(s, None)]
    assert order[2:2 + 2 * len(coarse[1:])] == [(m, r) for r in coarse[1:] for m in s.meshes]
    assert order.index(("istio", 400.0)) < order.index(("istio", grid(100.0, top, 5)[1]))  # CDF before fine


def test_points_are_cached_under_their_full_inputs(sweeper):
    sw, recorded = sweeper
    s = scenario(meshes=("none",), rate_max=800.0)
    for _ in range(20):
        if sw.advance(s, None, budget_s=5.0).complete:
            break
    calls = len(recorded.calls)
    assert calls == len(set(grid(100.0, 800.0, 5)) | {400.0})
    assert sw.advance(s, None, budget_s=5.0).complete and len(recorded.calls) == calls
    sw.advance(scenario(meshes=("none",), rate_max=800.0, payload_bytes=4096), None, budget_s=0.0)
    assert len(recorded.calls) == calls + 1 and recorded.calls[-1]["payload_bytes"] == 4096
    # Each call carried the scenario's inputs and the interactive run settings.
    call = recorded.calls[0]
    assert call["topology"] == "single" and call["mesh"] == "none" and call["load"] == "fortio"
    assert call["connections"] == 4 and call["replications"] == 2 and call["precision"] is None
    assert call["duration_s"] == pytest.approx(SETTINGS.duration_s(call["rps"]))
    assert call.get("processes") == 1


def test_features_are_requested_per_mesh(sweeper):
    sw, recorded = sweeper
    s = scenario(features=("tracing",), features_off=("telemetry",), rate_max=800.0)
    sw.advance(s, None, budget_s=0.0)
    sw.advance(s, None, budget_s=0.0)
    by_mesh = {c["mesh"]: c["features"] for c in recorded.calls}
    assert by_mesh == {"istio": ("tracing", "no-telemetry"), "none": ()}


def test_a_model_error_is_cached_and_reported_once(sweeper):
    sw, recorded = sweeper
    s = scenario(meshes=("consul",), rate_max=800.0)  # e.g. a mesh model removed while the app runs
    view = sw.advance(s, None, budget_s=0.0)
    assert len(view.errors) == 1 and view.errors[0].startswith("consul at 100 rps:")
    assert "consul" in view.errors[0] and "\n" not in view.errors[0]
    calls = len(recorded.calls)
    assert sw.view(s, None).errors == view.errors and len(recorded.calls) == calls


def test_a_newer_request_from_the_same_page_stops_the_older_one(sweeper):
    import threading

    sw, recorded = sweeper
    old, new = scenario(meshes=("none",), rate_max=800.0), scenario(meshes=("none",), rate_max=900.0)
    views = []
    worker = threading.Thread(target=lambda: views.append(sw.advance(old, None, budget_s=120.0, client="page")))
    worker.start()
    while not recorded.calls:
        threading.Event().wait(0.01)
    sw.advance(new, None, budget_s=0.0, client="page")
    worker.join(timeout=60)
    assert not worker.is_alive()
    assert not views[0].complete and views[0].done <= 3  # it stopped after the point it was computing
    # Another page is not affected: it runs to the end of its budget.
    assert sw.advance(old, None, budget_s=120.0, client="other page").complete
