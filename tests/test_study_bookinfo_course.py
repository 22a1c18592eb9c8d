"""Study bookinfo-course (seed 004, 1500 sequential requests with and without Istio): the fits from the standalone
rows only, the new outputs (bytes on the wire per request, idle CPU of the proxies) and the study's cells."""

from __future__ import annotations

import json
import math

import pytest

from meshsim.catalog import load_mesh, load_topology
from meshsim.sim.experiments.predict import predict

from meshsim.calibrate.measure.tables import load_table
from meshsim.calibrate.studies.bookinfo_course_study import (GATEWAY, PACKETS, SETUPS, TOTALS, fit_client_rtt_ms,
                                                              fit_compute_scale, scaled_computes, setup_topology,
                                                              shipped_computes)
from meshsim.calibrate.studies.study_catalog import StudySettings, run_study
from meshsim.distributions import MS

ROWS = {(r["environment"], r["app"], r["setup"]): r for r in load_table("course004_totals").rows}


def _total(env: str, app: str) -> float:
    return float(ROWS[(env, app, "standalone")]["response_wait_total_s"])


def test_shipped_topologies_are_the_fits_of_the_standalone_rows() -> None:
    simple = load_topology("course-simple-eks")
    rtt = fit_client_rtt_ms(_total("aws-eks", "simple-service"), simple)
    assert simple.network.client_rtt.mean / MS == pytest.approx(rtt, abs=1e-9)
    eks = load_topology("course-bookinfo-eks")
    assert eks.network.client_rtt.mean / MS == pytest.approx(rtt, abs=1e-9)  # the same client and cluster
    shape = load_topology("bookinfo")
    for name, env, app in (("course-bookinfo-eks", "aws-eks", "bookinfo"),
                           ("course-bookinfo-minikube", "local-minikube", "example-app")):
        topology = load_topology(name)
        scale = fit_compute_scale(_total(env, app), topology, shape)
        assert 0.1 < scale < 10
        assert shipped_computes(topology) == scaled_computes(shape, scale)
    # the Istio rows would give other fits: the fit reads the standalone ones only
    istio_total = float(ROWS[("aws-eks", "simple-service", "istio")]["response_wait_total_s"])
    assert fit_client_rtt_ms(istio_total, simple) > rtt + 4.0


def _simple(meshed: bool, **extra):
    topology = setup_topology(load_topology("course-simple-eks"), meshed)
    mesh = dict(mesh="istio", scope="server", features=("mtls",)) if meshed else dict(mesh="none", scope="none")
    return predict(topology, load="sequential", think_ms=50.0, keepalive=False, duration_s=20.0, warmup_s=0.0,
                   replications=1, precision=None, saturation=False, processes=1, max_events=1e9, **mesh, **extra)


def test_wire_bytes_per_request_carry_the_mesh_headers_and_idle_cores_reach_the_output() -> None:
    istio = load_mesh("istio")
    headers = istio.proxy.header_bytes + istio.features["mtls"].header_bytes
    plain, meshed = _simple(False), _simple(True)
    # one call per request to the compute-less service: its 200 B request, plus the mesh's headers with Istio
    assert plain.wire_bytes == {"request": pytest.approx(200.0, rel=0.02), "response": pytest.approx(200.0, rel=0.02),
                                "entry_request": 200.0}
    assert meshed.wire_bytes["entry_request"] == 200.0 + headers
    assert meshed.wire_bytes["request"] / meshed.wire_bytes["response"] == pytest.approx((200.0 + headers) / 200.0)
    # 3 replicas, each with a sidecar idling at the mesh's idle_millicores; nothing idles without a mesh
    assert meshed.idle_cores == {"simple-server/sidecar": pytest.approx(3 * istio.proxy.idle_cores)}
    assert plain.idle_cores == {}
    d = meshed.to_dict()
    assert d["wire_bytes_per_request"]["entry_request"] == 200.0 + headers
    assert d["idle_cores"]["simple-server/sidecar"] > 0
    # the idle part is inside the CPU the sidecars report under load
    assert meshed.cpu_cores["simple-server/sidecar"] > meshed.idle_cores["simple-server/sidecar"]


def test_wire_bytes_follow_the_call_graph() -> None:
    topology = setup_topology(load_topology("course-bookinfo-eks"), False)
    p = predict(topology, "none", scope="none", load="sequential", think_ms=0.0, keepalive=False, duration_s=30.0,
                warmup_s=0.0, replications=1, precision=None, saturation=False, processes=1, max_events=1e9)
    # productpage (500 B) -> details (300) and one reviews (300); 2 of 3 reviews versions call ratings (300)
    expected = 500 + 300 + 300 + 2 / 3 * 300
    sd = 300 * math.sqrt(2 / 9 / p.requests)  # the ratings calls' share over the run's requests (binomial)
    assert p.wire_bytes["request"] == pytest.approx(expected, abs=4 * sd + 1)
    assert p.wire_bytes["entry_request"] == 500.0


