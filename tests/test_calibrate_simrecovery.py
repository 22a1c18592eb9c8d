"""Parameter recovery through the project's own simulator: a mesh model with known passes is simulated under
fortio's c=1, 1000 rps workload (baseline, server-sidecar and both-sidecars scopes); latencies drawn from the
simulator's reported CDF (111 quantile levels) become fortio histograms with fortio's -r 0.00001 edges; meshsim
fit must give the known per-pass distributions back.

Tolerances: means within 5 %, p99 within 10 %. The simulator's CDF is reported at 1 % steps, so the sampled
latencies carry a linear-interpolation error of a few microseconds on passes of ~0.13 ms (observed: means within
0.5 %, p99 within 5 %).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from meshsim.calibrate.fit_runs import fit_runs
from meshsim.calibrate.fit.families import Family
from meshsim.calibrate.measure.fortio_histogram import result_json
from meshsim.calibrate.fit.sim_check import calibration_topology
from meshsim.catalog import load_mesh
from meshsim.run_folder import LoadSettings, RunManifest, Setup, write_run

INBOUND = {"family": "gamma", "shape": 3.0, "scale_ms": 0.03, "shift_ms": 0.04, "source": "test truth"}
OUTBOUND = {"family": "lognormal", "median_ms": 0.08, "sigma": 0.4, "shift_ms": 0.05, "source": "test truth"}
BASELINE = {"family": "lognormal", "median_ms": 0.12, "sigma": 0.3, "shift_ms": 0.16, "source": "test truth"}
N = 40000


def truth_model() -> dict:
    return {
        "schema": "meshsim/mesh/v1", "name": "truth", "version": "test", "description": "known passes",
        "sources": {"test": "tests/test_calibrate_simrecovery.py"},
        "proxy": {"kind": "envoy", "placement": "sidecar", "dispatch": "pinned", "connection_balance": "hash",
                  "workers": 2, "cpu_limit": None, "header_bytes": 0, "per_kb_ms": 0.0, "source": "test truth",
                  "passes": {"inbound_request": INBOUND, "inbound_response": INBOUND,
                             "outbound_request": OUTBOUND, "outbound_response": OUTBOUND}},
        "calibration": {"baseline": BASELINE},
    }


def test_known_passes_recovered_through_the_simulator(tmp_path: Path) -> None:
    from meshsim.sim.experiments.predict import predict

    model = truth_model()
    model_path = tmp_path / "truth.yaml"
    model_path.write_text(yaml.safe_dump(model, sort_keys=False))
    topo = calibration_topology(model, tmp_path)
    rng = np.random.default_rng(5)
    for path, scope in (("baseline", "none"), ("server-sidecar", "server"), ("both-sidecars", "both")):
        pred = predict(topo, model_path, rps=1000, load="fortio", connections=1, scope=scope, warmup_s=0.0,
                       duration_s=60.0, replications=1, processes=1, seed=3).to_dict()
        cdf = pred["latency_cdf_ms"]
        samples = np.interp(rng.uniform(0, 1, N), cdf["q"], cdf["ms"]) * 1e-3
        manifest = RunManifest(
            id=f"sim-{path}", source="lab", provenance="simulated by meshsim.sim.experiments.predict (truth.yaml), test",
            when="2026-11-22T00:00:00Z", where={"simulator": "meshsim"},
            setup=Setup(mesh="truth", path=path, proxy_workers=2),
            load=LoadSettings(rps=1000.0, connections=1, duration_s=60.0, resolution_s=1e-5))
        write_run(tmp_path / "runs" / manifest.id, manifest,
                  result_json(samples, 1e-5, requested_rps=1000, actual_rps=pred["achieved_rps"], labels=path))
    fit_runs([tmp_path / "runs"], "recovered", tmp_path / "recovered.yaml",
             families=[Family("gamma", True), Family("lognormal", True)])
    truth, got = load_mesh(str(model_path)), load_mesh(str(tmp_path / "recovered.yaml"))
    for kind in ("inbound_request", "outbound_response"):
        assert got.proxy.passes[kind].mean == pytest.approx(truth.proxy.passes[kind].mean, rel=0.05), kind
        assert got.proxy.passes[kind].quantile(0.99) == pytest.approx(truth.proxy.passes[kind].quantile(0.99),
                                                                       rel=0.10), kind
