"""An app's garbage collections (meshsim/garbage_collection.py): CPU in lumps every so many requests.

Exact timelines on deterministic inputs, the same on both engines: a collection falling due runs on one of the app's
threads before the request's own work, so with one core the request that set it off waits for it, and with two it
does not; the app's CPU is its work per request plus the collections' share.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from meshsim.distributions import Deterministic
from meshsim.errors import ModelError
from meshsim.garbage_collection import GarbageCollection
from meshsim.sim.engine.replication_result import Horizon
from meshsim.sim.engine.simpy_replication import run_replication
from meshsim.sim.fast.fast_engine import run_fast_replication
from meshsim.topology import load_topology_text
from meshsim.workload import FortioLoad, Workload
from simkit import plain, tandem_topology

WORK, EVERY, GC_CPU = 0.2e-3, 4, 1.0e-3
PERIOD = 2.5e-3  # one fortio connection at 400 rps: a call every 2.5 ms, longer than work and collection together


def _runs(cores: int, every: float = EVERY, cpu: float = GC_CPU):
    topology = tandem_topology([Deterministic(WORK)])
    service = replace(topology.services["q1"], cores=cores, garbage_collection=GarbageCollection(every, cpu))
    scenario = plain(replace(topology, services={"q1": service}))
    workload, horizon = Workload(FortioLoad(400.0, 1)), Horizon(1.0, 0.0, 1.0)
    return run_replication(scenario, workload, horizon, 3, 0), run_fast_replication(scenario, workload, horizon, 3, 0)


def test_with_one_core_every_kth_request_waits_for_the_collection_it_sets_off() -> None:
    simpy, fast = _runs(cores=1)
    np.testing.assert_allclose(fast.latencies, simpy.latencies, rtol=0, atol=1e-9)
    latencies = simpy.latencies
    slow = np.flatnonzero(np.isclose(latencies, GC_CPU + WORK, rtol=0, atol=1e-9))
    fast_ones = np.isclose(latencies, WORK, rtol=0, atol=1e-9)
    assert latencies.size == 400 and np.all(fast_ones | np.isin(np.arange(latencies.size), slow))
    assert np.all(np.diff(slow) == EVERY) and slow[0] < EVERY  # every 4th, from a drawn phase
    for result in (simpy, fast):
        assert result.usage["q1/app"].cpu_seconds == pytest.approx(latencies.size * WORK + slow.size * GC_CPU,
                                                                   rel=1e-9)


def test_with_two_cores_the_collection_takes_a_thread_of_its_own() -> None:
    simpy, fast = _runs(cores=2)
    np.testing.assert_allclose(fast.latencies, simpy.latencies, rtol=0, atol=1e-9)
    np.testing.assert_allclose(simpy.latencies, WORK, rtol=0, atol=1e-9)
    without, _ = _runs(cores=2, cpu=0.0)
    collections = (simpy.usage["q1/app"].cpu_seconds - without.usage["q1/app"].cpu_seconds) / GC_CPU
    assert collections == pytest.approx(round(collections), abs=1e-6) and abs(collections - 400 / EVERY) <= 1


def test_a_fractional_period_keeps_its_mean() -> None:
    """Every 2.5 requests: the gaps between collections alternate 2 and 3 requests, 160 of 400."""
    simpy, fast = _runs(cores=1, every=2.5)
    np.testing.assert_allclose(fast.latencies, simpy.latencies, rtol=0, atol=1e-9)
    slow = np.flatnonzero(np.isclose(simpy.latencies, GC_CPU + WORK, rtol=0, atol=1e-9))
    assert set(np.diff(slow)) == {2, 3} and abs(slow.size - 160) <= 1


BASE = """
schema: meshsim/topology/v1
name: t
entry: a
services:
  a:
    handler: [{compute: {family: deterministic, value_ms: 0.2}}]
    garbage_collection: BLOCK
network: {loopback: {family: deterministic, value_ms: 0.01}, same_node: {family: deterministic, value_ms: 0.05},
          cross_node: {family: deterministic, value_ms: 0.1}, bandwidth_gbps: 10}
"""


def test_a_declared_collection_is_read_with_its_units() -> None:
    topology = load_topology_text(BASE.replace("BLOCK", "{every_requests: 48, cpu_ms: 2.0, source: gctrace}"))
    gc = topology.services["a"].garbage_collection
    assert gc == GarbageCollection(48.0, 2.0e-3, "gctrace") and gc.cpu_per_request == pytest.approx(2.0e-3 / 48)


@pytest.mark.parametrize("block, key", [
    ("{every_requests: 0.5, cpu_ms: 2}", "garbage_collection.every_requests"),
    ("{every_requests: 48, cpu_ms: -1}", "garbage_collection.cpu_ms"),
    ("{every_requests: 48}", "garbage_collection.cpu_ms"),
    ("{every_requests: 48, cpu_ms: 2, pause_ms: 1}", "garbage_collection"),
])
def test_a_bad_collection_block_is_refused_naming_its_key(block: str, key: str) -> None:
    with pytest.raises(ModelError, match=key.replace(".", r"\.")):
        load_topology_text(BASE.replace("BLOCK", block))
