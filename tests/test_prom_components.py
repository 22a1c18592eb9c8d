"""A container's CPU and memory series become the model's components: in a Kubernetes cluster by its pod's
workload (Deployment and StatefulSet pod names, or a label naming it) and whether it is the mesh's proxy container;
in the lab by the container label. Unit checks of the rules, and one window read through a real Prometheus that
scrapes cAdvisor-shaped series of known rates."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, strategies as st

from meshsim.calibrate.measure.prometheus.prom_components import POD_RULES, ContainerIsComponent, PodWorkload, \
    by_component
from meshsim.calibrate.measure.prometheus.prom_metric_sets import METRIC_SETS
from cadvisor_exporter import CadvisorExporter

ISTIO = METRIC_SETS["istio"].naming
SAFE = "bcdfghjklmnpqrstvwxz2456789"


def _component(pod: str, container: str, naming=ISTIO, **labels: str) -> str | None:
    return naming.component({"pod": pod, "container": container, **labels})


def test_a_deployments_pods_name_its_workload_sidecar_and_app():
    assert _component("reviews-v1-545db77b95-7xk2p", "istio-proxy") == "reviews-v1/sidecar"
    assert _component("reviews-v1-545db77b95-7xk2p", "reviews") == "reviews-v1/app"
    assert _component("productpage-v1-6b746f74dc-9stp4", "productpage") == "productpage-v1/app"


def test_a_statefulsets_pods_name_its_workload():
    assert _component("ratings-0", "istio-proxy") == "ratings/sidecar"
    assert _component("web-v2-12", "nginx") == "web-v2/app"


def test_linkerd_names_its_own_proxy_container():
    linkerd = METRIC_SETS["linkerd"].naming
    assert _component("emoji-7b9b9c8c4d-x2k4z", "linkerd-proxy", linkerd) == "emoji/sidecar"
    assert _component("emoji-7b9b9c8c4d-x2k4z", "istio-proxy", linkerd) == "emoji/app"  # not linkerd's proxy


def test_a_label_naming_the_workload_wins_over_the_pod_name():
    assert _component("anything", "istio-proxy", workload="details-v1") == "details-v1/sidecar"
    assert _component("reviews-v1-545db77b95-7xk2p", "reviews", workload="") == "reviews-v1/app"  # empty: the pod's


@pytest.mark.parametrize("pod", ["debug", "my-pod", "reviews-v1-545db77b95-7XK2P", "job-abcde", "web--1"])
def test_a_pod_name_no_rule_reads_names_nothing(pod):
    assert _component(pod, "istio-proxy") is None


def test_replicas_add_up_and_unnamed_series_are_returned_not_dropped():
    series = [({"pod": "reviews-v1-545db77b95-7xk2p", "container": "istio-proxy"}, 0.10),
              ({"pod": "reviews-v1-545db77b95-q9zz4", "container": "istio-proxy"}, 0.15),
              ({"pod": "reviews-v1-545db77b95-q9zz4", "container": "reviews"}, 0.30),
              ({"pod": "debug", "container": "shell"}, 0.01),
              ({"pod": "my-pod", "container": "istio-proxy"}, 0.02)]
    totals, unnamed = by_component(ISTIO, series)
    assert totals == pytest.approx({"reviews-v1/sidecar": 0.25, "reviews-v1/app": 0.30})
    assert unnamed == ("debug/shell", "my-pod/istio-proxy")


def test_the_lab_keeps_its_container_label_and_adds_its_replicas():
    totals, unnamed = by_component(ContainerIsComponent(), [({"pod": "server#0", "container": "server/app"}, 0.1),
                                                            ({"pod": "server#1", "container": "server/app"}, 0.2)])
    assert totals == pytest.approx({"server/app": 0.3}) and unnamed == ()


@given(workload=st.from_regex(r"[a-z][a-z0-9]{0,7}(-[a-z0-9]{1,6}){0,3}", fullmatch=True),
       template_hash=st.text(SAFE, min_size=1, max_size=10), suffix=st.text(SAFE, min_size=5, max_size=5),
       ordinal=st.integers(0, 999))
def test_every_generated_pod_name_gives_back_its_workload(workload, template_hash, suffix, ordinal):
    naming = PodWorkload("istio-proxy")
    assert naming.workload({"pod": f"{workload}-{template_hash}-{suffix}"}) == workload
    assert naming.workload({"pod": f"{workload}-{ordinal}"}) == workload
    assert [rule.controller for rule in POD_RULES] == ["Deployment", "StatefulSet"]


def test_an_unnamed_series_is_counted_in_the_validations_note():
    from meshsim.calibrate.measure.prometheus.prom_histogram import Bucket
    from meshsim.calibrate.measure.prometheus.prom_window import WindowMeasure
    from meshsim.calibrate.validation.prometheus_check import window_comparison

    window = WindowMeasure("http://127.0.0.1:9090", METRIC_SETS["istio"], "{}", 1.8e9, 60.0, 600, 10.0,
                           (Bucket(1, 300), Bucket(5, 600), Bucket(math.inf, 600)),
                           {"reviews-v1/sidecar": 0.2}, {}, ("debug/shell", "my-pod/istio-proxy"))
    pred = {"cpu_cores": {"reviews-v1/sidecar": 0.18}, "latency_ms": {}, "latency_ci95_ms": {}, "achieved_rps": 10.0,
            "latency_cdf_ms": {"ms": [], "q": []}}
    notes = window_comparison(window, pred, "setup", 0).notes
    assert any(n.startswith("2 container series whose pod names no workload") and "debug/shell" in n for n in notes)


@pytest.mark.lab
def test_a_real_prometheus_window_reads_cpu_and_memory_per_workload(tmp_path):
    """A real Prometheus scrapes cAdvisor-shaped series of known rates; the window's CPU is per workload and role,
    the two reviews-v1 pods summed, the pod total and the pause container left out, the debug pod counted apart."""
    from prometheus_server import last_scrape, poll, real_prometheus

    from meshsim.calibrate.measure.prometheus.prom_api import PrometheusApi
    from meshsim.calibrate.measure.prometheus.prom_window import measure_window

    exporter = CadvisorExporter()
    try:
        config = exporter.scrape_config(tmp_path / "prometheus.yml")
        with real_prometheus(config, tmp_path, targets=1) as url:
            first = last_scrape(url)
            end = poll("five scrapes", lambda: (t := last_scrape(url)) > first + 4.5 and t)
            window = measure_window(PrometheusApi(url), METRIC_SETS["istio"], source="productpage-v1",
                                    destination="reviews-v1", window_s=4.0, end=end)
    finally:
        exporter.close()
    assert window.cpu_cores == pytest.approx({"reviews-v1/sidecar": 0.25, "reviews-v1/app": 0.45,
                                              "ratings/sidecar": 0.05}, rel=0.05)
    assert window.memory_mb == pytest.approx({"reviews-v1/sidecar": 250.0, "reviews-v1/app": 450.0,
                                              "ratings/sidecar": 50.0}, rel=1e-6)
    assert window.unnamed == ("debug/shell",)
    assert window.rps == pytest.approx(100.0, rel=0.05)


def test_fit_from_a_window_says_how_many_series_it_could_not_name(tmp_path):
    from meshsim.calibrate.fit.row_simulation import RowSettings
    from meshsim.calibrate.measure.prometheus.prom_histogram import Bucket
    from meshsim.calibrate.measure.prometheus.prom_rows import RowMeaning
    from meshsim.calibrate.measure.prometheus.prom_window import WindowMeasure
    from meshsim.calibrate.summary_fit import fit_prometheus_window
    from meshsim.errors import MeshsimError

    class Source:  # a window as PrometheusSource.read gives it
        def read(self) -> WindowMeasure:
            return WindowMeasure("http://127.0.0.1:9090", METRIC_SETS["istio"], "{}", 1.8e9, 60.0, 600, 10.0,
                                 (Bucket(1, 300), Bucket(5, 600), Bucket(math.inf, 600)),
                                 {"reviews-v1/sidecar": 0.2}, {}, ("debug/shell",))

    said: list[str] = []
    with pytest.raises(MeshsimError, match="need baseline rows"):
        fit_prometheus_window(Source(), RowMeaning("none_mtls_both", 4), tmp_path / "rows.csv", [], "m", None,
                              RowSettings(), said.append, reference_mode="none_mtls_both")
    assert any(m.startswith("1 container series whose pod names no workload") and "debug/shell" in m for m in said)
    assert (tmp_path / "rows.csv").read_text().count("\n") == 2  # the window's row was kept all the same
