"""A feature's CPU per wake of its worker (``features.F.resume_cpu_ms``): the split of its extra CPU into per-wake and
per-pass work from runs with different sleeps per request (calibrate/load/feature_wake.py), the thinned latency
increment that keeps one-connection latencies, and both engines booking the feature's CPU on every wake.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from meshsim.calibrate.load.feature_cpu import apply_feature_cpu
from meshsim.calibrate.load.feature_wake import WakePoint, split, thinned
from meshsim.calibrate.measure.dataset import load_runs
from meshsim.distribution_spec import parse_distribution
from meshsim.distributions import Deterministic
from meshsim.errors import ModelError
from meshsim.mesh import Feature, MeshModel, ProxyModel, mesh_from_data
from meshsim.scenario import Scenario
from meshsim.sim.engine.replication_result import Horizon
from meshsim.sim.engine.simpy_replication import run_replication
from meshsim.sim.fast.fast_engine import run_fast_replication
from meshsim.wakeup import WakeUp
from meshsim.workload import FortioLoad, Workload
from simkit import station_topology

MS = 1e-3
ENGINES = {"simpy": run_replication, "fast": run_fast_replication}
KINDS = ("inbound_request", "inbound_response", "outbound_request", "outbound_response")
HELD, STEP, PER_WAKE, POST = 0.5, 0.05 * MS, 0.03 * MS, 0.01 * MS
HELDOUT = Path(__file__).resolve().parent.parent / "measurements" / "lab-heldout-2026-11-27"


def _extra(sleeps: float, per_wake: float = PER_WAKE, post: float = POST) -> float:
    """The extra CPU per request and sidecar the module's model gives: 2 h (m - c) + w c + post."""
    return 2 * HELD * (STEP - per_wake) + sleeps * per_wake + post


def test_the_split_recovers_a_known_wake_and_post_work() -> None:
    points = [WakePoint(_extra(w), w, HELD, STEP) for w in (2.0, 1.9, 0.4, 0.35)]
    found = split(points)
    assert found.identified
    assert found.resume_cpu_s == pytest.approx(PER_WAKE, rel=1e-6)
    assert found.post_s == pytest.approx(POST, rel=1e-6)
    assert found.per_pass_share(STEP) == pytest.approx((STEP - PER_WAKE) / STEP)


def test_without_a_spread_of_sleeps_all_of_it_is_per_pass() -> None:
    """One-connection runs only (two sleeps per request each): the wake is not identified, the extra CPU beyond
    the held increment is work after the response, as before the split."""
    points = [WakePoint(_extra(2.0), 2.0, HELD, STEP), WakePoint(_extra(1.95), 1.95, HELD, STEP)]
    found = split(points)
    assert not found.identified and found.resume_cpu_s == 0.0
    expected = np.mean([_extra(2.0), _extra(1.95)]) - 2 * HELD * STEP
    assert found.post_s == pytest.approx(expected, rel=1e-9)


def test_the_wake_never_takes_more_than_the_increment() -> None:
    """mTLS in the lab: 0.08 ms more per request at one connection, nothing at a loaded rung. The least-squares
    wake (0.0575 ms) would exceed the 0.048 ms increment per pass it comes from; it stops there."""
    step = 0.048 * MS
    points = [WakePoint(0.08 * MS, 2.0, 1.0, step), WakePoint(0.004 * MS, 0.4, 1.0, step)]
    found = split(points)
    assert found.resume_cpu_s == pytest.approx(step)
    assert found.per_pass_share(step) == 0.0


def test_a_thinned_increment_keeps_the_share_of_its_mean() -> None:
    spec = {"family": "lognormal", "median_ms": 0.02, "sigma": 0.5, "shift_ms": 0.01, "source": "x"}
    base = parse_distribution(spec, "spec")
    for share in (0.0, 0.3, 1.0):
        dist = parse_distribution(thinned(spec, share), "thinned")
        assert dist.mean == pytest.approx(share * base.mean, rel=1e-9)
    assert parse_distribution(thinned(spec, 0.3), "t").sample(np.random.default_rng(1), 10_000).min() == 0.0


def _resume_mesh(feature_resume_ms: float) -> MeshModel:
    """Passes of 0.1 ms, a worker that pays 0.02 ms on every wake; the feature adds ``feature_resume_ms``."""
    proxy = ProxyModel("test", dict.fromkeys(KINDS, Deterministic(0.1 * MS)), workers=1,
                       wakeup=WakeUp(delay=0.0, tau=1.0, resume_cpu=0.02 * MS))
    return MeshModel("m", proxy, {"mtls": Feature("mtls", resume_cpu=feature_resume_ms * MS)}, None)


