"""Load generators, each reproducing a real tool's behaviour.

- :func:`fortio_threads`: fortio's periodic runner (periodic.go, v1.68.2) line by line: per-thread call budget
  ``int(rps*duration)/c``, pacing target ``(i + i/(n-1)) / (rps/c)`` from the thread's start, ``-uniform``
  start offsets ``id/rps``, ``-jitter`` +-10 % of each sleep, catch-up (no sleep when late) unless ``-nocatchup``
  (late iterations skipped), latency timed from the actual send. Before that, fortio's warm-up (httprunner.go
  ``RunHTTPTest``): one untimed, uncounted call per thread, all at once or one after another as the fortio
  version does (meshsim/fortio_warmup.py); the timed run of every thread starts when the last one is back.
- :func:`open_arrivals`: Poisson arrivals, optionally with a time-varying rate (thinning), latency from the
  intended start (an open load, Nighthawk-like).
- :func:`sequential_users`: request, wait for the answer, think, repeat (the Bookinfo seed's 50 ms client).
- :func:`wrk2_connections`: wrk2's constant throughput (giltene/wrk2 wrk.c): per-connection schedules of intended
  send times, one request in flight per connection, sent at once when behind, latency from the intended send time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import simpy

from meshsim.distributions import Exponential
from meshsim.workload import FortioLoad, Load, OpenLoad, SequentialLoad, Wrk2Load
from meshsim.sim.engine.streams import Sampler, Streams
from meshsim.sim.engine.nested_calls import Process
from meshsim.sim.engine.system import System

Record = Callable[[float, float], None]


@dataclass
class FortioPlan:
    """What fortio decides before it starts: threads and calls per thread (runQPSSetup)."""

    threads: int
    calls_per_thread: int

    @staticmethod
    def of(load: FortioLoad, duration: float) -> "FortioPlan":
        total = int(load.rps * duration)
        threads = load.connections
        if total < 2:
            total, threads = 2, 1
        if 2 * threads > total:
            threads = total // 2
        return FortioPlan(threads, total // threads)


@dataclass
class LoadTrace:
    """Per-thread end times (fortio's elapsed), how many timed requests were started, and when the timed run began.

    ``origin`` is 0 except for fortio, whose timed run starts after its warm-up calls.
    """

    ends: list[float] = field(default_factory=list)
    started: int = 0
    origin: float = 0.0


def fortio_threads(env: simpy.Environment, system: System, load: FortioLoad, duration: float, record: Record,
                   streams: Streams, trace: LoadTrace, on_start: Callable[[], None] | None = None) -> FortioPlan:
    """Start fortio: warm-up calls, then ``on_start()`` and the timed threads, all at the time the warm-up ends."""
    plan = FortioPlan.of(load, duration)
    jitter = streams.uniforms("fortio:jitter") if load.jitter else None
    env.process(_fortio_run(env, system, plan, duration, load, record, jitter, trace, on_start))
    return plan


def _fortio_run(env: simpy.Environment, system: System, plan: FortioPlan, duration: float, load: FortioLoad,
                record: Record, jitter: Sampler | None, trace: LoadTrace, on_start: Callable[[], None] | None
                ) -> Process:
    """RunHTTPTest: each thread's warm-up call (not recorded), then periodicRunner.Run with one shared start."""
    mode = load.warmup_mode
    if mode == "parallel":  # one goroutine per thread, errgroup.Wait() before Run()
        yield env.all_of([env.process(system.client_request(tid)) for tid in range(plan.threads)])
    elif mode == "sequential":  # the fetch inside the loop that builds each thread's client
        for tid in range(plan.threads):
            yield from system.client_request(tid)
    trace.origin = env.now
    if on_start is not None:
        on_start()  # before any timed call is booked
    per_thread_rps = load.rps / plan.threads
    for tid in range(plan.threads):
        env.process(_fortio_thread(env, system, tid, plan, per_thread_rps, duration, load, record, jitter, trace))


def _fortio_thread(env: simpy.Environment, system: System, tid: int, plan: FortioPlan, per_thread_rps: float,
                   duration: float, load: FortioLoad, record: Record, jitter: Sampler | None,
                   trace: LoadTrace) -> Process:
    n = plan.calls_per_thread
    start = env.now
    end_time = start + duration
    if load.uniform:
        delay = (1.0 / per_thread_rps) * tid / plan.threads
        start += delay
        if delay > 0:
            yield env.timeout(delay)
    i = 0
    while True:
        sent = env.now
        if sent > end_time and i >= 2 and i != n - 1:
            break
        trace.started += 1
        yield from system.client_request(tid)
        record(sent, env.now - sent)
        finished = False
        while True:
            i += 1
            if i >= n:
                finished = True
                break
            target = (i + i / (n - 1)) / per_thread_rps
            sleep = target - (env.now - start)
            if load.nocatchup and sleep < 0:
                continue  # skip that request: it would be late
            if jitter is not None and sleep > 0:
                sleep += (2.0 * jitter() - 1.0) * 0.1 * sleep
            if sleep > 0:
                yield env.timeout(sleep)
            break
        if finished:
            break
    trace.ends.append(env.now)


def open_arrivals(env: simpy.Environment, system: System, load: OpenLoad, end: float, record: Record,
                  streams: Streams, trace: LoadTrace) -> None:
    env.process(_open(env, system, load, end, record, streams, trace))


def _open(env: simpy.Environment, system: System, load: OpenLoad, end: float, record: Record, streams: Streams,
          trace: LoadTrace) -> Process:
    accept = streams.uniforms("arrivals:thinning")
    conns = streams.rng("arrivals:connection")
    peak = load.profile.max_rps if load.profile is not None else load.rps
    gaps = streams.sampler("arrivals", Exponential(1.0 / peak))  # Poisson arrivals at the peak rate
    while True:
        yield env.timeout(gaps())
        if env.now >= end:
            break
        if load.profile is not None and accept() * peak > load.profile.rate_at(env.now):
            continue  # thinning: a non-homogeneous Poisson process (mirrored by fast_kernels._arrival)
        trace.started += 1
        env.process(_one(env, system, int(conns.integers(load.connections)), record))
    trace.ends.append(end)


def _one(env: simpy.Environment, system: System, conn: int, record: Record) -> Process:
    intended = env.now
    yield from system.client_request(conn)
    record(intended, env.now - intended)


def sequential_users(env: simpy.Environment, system: System, load: SequentialLoad, end: float, record: Record,
                     streams: Streams, trace: LoadTrace) -> None:
    for user in range(load.users):
        think = streams.sampler(f"user{user}:think", load.think)
        env.process(_user(env, system, user, end, think, record, trace))


def _user(env: simpy.Environment, system: System, user: int, end: float, think: Sampler, record: Record,
          trace: LoadTrace) -> Process:
    while env.now < end:
        sent = env.now
        trace.started += 1
        yield from system.client_request(user)
        record(sent, env.now - sent)
        yield env.timeout(think())
    trace.ends.append(env.now)


# wrk2 thread_main: "Stagger connects 5 msec apart within thread" (delayed_initial_connect at i * 5 ms); each
# connection's schedule counts from its own connect (c->thread_start).
WRK2_CONNECT_STAGGER_S = 0.005
WRK2_CLOCK_S = 1e-6  # time_us(): wrk2's clock counts microseconds


@dataclass
class Wrk2Pacer:
    """One wrk2 connection's send decision (wrk.c ``usec_to_next_send``), in seconds.

    Request k (k answers received so far) is intended at ``origin + k * interval``. On pace, the connection waits
    for that time on an event-loop timer (``timer_s`` grain: ``round(w_ms + 0.5)`` ms); behind, it sends at once.
    (wrk2 also limits a late connection to twice its rate, counted from its last send on time: that send is at
    most one timer tick after its intended time, so the limit never holds back a connection that is behind its
    intended times by more than a tick; left out.)
    """

    origin: float
    interval: float
    timer_s: float = 1e-3
    completed: int = 0

    @property
    def intended(self) -> float:
        return self.origin + self.completed * self.interval

    def wait(self, now: float) -> float:
        """Seconds to wait before sending (0: send now). The compiled engine mirrors it (fast_kernels._wrk2_wake)."""
        target = self.intended
        if target - now < WRK2_CLOCK_S:  # wrk2 compares whole microseconds: less than one ahead is on time
            return 0.0
        if self.timer_s <= 0:
            return target - now
        ticks = round((target - now) / self.timer_s, 9)  # float noise must not move a whole tick
        return self.timer_s * math.floor(ticks + 1.0)  # C round(x + 0.5) for x > 0


def wrk2_connections(env: simpy.Environment, system: System, load: Wrk2Load, end: float, record: Record,
                     trace: LoadTrace, uncorrected: Record | None = None) -> None:
    """Start every connection of every thread. ``record(t, latency)`` gets each answer's arrival time ``t`` (wrk2
    resets its histograms at calibration, so what counts is when the answer came) and the latency from the
    intended send time; ``uncorrected`` (optional) the same answer timed from the actual send (wrk2 -U)."""
    per_thread = load.connections_per_thread
    for tid in range(load.threads):
        for i in range(per_thread):
            pacer = Wrk2Pacer(i * WRK2_CONNECT_STAGGER_S, load.interval_s, load.timer_s)
            env.process(_wrk2_connection(env, system, tid * per_thread + i, pacer, end, record, trace, uncorrected))
    trace.ends.append(end)


def _wrk2_connection(env: simpy.Environment, system: System, conn: int, pacer: Wrk2Pacer, end: float,
                     record: Record, trace: LoadTrace, uncorrected: Record | None) -> Process:
    if pacer.origin > 0:
        yield env.timeout(pacer.origin)
    while env.now < end:
        wait = pacer.wait(env.now)
        if wait > 0:
            yield env.timeout(wait)
            continue  # the timer fired: socket_writeable asks usec_to_next_send again
        intended, sent = pacer.intended, env.now
        trace.started += 1
        yield from system.client_request(conn)
        pacer.completed += 1
        if env.now > end:
            break  # the run stopped while this answer was on its way: wrk2 never reads it
        record(env.now, env.now - intended)
        if uncorrected is not None:
            uncorrected(env.now, env.now - sent)


Generator = Callable[[simpy.Environment, System, Load, float, Record, Streams, LoadTrace, Callable[[], None]], None]


def _start_fortio(env: simpy.Environment, system: System, load: FortioLoad, duration: float, record: Record,
                  streams: Streams, trace: LoadTrace, open_window: Callable[[], None]) -> None:
    fortio_threads(env, system, load, duration, record, streams, trace, open_window)  # opens after its warm-up


def _start_open(env: simpy.Environment, system: System, load: OpenLoad, duration: float, record: Record,
                streams: Streams, trace: LoadTrace, open_window: Callable[[], None]) -> None:
    open_window()
    open_arrivals(env, system, load, duration, record, streams, trace)


def _start_sequential(env: simpy.Environment, system: System, load: SequentialLoad, duration: float, record: Record,
                      streams: Streams, trace: LoadTrace, open_window: Callable[[], None]) -> None:
    open_window()
    sequential_users(env, system, load, duration, record, streams, trace)


def _start_wrk2(env: simpy.Environment, system: System, load: Wrk2Load, duration: float, record: Record,
                streams: Streams, trace: LoadTrace, open_window: Callable[[], None]) -> None:
    open_window()
    wrk2_connections(env, system, load, duration, record, trace)


# How each load kind starts its generator on the SimPy engine (the compiled engine's counterpart is
# fast_setup.LOWERINGS); a registry keyed by the load's type keeps the data model free of the engine.
GENERATORS: dict[type, Generator] = {FortioLoad: _start_fortio, OpenLoad: _start_open,
                                     SequentialLoad: _start_sequential, Wrk2Load: _start_wrk2}


def start_generator(env: simpy.Environment, system: System, load: Load, duration: float, record: Record,
                    streams: Streams, trace: LoadTrace, open_window: Callable[[], None]) -> None:
    """The load generator's processes; the timed run's window opens now, or after fortio's warm-up calls."""
    GENERATORS[type(load)](env, system, load, duration, record, streams, trace, open_window)
