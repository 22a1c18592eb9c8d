"""One replication on the SimPy reference engine: build the system, drive it with the workload, collect latencies
and per-station busy time."""

from __future__ import annotations

import numpy as np
import simpy

from meshsim.scenario import Scenario
from meshsim.workload import Workload
from meshsim.sim.engine.loadgen import LoadTrace, start_generator
from meshsim.sim.engine.replication_measures import (backlog, component_usage, node_utilization, time_breakdown,
                                                     wire_bytes)
from meshsim.sim.engine.replication_result import Horizon, ReplicationResult, in_filed_order
from meshsim.sim.engine.streams import Streams
from meshsim.sim.engine.system import System
from meshsim.sim.engine.window_series import replication_series, start_sampler


def run_replication(scenario: Scenario, workload: Workload, horizon: Horizon, seed: int,
                    replication: int, observe_gaps: bool = False) -> ReplicationResult:
    """``observe_gaps``: also return the idle gap every job found its worker in (calibration of wake-ups)."""
    env = simpy.Environment()
    streams = Streams(seed, replication)
    system = System(env, scenario, workload, streams)
    if observe_gaps:
        for _, station, _ in system.stations():
            station.idle_gaps = []
    latencies: list[float] = []
    warmup = horizon.warmup
    measure_from = [warmup]
    finished = [0]
    sent_times: list[float] = []  # of the measured requests, in the order of their latencies

    def record(sent: float, latency: float) -> None:
        finished[0] += 1
        if sent >= measure_from[0]:
            latencies.append(latency)
            sent_times.append(sent)

    trace = LoadTrace()
    opened = env.event()

    def open_window() -> None:
        """The load's timed run starts now (fortio: after its warm-up calls, which are not measured)."""
        measure_from[0] = env.now + warmup
        if warmup == 0:
            system.set_recording(True)  # before the first timed call books any work
        opened.succeed()

    load = workload.load
    start_generator(env, system, load, horizon.duration, record, streams, trace, open_window)
    if load.runs_fixed_calls:  # fortio: its untimed warm-up calls come first
        env.run(until=opened)

    origin = trace.origin  # the load's own times (duration, warm-up cut) count from here
    sampler = start_sampler(env, system.stations(), origin + warmup, origin + horizon.duration, horizon.series_s)
    if warmup > 0:
        env.run(until=origin + warmup)
    system.set_recording(True)
    system.set_hold_window(env.now, origin + horizon.duration)
    started_before = trace.started if warmup > 0 else 0
    env.run(until=origin + horizon.duration)
    started_in_window = trace.started - started_before
    system.set_recording(False)
    env.run(until=origin + horizon.duration + horizon.drain)

    # fortio reports calls / elapsed where elapsed ends when its last thread ends; open loads use the window
    end = max(trace.ends) if load.runs_fixed_calls and trace.ends else origin + horizon.duration
    window = max(end - origin - warmup, 1e-12)
    measured = len(latencies)
    achieved = measured / window
    busy_window = max(min(horizon.duration, end - origin) - warmup, 1e-12)
    growth, answered = backlog(load, np.asarray(sent_times), np.asarray(latencies), origin + warmup,
                               origin + horizon.duration)
    measured_latencies, filed_at = in_filed_order(np.asarray(latencies), np.asarray(sent_times))
    return ReplicationResult(
        latencies=measured_latencies,
        window=window,
        started=started_in_window,
        completed=measured,
        in_flight=trace.started - finished[0],
        achieved_rps=achieved,
        usage=component_usage(system, busy_window),
        busy_window=busy_window,
        sim_time=env.now,
        breakdown=time_breakdown(system, started_in_window),
        node_utilization=node_utilization(system, busy_window),
        backlog_growth=growth,
        answered_rps=answered,
        wire_bytes=wire_bytes(system, started_in_window),
        load_start=origin,
        series=replication_series(sampler, origin, sent_times if horizon.series_s else None, latencies),
        filed_at=filed_at,
    )
