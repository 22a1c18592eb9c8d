"""Study network-paths (seed 003, curl over five network paths): the handshake round trips a new connection costs,
the fit of the client's round trip from test 1 only, and the study's cells with short settings."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from meshsim.catalog import load_topology
from meshsim.distributions import MS, Deterministic
from meshsim.sim.experiments.predict import predict
from meshsim.topology import Compute

from meshsim.calibrate.measure.tables import load_table
from meshsim.calibrate.studies.network_paths_study import (FIT_PATH, LOSS_DELAY_MS, PATHS, TOPOLOGY, fit_client_rtt,
                                                          path_topology, shipped_client_rtt)
from meshsim.calibrate.studies.study_catalog import StudySettings, run_study

RTT_MS = 100.0


def _fixed_rtt_topology():
    """curl-paths with a constant 100 ms client round trip, no client overhead and no edge hops: every request's
    time is its round trips plus nginx's constant 0.1 ms and the transfer of 480 B at 1 Gbit/s."""
    base = path_topology(load_topology(TOPOLOGY), PATHS[0])
    hello = base.services["hello"]
    hello = replace(hello, handler=(Compute(Deterministic(0.1 * MS)),))
    network = replace(base.network, client_rtt=Deterministic(RTT_MS * MS))
    return replace(base, network=network, client=replace(base.client, overhead=None), services={"hello": hello})


@pytest.mark.parametrize(("keepalive", "tls", "round_trips"), [
    (True, False, 1),  # an open connection: the request and its response only
    (False, False, 2),  # + the TCP handshake (SYN, SYN/ACK; the ACK travels with the request)
    (False, True, 4),  # + a TLS 1.2 full handshake: 2 round trips
])
def test_new_connection_costs_its_handshake_round_trips(keepalive: bool, tls: bool, round_trips: int) -> None:
    p = predict(_fixed_rtt_topology(), "none", scope="none", load="sequential", think_ms=0.0, keepalive=keepalive,
                tls=tls, duration_s=5.0, warmup_s=0.0, replications=1, precision=None, saturation=False,
                processes=1)
    transfer_ms = 480 * 8 / 1e9 / MS
    expected = round_trips * RTT_MS + 0.1 + transfer_ms
    for key in ("p50", "max", "mean"):  # deterministic inputs: every request takes exactly this long
        assert p.latency[key].value / MS == pytest.approx(expected, abs=1e-6)


def test_shipped_client_rtt_is_the_fit_of_test_1_only() -> None:
    topology = load_topology(TOPOLOGY)
    test1 = [float(r["time_ms"]) for r in load_table("blog003_curl_times").where(test=1)]
    body, loss = fit_client_rtt(test1, topology)
    assert shipped_client_rtt(topology) == (body, loss, LOSS_DELAY_MS)
    # the fit sees only test 1: other paths' runs give another body
    test5 = [float(r["time_ms"]) for r in load_table("blog003_curl_times").where(test=5)]
    assert fit_client_rtt(test5, topology)[0] != body
    # 2 of 30 runs were slow; 3 draws per plain request, so P(a run has a lost draw) = 2/30
    assert 1 - (1 - loss) ** 3 == pytest.approx(2 / 30, abs=1e-4)


@pytest.fixture(scope="module")
def result():
    return run_study("network-paths", StudySettings(short=True, processes=1))


def test_cells_cover_both_tables_with_fit_only_on_test_1(result) -> None:
    tables = {c.table for c in result.cells}
    assert tables == {"Testes 1-5 (Média)", "Testes 1-5 (30 runs)"}  # blog003_summary and blog003_curl_times
    assert {c.condition["network_path"] for c in result.cells} == {p.name for p in PATHS}
    for c in result.cells:
        assert c.role == ("fit" if c.condition["network_path"] == FIT_PATH else "predicted")
        assert c.predicted is not None and math.isfinite(c.predicted) and math.isfinite(c.error)
    summary = {r["network_path"]: r["mean_ms"] for r in load_table("blog003_summary").rows}
    for c in result.cells:
        if c.metric == "mean_ms":
            assert c.published == summary[c.condition["network_path"]]
    d = json.loads(json.dumps(result.to_dict()))
    assert d["summary"]["fit"] == 3 and d["summary"]["predicted"] == 12
    # the naive forecast: test 1's published value of the same metric, in every other path's cell
    fit = {c.metric: c.published for c in result.cells if c.role == "fit"}
    assert all(c.naive == fit[c.metric] for c in result.cells if c.role == "predicted")
    assert set(d["summary"]["skill"]["latency"]["by_column"]) == \
        {f"network_path={p.name}" for p in PATHS if p.name != FIT_PATH}
    assert d["extras"]["round_trips"] == {"http": 2, "https (TLS 1.2 full handshake)": 4}


def _by(result, path: str, metric: str):
    return next(c for c in result.cells if c.condition["network_path"] == path and c.metric == metric)


def test_in_region_hops_add_milliseconds_and_tls_two_round_trips(result) -> None:
    direct = _by(result, "nodeport-pod-node", "p50_ms").predicted
    for path in ("nodeport-other-node", "cloud-lb", "cloud-lb-ambassador"):
        added = _by(result, path, "p50_ms").predicted - direct
        assert -2.0 < added < 6.0, (path, added)  # hops inside one region against a ~200 ms round trip
    plain = _by(result, "cloud-lb-ambassador", "p50_ms").predicted
    https = _by(result, "cloud-lb-ambassador-https", "p50_ms").predicted
    assert 1.9 < (https - 5.0) / (plain - 5.0) < 2.1  # 4 round trips for 2 (curl's own 5 ms paid once)


def test_prediction_lands_where_the_blog_measured(result) -> None:
    # the study's accuracy claim on its predicted latency cells, with room for the short settings' noise
    assert result.summary()["median_abs_error_latency"] < 0.10
    for c in result.cells:
        if c.metric == "max_ms":  # the 95 % range of a maximum of 30 runs brackets its median
            assert c.ci95[0] <= c.predicted <= c.ci95[1]
