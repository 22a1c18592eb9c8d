"""Figure builders and report functions of the Dash app, on fixed prediction dicts (no simulation, no server).

The fixed predictions follow ``Prediction.to_dict()``'s documented shape; their numbers are a simple M/M/1-like
curve chosen so that each assertion can fail: bands must enclose lines, the saturation line must sit at the reported
rate, the bottleneck must be named, hidden components must be the least busy ones.
"""

from __future__ import annotations

import csv
import io
import json

import pytest

from meshsim.dash_app import figures, report
from meshsim.dash_app.measured import MeasuredRun
from meshsim.dash_app.what_if import WhatIf

COMPONENTS = ("client/app", "client/sidecar", "s1/sidecar", "s1/app", "s2/sidecar", "s2/app", "s3/sidecar", "s3/app")


def prediction(rate: float, saturation: float, base_ms: float, bottleneck: str = "s2/sidecar") -> dict:
    """A prediction dict of the documented shape; latency grows like 1/(1-rho) towards saturation."""
    rho = min(rate / saturation, 0.999)
    scale = 1 / (1 - rho)
    latency = {"p50": base_ms * scale, "p90": 2 * base_ms * scale, "p99": 4 * base_ms * scale,
               "p999": 6 * base_ms * scale, "max": 9 * base_ms * scale, "mean": 1.3 * base_ms * scale}
    # Utilisation falls off with the component's index so the busiest ones are the first few.
    util = {c: round(rho * (0.9 - 0.1 * i), 4) for i, c in enumerate(COMPONENTS)}
    util[bottleneck] = rho
    levels = [i / 20 for i in range(1, 20)] + [0.99, 0.999]
    return {
        "latency_ms": latency,
        "latency_ci95_ms": {k: [0.9 * v, 1.12 * v] for k, v in latency.items()},
        "achieved_rps": min(rate, saturation),
        "cpu_cores": {c: u * 2 for c, u in util.items()},
        "utilization": util,
        "memory_mb": {"client/sidecar": 40.0},
        "bottleneck": bottleneck,
        "saturation_rps": saturation,
        "saturated": rate >= saturation,
        "in_flight": 0,
        "latency_cdf_ms": {"q": levels, "ms": [base_ms * scale * (1 + 5 * q) for q in levels]},
        "inputs": {"rps": rate},
    }


def curve(saturation: float, base_ms: float, rates=(100, 1000, 2000, 3000, 4000)) -> list[tuple[float, dict]]:
    return [(float(r), prediction(r, saturation, base_ms)) for r in rates]


@pytest.fixture
def curves() -> dict[str, list[tuple[float, dict]]]:
    return {"istio": curve(4500.0, 1.0), "linkerd": curve(4900.0, 0.7)}


def measured_run(mesh: str = "istio", rps: float = 1000.0) -> MeasuredRun:
    return MeasuredRun(
        run_id=f"{mesh}-run", folder="/nowhere", mesh=mesh, mesh_version="", path="both-sidecars", features=(),
        topology="chain3",
        generator="fortio", connections=16, payload_bytes=1024, proxy_workers=2, proxy_cpu_limit=None,
        rps_requested=rps, rps_achieved=rps - 1, percentiles_ms={"p50": 1.5, "p90": 2.5, "p99": 7.0, "p999": 9.0},
        cdf_ms=((1.0, 0.2), (2.0, 0.9), (8.0, 1.0)), source="lab", provenance="test fixture", notes="", status="ok",
    )


def test_latency_figure_one_colour_per_mesh_with_bands_enclosing_lines(curves):
    fig = figures.latency_figure(curves, {})
    lines = [t for t in fig.data if t.mode == "lines+markers"]
    bands = [t for t in fig.data if t.fill == "toself"]
    assert sorted(t.name for t in lines) == sorted(f"{m} {k}" for m in curves for k in ("p50", "p90", "p99"))
    assert len(bands) == 6
    colours = {t.name.split()[0]: t.line.color for t in lines}
    assert colours["istio"] != colours["linkerd"]
    for line in lines:
        mesh, key = line.name.split()
        assert list(line.x) == [r for r, _ in curves[mesh]]
        assert list(line.y) == [p["latency_ms"][key] for _, p in curves[mesh]]
        band = next(b for b in bands if b.name == f"{mesh} {key} 95% CI")
        n = len(line.x)
        upper, lower = list(band.y[:n]), list(band.y[n:])[::-1]
        assert all(lo <= y <= hi for lo, y, hi in zip(lower, line.y, upper))
    assert fig.layout.yaxis.type == "log"


