"""Study istio-features (Zanin 2023, seed 000): cells for every table, roles, the JSON shape, the mechanisms the
model claims, and the thesis's swapped factor columns recomputed from its own means."""

from __future__ import annotations

import json
import math

import pytest

from meshsim.catalog import load_mesh, load_topology
from meshsim.calibrate.studies.istio_features_scenarios import (FIT_RPS, PAYLOADS, RATES, SETUPS, Condition,
                                                               published_means, topology_for)
from meshsim.calibrate.studies.istio_features_study import (FACTORS, ROW_LABELS, design_frame, label_assignments,
                                                           published_influence)
from meshsim.calibrate.studies.study_catalog import StudySettings, load_study


@pytest.fixture(scope="module")
def result():
    return load_study("istio-features").run(StudySettings(short=True, seed=3))


def test_cells_cover_every_table_with_the_right_roles(result) -> None:
    means = [c for c in result.cells if c.table == "Tabela 3"]
    assert {(c.condition["istio_setup"], c.condition["rps"], c.condition["payload_bytes"]) for c in means} == \
        {(s, r, p) for s in SETUPS for r in RATES for p in PAYLOADS}
    assert all(c.metric == "mean_ms" for c in means)
    # only the lowest-rate column is fitted; every 100 rps cell and every influence row is predicted
    assert all((c.role == "fit") == (c.condition["rps"] == FIT_RPS) for c in means)
    influence = [c for c in result.cells if c.metric == "influence_percent"]
    assert {(c.table, c.condition["factors"]) for c in influence} == \
        {(t, row) for t in ("Tabela 5", "Tabela 6") for row in ROW_LABELS}
    assert all(c.role == "predicted" for c in influence)
    for c in result.cells:
        assert c.predicted is not None and math.isfinite(c.predicted) and math.isfinite(c.error)


def test_json_shape_and_summary(result) -> None:
    d = json.loads(json.dumps(result.to_dict()))
    assert d["study"] == "istio-features" and len(d["cells"]) == 12 + 14
    assert d["summary"]["predicted"] == 6 + 14 and d["summary"]["fit"] == 6
    assert d["summary"]["median_abs_error_latency"] is not None
    assert set(d["extras"]["factorial"]) == {"observability", "mtls"}
    assert len(d["extras"]["replications_ms"]["default/10rps/120B"]) == 2  # short settings: 2 tests per condition
    skill = d["summary"]["skill"]
    assert set(skill["latency"]["by_column"]) == {"rps=100"}
    assert set(skill["latency"]["by_mesh"]) == {"default", "observability", "mtls"}
    assert set(skill["other"]["by_column"]) == {"Tabela 5", "Tabela 6"}


def test_naive_forecast_copies_the_10_rps_column(result) -> None:
    """A 100 rps mean's naive value is the thesis's 10 rps mean of its row; an influence row's is the share the
    thesis's means give with the rate changing nothing: 0 % for every row the rate is in."""
    pub = published_means()
    for c in result.cells:
        if c.metric == "mean_ms" and c.role == "predicted":
            cond = c.condition
            assert c.naive == pub[Condition(cond["istio_setup"], FIT_RPS, cond["payload_bytes"])]
        elif c.metric == "influence_percent":
            assert (abs(c.naive) < 1e-9) == ("F2" in c.condition["factors"]), c


def test_fit_cells_reproduce_the_10_rps_column(result) -> None:
    """The fitted numbers in the shipped models reproduce the cells they were fitted from, within the short run's
    own noise (3 half-widths of its 95 % CI from 2 tests of 20 s) plus 2 %. The mTLS 98 kB cell is below the default
    one in the thesis, so its fitted per-KB cost sits at its bound 0 and the model stays above it (+6 % in the full
    run): that cell may be higher by up to 10 % more, never lower."""
    for c in result.cells:
        if c.role != "fit":
            continue
        half = (c.ci95[1] - c.ci95[0]) / 2
        bias = 0.10 * c.published if (c.condition["istio_setup"], c.condition["payload_bytes"]) == ("mtls", 98000) \
            else 0.0
        assert -3 * half - 0.02 * c.published <= c.predicted - c.published <= 3 * half + 0.02 * c.published + bias, c


