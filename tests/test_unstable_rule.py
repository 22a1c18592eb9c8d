"""A load that waits for its answers cannot pile up: however many requests a short run ends with in flight, it holds
at most one per connection, so the open-load rule for 'requests piling up'
(sim/experiments/saturation_search.unstable) must not call it saturated. The mesh-comparison study's short runs at
3500 rps (96 wrk2 connections, ~30 in flight, 1 400 answered) were all marked saturated with their proxies' workers
under 1 % busy."""

from __future__ import annotations

from meshsim.distributions import Deterministic
from meshsim.sim.engine.replication_result import Horizon
from meshsim.sim.engine.simpy_replication import run_replication
from meshsim.sim.experiments.saturation_search import unstable
from meshsim.workload import OpenLoad, Workload, Wrk2Load
from simkit import plain, station_topology

# 20 ms a request on 64 cores: a capacity of 3 200 rps, and no queueing at 1 000 rps
SCENARIO = plain(station_topology(Deterministic(0.02), servers=64))
SHORT = Horizon(0.35, 0.05, drain=0.1)


def test_a_short_wrk2_run_with_many_requests_in_flight_is_not_unstable() -> None:
    result = run_replication(SCENARIO, Workload(Wrk2Load(1000.0, connections=64, threads=2)), SHORT, 1, 0)
    # about 20 in flight and 300 answered: what the open-load rule reads as piling up
    assert result.in_flight > max(10, 0.01 * result.completed), (result.in_flight, result.completed)
    assert not unstable([result])


def test_an_overloaded_open_load_still_piles_up() -> None:
    result = run_replication(SCENARIO, Workload(OpenLoad(6000.0)), Horizon(1.0, 0.1, drain=0.1), 1, 0)
    assert result.in_flight > 1000 and unstable([result])