@pytest.fixture(scope="module")
def result():
    return run_study("bookinfo-course", StudySettings(short=True, processes=1))


def test_cells_cover_both_tables_and_fit_only_standalone(result) -> None:
    assert {c.table for c in result.cells} == {TOTALS, PACKETS}
    metrics = {"total_s", "cpu_cores", "cpu_seconds", "memory_mb"}
    for s in SETUPS:
        for setup in ("standalone", "istio"):
            got = {c.metric for c in result.cells if c.table == TOTALS and c.condition["environment"] ==
                   s.environment and c.condition["app"] == s.app and c.condition["setup"] == setup}
            assert got == metrics
    for c in result.cells:
        if c.condition["setup"] == "istio":  # the mesh's header sizes were read from this document: derived
            assert c.role == ("derived" if c.table == PACKETS else "predicted")
        if c.role == "fit":
            assert c.condition["setup"] == "standalone" and c.condition.get("access") in (None, "exposed-service")
        if c.predicted is not None:
            assert math.isfinite(c.predicted) and math.isfinite(c.error)
    missing = [c for c in result.cells if c.predicted is None]
    assert len(missing) == 1 and "x-envoy-peer-metadata" in missing[0].note
    d = json.loads(json.dumps(result.to_dict()))
    assert (d["summary"]["cells"], d["summary"]["fit"], d["summary"]["derived"]) == (39, 19, 1)
    # the naive forecast: each standalone row's published value in the Istio cell of its row
    for c in result.cells:
        if c.role == "predicted" and c.table == TOTALS:
            std = _cell(result, c.condition["environment"], c.condition["app"], "standalone", c.metric,
                        c.condition.get("state"))
            assert c.naive == std.published
    assert set(d["summary"]["skill"]["latency"]["by_column"]) == {"setup=istio"}
    assert set(d["extras"]) == {f"{s.environment}/{s.app}" for s in SETUPS}


def _cell(result, env, app, setup, metric, state=None):
    return next(c for c in result.cells if c.table == TOTALS and c.condition["environment"] == env and
                c.condition["app"] == app and c.condition["setup"] == setup and c.metric == metric and
                c.condition.get("state") == state)


def test_the_mesh_adds_time_cpu_and_memory_with_its_sidecars(result) -> None:
    istio = load_mesh("istio")
    for s in SETUPS:
        std = _cell(result, s.environment, s.app, "standalone", "total_s")
        ist = _cell(result, s.environment, s.app, "istio", "total_s")
        assert ist.predicted > std.predicted + 0.5  # at least ~0.3 ms per request over 1500 requests
        sidecars = result.extras[f"{s.environment}/{s.app}"]["sidecars"]
        assert sidecars == (3 if s.app == "simple-service" else 6)
        idle_std = _cell(result, s.environment, s.app, "standalone", "cpu_cores", "idle").predicted
        idle = _cell(result, s.environment, s.app, "istio", "cpu_cores", "idle").predicted
        assert idle - idle_std == pytest.approx(sidecars * istio.proxy.idle_cores)
        for metric, state in (("cpu_seconds", None), ("memory_mb", "idle"), ("memory_mb", "loaded")):
            assert (_cell(result, s.environment, s.app, "istio", metric, state).predicted >
                    _cell(result, s.environment, s.app, "standalone", metric, state).predicted)
    # Bookinfo crosses more sidecars per request than the one-call service: more added time per request
    added = {s.app: _cell(result, s.environment, s.app, "istio", "total_s").predicted -
             _cell(result, s.environment, s.app, "standalone", "total_s").predicted for s in SETUPS}
    assert added["bookinfo"] > 2 * added["simple-service"]
    packet = next(c for c in result.cells if c.table == PACKETS and c.condition["setup"] == "istio")
    assert packet.predicted > next(c for c in result.cells if c.table == PACKETS and c.role == "fit").predicted
    assert GATEWAY in {h.name for h in load_topology("course-bookinfo-eks").network.edge}


def test_predict_text_reports_wire_bytes_and_idle_cpu() -> None:
    from meshsim.cli.prediction_text import prediction_table

    text = prediction_table(_simple(True).to_dict())
    assert "the entry receives 601 B" in text  # 200 B + Istio's 150 B + mTLS's 251 B
    assert "idle cpu cores   simple-server/sidecar 0.0094" in text  # 3 sidecars x 3.13 millicores
    assert "idle cpu cores" not in prediction_table(_simple(False).to_dict())