def test_latency_figure_orders_percentiles_and_marks_measured_runs(curves):
    run = measured_run()
    fig = figures.latency_figure(curves, {"istio": [run], "linkerd": []})
    markers = [t for t in fig.data if t.mode == "markers" and t.x[0] is not None]
    assert len(markers) == 1
    assert list(markers[0].y) == [1.5, 2.5, 7.0]  # p50, p90, p99 of the run, at its achieved rate
    assert set(markers[0].x) == {run.rps_achieved}
    assert "istio-run" in markers[0].text[0]
    p50 = next(t for t in fig.data if t.name == "istio p50")
    p99 = next(t for t in fig.data if t.name == "istio p99")
    assert all(a < b for a, b in zip(p50.y, p99.y))


def test_saturated_points_are_marked():
    fig = figures.latency_figure({"istio": curve(2500.0, 1.0)}, {})
    p99 = next(t for t in fig.data if t.name == "istio p99")
    assert list(p99.marker.symbol) == ["circle", "circle", "circle", "x", "x"]
    assert "saturated" in p99.text[-1] and "saturated" not in p99.text[0]


def test_utilization_figure_marks_saturation_and_names_bottleneck(curves):
    fig = figures.utilization_figure(curves)
    vlines = [s for s in fig.layout.shapes if s.x0 == s.x1]
    assert sorted(s.x0 for s in vlines) == [4500.0, 4900.0]
    texts = [a.text for a in fig.layout.annotations]
    assert any("4,500 rps" in t and "s2/sidecar" in t for t in texts)
    assert any("4,900 rps" in t for t in texts)
    assert [a.text for a in fig.layout.annotations][:2] == ["istio", "linkerd"]  # one panel per mesh
    visible = [t.name for t in fig.data if t.visible is True and t.xaxis == "x"]
    hidden = [t.name for t in fig.data if t.visible == "legendonly" and t.xaxis == "x"]
    assert len(visible) == figures.VISIBLE_COMPONENTS and visible[0] == "s2/sidecar"
    last_util = curves["istio"][-1][1]["utilization"]
    assert min(last_util[c] for c in visible) >= max(last_util[c] for c in hidden)
    # A component keeps its colour in every panel and appears once in the legend.
    by_name: dict[str, set] = {}
    for t in fig.data:
        by_name.setdefault(t.name, set()).add(t.line.color)
    assert all(len(c) == 1 for c in by_name.values())
    assert sum(1 for t in fig.data if t.showlegend) == len(COMPONENTS)


def test_a_nodes_utilisation_is_drawn_without_cores_of_its_own():
    """A node (``node:NAME``) has a utilisation but no CPU of its own (its users' CPU is in their rows): its hover
    says its utilisation and no core count; a component's says both."""
    points = curve(4500.0, 1.0)
    for _, point in points:
        point["utilization"]["node:node-s2"] = 0.5 * point["utilization"]["s2/sidecar"]
    fig = figures.utilization_figure({"istio": points})
    node = next(t for t in fig.data if t.name == "node:node-s2")
    assert all(text.endswith("%") and "cores" not in text for text in node.text)
    assert all(text.endswith("cores)") for text in next(t for t in fig.data if t.name == "s2/sidecar").text)


def test_saturation_far_beyond_the_range_is_named_without_a_line():
    fig = figures.utilization_figure({"none": curve(20000.0, 0.3)})
    assert [s for s in fig.layout.shapes if s.x0 == s.x1] == []
    note = fig.layout.annotations[-1]
    assert "20,000 rps (beyond this range)" in note.text and "s2/sidecar" in note.text and note.x == 4000