def test_mechanisms_the_model_claims(result) -> None:
    sim = {(c.condition["istio_setup"], c.condition["rps"], c.condition["payload_bytes"]): c.predicted
           for c in result.cells if c.table == "Tabela 3"}
    for setup in SETUPS:
        for rps in RATES:  # the 98 kB answers cost more than the 120 B ones in every setup and at every rate
            assert sim[(setup, rps, 98000)] > sim[(setup, rps, 120)] + 5.0
    # idle proxies and apps wake up cold at 10 rps, warm at 100 rps: the default setup is faster at 100 rps
    assert sim[("default", 100.0, 120)] < sim[("default", 10.0, 120)]
    # observability adds in-path work at every rate
    assert sim[("observability", 100.0, 120)] > sim[("default", 100.0, 120)]


def test_thesis_tables_follow_from_its_means_only_with_f1_and_f3_swapped() -> None:
    pub, printed = published_means(), published_influence()
    for feature in ("observability", "mtls"):
        frame = design_frame({c: [v] for c, v in pub.items()}, feature)
        readings = label_assignments(frame, printed[feature])
        best = readings[0]
        assert (best["F1"], best["F2"], best["F3"]) == ("payload", "rate", "istio_setup")
        assert best["max_gap_pp"] <= 0.02  # two printed decimals
        as_printed = next(r for r in readings if (r["F1"], r["F2"], r["F3"]) == FACTORS)
        assert as_printed["max_gap_pp"] > 5.0
    # the headline "mTLS explains 81.95 %" is the payload's share; mTLS's own is 3.01 %
    mtls = label_assignments(design_frame({c: [v] for c, v in pub.items()}, "mtls"), printed["mtls"])
    as_printed = next(r for r in mtls if (r["F1"], r["F2"], r["F3"]) == FACTORS)
    assert as_printed["shares"]["F1 istio_setup"] == pytest.approx(3.01, abs=0.01)
    assert as_printed["shares"]["F3 payload"] == pytest.approx(81.95, abs=0.01)


def test_the_answers_grow_along_the_chain() -> None:
    topo = topology_for(98000)
    assert [topo.services[s].response_bytes for s in ("s3", "s2", "s1")] == [100_000, 200_000, 300_000]
    assert topology_for(120).services["s1"].response_bytes == 120
    assert load_topology("minikube-chain3").node_cores["minikube"] == 2
    assert {"observability", "mtls"} <= set(load_mesh("istio-minikube").features)
    assert Condition("default", 10.0, 120) in published_means()


def test_fit_helpers_solve_affine_cells_and_set_the_models() -> None:
    from meshsim.calibrate.studies.istio_features_scenarios import (solve_affine, with_client_rtt, with_feature_cost,
                                                                   MESH)

    assert solve_affine(lambda x: 3.0 + 2.0 * x, 10.0, 0.0, 1.0) == pytest.approx(3.5)
    topo = with_client_rtt(load_topology("minikube-chain3"), 6.0, 16.0)
    assert topo.network.client_rtt.mean == pytest.approx(6e-3, rel=1e-6)
    assert 1e6 * 8 / topo.network.bandwidth_bps == pytest.approx(16e-3)  # 16 ms per MB of answer
    mesh = with_feature_cost(load_mesh(MESH), "mtls", 0.05, -0.001)  # a negative fitted per-KB cost is kept at 0
    assert mesh.features["mtls"].per_kb == 0.0
    assert mesh.features["mtls"].per_pass["outbound_response"].mean == pytest.approx(5e-5, rel=1e-6)
