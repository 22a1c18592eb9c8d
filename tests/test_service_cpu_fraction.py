"""A service's ``cpu_fraction`` in the topology file (its timeline on both engines: test_delay_step.py), and the lab
replay's baseline service holding a core only for the CPU its client and app burn (calibration.baseline_cpu, written
by meshsim fit from the most loaded baseline run)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from meshsim.calibrate.fit.sim_check import baseline_cpu, baseline_service
from meshsim.calibrate.measure.dataset import load_runs
from meshsim.calibrate.validation.compare import validate_runs
from meshsim.calibrate.validation.validate_options import ValidateOptions
from meshsim.errors import ModelError
from meshsim.topology import load_topology_text

MEASURED = Path(__file__).resolve().parent.parent / "measurements"
SHIPPED = MEASURED / "lab-chain-cpu-2026-11-28"
SESSION = MEASURED / "lab-baseline-cpu-2026-11-29"


def _yaml(fraction: str) -> str:
    return ("schema: meshsim/topology/v1\nname: t\nentry: a\nnetwork: {loopback: 0.01, same_node: 0.02, "
            f"cross_node: 0.1, bandwidth_gbps: 10}}\nservices:\n  a: {{handler: [{{compute: 2}}]{fraction}}}\n")


def test_the_topology_file_reads_a_cpu_fraction() -> None:
    assert load_topology_text(_yaml(", cpu_fraction: 0.25"), "t.yaml").services["a"].cpu_fraction == 0.25
    assert load_topology_text(_yaml(""), "t.yaml").services["a"].cpu_fraction == 1.0
    for bad, why in (("0", "must be > 0"), ("1.5", "must be <= 1")):
        with pytest.raises(ModelError, match=f"services.a.cpu_fraction: {why}"):
            load_topology_text(_yaml(f", cpu_fraction: {bad}"), "t.yaml")


def test_the_baseline_service_holds_a_core_for_the_cpu_of_the_most_loaded_baseline_run() -> None:
    """The lab's standard plan: fortio and the echo app burn 0.35 ms per request at 500 rps and one connection,
    0.07 ms at 9 000 rps and 16 connections; the baseline latency is 0.11 ms. The replay books the saturated
    run's CPU (what a host near saturation pays per request) and waits out the rest of the baseline."""
    runs = load_runs(sorted((SHIPPED / "calibration").iterdir())).runs
    bases = [r for r in runs if r.manifest.setup.path == "baseline" and not r.features]
    cpu = baseline_cpu(bases)
    assert cpu is not None
    loaded = max(bases, key=lambda r: r.result.actual_rps)
    per_request = {r.id: sum(r.manifest.cpu_seconds[k] for k in ("client/app", "server/app"))
                   / (r.result.actual_rps * r.manifest.load.duration_s) for r in bases}
    assert cpu["cpu_ms"] == pytest.approx(per_request[loaded.id] * 1e3, rel=1e-3)
    assert cpu["cpu_ms"] == pytest.approx(min(per_request.values()) * 1e3, rel=0.2)  # the least waking run
    assert loaded.id in cpu["source"]
    model = {"name": "m", "calibration": {"baseline": {"family": "deterministic", "value_ms": 0.115},
                                          "baseline_cpu": cpu}}
    service = baseline_service(model, 1, "a test")
    assert service["cpu_fraction"] == pytest.approx(cpu["cpu_ms"] / 0.115, rel=1e-3)
    assert "cpu_fraction" not in baseline_service({"name": "m", "calibration": {
        "baseline": {"family": "deterministic", "value_ms": 0.115}}}, 1, "a test")


def _carried(model: Path, run: Path) -> float:
    validation = validate_runs(ValidateOptions(model=model, run_dirs=(run,), include_fit_runs=True, replications=2,
                                               sim_duration_s=2.0, processes=1))
    rate = validation.comparisons[0].achieved_rps
    return rate.predicted / rate.measured


def test_a_lab_model_carries_its_own_saturated_rung(tmp_path: Path) -> None:
    """The standard plan's pair at 9 000 rps requested, past what the host carries (8 714 rps): replayed with the
    session's model it is carried within 10 %; with the same model less its baseline_cpu (the baseline booked whole
    on the host's cores, as before) it is carried at most 85 % (it was 74 %)."""
    run = next((SESSION / "calibration").glob("lab-single-sidecar-q9000-c16-*"))
    assert abs(_carried(SESSION / "envoy-lab.yaml", run) - 1.0) < 0.10
    model = yaml.safe_load((SESSION / "envoy-lab.yaml").read_text())
    del model["calibration"]["baseline_cpu"]
    whole = tmp_path / "whole.yaml"
    whole.write_text(yaml.safe_dump(model, sort_keys=False))
    assert _carried(whole, run) < 0.85
