"""A cluster's workload names against a topology's service names in ``validate --prometheus``: Bookinfo's pods are
productpage-v1, details-v1, reviews-v1..v3, ratings-v1, its topology names productpage, details, reviews-v1..v3,
ratings. A workload is the model's when the names are equal, else when they differ only by a version suffix."""

from __future__ import annotations

import math

from meshsim.calibrate.measure.prometheus.prom_histogram import Bucket
from meshsim.calibrate.measure.prometheus.prom_metric_sets import METRIC_SETS
from meshsim.calibrate.measure.prometheus.prom_window import WindowMeasure
from meshsim.calibrate.measure.prometheus.prom_components import model_workload
from meshsim.calibrate.validation.prometheus_check import reporting_view, window_comparison

SERVICES = {"productpage", "details", "reviews-v1", "reviews-v2", "reviews-v3", "ratings"}
VIEWS = {"productpage/sidecar to details": {"p50": 1.0}, "productpage/sidecar to reviews-v1": {"p50": 2.0},
         "details/sidecar inbound": {"p50": 0.5}, "client/sidecar to productpage": {"p50": 4.0}}


def test_a_versioned_workload_is_its_service_unless_the_model_has_the_version() -> None:
    assert model_workload("productpage-v1", SERVICES) == "productpage"
    assert model_workload("reviews-v2", SERVICES) == "reviews-v2"
    assert model_workload("payments-v3", SERVICES) == "payments-v3"  # neither name known: left as measured
    assert model_workload("v1", SERVICES) == "v1"


def test_the_reporting_view_follows_the_workload_names() -> None:
    pred = {"proxy_latency_ms": VIEWS}
    assert reporting_view(pred, "productpage-v1", "details-v1", None) == "productpage/sidecar to details"
    assert reporting_view(pred, "productpage-v1", "reviews-v1", None) == "productpage/sidecar to reviews-v1"
    assert reporting_view(pred, "client", None, None) == "client/sidecar to productpage"
    assert reporting_view(pred, "productpage-v1", None, None) is None  # two outbound views: --proxy-view decides


def test_measured_containers_are_compared_under_the_models_names() -> None:
    """Each workload's CPU under the model's name: productpage-v1's sidecar is productpage's, reviews-v1's its own;
    a workload the model lacks is counted in the note."""
    window = WindowMeasure("http://127.0.0.1:9090", METRIC_SETS["istio"], "{}", 0.0, 60.0, 600.0, 10.0,
                           (Bucket(1.0, 300.0), Bucket(math.inf, 600.0)),
                           cpu_cores={"productpage-v1/sidecar": 0.1, "reviews-v1/sidecar": 0.2, "payments-v3/app": 0.3})
    pred = {"latency_ms": {"p50": 1.0, "p90": 2.0, "p99": 3.0, "p999": 4.0, "max": 5.0},
            "latency_ci95_ms": {}, "latency_cdf_ms": {"q": [], "ms": []}, "achieved_rps": 10.0,
            "cpu_cores": {"productpage/sidecar": 0.11, "reviews-v1/sidecar": 0.19, "details/sidecar": 0.05}}
    compared = window_comparison(window, pred, "bookinfo", 0)
    assert {k: m.measured for k, m in compared.cpu_cores.items()} == {"productpage/sidecar": 0.1,
                                                                       "reviews-v1/sidecar": 0.2}
    assert any("1 measured container(s) not in the model's components" in note and "payments-v3/app" in note
               for note in compared.notes)
