"""A handler's ``delay`` step and a service's ``cpu_fraction``: time the app waits without holding a core (topology
schema, both engines), and the lab validation's forwarding apps split into their measured CPU and such a delay."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from meshsim.calibrate.measure.dataset import load_runs
from meshsim.calibrate.validation.forwarding_cpu import forwarding_cpu_ms
from meshsim.calibrate.validation.replay import graph_topology
from meshsim.calibrate.measure.lab.spec import parse_topology
from meshsim.distributions import Deterministic
from meshsim.errors import ModelError
from meshsim.scenario import Scenario
from meshsim.sim.engine.replication_result import Horizon
from meshsim.sim.engine.simpy_replication import run_replication
from meshsim.sim.fast.fast_engine import run_fast_replication
from meshsim.topology import Client, Compute, Delay, Service, Topology, load_topology_text
from meshsim.workload import FortioLoad, Workload
from simkit import NO_MESH, NO_NETWORK

MS = 1e-3
ENGINES = {"simpy": run_replication, "fast": run_fast_replication}
SHIPPED = Path(__file__).resolve().parent.parent / "measurements" / "lab-tracing-2026-11-27"


def _topology(*handler, cpu_fraction: float = 1.0) -> Topology:
    svc = Service("q", handler=tuple(handler), cores=1, request_bytes=0, response_bytes=0, cpu_fraction=cpu_fraction)
    return Topology("delayed", "q", {"q": svc}, NO_NETWORK, Client(request_bytes=0))


WAITS = {"a delay step": _topology(Compute(Deterministic(1 * MS)), Delay(Deterministic(2 * MS))),
         "a cpu fraction": _topology(Compute(Deterministic(3 * MS)), cpu_fraction=1 / 3)}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("wait", WAITS)
def test_a_wait_holds_no_core(engine: str, wait: str) -> None:
    """1 ms of CPU and 2 ms of waiting on one core (a compute and a delay step, or a 3 ms compute step a third of
    which holds the core), two connections as fast as they can: each request takes 3 ms once the two have fallen out
    of step, so 2 / 3 ms = 667 requests/s and the core is busy two thirds of the time; were the wait CPU, the core
    would carry 1 / 3 ms = 333."""
    load = Workload(FortioLoad(100_000, connections=2))
    delayed = ENGINES[engine](Scenario(WAITS[wait], NO_MESH), load, Horizon(4.0, 1.0), 1, 0)
    busy = ENGINES[engine](Scenario(_topology(Compute(Deterministic(3 * MS))), NO_MESH), load, Horizon(4.0, 1.0), 1, 0)
    assert delayed.achieved_rps == pytest.approx(2 / (3 * MS), rel=0.01)
    assert busy.achieved_rps == pytest.approx(1 / (3 * MS), rel=0.01)
    assert np.median(delayed.latencies) == pytest.approx(3 * MS, rel=1e-9)
    assert delayed.usage["q/app"].cpu_seconds / (delayed.achieved_rps * 3.0) == pytest.approx(1 * MS, rel=0.01)


def _yaml(step: str) -> str:
    return ("schema: meshsim/topology/v1\nname: t\nentry: a\nnetwork: {loopback: 0.01, same_node: 0.02, "
            f"cross_node: 0.1, bandwidth_gbps: 10}}\nservices:\n  a: {{handler: [{step}]}}\n")


def test_the_topology_file_reads_a_delay_step() -> None:
    topo = load_topology_text(_yaml("{delay: 2}"), "t.yaml")
    assert topo.services["a"].handler == (Delay(Deterministic(2 * MS)),)
    with pytest.raises(ModelError, match="exactly one of compute, delay, call, parallel, choose"):
        load_topology_text(_yaml("{delay: 2, compute: 1}"), "t.yaml")


def test_the_lab_chains_forwarding_apps_hold_their_core_for_their_cpu_only() -> None:
    """chain3's baseline run: s1's and s2's apps burn their CPU clock's share of the hop; the rest is a delay."""
    base = load_runs(sorted((SHIPPED / "chain-baseline").iterdir())).runs[0]
    graph = parse_topology("chain3")
    cpu = forwarding_cpu_ms(base, graph)
    assert cpu is not None and 0 < cpu < 1.0
    model = {"name": "m", "calibration": {"baseline": {"family": "deterministic", "value_ms": 0.3}}}
    topo = graph_topology(model, "chain3", graph, 1.0, "a test hop", cpu)
    handler = topo.services["s1"].handler
    computes = sum(s.time.mean for s in handler if isinstance(s, Compute))
    delays = sum(s.time.mean for s in handler if isinstance(s, Delay))
    assert computes == pytest.approx(cpu * MS, rel=1e-3)
    assert computes + delays == pytest.approx(1.0 * MS, rel=1e-3)
    whole = graph_topology(model, "chain3", graph, 1.0, "a test hop", None).services["s1"].handler
    assert not any(isinstance(s, Delay) for s in whole)
