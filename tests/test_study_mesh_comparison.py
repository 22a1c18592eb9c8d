"""Study mesh-comparison (seed 001): the three-mesh paper re-created, run with the test suite's short settings.

The assertions are the study's claims and rules, not golden numbers: a cell for every published table, only the
50 rps column fitted, the meshes ordered as the paper orders them, latencies flat with rate (nothing saturates at
3500 rps), the proxies' idle CPU reported, the max growing with the number of requests.
"""

from __future__ import annotations

import json
import math

import pytest

from meshsim.calibrate.measure.tables import load_table
from meshsim.calibrate.studies.study_catalog import StudySettings, load_study
from meshsim.catalog import load_mesh, load_topology
from meshsim.errors import ModelError
from meshsim.sim.predict import predict


@pytest.fixture(scope="module")
def result():
    return load_study("mesh-comparison").run(StudySettings(short=True, processes=1))


def _cell(result, mesh, rps, metric, layer=None, percentile=None):
    found = [c for c in result.cells if c.condition["mesh"] == mesh and c.condition["rps"] == rps
             and c.metric == metric and c.condition.get("layer") == layer
             and (percentile is None or c.condition.get("percentile") == percentile)]
    assert len(found) == 1, (mesh, rps, metric, layer, found)
    return found[0]


def test_every_published_table_has_its_cells(result):
    tables = {c.table for c in result.cells}
    assert tables == {f"Table {i}" for i in range(1, 19)}
    # every latency row of the CSV (4 percentiles x 4 columns x 3 stages) is one cell, its spread the repetitions'
    lat = [c for c in result.cells if c.metric.endswith("_ms")]
    assert len(lat) == 48
    rows = load_table("paper001_latency").where(mesh="istio", rate_rps=3500.0, percentile="p99")
    cell = _cell(result, "istio", 3500.0, "p99_ms")
    assert cell.published_spread == (min(r["latency_ms"] for r in rows), max(r["latency_ms"] for r in rows))
    # CPU and memory: 3 meshes x 3 stages x 2 layers each
    assert len([c for c in result.cells if c.metric == "cpu_cores"]) == 18
    assert len([c for c in result.cells if c.metric == "memory_mb"]) == 18


def test_only_the_50_rps_column_is_fitted(result):
    """Above 50 rps every cell is predicted except the proxies' memory, which is the fitted base (derived)."""
    for c in result.cells:
        derived = c.metric == "memory_mb" and c.condition["layer"] == "data-plane"
        assert c.role == ("fit" if c.condition["rps"] == 50.0 else "derived" if derived else "predicted"), c
    summary = result.summary()
    assert summary["predicted"] + summary["derived"] == len([c for c in result.cells if c.condition["rps"] != 50.0])


def test_naive_forecast_copies_the_50_rps_column(result):
    for c in result.cells:
        if c.role == "predicted" and c.predicted is not None:
            fit = _cell(result, c.condition["mesh"], 50.0, c.metric, c.condition.get("layer"),
                        c.condition.get("percentile"))
            assert c.naive == fit.published, c
    skill = result.summary()["skill"]
    assert set(skill["latency"]["by_column"]) == {"rps=450", "rps=3500"}
    assert set(skill["latency"]["by_mesh"]) == {"baseline", "istio", "linkerd", "traefik-mesh"}


def test_predictions_exist_and_errors_are_finite(result):
    for c in result.cells:
        if c.condition.get("layer") == "control-plane":
            assert c.predicted is None and "control plane" in c.note  # not modelled, and the cell says why
        else:
            assert c.predicted is not None and math.isfinite(c.predicted), c
            assert c.error is not None and math.isfinite(c.error), c


def test_json_shape(result):
    data = json.loads(json.dumps(result.to_dict()))
    assert data["study"] == "mesh-comparison"
    assert set(data["summary"]) >= {"cells", "fit", "predicted", "median_abs_error_latency"}
    cell = data["cells"][0]
    assert set(cell) >= {"table", "condition", "metric", "published", "predicted", "ci95", "error", "role",
                         "published_spread", "within_spread"}
    assert data["settings"]["threads"] == 96 and data["settings"]["connections"] == 96


def test_meshes_ordered_as_the_paper_orders_them(result):
    """Istio slowest, then Traefik Mesh, then Linkerd, all above the baseline, at every stage (p50)."""
    for rps in (50.0, 450.0, 3500.0):
        p50 = {m: _cell(result, m, rps, "p50_ms").predicted for m in ("baseline", "istio", "linkerd", "traefik-mesh")}
        assert p50["istio"] > p50["traefik-mesh"] > p50["linkerd"] > p50["baseline"], (rps, p50)


def test_added_latency_is_a_delay_not_worker_cpu(result):
    """The meshes' added latency is fitted as pass time that mostly does not hold a worker: at 450 rps (wrk2's 96
    connections keep their schedule) every p50 stays within 25 % of its 50 rps value, and no proxy saturates."""
    for mesh in ("baseline", "istio", "linkerd", "traefik-mesh"):
        low = _cell(result, mesh, 50.0, "p50_ms").predicted
        mid = _cell(result, mesh, 450.0, "p50_ms").predicted
        assert abs(mid - low) / low < 0.25, (mesh, low, mid)
        assert result.extras["achieved_rps"][f"{mesh}@450"] > 0.85 * 450  # short runs: 2 s of 213 ms intervals


