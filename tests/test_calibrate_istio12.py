"""The shipped Istio 1.2 model: it parses, it refits from the shipped runs, and the simulator driven by the same
c=1, 1000 rps fortio workload reproduces every one-connection calibration run's p50/p90/p99 within 10 %. The
16-connection runs give each side's held fraction and the cluster's wake-up: replayed, their mean latency comes back
within the held-fraction grid's resolution (checked in tests/test_validate_compare.py).

One exception is stated, not hidden: in the both-sidecars run with Mixer the CDF is flat from 4.9 to 9.1 ms
(98.95 % -> 99.05 %), so the data only fix its p99 to that interval (distribution-free 95 % interval); there the
model's p99 must fall inside that interval widened by 10 %."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from meshsim.calibrate.fit.mode_check import check_runs
from meshsim.calibrate.measure.dataset import load_runs
from meshsim.calibrate.fit.model_file import read_model
from meshsim.calibrate.fit.observations import from_result
from meshsim.calibrate.fit.sim_check import simulate_runs
from meshsim.calibrate.measure.tables import measurements_dir
from meshsim.catalog import load_mesh

RUNS = measurements_dir() / "istio-1.2.0"


@pytest.fixture(scope="module")
def all_runs():
    batch = load_runs([RUNS])
    assert batch.errors == ()
    return batch.runs


@pytest.fixture(scope="module")
def runs(all_runs):
    """The one-connection runs: nothing waits for a worker, so the passes alone must reproduce them."""
    return [r for r in all_runs if r.manifest.load.connections == 1]


@pytest.fixture(scope="module")
def model_path() -> Path:
    mesh = load_mesh("istio-1.2")
    return Path(mesh.origin) if Path(mesh.origin).is_absolute() else Path(__file__).parents[1] / mesh.origin


def test_shipped_model_parses_with_provenance(all_runs, model_path: Path) -> None:
    mesh = load_mesh("istio-1.2")
    assert mesh.proxy is not None and mesh.proxy.kind == "envoy" and mesh.proxy.workers == 2
    assert mesh.features["telemetry"].default is True
    # Envoy 1.11: one listening socket for the workers; each side's held fraction from the 16-connection bursts
    assert mesh.proxy.connection_balance == "shared_listener"
    assert {side: 0.0 < s.cpu_fraction < 1.0 for side, s in mesh.proxy.sides.items()} == {"inbound": True,
                                                                                           "outbound": True}
    assert mesh.cluster is not None and mesh.cluster.wakeup is not None
    runs = all_runs
    data = read_model(model_path)
    cal = data["calibration"]
    assert sorted(cal["fitted_from"]) == sorted(r.id for r in runs)
    for side in ("inbound", "outbound"):
        assert "bursts" in data["proxy"]["sides"][side]["source"]
        # Mixer's filter holds its own share of its time, from the bursts with it on (more than the pass's)
        own = data["features"]["telemetry"]["sides"][side]
        assert "bursts" in own["source"] and "mixer" in own["source"]
        assert mesh.features["telemetry"].sides[side] > mesh.proxy.side_fraction(side)
    assert "c16-qps1000-baseline" in data["cluster"]["wakeup"]["source"]
    assert any("both-sidecars-mixer" in f and "saturated" in f for f in cal["flagged_runs"])
    for kind, spec in data["proxy"]["passes"].items():
        assert "fitted by meshsim fit" in spec["source"] and spec["fit"]["ks"] < 0.02, kind
    for kind, spec in data["features"]["telemetry"]["per_pass"].items():
        assert spec["fit"]["runs"], kind
    assert set(data["sources"]) == {r.id for r in runs}
    # the server-side (inbound) pass is cheaper than the client-side (outbound) one in these runs
    assert mesh.proxy.passes["inbound_request"].mean < mesh.proxy.passes["outbound_request"].mean


def test_model_reproduces_runs_without_queueing(runs) -> None:
    mesh = load_mesh("istio-1.2")
    base = next(r for r in runs if r.manifest.setup.path == "baseline")
    checks = check_runs(mesh, runs, base)
    assert len(checks) == 5
    for c in checks:
        assert c.within(0.10), (c.run_id, c.measured_ms, c.model_ms)


def test_simulator_reproduces_p50_p90_p99_within_10_percent(runs, model_path: Path) -> None:
    checks = simulate_runs(model_path, runs, seed=11)  # 240 s per run, as measured
    assert len(checks) == 5
    for c in checks:
        assert c.within(0.10), (c.run_id, c.measured_ms, c.model_ms, c.measured_ci_ms)
        # p50 and p90 are pinned by the data to well under 1 %: hold them to 10 % strictly
        for model, meas in zip(c.model_ms[:2], c.measured_ms[:2]):
            assert model == pytest.approx(meas, rel=0.10), c.run_id
    # where the measured p99 is itself well determined (all but the gap-straddling Mixer run), strictly too
    for c in checks:
        lo, hi = c.measured_ci_ms[2]
        if (hi - lo) / c.measured_ms[2] < 0.05:
            assert c.model_ms[2] == pytest.approx(c.measured_ms[2], rel=0.10), c.run_id


def test_cli_refits_the_shipped_runs(model_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "istio-1.2.yaml"
    proc = subprocess.run(
        [sys.executable, "-m", "meshsim", "fit", *(str(d) for d in sorted(RUNS.glob("istio-1.2.0-c1-*"))),
         "--mesh", "istio-1.2", "--out", str(out),
         "--families", "lognormal", "--no-mixtures", "--include-flagged", "--default-on", "telemetry"],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "FLAGGED istio-1.2.0-c1-qps1000-both-sidecars-mixer: saturated" in proc.stdout
    assert "proxy.inbound_pass" in proc.stdout and "feature.telemetry.outbound" in proc.stdout
    assert "loaded istio-1.2.0-c1-qps1000-baseline" in proc.stderr  # progress goes to stderr
    fresh, shipped = load_mesh(str(out)), load_mesh("istio-1.2")
    for kind in ("inbound_request", "outbound_request"):
        assert fresh.proxy.passes[kind].mean == pytest.approx(shipped.proxy.passes[kind].mean, rel=0.05)


def test_cli_bad_input_is_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "meshsim", "fit", str(tmp_path / "nope"), "--mesh", "x", "--out",
         str(tmp_path / "x.yaml")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("meshsim: error: meshsim fit: no usable runs") and str(tmp_path / "nope") in last
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "x.yaml").exists()


def test_a_prediction_adds_no_app_sidecar_hop_the_fitted_passes_already_hold(model_path: Path,
                                                                                tmp_path: Path) -> None:
    """The passes are a mode's latency beyond its baseline's, hops between app and sidecar included
    (``proxy.loopback_in_passes``): a prediction on the pipeline's topology adds none. The same model with the flag
    off adds the topology's loopback hop twice per sidecar (into it and back)."""
    import yaml

    from meshsim.catalog import load_topology
    from meshsim.sim.experiments.predict import predict

    data = read_model(model_path)
    assert data["proxy"]["loopback_in_passes"] is True
    data["proxy"]["loopback_in_passes"] = False
    without = tmp_path / "hops-again.yaml"
    without.write_text(yaml.safe_dump(data, sort_keys=False))

    def mean(mesh: str, scope: str) -> float:
        return predict(topology="single", mesh=mesh, rps=1000, load="fortio", connections=1, scope=scope,
                       features=("no-telemetry",), fortio_version="1.3.1", duration_s=20.0, warmup_s=0.0,
                       replications=2, processes=1, seed=4, saturation=False).to_dict()["latency_ms"]["mean"]

    hop_ms = load_topology("single").network.loopback.mean * 1e3
    added = {scope: mean(str(without), scope) - mean("istio-1.2", scope) for scope in ("server", "both")}
    assert added["server"] == pytest.approx(2 * hop_ms, rel=0.25)  # the server's sidecar: app in and out
    assert added["both"] == pytest.approx(4 * hop_ms, rel=0.25)  # and the client's: fortio to it and back
    measured = {r.manifest.setup.path: from_result(r.result).mean * 1e3 for r in load_runs([RUNS]).runs
                if r.manifest.load.connections == 1 and not r.manifest.setup.features}
    assert mean("istio-1.2", "server") == pytest.approx(measured["server-sidecar"], rel=0.05)
