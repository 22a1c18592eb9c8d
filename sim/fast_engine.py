"""One replication on the compiled engine: the same Scenario and Workload as sim/engine.py, the same named random
streams, the same ReplicationResult; the request logic runs as a numba program (sim/fast_kernels.py).

The SimPy engine stays the reference: this module builds the SimPy ``System`` (the wiring, the samplers), lowers it
(sim/fast_program.py), runs the compiled loop, then writes the counters back into the System's stations and proxies
so that usage, memory and the time breakdown come from the very functions the SimPy engine uses.
"""

from __future__ import annotations

import numpy as np

from meshsim.distributions import Exponential
from meshsim.scenario import Scenario
from meshsim.workload import FortioLoad, OpenLoad, SequentialLoad, Workload, Wrk2Load
from meshsim.sim import fast_kernels as K
from meshsim.sim import fast_kernels as V  # the loop's op codes and columns
from meshsim.sim.engine import Horizon, ReplicationResult, _usage, expected_wire_bytes, time_breakdown
from meshsim.sim.fast_layout import Layout
from meshsim.sim.fast_program import (Lowering, balancer_arrays, link, network_arrays, node_arrays, proxy_arrays,
                                      station_arrays)
from meshsim.sim.loadgen import WRK2_CLOCK_S, WRK2_CONNECT_STAGGER_S, FortioPlan
from meshsim.sim.streams import BATCH, Streams
from meshsim.sim.system import System
from meshsim.sim.window_series import CpuSampler, ReplicationSeries, replication_series, window_edges

ENGINE_NAME = "fast-numba/1"
CAPACITY = 8 * BATCH + K.LOW_WATER  # a stream's buffer: up to 8 batches ahead


class StreamBuffers:
    """Every stream's next values, refilled batch by batch from its own generator (the SimPy engine's order).

    ``pos`` and ``lim`` are views into the compiled state; ``buf`` is the state's B array."""

    def __init__(self, refills: list) -> None:
        self.refills = refills
        n = max(len(refills), 1)
        self.buf = np.zeros((n, CAPACITY))
        self.pos = np.zeros(n, dtype=np.int64)
        self.end = np.zeros(n, dtype=np.int64)
        self.lim = np.zeros(n, dtype=np.int64)
        self.ahead = np.ones(n, dtype=np.int64)  # batches a refill appends: doubles per refill, up to 8
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
        self.lim[s] = self.end[s] - K.LOW_WATER

    def refill(self) -> None:
        """Streams near their end: keep what is left, append whole batches while they fit."""
        for s in np.nonzero(self.pos >= self.lim)[0]:
            left = self.end[s] - self.pos[s]
            self.buf[s, :left] = self.buf[s, self.pos[s]:self.end[s]]
            self.pos[s], self.end[s] = 0, left
            self.ahead[s] = min(2 * self.ahead[s], 8)  # a busy stream refills less often; a quiet one draws little
            for _ in range(self.ahead[s]):
                if self.end[s] + BATCH > CAPACITY:
                    break
                self._append(s)


def connections_of(workload: Workload, duration: float) -> int:
    """Connection ids the load uses (they index the proxies' worker bindings)."""
    load = workload.load
    if isinstance(load, FortioLoad):
        return FortioPlan.of(load, duration).threads
    if isinstance(load, SequentialLoad):
        return load.users
    return load.connections


