"""Study ``grpc-lb`` (seed 002, Moura 2022): cells for every number the text states, the right roles, the JSON
shape, and the mechanisms the study models (time scales, the proxy's growth with its CPU, balance, the ramps)."""

from __future__ import annotations

import json
import math

import pytest

from meshsim.calibrate.measure.tables import load_table
from meshsim.calibrate.studies.grpc_lb_study import (HEAVY_RPS, MESH, RATES, TOPOLOGY, fitted_proxy_cpu_ms,
                                                     fitted_server_cpu_ms, onset_from_sweep)
from meshsim.calibrate.studies.study_catalog import StudySettings, run_study
from meshsim.catalog import load_mesh, load_topology
from meshsim.topology import Compute

MS = 1e-3


@pytest.fixture(scope="module")
def result():
    return run_study("grpc-lb", StudySettings(short=True, processes=1))


def claims() -> dict[str, dict]:
    return {row["claim"]: row for row in load_table("thesis002_claims").rows}


def test_a_cell_for_every_result_the_text_states(result):
    stated = claims()
    published = {(c.metric, c.published) for c in result.cells}
    for claim, metric in (("added_latency", "added_ms"), ("degradation_onset", "cpu_percent"),
                          ("server_cpu_replica_max", "cpu_cores"), ("server_cpu_sum_peak", "cpu_cores"),
                          ("balance", "balance_ratio")):
        assert (metric, stated[claim]["value"]) in published, claim
    assert all(c.note for c in result.cells)


def test_fit_cells_are_the_baseline_server_cpu_and_the_protocols_proxy_cpu(result):
    fit = [c for c in result.cells if c.role == "fit"]
    assert [(c.metric, c.published) for c in fit] == [("cpu_cores", 0.4), ("cpu_percent", 80.0)]
    assert all(c.condition["rps"] == HEAVY_RPS for c in fit)
    predicted = {(c.metric, c.published) for c in result.cells if c.role == "predicted"}
    assert predicted == {("added_ms", 1.0), ("cpu_percent", 80.0)}
    # the busiest replica is the fitted sum shared by three, the balance is round robin's: both by construction
    derived = {(c.metric, c.published) for c in result.cells if c.role == "derived"}
    assert derived == {("cpu_cores", 0.17), ("balance_ratio", 1.0)}


def test_naive_forecast_is_the_fitted_proxy_cpu(result):
    """The document prints no latency the fit could copy: the naive forecast of the added latency is Traefik's
    fitted CPU per request, and of the onset the fit cell's 80 %; both are in the summary's skill block."""
    added = next(c for c in result.cells if c.metric == "added_ms")
    onset = next(c for c in result.cells if c.metric == "cpu_percent" and c.role == "predicted")
    assert added.naive == pytest.approx(fitted_proxy_cpu_ms()) and onset.naive == 80.0
    skill = result.summary()["skill"]
    assert skill["latency"]["overall"]["naive_cells"] == 1 and skill["column"] == "rps"


def test_the_shipped_models_hold_the_fitted_values_and_nothing_from_predicted_cells():
    """The YAML numbers come from the fit cells and the protocol only (0.4 CPU, 80 % of 2 cores, 1500 r/s)."""
    topo = load_topology(TOPOLOGY)
    compute = [s for s in topo.services["server"].handler if isinstance(s, Compute)]
    assert compute[0].time.mean / MS == pytest.approx(fitted_server_cpu_ms(), rel=1e-4)
    assert topo.services["server"].replicas == 3 and topo.services["server"].cores == 1
    assert set(topo.node_cores.values()) == {2.0} and len(topo.node_cores) == 3
    lb = load_mesh(MESH).load_balancer
    assert sum(d.mean for d in lb.passes.values()) / MS == pytest.approx(fitted_proxy_cpu_ms(), rel=1e-4)
    assert lb.workers == 2


def test_json_shape_and_finite_errors(result):
    d = json.loads(json.dumps(result.to_dict()))
    assert d["study"] == "grpc-lb" and d["summary"]["cells"] == len(result.cells)
    for c in result.cells:
        if c.predicted is not None:
            assert c.error is not None and math.isfinite(c.error), c
    ramps = d["extras"]["ramps"]
    assert set(ramps) == {"rising-client", "rising-proxy", "falling-client", "falling-proxy"}
    assert all(r["timeseries"]["windows"] for r in ramps.values())
    assert set(d["extras"]["experiments"]) == {f"{lb}-{r:g}" for lb in ("client", "proxy") for r in RATES}


def test_client_side_is_microseconds_and_the_proxy_milliseconds_growing_with_the_rate(result):
    exp = result.extras["experiments"]
    assert all(exp[f"client-{r:g}"]["mean_ms"] < 1.0 for r in RATES)
    assert all(exp[f"proxy-{r:g}"]["mean_ms"] >= 1.0 for r in RATES)
    assert exp["proxy-500"]["mean_ms"] < exp["proxy-1500"]["mean_ms"]
    assert exp["proxy-500"]["proxy_cpu_percent"] < exp["proxy-1000"]["proxy_cpu_percent"] \
        < exp["proxy-1500"]["proxy_cpu_percent"]


def test_the_proxy_adds_at_least_its_own_work_and_replicas_stay_balanced(result):
    added = next(c for c in result.cells if c.metric == "added_ms")
    assert added.predicted >= fitted_proxy_cpu_ms()  # Traefik's CPU per request is on every request's path
    assert 68 <= added.condition["proxy_cpu_percent"] <= 72
    for c in result.cells:
        if c.metric == "balance_ratio":
            assert 1.0 <= c.predicted < 1.05, c


def test_the_knee_lies_above_the_added_latency_condition(result):
    onset = next(c for c in result.cells if c.metric == "cpu_percent" and c.role == "predicted")
    assert onset.predicted is None or 70 < onset.predicted < 100
    sweep = result.extras["proxy_sweep"]
    assert [s["cpu_percent"] for s in sweep] == sorted(s["cpu_percent"] for s in sweep)
    assert sweep[-1]["added_ms"] > sweep[0]["added_ms"]  # queueing grows with the proxy's CPU


def test_onset_interpolates_where_queueing_reaches_the_work():
    sweep = [{"cpu_percent": 30, "added_ms": 1.3}, {"cpu_percent": 80, "added_ms": 1.8},
             {"cpu_percent": 90, "added_ms": 2.8}]
    assert onset_from_sweep(sweep, 1.0) == pytest.approx(85.0)
    assert onset_from_sweep(sweep[:2], 1.0) is None


def test_the_ramps_time_series_follow_the_load(result):
    ramps = result.extras["ramps"]
    rising = ramps["rising-proxy"]["timeseries"]["windows"]
    falling = ramps["falling-proxy"]["timeseries"]["windows"]
    assert rising[-1]["utilization"]["lb:server"] > 2 * rising[0]["utilization"]["lb:server"]
    assert falling[0]["utilization"]["lb:server"] > 2 * falling[-1]["utilization"]["lb:server"]
    assert rising[0]["offered_rps"] < rising[-1]["offered_rps"] and falling[0]["offered_rps"] > falling[-1]["offered_rps"]
    client = ramps["rising-client"]["timeseries"]["windows"]
    assert max(w["mean_ms"] for w in client) < 1.0  # client-side stays in microseconds over the whole ramp