def test_cdf_figure_is_monotone_and_overlays_runs_near_the_rate(curves):
    points = {"istio": curves["istio"][1][1], "linkerd": None}
    fig = figures.cdf_figure(points, 1000.0, {"istio": [measured_run(rps=1000.0), measured_run(rps=3000.0)]})
    predicted = [t for t in fig.data if t.name == "istio predicted"]
    assert len(predicted) == 1
    assert list(predicted[0].y) == sorted(predicted[0].y) and list(predicted[0].x) == sorted(predicted[0].x)
    measured = [t for t in fig.data if "measured" in t.name]
    assert len(measured) == 1  # the 3000 rps run is too far from 1000 rps
    assert "1,000 rps" in fig.layout.title.text


def test_empty_views_say_computing():
    for fig in (figures.latency_figure({"istio": []}, {}), figures.utilization_figure({"istio": []}),
                figures.cdf_figure({"istio": None}, 100.0, {})):
        assert fig.layout.annotations[0].text == "computing ..."
        assert len(fig.data) == 0


def test_table_rows_csv_and_json_carry_the_numbers(curves):
    rows = report.table_rows(curves)
    assert len(rows) == 10 and list(rows[0]) == list(report.COLUMNS)
    first = rows[0]
    expected = curves["istio"][0][1]
    assert first["mesh"] == "istio" and first["offered_rps"] == 100
    assert first["p99_ms"] == pytest.approx(expected["latency_ms"]["p99"], rel=1e-3)
    assert first["bottleneck"] == "s2/sidecar" and first["saturation_rps"] == 4500
    parsed = list(csv.DictReader(io.StringIO(report.rows_to_csv(rows))))
    assert len(parsed) == 10 and float(parsed[-1]["p50_ms"]) == rows[-1]["p50_ms"]
    scenario = WhatIf(topology="chain3", topology_text=None, meshes=("istio", "linkerd"))
    data = json.loads(report.export_json(scenario, curves))
    assert data["scenario"]["topology"] == "chain3"
    assert [p["offered_rps"] for p in data["predictions"]["linkerd"]] == [100, 1000, 2000, 3000, 4000]
    assert data["predictions"]["istio"][2]["latency_ms"] == curves["istio"][2][1]["latency_ms"]


def test_what_changed_names_inputs_and_effects():
    before = WhatIf(topology="chain3", topology_text=None, meshes=("istio", "linkerd"))
    after = WhatIf(topology="chain3", topology_text=None, meshes=("istio", "traefik"), features=("tracing",))
    a = {"istio": prediction(1000, 4500.0, 1.0), "linkerd": prediction(1000, 6000.0, 0.7)}
    b = {"istio": prediction(1000, 3000.0, 1.2, bottleneck="collector"), "traefik": None}
    lines = report.what_changed(before, a, after, b, 1000.0)
    assert "features: mesh defaults -> mesh defaults + tracing" in lines
    assert "meshes: istio, linkerd -> istio, traefik" in lines
    istio = next(line for line in lines if line.startswith("istio at 1,000 rps"))
    p99_a, p99_b = a["istio"]["latency_ms"]["p99"], b["istio"]["latency_ms"]["p99"]
    assert f"p99 {p99_a:.3g} -> {p99_b:.3g} ms" in istio and "(+" in istio
    assert "saturation 4,500 -> 3,000 rps (-33%)" in istio
    assert "bottleneck s2/sidecar -> collector" in istio
    assert any(line.startswith("traefik:") for line in lines)
    assert "linkerd: dropped from the comparison." in lines
    same = report.what_changed(before, a, before, a, 1000.0)
    assert same[0] == "No input differs from the pinned scenario."
    assert "bottleneck still s2/sidecar" in same[1] and "(+0%)" in same[1]


def with_views(point: dict, views: dict[str, tuple[float, float]]) -> dict:
    """``point`` with proxy views of the given (p50, p99), as ``Prediction.to_dict()`` writes them."""
    values = {name: {"p50": p50, "p90": (p50 + p99) / 2, "p99": p99, "p999": 1.5 * p99, "mean": 1.1 * p50}
              for name, (p50, p99) in views.items()}
    return {**point, "proxy_latency_ms": values,
            "proxy_latency_ci95_ms": {name: {k: [0.9 * v, 1.1 * v] for k, v in vs.items()}
                                      for name, vs in values.items()}}


