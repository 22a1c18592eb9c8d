"""One replication on the compiled engine: the same Scenario and Workload as sim/engine/simpy_replication.py, the same named random
streams, the same ReplicationResult; the request logic runs as a numba program (sim/fast/fast_kernels.py), loaded from
a native module built once (sim/fast/fast_native.py).

The SimPy engine stays the reference: the setup (sim/fast/fast_setup.py) builds the SimPy ``System`` (the wiring, the
samplers) and lowers it (sim/fast/fast_program.py), once for every replication of a prediction; this module runs the
compiled loop, then writes the counters back into the System's stations and proxies so that usage, memory and the
time breakdown come from the very functions the SimPy engine uses.
"""

from __future__ import annotations

import math
import time
from typing import Callable

import numpy as np

from meshsim.errors import MeshsimError
from meshsim.scenario import Scenario
from meshsim.workload import OpenLoad, Workload
from meshsim.sim.fast import fast_kernels as K
from meshsim.sim.engine.replication_measures import backlog, component_usage, expected_wire_bytes, node_utilization, time_breakdown
from meshsim.sim.engine.replication_result import Horizon, in_filed_order, PastDeadline, ReplicationResult
from meshsim.sim.fast.fast_layout import Layout
from meshsim.sim.fast.fast_native import compiled_loop
from meshsim.sim.fast.fast_program import Lowering
from meshsim.sim.fast.fast_setup import FastSetup
from meshsim.sim.engine.system import System
from meshsim.sim.engine.window_series import CpuSampler, ReplicationSeries, replication_series, window_edges

ENGINE_NAME = "fast-numba/1"


