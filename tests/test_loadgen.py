"""fortio's closed loop reproduced exactly on deterministic inputs, and the other load models."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from meshsim.distributions import Deterministic, Exponential
from meshsim.sim.engine.replication_result import Horizon
from meshsim.sim.engine.simpy_replication import run_replication
from meshsim.sim.engine.loadgen import FortioPlan, LoadTrace, fortio_threads, open_arrivals, sequential_users
from meshsim.sim.engine.streams import Streams
from meshsim.sim.engine.system import System
from meshsim.workload import FortioLoad, OpenLoad, RateProfile, SequentialLoad, Workload
from simkit import plain, station_topology


def fortio_calls(load: FortioLoad, duration: float, service: float,
                 servers: int = 4) -> tuple[dict[int, list[tuple]], float, list[tuple[float, float]]]:
    """Every call per thread as (send time, latency) in ms (warm-ups included), fortio's timed start in ms, and
    what fortio recorded, for a deterministic server."""
    env = simpy.Environment()
    streams = Streams(1, 0)
    system = System(env, plain(station_topology(Deterministic(service), servers)), Workload(load), streams)
    recorded: list[tuple[float, float]] = []
    threads: dict[int, list[tuple]] = {}
    original = system.client_request

    def tagged(conn: int):
        start = env.now
        yield from original(conn)
        threads.setdefault(conn, []).append((round(start * 1e3, 6), round((env.now - start) * 1e3, 6)))

    system.client_request = tagged  # type: ignore[method-assign]
    trace = LoadTrace()
    fortio_threads(env, system, load, duration, lambda s, l: recorded.append((s, l)), streams, trace)
    env.run()
    return threads, round(trace.origin * 1e3, 6), recorded


def timeline(load: FortioLoad, duration: float, service: float, servers: int = 4) -> dict[int, list[tuple]]:
    """Per-thread timed calls (send time from fortio's timed start, latency) in ms: the warm-up calls left out."""
    threads, origin, _ = fortio_calls(load, duration, service, servers)
    return {tid: [(round(s - origin, 6), lat) for s, lat in calls if s >= origin] for tid, calls in threads.items()}


def test_fortio_paces_each_thread_over_the_duration():
    # 100 rps, 2 threads, 0.1 s: 10 calls, 5 per thread at (i + i/4) / 50 s = 0, 25, 50, 75, 100 ms
    t = timeline(FortioLoad(100, connections=2), 0.1, service=0.005)
    assert t[0] == [(0.0, 5.0), (25.0, 5.0), (50.0, 5.0), (75.0, 5.0), (100.0, 5.0)]
    assert t[1] == t[0]  # without -uniform the connections fire in sync


def test_fortio_uniform_staggers_thread_starts():
    t = timeline(FortioLoad(100, connections=2, uniform=True), 0.1, service=0.005)
    assert [s for s, _ in t[0]] == [0.0, 25.0, 50.0, 75.0, 100.0]
    assert [s for s, _ in t[1]] == [10.0, 35.0, 60.0, 85.0, 110.0]  # offset id/rps = 1/100 s


def test_fortio_in_sync_threads_queue_on_one_core():
    t = timeline(FortioLoad(100, connections=2), 0.1, service=0.005, servers=1)
    assert [l for _, l in t[0]] == [5.0] * 5
    assert [l for _, l in t[1]] == [10.0] * 5  # same instant, one core: the second waits for the first


def test_fortio_catches_up_when_late():
    # 40 rps, 1 thread, 0.1 s: 4 calls at targets 0, 33.3, 66.7, 100 ms; the server takes 50 ms
    t = timeline(FortioLoad(40, connections=1), 0.1, service=0.05)
    assert [s for s, _ in t[0]] == [0.0, 50.0, 100.0, 150.0]  # no sleep while behind: back to back


def test_fortio_nocatchup_skips_late_requests():
    t = timeline(FortioLoad(40, connections=1, nocatchup=True), 0.1, service=0.05)
    assert [s for s, _ in t[0]] == [0.0, 66.666667]  # call 1 (33.3 ms) skipped, call 3 (100 ms) skipped


def test_fortio_jitter_moves_sends_by_at_most_ten_percent_of_the_sleep():
    t = timeline(FortioLoad(100, connections=1, jitter=True), 0.1, service=0.005)
    sends = [s for s, _ in t[0]]
    assert len(sends) == 10 and sends[0] == 0.0
    plain_sends = [s for s, _ in timeline(FortioLoad(100, connections=1), 0.1, service=0.005)[0]]
    assert sends != plain_sends
    gaps_ok = [abs(s - p) <= 0.1 * (p - q - 5.0) + 1e-6 for q, s, p in zip(plain_sends, sends[1:], plain_sends[1:])]
    assert all(gaps_ok)


def test_fortio_plan_matches_fortio_setup():
    assert FortioPlan.of(FortioLoad(1000, 8), 10) == FortioPlan(8, 1250)
    assert FortioPlan.of(FortioLoad(1, 8), 1) == FortioPlan(1, 2)  # fewer than 2 calls: 2 calls, 1 thread
    assert FortioPlan.of(FortioLoad(10, 8), 1) == FortioPlan(5, 2)  # 2*threads > calls: threads lowered


@pytest.mark.parametrize("service_ms", [1.35, 2.0])
def test_fortio_throughput_caps_at_connections_over_latency(service_ms):
    """Istio 1.2 `both` at c=1 achieved 742 of 1000 rps: one connection cannot beat 1 / latency."""
    scenario = plain(station_topology(Deterministic(service_ms * 1e-3)))
    r = run_replication(scenario, Workload(FortioLoad(1000, connections=1)), Horizon(2.0), 1, 0)
    assert r.achieved_rps == pytest.approx(1000 / service_ms, rel=0.01)


def test_fortio_meets_the_rate_when_the_server_keeps_up():
    scenario = plain(station_topology(Exponential(0.2e-3), servers=2))
    r = run_replication(scenario, Workload(FortioLoad(500, connections=4)), Horizon(4.0), 1, 0)
    assert r.completed == 2000  # int(500 * 4) calls, 500 per connection
    assert r.achieved_rps == pytest.approx(500, rel=0.01)


def test_sequential_user_with_think_time():
    scenario = plain(station_topology(Deterministic(0.01)))
    env = simpy.Environment()
    streams = Streams(1, 0)
    system = System(env, scenario, Workload(SequentialLoad(Deterministic(0.05))), streams)
    sends: list[float] = []
    sequential_users(env, system, SequentialLoad(Deterministic(0.05)), 0.3, lambda s, l: sends.append(s), streams,
                     LoadTrace())
    env.run()
    assert sends == pytest.approx([0.0, 0.06, 0.12, 0.18, 0.24])  # 10 ms answer + 50 ms think


def test_open_load_rate_profile_ramps():
    """A ramp 500 -> 1500 rps over 20 s: the arrival count in each 5 s slice follows the integral of the rate."""
    scenario = plain(station_topology(Exponential(0.1e-3), servers=4))
    load = OpenLoad(1500, profile=RateProfile.ramp(500, 1500, 20.0))
    env = simpy.Environment()
    streams = Streams(3, 0)
    system = System(env, scenario, Workload(load), streams)
    sends: list[float] = []
    open_arrivals(env, system, load, 20.0, lambda s, l: sends.append(s), streams, LoadTrace())
    env.run()
    counts, _ = np.histogram(sends, bins=[0, 5, 10, 15, 20])
    expected = np.array([3125, 4375, 5625, 6875])  # mean rate of each slice x 5 s
    assert np.all(np.abs(counts - expected) < 4 * np.sqrt(expected)), counts


def test_time_breakdown_of_two_synchronised_connections_on_one_core():
    """5 ms of work, two connections firing together on one core: every second request waits 5 ms for the core."""
    r = run_replication(plain(station_topology(Deterministic(0.005), 1)), Workload(FortioLoad(100, connections=2)),
                        Horizon(0.1, 0.0), 1, 0)
    parts = {k: round(v * 1e3, 9) for k, v in r.breakdown.items()}
    assert parts["app work"] == 5.0 and parts["app queueing"] == 2.5
    assert sum(parts.values()) == pytest.approx(7.5) == float(np.mean(r.latencies)) * 1e3  # nothing else on the path