CHAIN_VIEWS = {"s1/sidecar inbound": (2.2, 3.8), "client/sidecar to s1": (2.7, 4.6), "s2/sidecar inbound": (1.2, 2.4),
               "s1/sidecar to s2": (1.7, 3.3)}


def test_proxy_views_figure_bars_end_to_end_first_then_outer_proxies():
    istio = with_views(prediction(1000, 4500.0, 1.0), CHAIN_VIEWS)
    linkerd = with_views(prediction(1000, 4900.0, 0.7), {"client/sidecar to s1": (1.5, 2.0)})
    fig = figures.proxy_views_figure({"istio": istio, "linkerd": linkerd}, 1000)
    assert fig.layout.title.text.startswith("What each proxy sees at 1,000 rps")
    bars = {t.name: t for t in fig.data}
    assert sorted(bars) == ["istio p50", "istio p99", "linkerd p50", "linkerd p99"]
    order = [figures.END_TO_END, "client/sidecar to s1", "s1/sidecar inbound", "s1/sidecar to s2",
             "s2/sidecar inbound"]  # the longest p50 first: along the chain from the caller inwards
    assert list(bars["istio p50"].y) == list(bars["istio p99"].y) == order
    assert list(bars["istio p50"].x) == [istio["latency_ms"]["p50"]] + [CHAIN_VIEWS[v][0] for v in order[1:]]
    assert list(bars["istio p99"].x) == [istio["latency_ms"]["p99"]] + [CHAIN_VIEWS[v][1] for v in order[1:]]
    assert all(t.orientation == "h" for t in fig.data)
    assert bars["istio p50"].xaxis != bars["linkerd p50"].xaxis  # one panel per mesh
    assert list(bars["linkerd p50"].y) == [figures.END_TO_END, "client/sidecar to s1"]
    assert "95% CI 1.98-2.42" in bars["istio p50"].text[2]  # s1/sidecar inbound's p50 CI in the hover
    assert [a.text for a in fig.layout.annotations] == ["istio", "linkerd"]  # panel titles, no empty-state note


def test_proxy_views_figure_says_why_it_is_empty():
    no_mesh = prediction(1000, 9000.0, 0.5)  # no proxy_latency_ms at all, as an older prediction dict
    for points in ({"none": no_mesh}, {"none": {**no_mesh, "proxy_latency_ms": {}}}):
        fig = figures.proxy_views_figure(points, 1000)
        assert fig.data == () and "no proxy histogram to show" in fig.layout.annotations[0].text
        assert fig.layout.xaxis.visible is False
    assert figures.proxy_views_figure({"istio": None}, 1000).layout.annotations[0].text == "computing ..."
    mixed = figures.proxy_views_figure({"istio": with_views(no_mesh, CHAIN_VIEWS), "none": no_mesh}, 1000)
    none_bars = next(t for t in mixed.data if t.name == "none p50")
    assert list(none_bars.y) == [figures.END_TO_END]
    assert any(a.text == figures.NO_PROXY_VIEWS for a in mixed.layout.annotations)


def test_a_warning_of_every_point_is_said_once_per_mesh_and_one_rates_is_not():
    about_load = "fortio is driven unlike the calibration cluster's runs"
    curves = {
        "istio-1.2": [(500.0, {"warnings": [about_load]}),
                      (3000.0, {"warnings": ["saturated: offered 3000 rps is above the capacity", about_load]})],
        "istio": [(500.0, {"warnings": []}), (3000.0, {"warnings": ["saturated: offered 3000 rps"]})],
        "none": [],
    }
    assert report.scenario_warnings(curves) == [f"istio-1.2: {about_load}"]
    taken = "fortio driven as the calibration cluster's runs (the mesh model's cluster.load): -jitter"
    curves["istio-1.7"] = [(r, {"warnings": [], "inputs": {"fortio_from": taken}}) for r in (500.0, 3000.0)]
    assert report.scenario_warnings(curves)[-1] == f"istio-1.7: {taken}"  # what a point's load took, said once
