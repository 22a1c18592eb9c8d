"""A service's ``cpu_fraction`` in the topology file (its timeline on both engines: test_delay_step.py), and the lab
replay's baseline service holding a core only for the CPU its client and app burn (calibration.baseline_cpu, written
by meshsim fit from the baseline runs: the most loaded run's, and every run's by rate, read where a replay runs)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from meshsim.calibrate.fit.baseline_cpu import baseline_cpu, baseline_cpu_at
from meshsim.calibrate.fit.sim_check import baseline_service
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


def _point(rps: float, connections: int, cpu_ms: float, payload: int = 1024) -> dict:
    return {"rps": rps, "connections": connections, "payload_bytes": payload, "cpu_ms": cpu_ms, "run": f"r{rps}"}


def test_the_baseline_cpu_is_read_at_the_rate_and_connections_of_a_replay() -> None:
    """Known answers: linear in log(rate) between the runs at the nearest connection count (and payload), held
    beyond the end rates, repeats averaged; a model without the ladder books its one value."""
    block = {"cpu_ms": 0.06, "source": "the most loaded run",
             "by_rate": [_point(1000, 16, 0.12), _point(4000, 16, 0.08), _point(1010, 16, 0.10),
                         _point(500, 1, 0.40), _point(500, 1, 0.50, payload=16384)]}
    cpu, how = baseline_cpu_at(block, 2000, 16, 1024)  # half way from 1 000 (two repeats: 0.11) to 4 000 in log
    assert cpu == pytest.approx(0.095, rel=1e-9)
    assert "16 connection(s)" in how
    assert baseline_cpu_at(block, 200, 16, 1024)[0] == pytest.approx(0.11)  # held at the lowest rate
    assert baseline_cpu_at(block, 9000, 12, 1024)[0] == pytest.approx(0.08)  # 12 is nearer 16 than 1
    assert baseline_cpu_at(block, 500, 2, 1024)[0] == pytest.approx(0.40)  # 2 is nearer 1 than 16
    assert baseline_cpu_at(block, 500, 1, 16384)[0] == pytest.approx(0.50)  # the payload's own run
    assert baseline_cpu_at({"cpu_ms": 0.06, "source": "s"}, 500, 1, 1024) == (0.06, "s")
    model = {"name": "m", "calibration": {"baseline": {"family": "deterministic", "value_ms": 0.14},
                                          "baseline_cpu": block}}
    assert baseline_service(model, 1, "a test", (2000, 16, 1024))["cpu_fraction"] == pytest.approx(0.095 / 0.14,
                                                                                                  rel=1e-4)
    assert baseline_service(model, 1, "a test")["cpu_fraction"] == pytest.approx(0.06 / 0.14, rel=1e-4)  # no rate


def test_the_fit_writes_every_baseline_run_by_rate() -> None:
    runs = load_runs(sorted((SESSION / "calibration").iterdir())).runs
    cpu = baseline_cpu(runs)
    assert cpu is not None
    plain = [r for r in runs if r.manifest.setup.path == "baseline" and not r.features]
    assert sorted(p["run"] for p in cpu["by_rate"]) == sorted(r.id for r in plain)
    ladder = sorted((p["rps"], p["cpu_ms"]) for p in cpu["by_rate"] if p["connections"] == 16)
    assert [c for _, c in ladder] == sorted((c for _, c in ladder), reverse=True)  # fewer wakes per request


def test_validate_replays_a_closed_loop_at_the_rate_it_carries(tmp_path: Path) -> None:
    """A saturated chain3 closed loop (20 000 requested): the first replay books the most loaded baseline run's
    CPU, carries about 2 000 rps, saturating the host, and is replayed with the CPU read at that rate; the CPU
    booked is then the ladder's at a rate within 5 % of what the last replay carried, and the carried rate falls (a
    dearer baseline). A paced run the replay carries is left as it was."""
    model = yaml.safe_load((SESSION / "envoy-lab.yaml").read_text())
    runs = load_runs(sorted((SESSION / "calibration").iterdir())).runs
    model["calibration"]["baseline_cpu"] = baseline_cpu(runs)
    by_rate = tmp_path / "by-rate.yaml"
    by_rate.write_text(yaml.safe_dump(model, sort_keys=False))
    run = next((SESSION / "closed").glob("lab-chain3-sidecar-q20000-*"))
    options = dict(run_dirs=(SESSION / "baselines", SESSION / "baselines-loaded", run), replications=2,
                   sim_duration_s=2.0, processes=1)
    comparison = next(c for c in validate_runs(ValidateOptions(model=by_rate, **options)).comparisons
                      if c.run_id == run.name)
    read = [n for n in comparison.notes if n.startswith("the baseline's CPU read at")]
    assert len(read) == 1
    rate = float(read[0].split("read at ")[1].split(" rps")[0])
    assert abs(comparison.achieved_rps.predicted / rate - 1.0) <= 0.05
    assert rate < 4000  # not the 20 000 requested, nor the top rung
    one_value = next(c for c in validate_runs(ValidateOptions(model=SESSION / "envoy-lab.yaml", **options)).comparisons
                     if c.run_id == run.name)
    assert comparison.achieved_rps.predicted < 0.99 * one_value.achieved_rps.predicted
    paced = next((SESSION / "paced").glob("lab-single-sidecar-q800-*"))
    notes = validate_runs(ValidateOptions(model=by_rate, **{**options, "run_dirs": (paced,)})).comparisons[0].notes
    assert not any(n.startswith("the baseline's CPU read at") for n in notes)