def load_arrays(workload: Workload, horizon: Horizon, streams: Streams, table, client_pc: int) -> tuple:
    """The load generator's parameters, its per-thread (fortio), per-user (sequential) or per-connection (wrk2)
    state, and its rate profile's points (time s, rps)."""
    load = workload.load
    load_i = np.zeros(V.LOAD_I, dtype=np.int64)
    load_f = np.zeros(V.LOAD_F)
    load_f[V.LF_DURATION], load_f[V.LF_WARMUP], load_f[V.LF_DRAIN] = horizon.duration, horizon.warmup, horizon.drain
    load_f[V.LF_MAX_END], load_f[V.LF_WINDOW] = -np.inf, horizon.series_s or 0.0
    load_i[V.L_CLIENT_PC], load_i[V.L_JITTER] = client_pc, -1
    profile = np.zeros((1, 2))
    threads = 1
    if isinstance(load, OpenLoad):
        profile = _open_load(load, streams, table, load_i, load_f)
    elif isinstance(load, FortioLoad):
        threads = _fortio_load(load, horizon, streams, table, load_i, load_f)
    elif isinstance(load, Wrk2Load):
        load_i[V.L_KIND], threads = V.LOAD_WRK2, load.used_connections
        load_f[V.LF_INTERVAL], load_f[V.LF_TIMER], load_f[V.LF_CLOCK] = load.interval_s, load.timer_s, WRK2_CLOCK_S
    else:
        load_i[V.L_KIND] = V.LOAD_SEQUENTIAL
        threads = load.users
    load_i[V.L_THREADS] = threads
    th_i, th_f = np.zeros((threads, 3), dtype=np.int64), np.zeros((threads, 3))
    if isinstance(load, SequentialLoad):
        for user in range(threads):
            th_i[user, V.TH_STREAM] = table.sampler(streams.sampler(f"user{user}:think", load.think))
    if isinstance(load, Wrk2Load):  # connection i of a thread connects i x 5 ms after the thread starts
        th_f[:, V.THF_START] = (np.arange(threads) % load.connections_per_thread) * WRK2_CONNECT_STAGGER_S
    return load_i, load_f, th_i, th_f, profile


def _open_load(load: OpenLoad, streams: Streams, table, load_i: np.ndarray, load_f: np.ndarray) -> np.ndarray:
    """Poisson arrivals at the rate, or at a profile's peak thinned to its rate (loadgen._open's streams)."""
    peak = load.profile.max_rps if load.profile is not None else load.rps
    load_i[V.L_KIND] = V.LOAD_OPEN
    load_i[V.L_ARRIVALS] = table.sampler(streams.sampler("arrivals", Exponential(1.0 / peak)))
    load_i[V.L_CONN_STREAM] = table.uniforms(streams.rng("arrivals:connection"))
    load_i[V.L_CONNECTIONS] = load.connections
    if load.profile is None:
        return np.zeros((1, 2))
    load_i[V.L_PROFILE] = V.PROFILE_STEPS if load.profile.kind == "steps" else V.PROFILE_RAMP
    load_i[V.L_POINTS] = len(load.profile.points)
    load_i[V.L_THINNING] = table.sampler(streams.uniforms("arrivals:thinning"))
    load_f[V.LF_PEAK] = peak
    return np.array(load.profile.points, dtype=float).reshape(-1, 2)


def _fortio_load(load: FortioLoad, horizon: Horizon, streams: Streams, table, load_i: np.ndarray,
                 load_f: np.ndarray) -> int:
    """fortio's plan, pacing options and warm-up mode; returns its threads."""
    plan = FortioPlan.of(load, horizon.duration)
    load_i[V.L_KIND], load_i[V.L_CALLS] = V.LOAD_FORTIO, plan.calls_per_thread
    load_i[V.L_UNIFORM], load_i[V.L_NOCATCHUP] = int(load.uniform), int(load.nocatchup)
    if load.jitter:
        load_i[V.L_JITTER] = table.sampler(streams.uniforms("fortio:jitter"))
    load_i[V.L_WARM_MODE] = {"none": V.WARM_NONE, "parallel": V.WARM_PARALLEL,
                             "sequential": V.WARM_SEQUENTIAL}[load.warmup_mode]
    load_f[V.LF_RATE] = load.rps / plan.threads
    return plan.threads


