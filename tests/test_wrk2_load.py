"""wrk2's constant-throughput load: exact timelines on deterministic inputs, and queueing theory for the
coordinated-omission correction (one connection, timed from its intended send times, is a D/M/1 queue)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import simpy
from scipy.optimize import brentq

from meshsim.distributions import Deterministic, Exponential
from meshsim.errors import FieldError
from meshsim.sim.engine.replication_result import Horizon
from meshsim.sim.engine.simpy_replication import run_replication
from meshsim.sim.engine.loadgen import LoadTrace, Wrk2Pacer, wrk2_connections
from meshsim.sim.engine.streams import Streams
from meshsim.sim.engine.system import System
from meshsim.workload import Workload, Wrk2Load, validate_load
from simkit import plain, station_topology


def wrk2_timeline(load: Wrk2Load, duration: float, service: float | list[float], servers: int = 8
                  ) -> tuple[dict[int, list[float]], list[tuple[float, float, float]]]:
    """Send times per connection (ms) and every recorded answer as (arrival, corrected, uncorrected latency) in ms.

    ``service``: a deterministic service time, or the service time of each request in send order (a scripted
    server, to put one late answer exactly where the test wants it)."""
    env = simpy.Environment()
    system = System(env, plain(station_topology(Deterministic(service if isinstance(service, float) else 0.0),
                                                servers)), Workload(load), Streams(1, 0))
    sends: dict[int, list[float]] = {}
    original = system.client_request
    script = iter(service) if isinstance(service, list) else None

    def tagged(conn: int):
        sends.setdefault(conn, []).append(round(env.now * 1e3, 6))
        if script is None:
            yield from original(conn)
        else:
            yield env.timeout(next(script))

    system.client_request = tagged  # type: ignore[method-assign]
    corrected: list[tuple[float, float]] = []
    uncorrected: list[float] = []
    wrk2_connections(env, system, load, duration, lambda t, lat: corrected.append((t, lat)), LoadTrace(),
                     lambda t, lat: uncorrected.append(lat))
    env.run()
    ms = [(round(t * 1e3, 6), round(c * 1e3, 6), round(u * 1e3, 6)) for (t, c), u in zip(corrected, uncorrected)]
    return sends, ms


def test_on_pace_connection_sends_at_its_intended_times():
    # 100 rps on one connection: intended every 10 ms; a 3 ms answer never makes it late
    sends, answers = wrk2_timeline(Wrk2Load(100, connections=1, threads=1, timer_s=0.0), 0.05, 0.003)
    assert sends[0] == [0.0, 10.0, 20.0, 30.0, 40.0]
    assert [(c, u) for _, c, u in answers] == [(3.0, 3.0)] * 5


def test_event_loop_timer_rounds_each_wait_up_to_the_next_millisecond():
    # wrk2 waits round(w_ms + 0.5) ms: the 7 ms to the next intended send become 8 ms, counted in the latency
    sends, answers = wrk2_timeline(Wrk2Load(100, connections=1, threads=1), 0.05, 0.003)
    assert sends[0] == [0.0, 11.0, 21.0, 31.0, 41.0]
    assert [(c, u) for _, c, u in answers] == [(3.0, 3.0)] + [(4.0, 3.0)] * 4


def test_late_answers_delay_the_next_send_and_latency_grows_with_the_backlog():
    # 15 ms answers on a 10 ms schedule: each request leaves when the previous answer is back, 5 ms later than the
    # one before relative to its intended time; timed from the intended time its latency grows by 5 ms a request
    sends, answers = wrk2_timeline(Wrk2Load(100, connections=1, threads=1, timer_s=0.0), 0.1, 0.015)
    assert sends[0] == [0.0, 15.0, 30.0, 45.0, 60.0, 75.0, 90.0]
    assert [c for _, c, _ in answers] == [15.0 + 5.0 * k for k in range(6)]  # the 7th answer (105 ms) is past the end
    assert {u for _, _, u in answers} == {15.0}  # the uncorrected latency sees none of it


def test_a_connection_behind_sends_at_once_until_it_is_on_pace_again():
    # one 25 ms answer, then 1 ms ones, on a 10 ms schedule: the requests intended at 10 and 20 ms leave as soon as
    # the previous answer is back (25, 26 ms), the one intended at 30 ms leaves on time
    sends, answers = wrk2_timeline(Wrk2Load(100, connections=1, threads=1, timer_s=0.0), 0.06, [0.025] + [0.001] * 9)
    assert sends[0] == [0.0, 25.0, 26.0, 30.0, 40.0, 50.0]
    assert [c for _, c, _ in answers] == [25.0, 16.0, 7.0, 1.0, 1.0, 1.0]
    assert [u for _, _, u in answers] == [25.0, 1.0, 1.0, 1.0, 1.0, 1.0]


def test_threads_split_the_connections_and_the_rate():
    # -t2 -c5 -R400: 2 connections per thread (the fifth is dropped, as wrk2 does), 200 rps per thread, 100 rps per
    # connection; inside a thread the second connection connects 5 ms after the first and keeps its own schedule
    load = Wrk2Load(400, connections=5, threads=2, timer_s=0.0)
    assert (load.connections_per_thread, load.used_connections, load.interval_s) == (2, 4, pytest.approx(0.01))
    sends, _ = wrk2_timeline(load, 0.03, 0.002)
    assert sorted(sends) == [0, 1, 2, 3]
    assert sends[0] == sends[2] == [0.0, 10.0, 20.0]
    assert sends[1] == sends[3] == [5.0, 15.0, 25.0]


@pytest.mark.parametrize("load, field", [
    (Wrk2Load(0.0), "rps"), (Wrk2Load(100, threads=0), "threads"), (Wrk2Load(100, connections=2, threads=4),
                                                                     "connections"),
    (Wrk2Load(100, timer_s=-1e-3), "timer_s"), (Wrk2Load(float("inf")), "rps"),
])
def test_bad_wrk2_loads_name_their_field(load: Wrk2Load, field: str):
    with pytest.raises(FieldError) as err:
        validate_load(load)
    assert err.value.field == field


def test_pacer_intended_times_count_answers_not_clock():
    pacer = Wrk2Pacer(origin=0.005, interval=0.01, timer_s=0.0)
    assert pacer.wait(0.0) == pytest.approx(0.005)
    pacer.completed = 3
    assert pacer.intended == pytest.approx(0.035)
    assert pacer.wait(0.1) == 0.0  # behind: send now


def dm1_sigma(rho: float) -> float:
    """D/M/1: the root in (0, 1) of sigma = exp(-(1 - sigma) / rho) (deterministic gaps a, service rate mu,
    rho = 1 / (mu a)); the waiting time is 0 with probability 1 - sigma, else exponential with rate mu (1 - sigma)."""
    return brentq(lambda s: s - math.exp(-(1 - s) / rho), 1e-12, 1 - 1e-12)


def test_one_connection_is_a_dm1_queue_timed_from_the_intended_send():
    """One connection sends as soon as it is behind: its lateness follows Lindley's recursion with
    deterministic gaps, so the corrected latency is the D/M/1 sojourn time (mean s / (1 - sigma)), while the
    uncorrected latency is just the service time (mean s): the correction adds sigma s / (1 - sigma)."""
    service, rho = 1e-3, 0.7
    load = Wrk2Load(rho / service, connections=1, threads=1, timer_s=0.0)
    scenario = plain(station_topology(Exponential(service)))
    sigma = dm1_sigma(rho)
    corrected, uncorrected, zero_wait = [], [], []
    for rep in range(8):
        env = simpy.Environment()
        system = System(env, scenario, Workload(load), Streams(7, rep))
        c: list[float] = []
        u: list[float] = []
        wrk2_connections(env, system, load, 15.0, lambda t, lat: c.append(lat), LoadTrace(),
                         lambda t, lat: u.append(lat))
        env.run()
        c_arr, u_arr = np.asarray(c), np.asarray(u)
        corrected.append(c_arr.mean())
        uncorrected.append(u_arr.mean())
        zero_wait.append(np.mean(np.isclose(c_arr, u_arr, rtol=0, atol=1e-12)))
    for values, expected in ((corrected, service / (1 - sigma)), (uncorrected, service), (zero_wait, 1 - sigma)):
        mean, half = np.mean(values), 2.365 * np.std(values, ddof=1) / np.sqrt(len(values))  # t(7) 95 %
        assert abs(mean - expected) <= max(half, 0.01 * expected) * 1.5, (mean, expected, half)
    assert np.mean(corrected) - np.mean(uncorrected) == pytest.approx(sigma * service / (1 - sigma), rel=0.05)


def test_saturated_wrk2_latency_grows_with_the_run_while_throughput_caps_at_capacity():
    """1500 rps offered to a 1000 rps server through one connection: throughput is the server's capacity, and the
    k-th answer is k (s - a) late, so the mean corrected latency over a run of D s is about D (1 - 1/rho) / 2."""
    service, rho = 1e-3, 1.5
    scenario = plain(station_topology(Exponential(service)))
    load = Workload(Wrk2Load(rho / service, connections=1, threads=1))
    means, achieved = {}, {}
    for duration in (4.0, 16.0):
        r = run_replication(scenario, load, Horizon(duration, 0.0, drain=1.0), 3, 0)
        means[duration], achieved[duration] = float(np.mean(r.latencies)), r.achieved_rps
        assert r.achieved_rps == pytest.approx(1 / service, rel=0.04)
        assert means[duration] == pytest.approx(duration * (1 - 1 / rho) / 2, rel=0.1)
    assert means[16.0] / means[4.0] == pytest.approx(4.0, rel=0.1)


# -- the request builder and `meshsim predict --load wrk2` ----------------------------------------------------------

def test_the_builder_makes_a_wrk2_load_with_wrk_defaults():
    from meshsim.request import PredictOptions, build_request
    assert build_request(PredictOptions(rps=100, load="wrk2")).workload.load == Wrk2Load(100.0, 10, 2)
    load = build_request(PredictOptions(rps=3500, load="wrk2", threads=96, connections=96)).workload.load
    assert load == Wrk2Load(3500.0, 96, 96)


@pytest.mark.parametrize("argv, flag, words", [
    (["--rps", "10", "--threads", "4"], "--threads:", "wrk2 load only"),  # open load: no threads
    (["--load", "fortio", "--rps", "10", "--threads", "4"], "--threads:", "wrk2 load only"),
    (["--load", "wrk2", "--rps", "10", "--threads", "4", "--connections", "2"], "--connections:", "threads (4)"),
    (["--load", "wrk2", "--rps", "10", "--threads", "0"], "--threads:", ">= 1"),
    (["--load", "wrk2", "--profile", "ramp:100:200:10"], "--profile:", "wrk2"),
    (["--load", "wrk2", "--rps", "10", "--uniform"], "--uniform:", "fortio load only"),
    (["--load", "wrk2", "--rps", "10", "--think", "5"], "--think:", "sequential load only"),
    (["--load", "wrk2"], "--rps:", "required"),
])
def test_conflicting_wrk2_flags_are_refused_in_one_line(argv: list[str], flag: str, words: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from meshsim.cli import main
    assert main(["predict", "--topology", "single", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"meshsim: error: {flag}") and words in err, err


def test_predict_with_wrk2_load_from_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from meshsim.cli import main
    argv = ["predict", "--topology", "single", "--mesh", "istio", "--load", "wrk2", "--threads", "2",
            "--connections", "4", "--rps", "200", "--duration", "2", "--replications", "2", "--processes", "1",
            "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["inputs"]["load"]["model"] == "Wrk2Load"
    assert (out["inputs"]["load"]["threads"], out["inputs"]["load"]["connections"]) == (2, 4)
    assert out["achieved_rps"] == pytest.approx(200, rel=0.05)
    assert 0 < out["latency_ms"]["p50"] < out["latency_ms"]["p99"]
