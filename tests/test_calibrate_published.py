"""Refit proposals from the published tables: percentile-only fits with their uncertainty, CPU slopes."""

from __future__ import annotations

import pytest

from meshsim.calibrate.published_refit import PASSES, propose, propose_istio17, report
from meshsim.calibrate.measure.tables import measurements_dir


def test_paper_proposals_have_fits_and_uncertainty_for_every_mesh_and_rate() -> None:
    p = propose()
    assert set(p["per_mesh"]) == {"istio", "linkerd", "traefik"}
    for mesh, entry in p["per_mesh"].items():
        assert [e["rate_rps"] for e in entry["by_rate"]] == [50, 450, 3500]
        for e in entry["by_rate"]:
            assert e["added_mean_ms"] > 0 and e["mesh_fit"]["se_log_median"] > 0
            # a lognormal through p50/p90/p99 reproduces them to within its reported log-residual
            assert e["mesh_fit"]["rms_log_residual"] < 0.2
    # the paper's own ranking of the meshes survives the fit (Linkerd fastest, Istio slowest per request)
    added = {m: e["by_rate"][0]["added_mean_ms"] for m, e in p["per_mesh"].items()}
    assert added["linkerd"] < added["traefik"] < added["istio"]
    assert p["per_mesh"]["istio"]["passes_per_request"] == PASSES["istio"]


def test_istio17_cpu_per_request_from_two_rates() -> None:
    rows = {e["label"]: e for e in propose_istio17()}
    plain = rows["none_mtls_both"]
    # (30.78 - 6.59) millicores / (100 - 10) rps = 0.2687 ms of CPU per request in the client sidecar
    assert plain["fortioclient_cpu_ms_per_request"] == pytest.approx((30.7751988198041 - 6.591402195799472) / 90,
                                                                     rel=1e-3)
    assert rows["v2-stats-nullvm_both"]["fortioserver_cpu_ms_per_request"] > plain["fortioserver_cpu_ms_per_request"]


def test_shipped_proposals_document_is_current() -> None:
    shipped = (measurements_dir() / "published" / "refit-proposals.md").read_text(encoding="utf-8")
    assert shipped == report()
