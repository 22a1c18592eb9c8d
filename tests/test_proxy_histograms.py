"""A lab run's proxies' own request-time histograms (calibrate/measure/lab/proxy_histograms.py): read from Envoy's
admin page, stored with the run, and compared by ``meshsim validate`` with the model's prediction of the same
spans (calibrate/validation/proxy_view_check.py). The real Envoys' side is in tests/test_lab_probe.py."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from meshsim.calibrate.measure.lab import proxy_histograms
from meshsim.calibrate.measure.prometheus.prom_histogram import Bucket, BucketQuantile, bucket_quantile, whole_units
from meshsim.calibrate.validation.validate import ReportOptions, validate
from meshsim.calibrate.validation.validate_options import ValidateOptions
from meshsim.errors import MeshsimError
from meshsim.run_folder import read_manifest, write_run

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "measurements" / "lab-tracing-2026-11-27"
RUN = SHIPPED / "saturated" / "lab-chain3-sidecar-q1000-c16-b1024-20261127T011010346"
MODEL = SHIPPED / "envoy-lab.yaml"

PAGE = """# TYPE envoy_http_downstream_rq_time histogram
envoy_http_downstream_rq_time_bucket{envoy_http_conn_manager_prefix="outbound",le="0.5"} 3
envoy_http_downstream_rq_time_bucket{envoy_http_conn_manager_prefix="outbound",le="1"} 10
envoy_http_downstream_rq_time_bucket{envoy_http_conn_manager_prefix="outbound",le="+Inf"} 12
envoy_http_downstream_rq_time_bucket{envoy_http_conn_manager_prefix="admin",le="+Inf"} 7
envoy_http_downstream_rq_time_sum{envoy_http_conn_manager_prefix="outbound"} 9.5
envoy_cluster_upstream_rq_time_bucket{envoy_cluster_name="to_s1",le="1"} 10
"""
SIDECAR_PAGE = PAGE.replace('"outbound"', '"inbound"').replace('"admin"', '"outbound_s2"')


def test_an_envoy_page_becomes_the_models_views() -> None:
    """The client sidecar's ``outbound`` listener is its calls to the entry service; a service sidecar's
    ``inbound`` and ``outbound_PEER`` are its inbound and calls to PEER; other series and listeners are not views."""
    client = proxy_histograms.parse(PAGE, "client/sidecar", "s1")
    assert client == {"client/sidecar to s1": {0.5: 3.0, 1.0: 10.0, math.inf: 12.0}}
    sidecar = proxy_histograms.parse(SIDECAR_PAGE, "s1/sidecar", "s1")
    assert set(sidecar) == {"s1/sidecar inbound", "s1/sidecar to s2"}
    assert proxy_histograms.view_of("lb:s1", "lb") == "lb:s1 balancing"
    assert proxy_histograms.view_of("x/sidecar", "admin") is None


def test_the_loads_buckets_are_after_minus_before_and_survive_the_file() -> None:
    before = proxy_histograms.parse(PAGE, "client/sidecar", "s1")
    after = {"client/sidecar to s1": {0.5: 5.0, 1.0: 30.0, math.inf: 40.0}, "s1/sidecar inbound": {math.inf: 4.0}}
    views = proxy_histograms.over_load(before, after)
    assert views == {"client/sidecar to s1": [Bucket(0.5, 2.0), Bucket(1.0, 20.0), Bucket(math.inf, 28.0)],
                     "s1/sidecar inbound": [Bucket(math.inf, 4.0)]}
    text = proxy_histograms.to_json(views)
    assert b"Infinity" not in text and b'"+Inf"' in text  # JSON has no infinity: Prometheus's own spelling
    assert proxy_histograms.from_json(json.loads(text)) == views


def _with_histograms(tmp_path: Path, views: dict[str, list[Bucket]]) -> Path:
    """A shipped lab run (chain3, both sidecars, c=16) with a proxy histogram file beside it."""
    folder = tmp_path / RUN.name
    manifest = read_manifest(RUN)
    access = next(RUN.glob("access*"), None)
    write_run(folder, manifest, (RUN / "fortio.json").read_bytes(), None,
              {proxy_histograms.FILE_KEY: (proxy_histograms.FILE_NAME, proxy_histograms.to_json(views))})
    if access is not None:
        shutil.copy(access, folder / access.name)
    return folder


def test_validate_compares_each_recorded_view_with_the_predicted_one(tmp_path: Path) -> None:
    """Measured: the buckets' percentiles (with their bucket); predicted: the replay's prediction of the same
    span. A view the model has no proxy for is left out."""
    views = {"client/sidecar to s1": [Bucket(2.0, 100.0), Bucket(4.0, 900.0), Bucket(8.0, 1000.0),
                                      Bucket(math.inf, 1000.0)],
             "nowhere/sidecar inbound": [Bucket(1.0, 5.0), Bucket(math.inf, 5.0)]}
    folder = _with_histograms(tmp_path, views)
    outcome = validate(ValidateOptions(MODEL, (SHIPPED / "chain-baseline", folder), replications=2,
                                       sim_duration_s=2.0), ReportOptions(as_json=True))
    run = next(r for r in json.loads(outcome.text)["runs"] if r["run"] == read_manifest(folder).id)
    assert set(run["proxy_latency_ms"]) == {"client/sidecar to s1"}
    p50 = run["proxy_latency_ms"]["client/sidecar to s1"]["p50"]
    expected = whole_units(bucket_quantile(0.5, views["client/sidecar to s1"]))  # Envoy's whole milliseconds
    assert (expected.lower, expected.upper) == (3.0, 5.0)  # the bucket (2, 4] holds the recorded 3 and 4 ms
    assert p50["measured"] == pytest.approx(expected.value, rel=1e-4)
    assert p50["resolution"] == [expected.lower, expected.upper]
    # the predicted view lies inside the predicted caller's latency (a part of each request's span)
    assert 0 < p50["predicted"] < run["latency_ms"]["p50"]["predicted"]
    assert any(note.startswith("client/sidecar to s1 (the proxy's own histogram, 1000 requests)")
               for note in run["notes"])


def test_a_broken_histogram_file_is_one_line(tmp_path: Path) -> None:
    folder = _with_histograms(tmp_path, {"client/sidecar to s1": [Bucket(math.inf, 1.0)]})
    (folder / proxy_histograms.FILE_NAME).write_text("{not json")
    with pytest.raises(MeshsimError, match=f"{proxy_histograms.FILE_NAME}: not a proxy histogram file"):
        validate(ValidateOptions(MODEL, (SHIPPED / "chain-baseline", folder), replications=2, sim_duration_s=2.0),
                 ReportOptions(as_json=True))


@pytest.mark.parametrize("lower, upper, interval", [
    (0.0, 0.25, (0.0, 1.0)),  # the first bucket holds the requests recorded as 0 ms: under 1 ms
    (0.75, 1.0, (1.0, 2.0)),  # recorded 1: 1 to 2 ms
    (2.0, 2.5, None),  # no whole millisecond inside: as found
    (10.0, 12.5, (11.0, 13.0)),
    (25.0, math.inf, None),
])
def test_a_whole_millisecond_histogram_knows_each_percentile_to_its_integers(lower, upper, interval) -> None:
    """Envoy truncates request times to whole milliseconds: a bucket's percentile lies among the integers it holds,
    plus one millisecond."""
    found = whole_units(BucketQuantile((lower + min(upper, 99.0)) / 2, lower, upper))
    if interval is None:
        assert (found.lower, found.upper) == (lower, upper)
    else:
        assert (found.lower, found.upper) == interval and found.value == sum(interval) / 2
