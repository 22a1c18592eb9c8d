"""The shipped ``istio`` model reproduces the shipped Istio 1.7 low-rate rows (istio/tools pipeline: fortio, 16
connections with -jitter, 1 KB, 10 and 100 rps, mTLS on both sidecars, default telemetry on and off): sidecar CPU
and p50 latency, including CPU per request falling with the rate (wake-ups) and the idle CPU of a proxy.

Tolerance 15 % (plus the p50's own CI half-width, about 3 %): repeats of Istio's own pipeline differ by 5-10 %
(issue 12's figure for identical runs), and one wake-up block and one telemetry increment serve both rates and both
sidecars. The model's wake-up CPU and telemetry split were fitted from these rows (their `source:` says so): this
is reproduction of calibration data, not a held-out prediction.
"""

from __future__ import annotations

import csv

import pytest

from meshsim.calibrate.measure.tables import measurements_dir
from meshsim.sim.experiments.predict import predict

CASES = {"none_mtls_both": ("mtls", "no-telemetry"), "v2-stats-nullvm_both": ("mtls",)}
SIDECARS = {"client/sidecar": "cpu_mili_avg_istio_proxy_fortioclient",
            "server/sidecar": "cpu_mili_avg_istio_proxy_fortioserver"}


def _row(label: str, rate: int) -> dict[str, str]:
    with open(measurements_dir() / "istio-1.7" / "telemetry-lowrate.csv", encoding="utf-8") as handle:
        return next(r for r in csv.DictReader(handle)
                    if r["Labels"].endswith("_" + label) and r["Labels"].split("_")[2] == str(rate))


def _predict(label: str, rate: int) -> dict:
    return predict("single", "istio", rps=rate, load="fortio", connections=16, jitter=True, features=CASES[label],
                   duration_s=60.0 if rate == 10 else 20.0, replications=3, processes=1, saturation=False).to_dict()


@pytest.mark.slow
@pytest.mark.parametrize("label", sorted(CASES))
def test_sidecar_cpu_and_p50_at_10_and_100_rps(label: str) -> None:
    per_request = {}
    for rate in (10, 100):
        row, pred = _row(label, rate), _predict(label, rate)
        for side, column in SIDECARS.items():
            measured_mc, predicted_mc = float(row[column]), pred["cpu_cores"][side] * 1e3
            assert predicted_mc == pytest.approx(measured_mc, rel=0.15), (label, rate, side)
            per_request[(side, rate)] = predicted_mc / rate
        # the p50 of 3 replications moves by its CI between seeds: the bound holds the model's mean, not one draw
        # (the v2-stats row at 100 rps sits at -15.2 % over 12-20 replications, before and after mTLS sessions
        # moved to proxy pairs; seed 1's 3 replications gave -14.3 % before and -15.5 % after)
        lo, hi = pred["latency_ci95_ms"]["p50"]
        measured_ms = float(row["p50"]) / 1e3
        assert abs(pred["latency_ms"]["p50"] - measured_ms) <= 0.15 * measured_ms + (hi - lo) / 2, (label, rate)
    for side in SIDECARS:  # CPU per request falls with the rate, as in the rows (idle CPU and wake-ups)
        assert per_request[(side, 10)] > 1.3 * per_request[(side, 100)]


def test_a_feature_adds_its_part_to_the_proxys_cold_wake(tmp_path) -> None:
    """Telemetry's cold_wake adds to the istio proxy's: the station built with it wakes slower and dearer."""
    from meshsim.catalog import load_mesh
    from meshsim.errors import ModelError
    from meshsim.sim.engine.components import make_station
    from meshsim.sim.engine.streams import Streams

    mesh = load_mesh("istio")
    proxy, telemetry = mesh.proxy, mesh.features["telemetry"]
    assert proxy is not None and proxy.wakeup is not None and telemetry.cold_cpu > 0
    bare = make_station("s", 2, True, Streams(1, 0), proxy=proxy)
    with_tel = make_station("s", 2, True, Streams(1, 0), proxy=proxy, features=[telemetry])
    assert bare.wakeup == proxy.wakeup
    assert with_tel.wakeup.delay == pytest.approx(proxy.wakeup.delay + telemetry.cold_delay)
    assert with_tel.wakeup.cpu == pytest.approx(proxy.wakeup.cpu + telemetry.cold_cpu)
    assert with_tel.wakeup.tau == proxy.wakeup.tau
    broken = tmp_path / "m.yaml"  # a feature's cold_wake needs the proxy's wake-up (its tau)
    text = (measurements_dir().parent / "models" / "meshes" / "istio.yaml").read_text()
    start = text.index("  wakeup: {delay_ms: 0.19")
    broken.write_text(text[:start] + text[text.index("\n", start) + 1:])
    with pytest.raises(ModelError, match="cold_wake and resume_cpu_ms add to the proxy's wake-ups, but proxy.wakeup "
                                         "is missing"):
        load_mesh(str(broken))