def test_wrk2_falls_behind_where_its_connections_cannot_carry_the_rate(result):
    """wrk2's connection waits for its answer: 96 connections carry at most 96 / mean latency. Where the mean latency
    at 50 rps times 3500 exceeds 96 (Istio: ~40 ms), the achieved rate falls short and the latency, timed from the
    intended send, grows; where it does not (baseline, ~7.6 ms), wrk2 holds 3500 rps."""
    needed = result.extras["wrk2_connections_needed"]
    for mesh in ("baseline", "istio"):
        demand = needed[f"{mesh}@50"] * 3500 / 50
        achieved = result.extras["achieved_rps"][f"{mesh}@3500"]
        if demand < 0.8 * 96:
            assert achieved > 0.95 * 3500, (mesh, demand, achieved)
        else:
            assert demand > 96 and achieved < 0.9 * 3500, (mesh, demand, achieved)
    assert needed["istio@50"] * 70 > 96 > needed["baseline@50"] * 70
    behind = _cell(result, "istio", 3500.0, "p50_ms").predicted
    assert behind > 2 * _cell(result, "istio", 50.0, "p50_ms").predicted


def test_idle_cpu_dominates_at_low_rate_and_is_reported(result):
    """The proxy CPU at 50 rps is almost all idle CPU (the model's idle_millicores), so it is reported per proxy
    even when hardly any request passes; at 3500 rps the per-request part is added on top."""
    for mesh, model in (("istio", "istio-1.11"), ("linkerd", "linkerd-2.11"), ("traefik-mesh", "traefik-mesh-1.4")):
        idle = load_mesh(model).proxy.idle_cores
        low = _cell(result, mesh, 50.0, "cpu_cores", "data-plane").predicted
        high = _cell(result, mesh, 3500.0, "cpu_cores", "data-plane").predicted
        # at 50 rps the busiest proxy passes a few requests a second: a few millicores on top of its idle CPU
        assert idle > 0 and idle <= low <= idle + 0.005, (mesh, idle, low)
        assert high > low + 0.01


def test_replicas_spread_over_the_declared_nodes():
    topo = load_topology("emojivoto-study")
    web = topo.services["web"]
    assert [web.node_of_replica(r) for r in range(10)] == ["w1", "w2", "w3", "w4", "w5"] * 2
    assert all(topo.node_cores[n] == 50 for n in ("w1", "w2", "w3", "w4", "w5"))
    # Traefik Mesh: one proxy per node that hosts a caller (web's 10 replicas on the 5 nodes: 5 proxies)
    p = predict("emojivoto-study", "traefik-mesh-1.4", scope="server", rps=100, load="wrk2", threads=4, connections=8, duration_s=1,
                warmup_s=0.2, replications=2, precision=None, saturation=False, processes=1)
    assert sorted(c for c in p.cpu_cores if c.startswith("node-proxy:")) == [f"node-proxy:w{i}" for i in range(1, 6)]


def test_nodes_list_is_validated(tmp_path):
    text = (load_topology("emojivoto-study").origin and open(load_topology("emojivoto-study").origin).read())
    bad = text.replace("nodes: [w1, w2, w3, w4, w5]", "nodes: [w1, w2, w3, w4, w5]\n    node: w1", 1)
    path = tmp_path / "bad.yaml"
    path.write_text(bad)
    with pytest.raises(ModelError, match=r"services\.web\.nodes.*either node or nodes"):
        load_topology(str(path))
    path.write_text(text.replace("nodes: [w1, w2, w3, w4, w5]", "nodes: []", 1))
    with pytest.raises(ModelError, match=r"services\.web\.nodes"):
        load_topology(str(path))


def test_shipped_hops_and_run_length_are_the_baseline_fit():
    """The topology's hops and the study's run length are what the 50 rps baseline fit gives (no hand edits)."""
    from meshsim.calibrate.studies.mesh_comparison_fit import fit_baseline
    from meshsim.calibrate.studies.mesh_comparison_study import MEASURED_S

    fit = fit_baseline()
    hop = load_topology("emojivoto-study").network.cross_node
    assert math.exp(hop.mu) == pytest.approx(fit.hop_median_ms * 1e-3, rel=1e-3)
    assert hop.sigma == pytest.approx(fit.hop_sigma, rel=1e-3)
    assert fit.measured_s == pytest.approx(MEASURED_S, abs=0.01)
    for pct in ("p50", "p90", "p99", "p100"):  # the fit reproduces the column it was fitted to
        published = {"p50": 7.3, "p90": 10.12, "p99": 14.22, "p100": 18.34}[pct]
        assert fit.fitted[pct] == pytest.approx(published, rel=0.03)


def test_one_host_overrides_spread_nodes():
    """meshsim validate's one-host view puts every replica on the host, spread list or not."""
    host = load_topology("emojivoto-study").on_one_host(2)
    assert {host.services["web"].node_of_replica(r) for r in range(10)} == {"host"}