def _tokens(count: int, depth: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token tables (ints and floats, with ``depth`` call frames each) and the free list."""
    return (np.zeros((count, V.T_FRAMES + 4 * depth), dtype=np.int64), np.zeros((count, V.TF_FRAMES + 4 * depth)),
            np.arange(count - 1, -1, -1, dtype=np.int64))


def _grow_tokens(TI: np.ndarray, TF: np.ndarray, FREE: np.ndarray, free_n: int) -> tuple:
    """Twice the tokens; the new ids go under the free ones (the pool hands out the old free ids first)."""
    old = TI.shape[0]
    ti, tf, free = _tokens(2 * old, (TI.shape[1] - V.T_FRAMES) // 4)
    ti[:old], tf[:old] = TI, TF
    ids = np.concatenate([np.arange(2 * old - 1, old - 1, -1, dtype=np.int64), FREE[:free_n]])
    free[:ids.size] = ids
    return ti, tf, free, ids.size


def _depth(scenario: Scenario) -> int:
    """Frames a token can stack: a call frame and a handler frame per service on the deepest path."""
    return 2 * len(scenario.topology.services) + 4


def _tables(lowering: Lowering, workload: Workload, horizon: Horizon, streams: Streams) -> tuple[dict, int]:
    """Every table of the compiled state, by region, and the client program's start."""
    program, client_pc = link(lowering)
    ops, route_pc, route_bal, ch_stream, ch_n, ch_w, ch_route, tls_seen, fk_n, fk_pc = program
    st_i, st_f, free_at, busy, quota_used, quota_tag = station_arrays(lowering)
    px_i, px_f, bind, post, export = proxy_arrays(lowering)
    ncores, slowdown, starts, ends, count, last, floor, width = node_arrays(lowering)
    net_i, net_f = network_arrays(lowering)
    bal_i, active, ewma = balancer_arrays(lowering)
    load_i, load_f, th_i, th_f, profile = load_arrays(workload, horizon, streams, lowering.streams, client_pc)
    samples = _sample_rows(horizon, len(lowering.station_list), load_i)
    flags = np.zeros(K.FLAGS, dtype=np.int64)
    flags[K.G_NODES], flags[K.G_CORES] = len(lowering.system.node_cpu), width
    n_streams = max(len(lowering.streams.refills), 1)
    tables = {
        K.R_POS: np.zeros(n_streams, dtype=np.int64), K.R_LIM: np.zeros(n_streams, dtype=np.int64),
        K.R_STI: st_i, K.R_QTAG: quota_tag, K.R_PXI: px_i, K.R_BIND: bind, K.R_NCORES: ncores, K.R_NCOUNT: count,
        K.R_NETI: net_i[None, :], K.R_BALI: bal_i, K.R_ACTIVE: active, K.R_OPS: ops, K.R_RPC: route_pc,
        K.R_RBAL: route_bal, K.R_CHS: ch_stream, K.R_CHN: ch_n, K.R_CHR: ch_route, K.R_TLS: tls_seen,
        K.R_FKN: fk_n, K.R_FKPC: fk_pc, K.R_LOADI: load_i[None, :], K.R_THI: th_i, K.R_FLAGS: flags[None, :],
        K.R_STF: st_f, K.R_FREE: free_at, K.R_BUSY: busy, K.R_QUSED: quota_used, K.R_PXF: px_f, K.R_POST: post,
        K.R_EXPORT: export, K.R_SLOW: slowdown, K.R_NSTART: starts, K.R_NEND: ends, K.R_NLAST: last,
        K.R_NFLOOR: floor, K.R_NETF: net_f[None, :], K.R_EWMA: ewma, K.R_CHW: ch_w, K.R_LOADF: load_f[None, :],
        K.R_THF: th_f, K.R_GF: np.zeros((1, 4)), K.R_PROFILE: profile, K.R_SAMPLES: samples,
    }
    return tables, len(lowering.proxy_list)


def _sample_rows(horizon: Horizon, stations: int, load_i: np.ndarray) -> np.ndarray:
    """Room for the time series' snapshots: a row per window edge (and one spare: the compiled loop counts the
    windows from the load's actual start), two columns per station (busy seconds, jobs)."""
    if not horizon.series_s:
        return np.zeros((1, 1))
    rows = window_edges(horizon.warmup, horizon.duration, horizon.series_s).size + 1
    load_i[V.L_SAMPLE_ROWS], load_i[V.L_STATIONS] = rows, stations
    return np.zeros((rows, 2 * stations))


def run_fast_replication(scenario: Scenario, workload: Workload, horizon: Horizon, seed: int,
                         replication: int) -> ReplicationResult:
    """sim/engine.py's run_replication on the compiled engine (same streams, same result fields)."""
    import simpy  # the System's wiring needs an environment; nothing is scheduled on it

    streams = Streams(seed, replication)
    system = System(simpy.Environment(), scenario, workload, streams)
    lowering = Lowering(system, max(connections_of(workload, horizon.duration), 1))
    lowering.build_program()
    tables, proxies = _tables(lowering, workload, horizon, streams)
    layout = Layout(tables)
    I, F = layout.I, layout.F
    buffers = StreamBuffers(lowering.streams.refills)
    buffers.attach(layout.view(K.R_POS)[:, 0], layout.view(K.R_LIM)[:, 0])
    rate = workload.load.rps if np.isfinite(workload.load.rps) else 1e4  # think time 0: the buffer grows as needed
    LAT = np.zeros((int(min(rate, 1e6) * (horizon.duration + horizon.drain) * 1.1) + 1024, 2))
    HT, HI = np.zeros(4096), np.zeros((4096, 2), dtype=np.int64)
    TI, TF, FREE = _tokens(1024, _depth(scenario))
    flags = layout.view(K.R_FLAGS)[0]
    flags[K.G_FREE_N] = TI.shape[0]
    while True:
        code = V.run(I, F, buffers.buf, HT, HI, TI, TF, FREE, LAT, proxies)
        if code == V.DONE:
            break
        if code == V.REFILL:
            buffers.refill()
            flags[K.G_LOW] = 0
            continue
        if flags[K.G_FREE_N] < V.MARGIN:
            TI, TF, FREE, flags[K.G_FREE_N] = _grow_tokens(TI, TF, FREE, int(flags[K.G_FREE_N]))
        if flags[K.G_HEAP_N] + V.MARGIN > HT.size:
            HT, HI = np.resize(HT, 2 * HT.size), np.resize(HI, (2 * HT.size, 2))
        if layout.view(K.R_LOADI)[0, V.L_NLAT] + V.MARGIN > LAT.shape[0]:
            LAT = np.resize(LAT, (2 * LAT.shape[0], 2))
    _write_back(system, lowering, layout)
    result = _result(system, workload, horizon, layout, LAT)
    result.series = _series(system, lowering, horizon, layout, LAT, result)
    return result


def _write_back(system: System, lowering: Lowering, layout: Layout) -> None:
    """The compiled run's counters into the System's stations and proxies (for engine._usage / time_breakdown)."""
    st_i, st_f, busy = layout.view(K.R_STI), layout.view(K.R_STF), layout.view(K.R_BUSY)
    for k, station in enumerate(lowering.station_list):
        station.busy = busy[k, :station.servers].tolist()
        station.jobs, station.cold_wakes = int(st_i[k, K.ST_JOBS]), int(st_i[k, K.ST_COLD])
        station.waited, station.woke = float(st_f[k, K.ST_WAITED]), float(st_f[k, K.ST_WOKE])
        station.worked, station.cpu_waited = float(st_f[k, K.ST_WORKED]), float(st_f[k, K.ST_CPUWAIT])
    px_i, px_f = layout.view(K.R_PXI), layout.view(K.R_PXF)
    for k, proxy in enumerate(lowering.proxy_list):
        proxy.delayed, proxy.held_area = float(px_f[k, K.PX_DELAYED]), float(px_f[k, K.PX_AREA])
        proxy.holds, proxy.held_seconds = int(px_f[k, K.PX_HOLDS]), float(px_f[k, K.PX_HELD])
        if px_f[k, K.PX_WINSET]:
            proxy.window = (float(px_f[k, K.PX_WIN0]), float(px_f[k, K.PX_WIN1]))
        proxy.binding = dict.fromkeys(range(int(px_i[k, K.PX_BOUND])), 0)  # only their number is read
    gf = layout.view(K.R_GF)[0]
    system.net.total = float(gf[K.GF_NET])
    system.host_cpu_time = float(gf[K.GF_HOST])


def _result(system: System, workload: Workload, horizon: Horizon, layout: Layout,
            LAT: np.ndarray) -> ReplicationResult:
    """engine.run_replication's summary of the run, from the compiled loop's counters."""
    load_i, load_f = layout.view(K.R_LOADI)[0], layout.view(K.R_LOADF)[0]
    origin, warmup = float(load_f[V.LF_ORIGIN]), horizon.warmup
    if isinstance(workload.load, FortioLoad) and load_i[V.L_ENDS]:
        end = float(load_f[V.LF_MAX_END])  # fortio's elapsed ends when its last thread ends
    else:
        end = origin + horizon.duration
    window = max(end - origin - warmup, 1e-12)
    latencies = LAT[:int(load_i[V.L_NLAT]), 0].copy()
    busy_window = max(min(horizon.duration, end - origin) - warmup, 1e-12)
    started = int(load_i[V.L_IN_WINDOW])
    return ReplicationResult(
        latencies=latencies,
        window=window,
        started=started,
        completed=latencies.size,
        in_flight=int(load_i[V.L_STARTED] - load_i[V.L_FINISHED]),
        achieved_rps=latencies.size / window,
        usage=_usage(system, busy_window),
        busy_window=busy_window,
        sim_time=float(load_f[V.LF_NOW]),
        breakdown=time_breakdown(system, started),
        wire_bytes=expected_wire_bytes(system),
        load_start=origin,
    )


def _series(system: System, lowering: Lowering, horizon: Horizon, layout: Layout, LAT: np.ndarray,
            result: ReplicationResult) -> ReplicationSeries | None:
    """engine.run_replication's series: the compiled loop's snapshots at the window edges, in System.stations()
    order, cut with the measured requests' send times (wrk2: answer times) by the same function."""
    if not horizon.series_s:
        return None
    origin = result.load_start
    edges = window_edges(origin + horizon.warmup, origin + horizon.duration, horizon.series_s)
    load_i = layout.view(K.R_LOADI)[0]
    snapshots = layout.view(K.R_SAMPLES)[:edges.size].reshape(edges.size, -1, 2)
    if int(load_i[V.L_SAMPLE_K]) == edges.size - 1:  # no drain: the run ended at the last edge, before its turn
        snapshots[-1, :, 0] = layout.view(K.R_BUSY).sum(axis=1)[:snapshots.shape[1]]
        snapshots[-1, :, 1] = layout.view(K.R_STI)[:snapshots.shape[1], K.ST_JOBS]
    elif int(load_i[V.L_SAMPLE_K]) != edges.size:
        raise RuntimeError(f"the compiled loop took {load_i[V.L_SAMPLE_K]} snapshots for {edges.size} window edges")
    stations = system.stations()
    snapshots = snapshots[:, [lowering.station_ids[id(station)] for _, station, _ in stations]]
    sampler = CpuSampler(edges, stations, busy=snapshots[:, :, 0].tolist(), jobs=snapshots[:, :, 1].tolist())
    measured = LAT[:int(load_i[V.L_NLAT])]
    return replication_series(sampler, origin, measured[:, 1], measured[:, 0])


def load_compiled() -> None:
    """Load (or compile, the first time) the compiled loop now: a tiny replication of a one-service scenario."""
    from meshsim.distributions import Deterministic
    from meshsim.mesh import MeshModel
    from meshsim.topology import Client, Compute, Network, Service, Topology

    zero = Deterministic(0.0)
    service = Service("q", handler=(Compute(Deterministic(1e-4)),), request_bytes=0, response_bytes=0)
    topology = Topology("warm", "q", {"q": service}, Network(loopback=zero, same_node=zero, cross_node=zero,
                                                                bandwidth_bps=1e30), Client(request_bytes=0))
    scenario = Scenario(topology, MeshModel(name="none", proxy=None, features={}, load_balancer=None))
    run_fast_replication(scenario, Workload(OpenLoad(100.0)), Horizon(0.02, 0.0, 0.01), 0, 0)
