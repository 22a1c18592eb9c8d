"""Linux's per-CPU run queues on a node's cores (NodeCores with per_core_queues): a burst that finds no core idle
waits on the one core it was queued on at its wake-up, even when another core frees sooner; both engines alike."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from meshsim.distributions import Deterministic
from meshsim.sim.engine.replication_result import Horizon
from meshsim.sim.engine.simpy_replication import run_replication
from meshsim.sim.engine.stations import NodeCores
from meshsim.sim.fast.fast_engine import run_fast_replication
from meshsim.workload import OpenLoad, Workload
from simkit import plain, tandem_topology


def test_a_queued_burst_waits_on_its_own_core_in_turn() -> None:
    shared, per_core = NodeCores(2), NodeCores(2, per_core_queues=True)
    for cores in (shared, per_core):
        assert cores.run(0.0, 1.0) == 1.0 and cores.run(0.0, 0.5) == 0.5  # idle cores: taken at once
    assert shared.run(0.1, 0.2) == pytest.approx(0.7)  # one queue: the core that frees first (at 0.5)
    assert per_core.run(0.1, 0.2) == pytest.approx(1.2)  # queued on core 0, busy until 1.0
    assert per_core.run(0.1, 0.2) == pytest.approx(0.7)  # the next in turn: core 1, free at 0.5
    assert per_core.run(0.1, 0.2) == pytest.approx(1.4)  # core 0 again, after the first queued burst
    assert per_core.run(2.0, 0.1) == pytest.approx(2.1)  # an idle core is still taken at once


def _lab(per_core: bool):
    tandem = tandem_topology([Deterministic(0.3e-3), Deterministic(0.2e-3), Deterministic(0.25e-3)])
    spare = replace(tandem, services={n: replace(s, cores=8) for n, s in tandem.services.items()})
    return plain(spare.on_one_host(2.0, per_core_queues=per_core))


def test_both_engines_give_the_same_timeline_with_per_core_queues() -> None:
    workload, horizon = Workload(OpenLoad(2000.0, connections=16)), Horizon(1.0, 0.1, 0.5)
    simpy = run_replication(_lab(True), workload, horizon, 5, 0)
    fast = run_fast_replication(_lab(True), workload, horizon, 5, 0)
    assert fast.latencies.size == simpy.latencies.size > 1000
    np.testing.assert_allclose(fast.latencies, simpy.latencies, rtol=0, atol=1e-9)
    assert {c: u.cpu_waited for c, u in fast.usage.items()} == pytest.approx(
        {c: u.cpu_waited for c, u in simpy.usage.items()}, abs=1e-9)
    shared = run_replication(_lab(False), workload, horizon, 5, 0)
    # the same arrivals (common random numbers) wait longer for a core when they cannot move to the one that frees
    assert sum(u.cpu_waited for u in simpy.usage.values()) > sum(u.cpu_waited for u in shared.usage.values())
    assert np.mean(simpy.latencies) > np.mean(shared.latencies)


REPO = Path(__file__).resolve().parent.parent
LAB = REPO / "measurements" / "lab-cpu-at-load-2026-11-27"
RUN = sorted((REPO / "measurements" / "lab-runqueue-2026-11-27" / "runs" / "chain3-c16-q700").glob("*/manifest.yaml"))[0]


def test_validate_replays_a_lab_run_with_per_core_queues_beside_its_measured_run_queue() -> None:
    from meshsim.calibrate.validation import ValidateOptions, validate_runs

    def waits(per_core: bool) -> dict[str, tuple[float, float]]:
        validation = validate_runs(ValidateOptions(LAB / "envoy-lab.yaml", (LAB / "sitting-0359" / "chain-baseline",
                                                   RUN.parent), replications=2, sim_duration_s=1.0, processes=1,
                                                   per_core_queues=per_core))
        assert validation.settings["run_queues"] == ("per-core" if per_core else "shared")
        (held_out,) = [c for c in validation.comparisons if c.role == "held-out"]
        return {k: (m.measured, m.predicted) for k, m in held_out.run_queue_ms.items()}

    shared, per_core = waits(False), waits(True)
    assert set(shared) == set(per_core) == {"client/sidecar", "s1/app", "s1/sidecar", "s2/app", "s2/sidecar",
                                            "s3/app", "s3/sidecar"}
    assert all(shared[k][0] == per_core[k][0] > 0 for k in shared)  # the same measured waits
    assert sum(p for _, p in per_core.values()) > sum(p for _, p in shared.values())  # the bursts wait longer


def test_run_queues_do_not_apply_to_summary_rows(capsys) -> None:
    from meshsim.cli import main

    code = main(["validate", "--model", str(LAB / "envoy-lab.yaml"), "--rows", "rows.csv", "--run-queues", "per-core"])
    assert code == 2 and "--rows: --run-queues does not apply" in capsys.readouterr().err