def _tokens(count: int, depth: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token tables (ints and floats, with ``depth`` call frames each) and the free list."""
    return (np.zeros((count, K.T_FRAMES + 4 * depth), dtype=np.int64), np.zeros((count, K.TF_FRAMES + 4 * depth)),
            np.arange(count - 1, -1, -1, dtype=np.int64))


def _grow_tokens(TI: np.ndarray, TF: np.ndarray, FREE: np.ndarray, free_n: int) -> tuple:
    """Twice the tokens; the new ids go under the free ones (the pool hands out the old free ids first)."""
    old = TI.shape[0]
    ti, tf, free = _tokens(2 * old, (TI.shape[1] - K.T_FRAMES) // 4)
    ti[:old], tf[:old] = TI, TF
    ids = np.concatenate([np.arange(2 * old - 1, old - 1, -1, dtype=np.int64), FREE[:free_n]])
    free[:ids.size] = ids
    return ti, tf, free, ids.size


def _depth(scenario: Scenario) -> int:
    """Frames a token can stack: a call frame and a handler frame per service on the deepest call path (a fork's
    branch stacks only the calls below it)."""
    return 2 * scenario.topology.call_depth() + 4


TOKEN_TABLE_MB = 8.0  # the first token tables' size when a token is large (deep graphs); they double as needed
FIRST_TOKENS, FIRST_HEAP = 1024, 4096


def first_tokens(depth: int, threads: int, room: int) -> int:
    """Tokens to start with: 1024, fewer when a deep graph makes each large (their tables grow as needed), and at
    least what the load generator's start takes (fortio's parallel warm-up: a token per thread) plus one event's
    room."""
    row_bytes = 8 * (K.T_FRAMES + K.TF_FRAMES + 8 * depth)
    return max(min(FIRST_TOKENS, int(TOKEN_TABLE_MB * 2**20 // row_bytes)), threads + room + K.MARGIN)


class EngineOverflow(MeshsimError):
    """A table of the compiled loop was full although its margins should have kept room (a bug: the loop stopped
    instead of writing past it)."""


_LAST_SETUP: list[FastSetup] = []  # the last setup built in this process: its next replications reuse it


def fast_setup(scenario: Scenario, workload: Workload, horizon: Horizon) -> FastSetup:
    """The setup of the last replication when it serves this one (a prediction's replications, in one process or
    worker; its saturation probes, at other rates of the same load), else a new one, kept for the next calls."""
    if _LAST_SETUP and _LAST_SETUP[0].serves(scenario, workload, horizon):
        return _LAST_SETUP[0]
    setup = FastSetup(scenario, workload, horizon)
    _LAST_SETUP[:] = [setup]
    return setup


def run_fast_replication(scenario: Scenario, workload: Workload, horizon: Horizon, seed: int,
                         replication: int, deadline: float = math.inf) -> ReplicationResult:
    """sim/engine/simpy_replication.py's run_replication on the compiled engine (same streams, same result fields); PastDeadline when
    it is still running at ``deadline`` (a time.perf_counter() value)."""
    setup = fast_setup(scenario, workload, horizon)
    if not setup.lock.acquire(blocking=False):  # another thread runs on it: this replication builds its own
        setup = FastSetup(scenario, workload, horizon)
        setup.lock.acquire()
    try:
        setup.retarget(workload, horizon)
        result = run_on_setup(setup, seed, replication, deadline)
    finally:
        setup.lock.release()
    if not _FROZEN:
        _freeze_long_lived()
    return result


_FROZEN: list[bool] = []


def _freeze_long_lived() -> None:
    """Once per process, after the compiled loop is loaded: every object so far (the modules, and numba's registries
    and loaded code when the loop runs on the JIT) lives as long as the process, so the cyclic garbage collector
    stops walking them (gc.freeze): neither its full collections here and in forked workers nor the one at
    interpreter exit, which took ~0.45 s of a fresh `meshsim predict` while numba was loaded. Only once: a
    long-running process would freeze its later garbage."""
    import gc

    gc.freeze()
    _FROZEN.append(True)


def run_on_setup(setup: FastSetup, seed: int, replication: int, deadline: float = math.inf) -> ReplicationResult:
    """One replication on a setup (built for it or reused: the same result). The loop comes back to refill its
    streams every few thousand draws: there it gives up past ``deadline``."""
    buffers = setup.reset(seed, replication)
    workload, horizon, layout = setup.workload, setup.horizon, setup.layout
    I, F, proxies = layout.I, layout.F, setup.proxies
    rate = workload.load.rps if np.isfinite(workload.load.rps) else 1e4  # think time 0: the buffer grows as needed
    LAT = np.zeros((int(min(rate, 1e6) * (horizon.duration + horizon.drain) * 1.1) + 1024, 2))
    flags, load_f = layout.view(K.R_FLAGS)[0], layout.view(K.R_LOADF)[0]
    threads = int(layout.view(K.R_LOADI)[0, K.L_THREADS])  # every user or connection starts at once
    heap = max(FIRST_HEAP, threads + 2 * int(flags[K.G_HEAP_MARGIN]))
    HT, HI = np.zeros(heap), np.zeros((heap, 2), dtype=np.int64)
    depth = _depth(setup.scenario)
    TI, TF, FREE = _tokens(first_tokens(depth, threads, int(flags[K.G_TOKEN_MARGIN])), depth)
    flags[K.G_FREE_N] = TI.shape[0]
    loop = compiled_loop()
    while True:
        code = loop(I, F, buffers.buf, HT, HI, TI, TF, FREE, LAT, proxies)
        if flags[K.G_OVERFLOW]:
            raise EngineOverflow(f"the compiled engine's tables ran out of room ({TI.shape[0]} tokens of {depth} "
                                 f"frames, {HT.size} heap slots, {LAT.shape[0]} latencies): a bug, please report it; "
                                 "--engine simpy runs this prediction")
        if code == K.DONE:
            break
        if time.perf_counter() > deadline:
            raise PastDeadline(f"replication {replication} still running at its deadline")
        if code == K.REFILL:
            buffers.refill(float(load_f[K.LF_NOW]), float(load_f[K.LF_ORIGIN]) + horizon.duration)
            flags[K.G_LOW] = 0
            continue
        while flags[K.G_FREE_N] < flags[K.G_TOKEN_MARGIN]:
            TI, TF, FREE, flags[K.G_FREE_N] = _grow_tokens(TI, TF, FREE, int(flags[K.G_FREE_N]))
        while flags[K.G_HEAP_N] + flags[K.G_HEAP_MARGIN] > HT.size:
            HT, HI = np.resize(HT, 2 * HT.size), np.resize(HI, (2 * HT.size, 2))
        if layout.view(K.R_LOADI)[0, K.L_NLAT] + K.MARGIN > LAT.shape[0]:
            LAT = np.resize(LAT, (2 * LAT.shape[0], 2))
    _write_back(setup.system, setup.lowering, layout)
    result = _result(setup.system, workload, horizon, layout, LAT)
    result.series = _series(setup.system, setup.lowering, horizon, layout, LAT, result)
    return result


def _write_back(system: System, lowering: Lowering, layout: Layout) -> None:
    """The compiled run's counters into the System's stations and proxies (for engine._usage / time_breakdown)."""
    st_i, st_f, busy = layout.view(K.R_STI), layout.view(K.R_STF), layout.view(K.R_BUSY)
    for k, station in enumerate(lowering.station_list):
        station.busy = busy[k, :station.servers].tolist()
        station.jobs, station.cold_wakes = int(st_i[k, K.ST_JOBS]), float(st_f[k, K.ST_COLD])
        station.waited, station.woke = float(st_f[k, K.ST_WAITED]), float(st_f[k, K.ST_WOKE])
        station.worked, station.cpu_waited = float(st_f[k, K.ST_WORKED]), float(st_f[k, K.ST_CPUWAIT])
    px_i, px_f = layout.view(K.R_PXI), layout.view(K.R_PXF)
    for k, proxy in enumerate(lowering.proxy_list):
        proxy.delayed, proxy.held_area = float(px_f[k, K.PX_DELAYED]), float(px_f[k, K.PX_AREA])
        proxy.holds, proxy.held_seconds = int(px_f[k, K.PX_HOLDS]), float(px_f[k, K.PX_HELD])
        proxy.pool_busy, proxy.pool_peak = int(px_f[k, K.PX_OPEN]), int(px_f[k, K.PX_PEAK])
        if px_f[k, K.PX_WINSET]:
            proxy.window = (float(px_f[k, K.PX_WIN0]), float(px_f[k, K.PX_WIN1]))
        proxy.binding = dict.fromkeys(range(int(px_i[k, K.PX_BOUND])), 0)  # only their number is read
        proxy.views = {}  # a new dict: the built one is the setup's pristine state (FastSetup.reset)
    views = layout.view(K.R_VIEWS)
    for row, (proxy, name) in enumerate(lowering.view_rows):
        if views[row, :K.VIEW_BINS].any():
            proxy.views[name] = views[row].copy()
    nodes = layout.view(K.R_SLOW)
    for row, cores in enumerate(system.node_cpu.values()):  # node_arrays' order
        cores.busy = float(nodes[row, K.SLOW_BUSY])
    gf = layout.view(K.R_GF)[0]
    system.net.total = float(gf[K.GF_NET])
    system.host_cpu_time = float(gf[K.GF_HOST])


def _result(system: System, workload: Workload, horizon: Horizon, layout: Layout,
            LAT: np.ndarray) -> ReplicationResult:
    """engine.run_replication's summary of the run, from the compiled loop's counters."""
    load_i, load_f = layout.view(K.R_LOADI)[0], layout.view(K.R_LOADF)[0]
    origin, warmup = float(load_f[K.LF_ORIGIN]), horizon.warmup
    if workload.load.runs_fixed_calls and load_i[K.L_ENDS]:
        end = float(load_f[K.LF_MAX_END])  # fortio's elapsed ends when its last thread ends
    else:
        end = origin + horizon.duration
    window = max(end - origin - warmup, 1e-12)
    measured = int(load_i[K.L_NLAT])
    latencies, filed_at = in_filed_order(LAT[:measured, 0], LAT[:measured, 1])  # copies
    busy_window = max(min(horizon.duration, end - origin) - warmup, 1e-12)
    started = int(load_i[K.L_IN_WINDOW])
    growth, answered = backlog(workload.load, filed_at, latencies, origin + warmup,
                               origin + horizon.duration)  # filed_at: the send times (open load)
    return ReplicationResult(
        latencies=latencies,
        window=window,
        started=started,
        completed=latencies.size,
        in_flight=int(load_i[K.L_STARTED] - load_i[K.L_FINISHED]),
        achieved_rps=latencies.size / window,
        usage=component_usage(system, busy_window),
        busy_window=busy_window,
        sim_time=float(load_f[K.LF_NOW]),
        breakdown=time_breakdown(system, started),
        node_utilization=node_utilization(system, busy_window),
        backlog_growth=growth,
        answered_rps=answered,
        wire_bytes=expected_wire_bytes(system),
        load_start=origin,
        filed_at=filed_at,
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
    if int(load_i[K.L_SAMPLE_K]) == edges.size - 1:  # no drain: the run ended at the last edge, before its turn
        snapshots[-1, :, 0] = layout.view(K.R_BUSY).sum(axis=1)[:snapshots.shape[1]]
        snapshots[-1, :, 1] = layout.view(K.R_STI)[:snapshots.shape[1], K.ST_JOBS]
    elif int(load_i[K.L_SAMPLE_K]) != edges.size:
        raise RuntimeError(f"the compiled loop took {load_i[K.L_SAMPLE_K]} snapshots for {edges.size} window edges")
    stations = system.stations()
    snapshots = snapshots[:, [lowering.station_ids[id(station)] for _, station, _ in stations]]
    sampler = CpuSampler(edges, stations, busy=snapshots[:, :, 0].tolist(), jobs=snapshots[:, :, 1].tolist())
    measured = LAT[:int(load_i[K.L_NLAT])]
    return replication_series(sampler, origin, measured[:, 1], measured[:, 0])


def load_compiled(report_progress: Callable[[str], None] | None = None) -> None:
    """Load (or build, the first time) the compiled loop now, then run a tiny replication of a one-service scenario
    (the rest of the engine's first-call costs). ``report_progress`` hears the one line of a fallback to numba's JIT."""
    from meshsim.distributions import Deterministic
    from meshsim.mesh import MeshModel
    from meshsim.topology import Client, Compute, Network, Service, Topology

    zero = Deterministic(0.0)
    service = Service("q", handler=(Compute(Deterministic(1e-4)),), request_bytes=0, response_bytes=0)
    topology = Topology("warm", "q", {"q": service}, Network(loopback=zero, same_node=zero, cross_node=zero,
                                                                bandwidth_bps=1e30), Client(request_bytes=0))
    scenario = Scenario(topology, MeshModel(name="none", proxy=None, features={}, load_balancer=None))
    compiled_loop(report_progress=report_progress)
    run_fast_replication(scenario, Workload(OpenLoad(100.0)), Horizon(0.02, 0.0, 0.01), 0, 0)