@pytest.mark.parametrize("engine", ENGINES)
def test_both_engines_book_the_features_cpu_on_every_wake(engine: str) -> None:
    """One connection at 200 rps to an app working 1 ms: every pass finds its worker asleep, so the server's
    sidecar wakes twice per request and burns 2 x (0.1 + 0.02 + 0.03) ms per request with the feature,
    2 x (0.1 + 0.02) without."""
    horizon = Horizon(4.0, 0.5)

    def per_request(features: tuple[str, ...]) -> float:
        scenario = Scenario(station_topology(Deterministic(MS)), _resume_mesh(0.03), features=features, scope="both")
        result = ENGINES[engine](scenario, Workload(FortioLoad(200, connections=1)), horizon, 1, 0)
        requests = result.achieved_rps * (horizon.duration - horizon.warmup)
        return result.usage["q/sidecar"].cpu_seconds / requests

    assert per_request(()) == pytest.approx(2 * 0.12 * MS, rel=0.01)
    assert per_request(("mtls",)) == pytest.approx(2 * 0.15 * MS, rel=0.01)


def test_a_feature_wake_needs_the_proxys_wakeup() -> None:
    data = {"schema": "meshsim/mesh/v1", "name": "m",
            "proxy": {"passes": dict.fromkeys(KINDS, {"family": "deterministic", "value_ms": 0.1})},
            "features": {"mtls": {"resume_cpu_ms": 0.03}}}
    with pytest.raises(ModelError, match=r"m.yaml: features.\*.cold_wake and resume_cpu_ms .* proxy.wakeup is "
                                         "missing"):
        mesh_from_data(data, "m.yaml")
    data["proxy"]["wakeup"] = {"delay_ms": 0.0, "tau_ms": 1.0}
    assert mesh_from_data(data, "m.yaml").features["mtls"].resume_cpu == pytest.approx(0.03 * MS)


# -- the fit, from real run folders whose CPU readings and sleeps are set to known values ------------------------

def _set(run: Path, cpu_ms: float, sleeps: float | None) -> None:
    """Each sidecar burns ``cpu_ms`` per completed request and its workers sleep ``sleeps`` times per request."""
    manifest = yaml.safe_load((run / "manifest.yaml").read_text())
    loaded = load_runs([run]).runs[0]
    requests = loaded.result.actual_rps * (manifest["load"]["duration_s"] or loaded.result.duration_s)
    sides = ("server/sidecar", "client/sidecar")
    manifest["cpu_seconds"] = {key: cpu_ms * 1e-3 * requests for key in sides}
    manifest["sleeps"] = {key: sleeps * requests for key in sides} if sleeps is not None else {}
    (run / "manifest.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))


def _known_runs(tmp_path: Path, counted: bool) -> list[Path]:
    """The shipped lab's plain and mTLS runs at one connection (1 000 rps) and at the loaded rung (c=16,
    1 500 rps; from its calibration and its mTLS rung): plain sidecars 0.10 ms per request, mTLS ones ``_extra``
    more; two sleeps per request at one connection and 0.4 at the rung."""
    folders = []
    for pattern, cpu, sleeps in (("sidecar-q1000-c1-b1024", 0.10, 2.0), ("sidecar-q1500-c16-b1024", 0.10, 0.4),
                                 ("mtls-q1000-c1-b1024", 0.10 + _extra(2.0) / MS, 2.0),
                                 ("mtls-q1500-c16-b1024", 0.10 + _extra(0.4) / MS, 0.4)):
        src = next(HELDOUT.glob(f"*/lab-single-{pattern}-*"))
        dst = tmp_path / src.name
        shutil.copytree(src, dst)
        _set(dst, cpu, sleeps if counted else None)
        folders.append(dst)
    return folders


def test_the_fit_writes_the_wake_and_thins_the_increment(tmp_path: Path) -> None:
    runs = load_runs(_known_runs(tmp_path, counted=True)).runs
    spec = {"family": "deterministic", "value_ms": STEP / MS, "source": "fitted"}
    features: dict = {"mtls": {"per_pass": dict(spec), "source": "fitted from runs"}}
    notes: list[str] = []
    apply_feature_cpu(features, {"cpu_fraction": HELD}, {"mtls": {"inbound": STEP, "outbound": STEP}}, runs, notes)
    block = features["mtls"]
    assert block["resume_cpu_ms"] == pytest.approx(PER_WAKE / MS, rel=1e-3)
    assert block["post_response"]["value_ms"] == pytest.approx(POST / MS, rel=1e-3)
    kept = parse_distribution(block["per_pass"], "per_pass").mean
    assert kept == pytest.approx(STEP - PER_WAKE, rel=1e-3)
    assert "sleeps per request" in block["source"]


def test_runs_that_did_not_count_sleeps_keep_the_work_per_pass(tmp_path: Path) -> None:
    runs = load_runs(_known_runs(tmp_path, counted=False)).runs
    features: dict = {"mtls": {"per_pass": {"family": "deterministic", "value_ms": STEP / MS}}}
    notes: list[str] = []
    apply_feature_cpu(features, {"cpu_fraction": HELD}, {"mtls": {"inbound": STEP, "outbound": STEP}}, runs, notes)
    assert "resume_cpu_ms" not in features["mtls"]
    assert features["mtls"]["per_pass"]["value_ms"] == STEP / MS
    assert any("CPU per wake not identified" in n for n in notes)
