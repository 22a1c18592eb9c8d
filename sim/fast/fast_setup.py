"""The compiled engine's setup, built once per (scenario, workload, horizon) and reused by every replication.

Building the SimPy ``System``, lowering it and packing its tables costs about as much as a tenth of a short
replication; none of it depends on the replication but the random streams (and the balancers' first replicas drawn
from them). ``FastSetup.reset`` restores the pristine tables and the System's counters and points every stream at
the replication's own generators, so that a replication on a reused setup is the replication built afresh.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from meshsim.distributions import Exponential
from meshsim.scenario import Scenario
from meshsim.workload import FortioLoad, OpenLoad, SequentialLoad, Workload, Wrk2Load
from meshsim.sim.fast import fast_kernels as K
from meshsim.sim.engine.replication_result import Horizon
from meshsim.sim.fast.fast_layout import Layout
from meshsim.sim.fast.fast_program import (Lowering, balancer_arrays, link, network_arrays, node_arrays, proxy_arrays,
                                      station_arrays)
from meshsim.sim.engine.loadgen import WRK2_CLOCK_S, WRK2_CONNECT_STAGGER_S, FortioPlan
from meshsim.sim.engine.streams import BATCH, Streams
from meshsim.sim.engine.system import System
from meshsim.sim.engine.window_series import window_edges

# A stream's buffer holds up to 8 batches ahead (fewer returns from the compiled loop to refill), as long as all
# the streams' buffers stay within BUFFERS_MB; past that (a chain of 1,000 sidecars draws from ~12,000 streams) a
# stream draws one batch at a time: as many values, drawn in more refills.
MAX_AHEAD = 8
BUFFERS_MB = 64.0


def stream_capacity(streams: int) -> int:
    """Values a stream's buffer holds: whole batches ahead (1 to MAX_AHEAD) and the low-water margin."""
    ahead = int(BUFFERS_MB * 2**20 // (max(streams, 1) * BATCH * 8))
    return min(max(ahead, 1), MAX_AHEAD) * BATCH + K.LOW_WATER


CAPACITY = stream_capacity(1)  # the most a stream's buffer holds


class FastSetup:
    """The wired System, its lowering and its tables for one (scenario, workload, horizon); ``reset`` readies them
    for a replication. One replication at a time: ``lock`` is held while one runs."""

    def __init__(self, scenario: Scenario, workload: Workload, horizon: Horizon, seed: int = 0,
                 replication: int = 0) -> None:
        import simpy  # the System's wiring needs an environment; nothing is scheduled on it

        self.scenario, self.workload, self.horizon = scenario, workload, horizon
        streams = Streams(seed, replication)
        self.system = System(simpy.Environment(), scenario, workload, streams)
        self.lowering = Lowering(self.system, max(connections_of(workload, horizon.duration), 1))
        self.lowering.build_program()
        tables, self.proxies = _tables(self.lowering, workload, horizon, streams)
        self.layout = Layout(tables)
        self.lock = threading.Lock()
        self._pristine = (self.layout.I.copy(), self.layout.F.copy())
        lowering, system = self.lowering, self.system
        # what the run writes into the System (sim/fast/fast_engine.py's _write_back), as it was built
        self._objects = [(obj, dict(vars(obj))) for obj in
                         (*lowering.station_list, *lowering.proxy_list, system.net, system)]
        count = max(len(lowering.streams.refills), 1)
        self._buffer = np.zeros((count, stream_capacity(count)))
        self.check_rebind(streams)

    def reset(self, seed: int, replication: int) -> StreamBuffers:
        """The tables and the System as built, every stream from the replication's generators; returns the streams'
        buffers, filled and attached to the tables."""
        I, F = self._pristine
        self.layout.I[:] = I
        self.layout.F[:] = F
        for obj, attrs in self._objects:
            vars(obj).clear()
            vars(obj).update(attrs)
        replayed = self.lowering.streams.rebind(Streams(seed, replication))
        balancers = self.layout.view(K.R_BALI)
        for row, replay in enumerate(self.lowering.balancer_replays):
            balancers[row, K.BAL_NEXT] = replayed[replay]
        buffers = StreamBuffers(self.lowering.streams.refills, self._buffer)
        streams = self.layout.view(K.R_STREAM)
        buffers.attach(streams[:, K.STREAM_POS], streams[:, K.STREAM_LIM])
        return buffers

    def serves(self, scenario: Scenario, workload: Workload, horizon: Horizon) -> bool:
        """Whether a replication of (scenario, workload, horizon) may run on this setup: the objects it was built
        for, or another rate of the same open load on the same scenario (``retarget`` points it there)."""
        if scenario is not self.scenario:
            return False
        if workload is self.workload and horizon == self.horizon:
            return True
        old, new = self.workload, workload
        return (old.load.is_open and new.load.is_open and replace(old.load, rps=new.load.rps) == new.load
                and (old.keepalive, old.tls) == (new.keepalive, new.tls) and not self.horizon.series_s
                and not horizon.series_s)

    def retarget(self, workload: Workload, horizon: Horizon) -> None:
        """Point the setup at ``workload``'s rate and ``horizon`` (one it ``serves``; called with ``lock`` held)
        instead of building the System again: a saturation probe's setup of a 1000-service graph took ~1 s. The
        rate shapes only the arrivals stream, which draws the new gaps from its own generator as a setup built for
        the rate would, and the horizon only the load's times."""
        if workload is self.workload and horizon == self.horizon:
            return
        load_i = self._pristine[0][self.layout.I[2 * K.R_LOADI]:][:K.LOAD_I]
        self.lowering.streams.redraw(int(load_i[K.L_ARRIVALS]), arrival_gaps(workload.load))
        load_f = self._pristine[1][self.layout.I[2 * K.R_LOADF]:][:K.LOAD_F]
        load_f[K.LF_DURATION], load_f[K.LF_WARMUP], load_f[K.LF_DRAIN] = horizon.duration, horizon.warmup, horizon.drain
        self.workload, self.horizon = workload, horizon

    def check_rebind(self, streams: Streams) -> None:
        """Rebinding to the build's own streams must give every generator the state the build left it in: else the
        build drew from a stream in a way ``rebind`` does not replay, and reuse would change the results."""
        table = self.lowering.streams
        built = [g.bit_generator.state for g in table.generators]
        starts = [row[3] for row in self.lowering.balancer_rows]
        replayed = table.rebind(Streams(streams.seed, streams.replication))
        again = [g.bit_generator.state for g in table.generators]
        for name, before, after in zip(table.slot_names, built, again):
            if before != after:
                raise RuntimeError(f"stream {name!r} drew while the system was built: StreamTable.rebind must replay it")
        if [replayed[k] for k in self.lowering.balancer_replays] != starts:
            raise RuntimeError("a balancer's first replica differs when replayed")


class StreamBuffers:
    """Every stream's next values, refilled batch by batch from its own generator (the SimPy engine's order).

    ``pos`` and ``lim`` are views into the compiled state; ``buf`` is the state's B array."""

    def __init__(self, refills: list, buf: np.ndarray) -> None:
        self.refills = refills
        n = max(len(refills), 1)
        self.buf = buf
        self.pos = np.zeros(n, dtype=np.int64)
        self.end = np.zeros(n, dtype=np.int64)
        self.lim = np.zeros(n, dtype=np.int64)
        self.drawn = np.zeros(n, dtype=np.int64)  # values drawn so far (appended)
        self.ahead = np.ones(n, dtype=np.int64)  # batches a refill appends at most: doubles per refill, up to 8
        for s in range(len(refills)):
            self._append(s)

    def attach(self, pos: np.ndarray, lim: np.ndarray) -> None:
        """Use the state's views from now on (the values so far are copied in)."""
        pos[:] = self.pos
        lim[:] = self.lim
        self.pos, self.lim = pos, lim

    def _append(self, s: int) -> None:
        values = self.refills[s]()
        self.buf[s, self.end[s]:self.end[s] + values.size] = values
        self.end[s] += values.size
        self.drawn[s] += values.size
        self.lim[s] = self.end[s] - K.LOW_WATER

    def refill(self, now: float, until: float) -> None:
        """Streams near their end: keep what is left, append whole batches (the stream's values stay the same; only
        how far ahead they are drawn changes). A busy stream draws more batches at once (fewer returns from the
        loop), but no more than its use so far per simulated second needs until the load ends at ``until``."""
        for s in np.nonzero(self.pos >= self.lim)[0]:
            left = self.end[s] - self.pos[s]
            self.buf[s, :left] = self.buf[s, self.pos[s]:self.end[s]]
            self.pos[s], self.end[s] = 0, left
            self.ahead[s] = min(2 * self.ahead[s], MAX_AHEAD)
            batches = self.ahead[s]
            if now > 0.0:
                need = (self.drawn[s] - left) / now * max(until - now, 0.0) + K.LOW_WATER - left
                batches = min(batches, max(1, math.ceil(need / BATCH)))
            for _ in range(batches):
                if self.end[s] + BATCH > self.buf.shape[1]:
                    break
                self._append(s)


def connections_of(workload: Workload, duration: float) -> int:
    """Connection ids the load uses (they index the proxies' worker bindings)."""
    return LOWERINGS[type(workload.load)].connections(workload.load, duration)


def load_arrays(workload: Workload, horizon: Horizon, streams: Streams, table, client_pc: int) -> tuple:
    """The load generator's parameters, its per-thread (fortio), per-user (sequential) or per-connection (wrk2)
    state, and its rate profile's points (time s, rps)."""
    load = workload.load
    load_i = np.zeros(K.LOAD_I, dtype=np.int64)
    load_f = np.zeros(K.LOAD_F)
    load_f[K.LF_DURATION], load_f[K.LF_WARMUP], load_f[K.LF_DRAIN] = horizon.duration, horizon.warmup, horizon.drain
    load_f[K.LF_MAX_END], load_f[K.LF_WINDOW] = -np.inf, horizon.series_s or 0.0
    load_i[K.L_CLIENT_PC], load_i[K.L_JITTER] = client_pc, -1
    lowering = LOWERINGS[type(load)]
    threads, profile = lowering.lower(load, horizon, streams, table, load_i, load_f)
    load_i[K.L_THREADS] = threads
    th_i, th_f = np.zeros((threads, 3), dtype=np.int64), np.zeros((threads, 3))
    if lowering.threads is not None:
        lowering.threads(load, streams, table, th_i, th_f)
    return load_i, load_f, th_i, th_f, profile


def _open_load(load: OpenLoad, horizon: Horizon, streams: Streams, table, load_i: np.ndarray,
               load_f: np.ndarray) -> tuple[int, np.ndarray]:
    """Poisson arrivals at the rate, or at a profile's peak thinned to its rate (loadgen._open's streams)."""
    peak = load.profile.max_rps if load.profile is not None else load.rps
    load_i[K.L_KIND] = K.LOAD_OPEN
    load_i[K.L_ARRIVALS] = table.sampler(streams.sampler("arrivals", arrival_gaps(load)))
    load_i[K.L_CONN_STREAM] = table.uniforms(streams.rng("arrivals:connection"))
    load_i[K.L_CONNECTIONS] = load.connections
    if load.profile is None:
        return 1, np.zeros((1, 2))
    load_i[K.L_PROFILE] = K.PROFILE_STEPS if load.profile.kind == "steps" else K.PROFILE_RAMP
    load_i[K.L_POINTS] = len(load.profile.points)
    load_i[K.L_THINNING] = table.sampler(streams.uniforms("arrivals:thinning"))
    load_f[K.LF_PEAK] = peak
    return 1, np.array(load.profile.points, dtype=float).reshape(-1, 2)


def arrival_gaps(load: OpenLoad) -> Exponential:
    """The gaps between Poisson arrivals at the load's rate (at a profile's peak, thinned to its rate)."""
    return Exponential(1.0 / (load.profile.max_rps if load.profile is not None else load.rps))


def _fortio_load(load: FortioLoad, horizon: Horizon, streams: Streams, table, load_i: np.ndarray,
                 load_f: np.ndarray) -> tuple[int, np.ndarray]:
    """fortio's plan, pacing options and warm-up mode; one thread per planned fortio thread."""
    plan = FortioPlan.of(load, horizon.duration)
    load_i[K.L_KIND], load_i[K.L_CALLS] = K.LOAD_FORTIO, plan.calls_per_thread
    load_i[K.L_UNIFORM], load_i[K.L_NOCATCHUP] = int(load.uniform), int(load.nocatchup)
    if load.jitter:
        load_i[K.L_JITTER] = table.sampler(streams.uniforms("fortio:jitter"))
    load_i[K.L_WARM_MODE] = {"none": K.WARM_NONE, "parallel": K.WARM_PARALLEL,
                             "sequential": K.WARM_SEQUENTIAL}[load.warmup_mode]
    load_f[K.LF_RATE] = load.rps / plan.threads
    return plan.threads, np.zeros((1, 2))


def _wrk2_load(load: Wrk2Load, horizon: Horizon, streams: Streams, table, load_i: np.ndarray,
               load_f: np.ndarray) -> tuple[int, np.ndarray]:
    """wrk2's schedule: one thread per used connection."""
    load_i[K.L_KIND] = K.LOAD_WRK2
    load_f[K.LF_INTERVAL], load_f[K.LF_TIMER], load_f[K.LF_CLOCK] = load.interval_s, load.timer_s, WRK2_CLOCK_S
    return load.used_connections, np.zeros((1, 2))


def _wrk2_threads(load: Wrk2Load, streams: Streams, table, th_i: np.ndarray, th_f: np.ndarray) -> None:
    """Connection i of a thread connects i x 5 ms after the thread starts."""
    th_f[:, K.THF_START] = (np.arange(len(th_f)) % load.connections_per_thread) * WRK2_CONNECT_STAGGER_S


def _sequential_load(load: SequentialLoad, horizon: Horizon, streams: Streams, table, load_i: np.ndarray,
                     load_f: np.ndarray) -> tuple[int, np.ndarray]:
    load_i[K.L_KIND] = K.LOAD_SEQUENTIAL
    return load.users, np.zeros((1, 2))


def _sequential_threads(load: SequentialLoad, streams: Streams, table, th_i: np.ndarray, th_f: np.ndarray) -> None:
    """Each user's think-time stream."""
    for user in range(len(th_i)):
        th_i[user, K.TH_STREAM] = table.sampler(streams.sampler(f"user{user}:think", load.think))


@dataclass(frozen=True)
class LoadLowering:
    """How one load kind is lowered to the compiled engine: its connection ids, its parameters (returning its
    threads and rate profile points) and, if it has any, its per-thread state."""

    connections: Callable[[Any, float], int]
    lower: Callable[..., tuple[int, np.ndarray]]
    threads: Callable[..., None] | None = None


# Keyed by the load's type (the SimPy engine's counterpart is loadgen.GENERATORS).
LOWERINGS: dict[type, LoadLowering] = {
    OpenLoad: LoadLowering(lambda load, duration: load.connections, _open_load),
    FortioLoad: LoadLowering(lambda load, duration: FortioPlan.of(load, duration).threads, _fortio_load),
    Wrk2Load: LoadLowering(lambda load, duration: load.connections, _wrk2_load, _wrk2_threads),
    SequentialLoad: LoadLowering(lambda load, duration: load.users, _sequential_load, _sequential_threads),
}


def _tables(lowering: Lowering, workload: Workload, horizon: Horizon, streams: Streams) -> tuple[dict, int]:
    """Every table of the compiled state, by region, and the client program's start."""
    program, client_pc = link(lowering)
    ops, route_pc, route_bal, ch_stream, ch_n, ch_w, ch_route, tls_seen, fk_n, fk_pc = program
    st_i, st_f, free_at, busy, quota_used, quota_tag = station_arrays(lowering)
    px_i, px_f, bind, post, export = proxy_arrays(lowering)
    ncores, slowdown, core_rows, count, width = node_arrays(lowering)
    net_i, net_f = network_arrays(lowering)
    bal_i, active, ewma = balancer_arrays(lowering)
    load_i, load_f, th_i, th_f, profile = load_arrays(workload, horizon, streams, lowering.streams, client_pc)
    samples = _sample_rows(horizon, len(lowering.station_list), load_i)
    flags = np.zeros(K.FLAGS, dtype=np.int64)
    flags[K.G_NODES], flags[K.G_CORES] = len(lowering.system.node_cpu), width
    flags[K.G_TOKEN_MARGIN], flags[K.G_HEAP_MARGIN] = event_room(lowering, load_i)
    n_streams = max(len(lowering.streams.refills), 1)
    tables = {
        K.R_STREAM: np.zeros((n_streams, 2), dtype=np.int64),
        K.R_STI: st_i, K.R_QTAG: quota_tag, K.R_PXI: px_i, K.R_BIND: bind, K.R_NCORES: ncores, K.R_NCOUNT: count,
        K.R_NETI: net_i[None, :], K.R_BALI: bal_i, K.R_ACTIVE: active, K.R_OPS: ops, K.R_RPC: route_pc,
        K.R_RBAL: route_bal, K.R_CHS: ch_stream, K.R_CHN: ch_n, K.R_CHR: ch_route, K.R_TLS: tls_seen,
        K.R_FKN: fk_n, K.R_FKPC: fk_pc, K.R_LOADI: load_i[None, :], K.R_THI: th_i, K.R_FLAGS: flags[None, :],
        K.R_STF: st_f, K.R_FREE: free_at, K.R_BUSY: busy, K.R_QUSED: quota_used, K.R_PXF: px_f, K.R_POST: post,
        K.R_EXPORT: export, K.R_SLOW: slowdown, K.R_CORE: core_rows, K.R_NETF: net_f[None, :], K.R_EWMA: ewma,
        K.R_CHW: ch_w, K.R_LOADF: load_f[None, :], K.R_THF: th_f, K.R_GF: np.zeros((1, 4)), K.R_PROFILE: profile,
        K.R_SAMPLES: samples, K.R_VIEWS: np.zeros((max(len(lowering.view_rows), 1), K.VIEW_WIDTH)),
    }
    return tables, len(lowering.proxy_list)


def event_room(lowering: Lowering, load_i: np.ndarray) -> tuple[int, int]:
    """The free tokens and heap slots one event may take at most: a fork takes one of each per branch, fortio's
    timed run pushes every thread's first wake-up at once (the start's bursts -- every user or connection, fortio's
    parallel warm-up -- come before the first event: the tables' first sizes cover them, sim/fast/fast_engine.py)."""
    fork = max((len(branches) for branches in lowering.forks), default=0)
    threads = int(load_i[K.L_THREADS]) if load_i[K.L_KIND] == K.LOAD_FORTIO else 0
    return K.MARGIN + fork, K.MARGIN + fork + threads + 2  # + the next arrival or window edge, and a wait


def _sample_rows(horizon: Horizon, stations: int, load_i: np.ndarray) -> np.ndarray:
    """Room for the time series' snapshots: a row per window edge (and one spare: the compiled loop counts the
    windows from the load's actual start), two columns per station (busy seconds, jobs)."""
    if not horizon.series_s:
        return np.zeros((1, 1))
    rows = window_edges(horizon.warmup, horizon.duration, horizon.series_s).size + 1
    load_i[K.L_SAMPLE_ROWS], load_i[K.L_STATIONS] = rows, stations
    return np.zeros((rows, 2 * stations))
