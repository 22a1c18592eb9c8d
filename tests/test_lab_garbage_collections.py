"""The lab apps' garbage collections as a probe records them (calibrate/measure/lab/garbage_collections.py): the Go
runtime's own trace lines parsed, counted over the load only, and on real fortio apps, with and without collecting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from meshsim.calibrate.measure.lab.garbage_collections import (Collections, collections_per_request, over_load,
                                                               parse, snapshot)

from conftest import require_component  # tests/conftest.py: fails under CI=true, skips otherwise

# three lines of a forwarding fortio app's log in a saturated lab chain (2026-11-29), and one that is not a collection
TRACE = """\
gc 128 @5.161s 3%: 0.063+5.1+0.18 ms clock, 0.12+0.25/0.32/0.35+0.37 ms cpu, 4->4->2 MB, 4 MB goal, 0 MB stacks, 0 MB globals, 2 P
gc 129 @5.210s 3%: 0.67+1.7+0.005 ms clock, 1.3+0/0.71/0.46+0.010 ms cpu, 4->4->2 MB, 4 MB goal, 0 MB stacks, 0 MB globals, 2 P
fortio proxy listening on 127.0.0.1:20001
gc 130 @5.260s 3%: 0.038+0.88+0.002 ms clock, 0.076+0.65/0.45/0.098+0.004 ms cpu, 4->4->2 MB, 4 MB goal, 0 MB stacks, 0 MB globals, 2 P
"""


def test_a_trace_line_gives_its_mark_workers_cpu_and_its_wall_clock() -> None:
    got = parse(TRACE.splitlines())
    assert got.cycles == 3
    assert got.mark_cpu_ms == pytest.approx((0.25 + 0.32 + 0.35) + (0 + 0.71 + 0.46) + (0.65 + 0.45 + 0.098))
    assert got.wall_ms == pytest.approx((0.063 + 5.1 + 0.18) + (0.67 + 1.7 + 0.005) + (0.038 + 0.88 + 0.002))


def test_only_the_lines_written_during_the_load_count(tmp_path: Path) -> None:
    log = tmp_path / "s1_app.log"
    lines = TRACE.splitlines()
    log.write_text(lines[0] + "\n")
    before = snapshot({"s1/app#0": str(log), "gone/app": str(tmp_path / "none.log")})
    with open(log, "a") as f:
        f.write("\n".join(lines[1:]) + "\n")
    got = over_load({"s1/app#0": str(log), "gone/app": str(tmp_path / "none.log")}, before)
    assert got == {"s1/app#0": parse(lines[1:])} and got["s1/app#0"].cycles == 2


def test_replicas_add_up_over_the_runs_requests() -> None:
    data = {"requests": 1000, "processes": {"s1/app#0": {"cycles": 10, "mark_cpu_ms": 20.0, "wall_ms": 1},
                                            "s1/app#1": {"cycles": 30, "mark_cpu_ms": 40.0, "wall_ms": 1},
                                            "s3/app": {"cycles": 0, "mark_cpu_ms": 0.0, "wall_ms": 0}}}
    assert collections_per_request(data, "s1/app") == pytest.approx((0.04, 1.5))
    assert collections_per_request(data, "s3/app") is None and collections_per_request(data, "s9/app") is None


@pytest.mark.lab
@pytest.mark.unmeasured  # asserts no timing: may run beside the simulations
@pytest.mark.parametrize("gogc", ["100", "off"])
def test_a_lab_probe_records_the_apps_collections(tmp_path: Path, monkeypatch, gogc: str) -> None:
    """fortio's forwarding apps allocate tens of KB per request against Go's 4 MB minimum heap goal: at 2000 rps for
    2 s each collects dozens of times; with GOGC=off in the lab's environment none does (the reading is the apps')."""
    require_component("fortio")
    from meshsim.calibrate.measure.lab.probe import ProbeSettings, probe
    from meshsim.calibrate.measure.lab.running import Lab
    from meshsim.calibrate.measure.lab.spec import LabSpec

    monkeypatch.setenv("GOGC", gogc)
    with Lab(LabSpec(topology="chain3", mode="baseline"), tmp_path / "lab") as state:
        result = probe(state, ProbeSettings(rps=2000, connections=8, duration_s=2.0, payload_bytes=1024),
                       tmp_path / "runs")
    data = json.loads((result.folder / "garbage-collections.json").read_text())
    assert set(data["processes"]) == {"s1/app", "s2/app", "s3/app"}
    assert data["requests"] == result.result["DurationHistogram"]["Count"]
    forwarding = [Collections(**data["processes"][name]) for name in ("s1/app", "s2/app")]
    if gogc == "off":
        assert all(row["cycles"] == 0 for row in data["processes"].values())
    else:
        assert all(c.cycles >= 10 and 0 < c.mark_cpu_per_cycle_ms < 50 for c in forwarding)
        assert collections_per_request(data, "s1/app")[0] == pytest.approx(forwarding[0].cycles / data["requests"])


SESSION = Path(__file__).resolve().parent.parent / "measurements" / "lab-garbage-collection-2026-11-29" / "session"


def test_a_chain_baselines_collections_become_its_forwarding_apps_block() -> None:
    """The stored loaded baselines of chain3: the replay's forwarding apps collect as often as s1's and s2's apps did
    per request, at their mark CPU per collection, and their CPU per request is booked beyond that share."""
    from meshsim.calibrate.measure.dataset import load_runs
    from meshsim.calibrate.measure.lab.spec import parse_topology
    from meshsim.calibrate.validation.forwarding_cpu import forwarding_collection, forwarding_cpu_ms
    from meshsim.calibrate.validation.replay import graph_topology
    from meshsim.garbage_collection import GarbageCollection

    graph = parse_topology("chain3")
    runs = load_runs(sorted((SESSION / "baselines-loaded").iterdir())).runs
    assert len(runs) == 2
    for run in runs:
        data = json.loads((run.folder / "garbage-collections.json").read_text())
        rows = [data["processes"][f"s{i}/app"] for i in (1, 2)]
        block = forwarding_collection(run, graph)
        assert block is not None
        every = 2 / sum(r["cycles"] / data["requests"] for r in rows)
        assert block["every_requests"] == pytest.approx(every, abs=1e-3) and 10 < every < 500
        assert block["cpu_ms"] == pytest.approx(sum(r["mark_cpu_ms"] for r in rows) / sum(r["cycles"] for r in rows),
                                                abs=1e-4)
        clocks = sum(run.cpu_per_request(f"s{i}/app") for i in (1, 2)) / 2 * 1e3
        share = sum(r["mark_cpu_ms"] for r in rows) / 2 / data["requests"]
        cpu = forwarding_cpu_ms(run, graph)
        assert cpu == pytest.approx(clocks - share, rel=1e-9) and 0 < share < clocks
        model = {"name": "m", "calibration": {"baseline": {"family": "deterministic", "value_ms": 0.3}}}
        topology = graph_topology(model, "chain3", graph, 1.0, "a test hop", cpu, collection=block)
        assert topology.services["s1"].garbage_collection == GarbageCollection(
            block["every_requests"], block["cpu_ms"] * 1e-3, block["source"])
        assert topology.services["s3"].garbage_collection is None  # the leaf stands for the calibration's baseline


def test_the_apps_trace_their_collections_after_the_users_own_go_settings() -> None:
    from meshsim.calibrate.measure.lab.garbage_collections import go_trace_env

    assert go_trace_env({}) == {"GODEBUG": "gctrace=1"}
    assert go_trace_env({"GODEBUG": "madvdontneed=1"}) == {"GODEBUG": "madvdontneed=1,gctrace=1"}
