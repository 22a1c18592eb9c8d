"""The wake-up's costs recovered: through the project's own simulator on a lab host whose cores the passes share,
and from the load ladder's runs that have no baseline at their rate (the last test).

A mesh model with a known wake-up (cold CPU 0.3 ms, tau 4 ms, resume CPU 0.04 ms per wake) and half of each pass on
the CPU is simulated on one 2-core host, as the lab runs: one connection at 200, 500 and 1000 rps, and the
calibration's load ladder (16 connections firing together at 1500, 3000 and 4500 rps, where the host is busy). Each
run's latencies become a fortio histogram and its sidecars' CPU its ``cpu_seconds``; ``meshsim fit`` must give the
wake-up back.

What it checks is how the fit finds the idle gaps it fits on. Fitted on gaps replayed without the host's cores and
without the wake-up's own CPU (how it was done before 2026-11-26), the same runs gave cold CPU 0.41 ms, tau 6.4 ms,
resume 0.083 ms and a CPU share of the pass of 0.17: at the ladder's rates a pass waits for a core and a wake-up's
CPU keeps the worker busy, so the replay found idle workers the runs never had. With the host's cores but one
replay: 0.356 ms, 5.3 ms, 0.039 ms, 0.47. Replayed with each fit's wake-up until it settles: 0.311 ms, 4.2 ms,
0.042 ms, 0.48. The tolerances sit between the settled fit's errors (at most 6 %) and the one-replay fit's (19 % on
the cold CPU, 32 % on tau); the runs are seeded, so the result is the same on every machine. Since 2026-11-29 the fit
replays a lab run on a host that runs woken threads first (``cluster.woken_first``), and the runs are simulated on
that host too: 0.292 ms, 3.7 ms, 0.039 ms, 0.49 (simulated first come, first served, the cold CPU came back 0.356).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from synthetic_passes import BASE, GAMMA, INBOUND, N, write_pass_run
from test_calibrate_simrecovery import truth_model

from meshsim.calibrate.fit.families import Family
from meshsim.calibrate.fit.sim_check import LAB_WOKEN_WINDOW_MS, calibration_topology
from meshsim.calibrate.fit_runs import fit_runs
from meshsim.calibrate.measure.fortio_histogram import result_json
from meshsim.catalog import load_mesh, load_topology
from meshsim.run_folder import LoadSettings, RunManifest, Setup, write_run
from meshsim.woken_first import WokenFirst

WAKE = {"delay_ms": 0.0, "cpu_ms": 0.3, "tau_ms": 4.0, "resume_cpu_ms": 0.04, "source": "test truth"}
CPU_FRACTION = 0.5
HOST_CORES = 2
PLAN = ([("baseline", "none", 1, q) for q in (200, 500, 1000)]
        + [("both-sidecars", "both", 1, q) for q in (200, 500, 1000)]
        + [("both-sidecars", "both", 16, q) for q in (1500, 3000, 4500)])
DURATION_S = 20.0
SAMPLES = 20000


def _simulated_runs(root: Path) -> None:
    from meshsim.sim.experiments.predict import predict

    model = truth_model()
    model["proxy"]["wakeup"] = dict(WAKE)
    model["proxy"]["cpu_fraction"] = CPU_FRACTION
    truth = root / "truth.yaml"
    truth.write_text(yaml.safe_dump(model, sort_keys=False))
    # the lab host as the fit replays a lab run: its scheduler runs a woken thread first (cluster.woken_first)
    woken = WokenFirst(LAB_WOKEN_WINDOW_MS * 1e-3)
    host = load_topology(str(calibration_topology(model, root))).on_one_host(float(HOST_CORES), woken_first=woken)
    rng = np.random.default_rng(5)
    for path, scope, connections, rps in PLAN:
        pred = predict(host, truth, rps=rps, load="fortio", connections=connections, scope=scope, warmup_s=0.0,
                       duration_s=DURATION_S, replications=1, processes=1, seed=3).to_dict()
        cdf = pred["latency_cdf_ms"]
        samples = np.interp(rng.uniform(0, 1, SAMPLES), cdf["q"], cdf["ms"]) * 1e-3
        run_id = f"sim-{path}-c{connections}-q{rps}"
        manifest = RunManifest(
            id=run_id, source="lab", provenance="simulated by meshsim.sim.experiments.predict (truth.yaml), test",
            when="2026-11-26T00:00:00Z", where={"simulator": "meshsim", "cpus": HOST_CORES},
            setup=Setup(mesh="truth", path=path, proxy_workers=2),
            load=LoadSettings(rps=float(rps), connections=connections, duration_s=DURATION_S, resolution_s=1e-5),
            cpu_seconds={k: v * DURATION_S for k, v in pred["cpu_cores"].items() if k.endswith("/sidecar")})
        write_run(root / "runs" / run_id, manifest, result_json(samples, 1e-5, requested_rps=rps, labels=path,
                                                                actual_rps=pred["achieved_rps"],
                                                                connections=connections))


def test_the_wake_up_is_recovered_from_runs_on_a_busy_host(tmp_path: Path) -> None:
    _simulated_runs(tmp_path)
    summary = fit_runs([tmp_path / "runs"], "recovered", tmp_path / "recovered.yaml",
                       families=[Family("gamma", True), Family("lognormal", True)])
    proxy = yaml.safe_load((tmp_path / "recovered.yaml").read_text())["proxy"]
    wake = proxy.get("wakeup")
    assert wake is not None, summary.notes
    assert wake["cpu_ms"] == pytest.approx(WAKE["cpu_ms"], rel=0.12)
    assert wake["tau_ms"] == pytest.approx(WAKE["tau_ms"], rel=0.15)
    assert wake["resume_cpu_ms"] == pytest.approx(WAKE["resume_cpu_ms"], rel=0.15)
    for side in ("inbound", "outbound"):
        assert proxy["sides"][side]["cpu_fraction"] == pytest.approx(CPU_FRACTION, rel=0.1), side
    assert any("replayed" in n and "with the last fit's wake-up" in n for n in summary.notes), summary.notes


def test_cpu_at_rates_without_a_baseline_identifies_the_wake_up(tmp_path: Path) -> None:
    """The lab's load ladder: runs at high rates with no baseline at the same rate. The latency a proxy adds needs
    that baseline; its CPU per request does not. At 100 and 300 rps every pass wakes cold (gaps >> tau): a cold
    wake's CPU cannot be told from the pass's own, and the fit must say so; the runs at 1000 and 1500 rps, whose
    gaps reach below tau, identify it (they were once dropped for want of a baseline)."""
    rng = np.random.default_rng(11)
    c0, cold, tau = 50e-6, 100e-6, 1e-3
    response_p = -math.expm1(-BASE.mean / tau)
    for rps in (100.0, 300.0, 1000.0, 1500.0):
        folder = tmp_path / ("low" if rps < 1000 else "high")
        if rps < 1000:
            write_pass_run(folder, f"base-{rps:g}", "baseline", rps, _draw(rng, BASE))
        server = _draw(rng, BASE, INBOUND, INBOUND)
        p_req = -math.expm1(-max(1 / rps - server.mean(), 0.0) / tau)
        colds = (rng.random(N) < p_req).astype(float) + (rng.random(N) < response_p)
        cpu = (c0 + cold * (p_req + response_p)) * N  # seconds over the run's N requests
        write_pass_run(folder, f"server-{rps:g}", "server-sidecar", rps, server + cold * colds,
                       cpu={"server/sidecar": cpu})
    unidentified = fit_runs([tmp_path / "low"], "envoy-low", tmp_path / "low.yaml", families=GAMMA)
    assert load_mesh(str(tmp_path / "low.yaml")).proxy.wakeup is None, unidentified.notes
    summary = fit_runs([tmp_path / "low", tmp_path / "high"], "envoy-ladder", tmp_path / "m.yaml", families=GAMMA)
    wake = load_mesh(str(tmp_path / "m.yaml")).proxy.wakeup
    assert wake is not None, summary.notes
    assert "server/sidecar CPU, server-sidecar (" in wake_source(tmp_path / "m.yaml")
    assert "1500 rps" in wake_source(tmp_path / "m.yaml")
    assert wake.cpu == pytest.approx(cold, rel=0.3) and wake.tau == pytest.approx(tau, rel=0.5)
    assert wake.delay == 0.0  # the cold wakes here are CPU on the worker: the latency runs ask for no delay


def _draw(rng: np.random.Generator, *dists) -> np.ndarray:
    return sum(d.sample(rng, N) for d in dists)


def wake_source(model: Path) -> str:
    return yaml.safe_load(model.read_text())["proxy"]["wakeup"]["source"]
