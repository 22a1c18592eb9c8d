"""The compiled engine (numba; built once into a native module, sim/fast/fast_native.py): its primitives and its event
loop, in one module because numba's disk cache keys a function on its own file only -- a callee in another file
could change without its callers being compiled again (the native module's name hashes this file for the same
reason). Importing this module compiles nothing and imports no numba: its functions are registered (``jit``) and
become numba dispatchers only when the native module is built or the JIT runs the loop.

Primitives: random draws from pre-filled stream buffers, a node's cores, a CPU quota, a station visit, a proxy
pass, a network hop, the balancers and the event heap -- each the line-by-line counterpart of the SimPy engine's
(sim/engine/stations.py, sim/engine/components.py, sim/engine/system.py, sim/engine/balancing.py): same arithmetic, same order of bookings.
The state is three flat arrays -- ``I`` (int64), ``F`` (float64) and ``B`` (the streams' buffers) -- holding tables
(regions) whose offset and row width sit in I's header (:func:`at`, laid out by sim/fast/fast_layout.py): few,
homogeneous arguments keep numba's compile time and every call cheap.

The loop: requests are tokens running a small program of ops (sim/fast/fast_program.py). A token is one request (or
one branch of a fork) with a program counter, the delay it carries to its next station (``pending``, as in
sim/engine/system.py) and a stack of call frames. A token runs its ops until it must wait (an op marked ``OP_WAIT``
while pending > 0): it goes on the event heap and resumes there, in time order, so every station is booked in the
order of arrivals, as in the SimPy engine; its event stays on the heap's top while it runs (``heap_replace``).
The loop returns to Python when a random stream runs low (Python refills it from the same named generator) or the
token pool or heap runs short (Python grows them): all state lives in arrays, so the loop simply continues where it
was.

Speed: a call between compiled functions passes every array as its fields (7 to 9 words each), so the hot path is
inlined into ``run`` at numba's IR level (``jit_inline``): ``step`` (whose one caller is ``run``: a load generator
returns a new request's token instead of stepping it), the ops of a request's path, proxy passes, bookings, node
cores and the heap push. The rare or large paths (``_fit``, ``_trim``, quotas, balancers, round trips, the load
generators) stay calls: inlining them too gained little and made the first compile several times longer.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Callable, Iterator

import numpy as np

PRUNE_AT = 32  # as sim/engine/stations.py: booked intervals a core keeps before it forgets the old ones
CORE_SLOTS = PRUNE_AT + 2
# a core's row of F (region R_CORE): when its last booking ends, the floor below which its old intervals were
# forgotten, when the woken bursts booked on it end (WokenFirstCores.woken_last), then its booked intervals as
# (start, end) pairs, in order: one base address serves a whole booking
CORE_LAST, CORE_FLOOR, CORE_WOKEN, CORE_START = range(4)
RHO_CAP = 0.9  # as meshsim/woken_first.py: the stretch of a burst behind the woken ones stops at 10x
CORE_WIDTH = CORE_START + 2 * CORE_SLOTS
QUOTA_RING = 256  # CPU-quota periods remembered (25.6 s at 100 ms): bookings never reach that far ahead
CFS_PERIOD = 0.1
LOW_WATER = 256  # a stream refills when fewer draws than this are left (a token's step draws far fewer)

# Every function below is registered here, not compiled at import: the loop normally runs from a native module
# built once ahead of time (sim/fast/fast_native.py), which a process loads without importing numba (~1 s saved). The
# functions become numba dispatchers only when that module is built, or as the fallback JIT (compile_with_numba).
_COMPILED: dict[str, dict[str, object]] = {}  # function name -> its numba options beyond the common ones


def jit(function: Callable) -> Callable:
    """Compiled, cached on disk (numba's NUMBA_CACHE_DIR, by default __pycache__ next to this file)."""
    _COMPILED[function.__name__] = {}
    return function


def jit_inline(function: Callable) -> Callable:
    """Inlined at every call site (numba IR): a call passes every array as its fields (7 to 9 words each), which
    costs more than a small body; each inlined copy lengthens the first compile, so only the hot path uses it."""
    _COMPILED[function.__name__] = {"inline": "always"}
    return function


def compile_with_numba(signature: str | None = None) -> Callable:
    """Make every registered function a numba dispatcher, in place (their calls to each other resolve through this
    module's globals when numba compiles them), and return ``run``'s, compiled now for ``signature`` when given
    (without index wrap-around: :func:`_indices_from_the_start`). numpy's error model: a division by zero gives inf
    instead of a checked exception on every division. No reference counts (numba's ``_nrt=False``): the kernels
    allocate no array and every array they see is owned by the Python caller, so the counts did nothing but cost --
    with numba 0.68.1 (LLVM 22) its pruning pass left 367 increments and 847 decrements in the loop, 58 % of its
    time (3.3x slower than on numba 0.62.1, which pruned all but 18 decrements)."""
    from numba import njit
    from numba.core.registry import CPUDispatcher

    names = globals()
    for name, options in _COMPILED.items():
        if not isinstance(names[name], CPUDispatcher):
            names[name] = njit(cache=True, error_model="numpy", _nrt=False, **options)(names[name])
    if signature is not None:
        with _indices_from_the_start():
            names["run"].compile(signature)
    return names["run"]


@contextmanager
def _indices_from_the_start() -> Iterator[None]:
    """While the kernels compile, numba indexes arrays without wrapping a negative index around (``i + len``).

    The wrap-around costs a compare and a select per access and keeps every array's length live: in ``run``'s large
    inlined body those lengths are spilled to the stack and reloaded. The kernels never index from the end (every
    index is an offset into a table, or a row, token or heap slot, all >= 0), so dropping it changes no result and
    took 37 % of the loop's instructions (callgrind, chain3 at 3500 rps: 32 900 -> 20 700 a request; the loop 1.21x
    faster). numba's own indexing is restored after, for any other code compiled in the process."""
    from numba.core import types
    from numba.np import arrayobj

    wrapping = getattr(arrayobj, "fix_integer_index", None)
    if wrapping is None:  # a numba without this hook (0.62-0.68.1 have it): its own indexing (slower, same results)
        yield
        return

    def from_the_start(context, builder, idxty, idx, size):  # noqa: ANN001 (numba's codegen objects)
        if idxty.signed:
            return context.cast(builder, idx, idxty, types.intp)
        return wrapping(context, builder, idxty, idx, size)

    arrayobj.fix_integer_index = from_the_start
    try:
        yield
    finally:
        arrayobj.fix_integer_index = wrapping


# regions of I (int) and F (float); I[2 r] is region r's offset in its array, I[2 r + 1] its row width
(R_STREAM, R_STI, R_QTAG, R_PXI, R_BIND, R_NCORES, R_NCOUNT, R_NETI, R_BALI, R_ACTIVE, R_OPS, R_RPC, R_RBAL,
 R_CHS, R_CHN, R_CHR, R_TLS, R_FKN, R_FKPC, R_LOADI, R_THI, R_FLAGS,
 R_STF, R_FREE, R_BUSY, R_QUSED, R_PXF, R_POST, R_EXPORT, R_SLOW, R_CORE, R_NETF,
 R_EWMA, R_CHW, R_LOADF, R_THF, R_GF, R_PROFILE, R_SAMPLES, R_VIEWS) = range(40)
REGIONS = 40
INT_REGIONS = tuple(range(R_FLAGS + 1))
HEADER = 2 * REGIONS
STREAM_POS, STREAM_LIM = range(2)  # a stream's row: its next value's index in B, and where it asks for a refill
# a node's row of R_SLOW: its cores' slowdown; core-seconds booked while recording; with per-core run queues the core
# the next queued burst goes to (-1: one queue for all its cores); the scheduler's tick (0: no tick holds), the share of
# bursts finding no core idle that wait for it, and the shares owed (NodeCores.tick_hold, .owed); a woken thread first:
# the window of the woken bursts' recent load (0: they queue like the others), that load and when it was last decayed
# (WokenFirstCores.window, .woken_load, .woken_at)
SLOW_FACTOR, SLOW_BUSY, SLOW_TURN, SLOW_TICK, SLOW_TICK_SHARE, SLOW_OWED, SLOW_WINDOW, SLOW_WOKEN_LOAD, SLOW_WOKEN_AT = (
    range(9))
SLOW_WIDTH = 9

# station columns (int / float)
ST_SERVERS, ST_PINNED, ST_WAKE, ST_NODE, ST_QUOTA, ST_JOBS = range(6)
# (ST_GRADED: WakeUp.graded, the cold cost's graded share; ST_COLD: cold wakes while recording, a graded one's share;
# ST_FRACTION: Station.cpu_fraction, the share of a compute step that holds a core; ST_GC_EVERY, ST_GC_CPU,
# ST_GC_COUNT: an app's garbage collections, its CollectionClock's every, cpu and count, every 0 for none; ST_SPIN:
# WakeUp.spin_share)
(ST_DELAY, ST_TAU, ST_CPU, ST_RESUME, ST_BUDGET, ST_WAITED, ST_WOKE, ST_WORKED, ST_CPUWAIT, ST_SHAPE, ST_LINGER,
 ST_GRADED, ST_COLD, ST_FRACTION, ST_GC_EVERY, ST_GC_CPU, ST_GC_COUNT, ST_SPIN) = range(18)
# proxy columns
PX_STATION, PX_BALANCE, PX_NEXT, PX_BOUND, PX_BIND_STREAM, PX_HS_STREAM, PX_UNIFORM, PX_NPOST, PX_NEXP, PX_ACCEPTOR = (
    range(10))
BALANCE_HASH, BALANCE_ROUND_ROBIN, BALANCE_SHARED_LISTENER = range(3)  # ProxyModel.connection_balance, in BALANCE order
# (the held fraction of a pass without a side -- a load balancer's -- then of the inbound and outbound sides, and
# likewise their hold ceilings, meshsim/hold_ceiling.py: a pass reads column PX_FRACTION or PX_CEILING + its side)
(PX_FRACTION, PX_FRACTION_IN, PX_FRACTION_OUT, PX_CEILING, PX_CEILING_IN, PX_CEILING_OUT, PX_PER_KB, PX_DELAYED,
 PX_AREA, PX_HOLDS, PX_HELD, PX_WIN0, PX_WIN1, PX_WINSET, PX_ACCEPTED_AT, PX_ACCEPT_WINDOW, PX_OPEN,
 PX_PEAK) = range(18)
SIDE_NONE, SIDE_IN, SIDE_OUT = range(3)  # a pass's side (sim/fast/fast_program.py SIDE_CODES); post work is per side
# flags (int) and global sums (float)
# (G_TOKEN_MARGIN, G_HEAP_MARGIN: the free tokens and heap slots one event may take at most -- a fork of n calls takes
# n of each, fortio's timed run starts every thread at once -- set from the scenario by sim/fast/fast_setup.py; G_OVERFLOW:
# a table was full all the same, so the loop stopped instead of writing past it: see _overflow)
(G_RECORDING, G_LOW, G_HEAP_N, G_HEAP_SEQ, G_FREE_N, G_NODES, G_CORES, G_STARTED, G_TOKEN_MARGIN, G_HEAP_MARGIN,
 G_OVERFLOW) = range(11)
FLAGS = 11
GF_NET, GF_HOST, GF_START = 0, 1, 2  # the network's and the host's sums; when the last booked job's own work began
# a proxy view's histogram (sim/engine/proxy_views.py, whose constants a test checks these against)
VIEW_BINS_PER_DECADE = 50
VIEW_FLOOR_S = 1e-6
VIEW_BINS = VIEW_BINS_PER_DECADE * 9
VIEW_WIDTH = VIEW_BINS + 1
# network columns
NET_LOOP, NET_SAME, NET_CROSS, NET_CLIENT, NET_CLIENT_NODE, NET_PER_HOP, NET_PER_KB, NET_KERNEL = range(8)
NETF_BANDWIDTH, NETF_PER_HOP, NETF_PER_KB = range(3)
# balancer columns and policies
BAL_N, BAL_POLICY, BAL_STREAM, BAL_NEXT = range(4)
RR, RANDOM, LEAST, EWMA, PINNED = range(5)  # PINNED: kube-proxy's pick per connection (BAL_NEXT: its seed)


@jit
def at(I, region, row, col):
    """Index of (row, col) of a region in its array (I or F)."""
    width = WIDTHS[region]  # a constant once inlined where the region is: the branch folds away
    if width < 0:
        width = I[2 * region + 1]
    offset = OFFSETS[region]  # likewise: the regions at fixed offsets need no load of their offset
    if offset < 0:
        offset = I[2 * region]
    return offset + row * width + col


@jit
def flag(I, k):
    return I[I[2 * R_FLAGS] + k]


@jit
def draw(I, B, s):
    """The next value of stream ``s`` (flags the refill when the stream runs low)."""
    p = at(I, R_STREAM, s, STREAM_POS)
    i = I[p]
    I[p] = i + 1
    if i >= I[p + STREAM_LIM - STREAM_POS]:
        I[at(I, R_FLAGS, 0, G_LOW)] = 1
    return B[s, i]


@jit
def _overflow(I):
    """A token, frame, heap or latency table is full although the margins should have kept room: flag it and have
    the loop stop at its next event (through the refill flag, which it checks anyway); the caller writes nothing.
    numba checks no bounds, so this guard is what stands between a wrong margin and a write past an array."""
    I[at(I, R_FLAGS, 0, G_OVERFLOW)] = 1
    I[at(I, R_FLAGS, 0, G_LOW)] = 1


@jit
def recording(I):
    return I[at(I, R_FLAGS, 0, G_RECORDING)] == 1


@jit
def _booked(I, F, slow, work):
    """NodeCores.booked: ``work`` as core time of the node (row ``slow`` of R_SLOW), counted busy while recording."""
    work *= F[slow + SLOW_FACTOR]
    if recording(I):
        F[slow + SLOW_BUSY] += work
    return work


@jit_inline
def node_run(I, F, node, start, work, now):
    """NodeCores.run: the earliest finish of ``work`` CPU seconds from ``start`` on the node's cores."""
    if node < 0 or node >= I[at(I, R_FLAGS, 0, G_NODES)]:  # a node without declared cores: a core of its own
        return start + work
    if work <= 0.0:
        return start
    slow = at(I, R_SLOW, node, 0)
    work = _booked(I, F, slow, work)
    if F[slow + SLOW_WINDOW] > 0.0:  # behind the woken bursts: stretched by their recent load (WokenFirstCores.run)
        work = work / (1.0 - _recent_load(I, F, node, start))
    width = I[at(I, R_FLAGS, 0, G_CORES)]  # core rows per node
    for core in range(I[at(I, R_NCORES, node, 0)]):
        row = node * width + core
        c = at(I, R_CORE, row, 0)
        if F[c + CORE_LAST] <= start:  # a core idle from `start` on (the first such core takes it)
            end = start + work
            F[c + CORE_LAST] = end
            count = at(I, R_NCOUNT, row, 0)
            if I[count] >= PRUNE_AT:
                _trim(I, F, row, now)
            k = I[count]
            F[c + CORE_START + 2 * k] = start
            F[c + CORE_START + 2 * k + 1] = end
            I[count] = k + 1
            return end
    return _fit(I, F, node, start, work, now)


@jit
def _recent_load(I, F, node, t):
    """WokenFirstCores.recent_load: the woken class's load per core at ``t``."""
    slow = at(I, R_SLOW, node, 0)
    window = F[slow + SLOW_WINDOW]
    if t > F[slow + SLOW_WOKEN_AT]:
        F[slow + SLOW_WOKEN_LOAD] *= math.exp(-(t - F[slow + SLOW_WOKEN_AT]) / window)
        F[slow + SLOW_WOKEN_AT] = t
    return min(F[slow + SLOW_WOKEN_LOAD] / (window * I[at(I, R_NCORES, node, 0)]), RHO_CAP)


@jit
def _woken_run(I, F, node, start, work):
    """WokenFirstCores.run_woken: a woken burst waits only for the woken bursts booked before it."""
    if work <= 0.0:
        return start
    slow = at(I, R_SLOW, node, 0)
    work = _booked(I, F, slow, work)
    width = I[at(I, R_FLAGS, 0, G_CORES)]
    tick = F[slow + SLOW_TICK]
    if tick > 0.0:  # every core taken: the running thread may keep it till the tick (WokenFirstCores.run_woken)
        taken = True
        for core in range(I[at(I, R_NCORES, node, 0)]):
            c = at(I, R_CORE, node * width + core, 0)
            if F[c + CORE_LAST] <= start and F[c + CORE_WOKEN] <= start:
                taken = False
        if taken:
            F[slow + SLOW_OWED] += F[slow + SLOW_TICK_SHARE]
            if F[slow + SLOW_OWED] >= 1.0:
                F[slow + SLOW_OWED] -= 1.0
                start = (math.floor(start / tick) + 1.0) * tick
    _recent_load(I, F, node, start)
    F[slow + SLOW_WOKEN_LOAD] += work
    best = at(I, R_CORE, node * width, 0) + CORE_WOKEN
    for core in range(1, I[at(I, R_NCORES, node, 0)]):
        c = at(I, R_CORE, node * width + core, 0) + CORE_WOKEN
        if F[c] < F[best]:
            best = c
    end = (start if F[best] <= start else F[best]) + work
    F[best] = end
    return end


@jit
def _first_after(F, base, n, t):
    """bisect_right over the n sorted values at F[base], F[base + 2], ... (a core's interval ends), scanned from the
    end: its callers ask for the first interval ending after a time at or past the clock, and of a core's booked
    intervals only a few (about 4 of 19 on chain3 at 3500 rps) end after it, so the scan takes fewer, predictable
    steps than a bisection."""
    index = n
    while index > 0 and F[base + 2 * index - 2] > t:
        index -= 1
    return index


@jit
def _fit(I, F, node, start, work, now):
    """Every core has work booked past ``start``: the earliest gap that fits on any core (NodeCores._fit). Interval
    k of a core starts at F[s0 + 2 k] and ends at F[s0 + 2 k + 1]."""
    width = I[at(I, R_FLAGS, 0, G_CORES)]  # core rows per node
    best_begin, best_row, best_index = np.inf, 0, 0
    first, last = 0, I[at(I, R_NCORES, node, 0)]
    slow = at(I, R_SLOW, node, 0)
    tick = F[slow + SLOW_TICK]
    if tick > 0.0:  # a thread with a backlog kept the core: this burst waits for the next tick (NodeCores._fit)
        F[slow + SLOW_OWED] += F[slow + SLOW_TICK_SHARE]
        if F[slow + SLOW_OWED] >= 1.0:
            F[slow + SLOW_OWED] -= 1.0
            start = (math.floor(start / tick) + 1.0) * tick
    turn = slow + SLOW_TURN
    if F[turn] >= 0.0:  # per-core run queues: the one core this burst is queued on (NodeCores.turn)
        first = int(F[turn])
        F[turn] = (first + 1) % last
        last = first + 1
    for core in range(first, last):
        row = node * width + core
        n = I[at(I, R_NCOUNT, row, 0)]
        c = at(I, R_CORE, row, 0)
        s0 = c + CORE_START
        floor = F[c + CORE_FLOOR]
        t = start if start > floor else floor
        index = _first_after(F, s0 + 1, n, t)
        if index < n and F[s0 + 2 * index] - t < work - 1e-15:
            t = F[s0 + 2 * index + 1] if F[s0 + 2 * index + 1] > t else t
            index += 1
            while index < n and t < best_begin:  # past the best core's begin this core cannot win: stop
                if F[s0 + 2 * index] - t >= work - 1e-15:
                    break
                t = F[s0 + 2 * index + 1] if F[s0 + 2 * index + 1] > t else t
                index += 1
        if t < best_begin:
            best_begin, best_row, best_index = t, row, index
            if t <= start:
                break
    row = best_row
    n = I[at(I, R_NCOUNT, row, 0)]
    c = at(I, R_CORE, row, 0)
    s0 = c + CORE_START
    end = best_begin + work
    if best_index == n:
        F[c + CORE_LAST] = end
    for k in range(2 * n - 1, 2 * best_index - 1, -1):  # the later intervals move up one pair
        F[s0 + k + 2] = F[s0 + k]
    F[s0 + 2 * best_index] = best_begin
    F[s0 + 2 * best_index + 1] = end
    I[at(I, R_NCOUNT, row, 0)] = n + 1
    if n + 1 > PRUNE_AT:
        _trim(I, F, row, now)
    return end


@jit
def _trim(I, F, row, now):
    """Forget intervals that ended before now; of a long backlog keep the latest PRUNE_AT / 2 (NodeCores._trim)."""
    n = I[at(I, R_NCOUNT, row, 0)]
    c = at(I, R_CORE, row, 0)
    s0 = c + CORE_START
    gone = _first_after(F, s0 + 1, n, now)
    if n - gone > PRUNE_AT // 2:
        gone = n - PRUNE_AT // 2
        F[c + CORE_FLOOR] = max(F[c + CORE_FLOOR], F[s0 + 2 * gone - 1])
    for k in range(2 * (n - gone)):
        F[s0 + k] = F[s0 + k + 2 * gone]
    I[at(I, R_NCOUNT, row, 0)] = n - gone


@jit
def quota_run(I, F, st, start, work):
    """CpuQuota.run: at most the budget of CPU seconds per 100 ms period; work past it waits for the next one."""
    budget = F[at(I, R_STF, st, ST_BUDGET)]
    t, remaining = start, work
    while remaining > 1e-12:
        p = int(t // CFS_PERIOD)
        period_end = (p + 1) * CFS_PERIOD
        if period_end - t <= 1e-12:
            p += 1
            period_end = (p + 1) * CFS_PERIOD
        tag, used = at(I, R_QTAG, st, p % QUOTA_RING), at(I, R_QUSED, st, p % QUOTA_RING)
        if I[tag] != p:
            I[tag] = p
            F[used] = 0.0
        available = budget - F[used]
        if available <= 1e-12:
            t = period_end
            continue
        take = min(remaining, available, period_end - t)
        F[used] += take
        t += take
        remaining -= take
    return t


@jit_inline
def _cpu_run(I, F, st, start, work, now):
    """Station._run / node.run: where the station's CPU comes from (quota and node, node, or its own cores)."""
    node = I[at(I, R_STI, st, ST_NODE)]
    quota_finish = -np.inf
    if I[at(I, R_STI, st, ST_QUOTA)]:
        quota_finish = quota_run(I, F, st, start, work)
        if node < 0:
            return quota_finish
    return max(quota_finish, node_run(I, F, node, start, work, now))  # one call site: node_run is inlined


@jit
def _pick(I, F, st, servers, now):
    """Station._pick: the idle worker idle the shortest time (still warm), else the one that frees up first."""
    base = at(I, R_FREE, st, 0)
    best, best_free = -1, -np.inf
    for i in range(servers):
        f = F[base + i]
        if best_free < f <= now:
            best, best_free = i, f
    if best >= 0:
        return best
    best = 0
    for i in range(1, servers):
        if F[base + i] < F[base + best]:
            best = i
    return best


@jit_inline
def book(I, F, B, st, now, work, server, post, timed, clock):
    """Station._book: a job arriving at ``now``; the worker stays busy until its finish + ``post``. ``clock``: the
    simulation's time, which is ``now`` but for work booked ahead (a span export at its pass's departure): the
    node's cores forget only the intervals that ended before it (NodeCores.clock)."""
    servers = I[at(I, R_STI, st, ST_SERVERS)]
    if server < 0:
        server = 0 if servers == 1 else _pick(I, F, st, servers, now)
    free_slot = at(I, R_FREE, st, server)
    free = F[free_slot]
    rec = recording(I)
    wake_delay, wake_cpu, lingered = 0.0, 0.0, 0.0
    wake = I[at(I, R_STI, st, ST_WAKE)]
    if wake >= 0 and free < now:
        linger = F[at(I, R_STF, st, ST_LINGER)]  # WakeUp.slept: a pass within the linger finds the thread running
        slept = now - free - linger if now - free > linger else 0.0
        lingered = now - free - slept
        if lingered > 0.0 and I[at(I, R_STI, st, ST_QUOTA)]:  # Station._book: the lingering spends quota too
            quota_run(I, F, st, now - lingered, lingered)
        if slept > 0.0:
            wake_cpu = F[at(I, R_STF, st, ST_RESUME)]
            p = -math.expm1(-(slept / F[at(I, R_STF, st, ST_TAU)]) ** F[at(I, R_STF, st, ST_SHAPE)])
            graded = F[at(I, R_STF, st, ST_GRADED)]  # WakeUp.cold_share: graded x p always, the rest a lottery
            cold = p if graded >= 1.0 else graded * p + (1.0 - graded) * (1.0 if draw(I, B, wake) < p else 0.0)
            if cold > 0.0:
                wake_delay = F[at(I, R_STF, st, ST_DELAY)] * cold
                wake_cpu += F[at(I, R_STF, st, ST_CPU)] * cold
                if rec:
                    F[at(I, R_STF, st, ST_COLD)] += cold
            spin = F[at(I, R_STF, st, ST_SPIN)]
            if spin > 0.0:  # WakeUp.spin_share: threads woken beside it burn this share, on no request's path
                spun = wake_cpu * spin
                wake_cpu -= spun
                if I[at(I, R_STI, st, ST_QUOTA)] or I[at(I, R_STI, st, ST_NODE)] >= 0:
                    _cpu_run(I, F, st, now, spun, clock)
                if rec:
                    F[at(I, R_BUSY, st, server)] += spun
    start = (now if free <= now else free) + wake_delay
    F[at(I, R_GF, 0, GF_START)] = start + wake_cpu
    held = work + wake_cpu
    node = I[at(I, R_STI, st, ST_NODE)]
    if free < now and not I[at(I, R_STI, st, ST_QUOTA)] and 0 <= node < I[at(I, R_FLAGS, 0, G_NODES)] \
            and F[at(I, R_SLOW, node, SLOW_WINDOW)] > 0.0:  # its thread slept: it runs first (WokenFirstCores)
        finish = _woken_run(I, F, node, start, held)
        released = _cpu_run(I, F, st, finish, post, clock) if post > 0 else finish
    elif I[at(I, R_STI, st, ST_QUOTA)] or node >= 0:
        finish = _cpu_run(I, F, st, start, held, clock)
        released = _cpu_run(I, F, st, finish, post, clock) if post > 0 else finish
    else:
        finish = start + held
        released = finish + post
    F[free_slot] = released
    if rec:
        F[at(I, R_BUSY, st, server)] += held + post + lingered
        I[at(I, R_STI, st, ST_JOBS)] += 1
        if timed:
            F[at(I, R_STF, st, ST_WAITED)] += start - wake_delay - now
            F[at(I, R_STF, st, ST_WOKE)] += wake_delay + wake_cpu
            F[at(I, R_STF, st, ST_WORKED)] += work
            F[at(I, R_STF, st, ST_CPUWAIT)] += finish - start - work - wake_cpu
    return finish


@jit_inline
def _worker(I, F, B, px, conn, now):
    """ProxyInstance.worker_for: a connection's worker, bound at its first pass (BALANCE_* codes)."""
    slot = at(I, R_BIND, px, conn)
    worker = I[slot]
    st = I[at(I, R_PXI, px, PX_STATION)]
    if worker < 0:
        servers = I[at(I, R_STI, st, ST_SERVERS)]
        balance = I[at(I, R_PXI, px, PX_BALANCE)]
        if balance == BALANCE_ROUND_ROBIN:
            worker = I[at(I, R_PXI, px, PX_NEXT)] % servers
            I[at(I, R_PXI, px, PX_NEXT)] += 1
        elif balance == BALANCE_SHARED_LISTENER:  # ProxyInstance._accept
            acceptor = I[at(I, R_PXI, px, PX_ACCEPTOR)]
            if acceptor >= 0 and now - F[at(I, R_PXF, px, PX_ACCEPTED_AT)] <= F[at(I, R_PXF, px, PX_ACCEPT_WINDOW)]:
                worker = acceptor
            else:
                worker = 0 if servers == 1 else _pick(I, F, st, servers, now)
            I[at(I, R_PXI, px, PX_ACCEPTOR)] = worker
            F[at(I, R_PXF, px, PX_ACCEPTED_AT)] = now
        else:
            worker = min(int(draw(I, B, I[at(I, R_PXI, px, PX_BIND_STREAM)]) * servers), servers - 1)
        I[slot] = worker
        I[at(I, R_PXI, px, PX_BOUND)] += 1
    return worker if I[at(I, R_STI, st, ST_PINNED)] else -1


@jit_inline
def proxy_pass(I, F, B, px, kind, side, now, conn, nbytes, last, handshake):
    """ProxyInstance.pass_: one pass through a proxy; returns when it leaves."""
    work = draw(I, B, kind)
    cpu = min(work, F[at(I, R_PXF, px, PX_CEILING + side)])  # its CPU first, then waits that free the worker
    extra = 0.0  # beyond the fitted pass (payload, a handshake): the side's held fraction of it is CPU
    per_kb = F[at(I, R_PXF, px, PX_PER_KB)]
    if per_kb != 0.0:
        extra += per_kb * nbytes / 1024.0
    if handshake and I[at(I, R_PXI, px, PX_HS_STREAM)] >= 0:
        extra += draw(I, B, I[at(I, R_PXI, px, PX_HS_STREAM)])
    if extra != 0.0:
        work += extra
        cpu += extra * F[at(I, R_PXF, px, PX_FRACTION + side)]
    uniform = I[at(I, R_PXI, px, PX_UNIFORM)]
    post_work = 0.0
    if last:
        for j in range(I[at(I, R_PXI, px, PX_NPOST)]):  # (stream, sampling, side) of each side's works in order
            p = at(I, R_POST, px, 3 * j)
            if F[p + 2] == side and (F[p + 1] >= 1.0 or draw(I, B, uniform) < F[p + 1]):
                post_work += draw(I, B, int(F[p]))
    worker = _worker(I, F, B, px, conn, now)
    departure = book(I, F, B, I[at(I, R_PXI, px, PX_STATION)], now, cpu, worker, post_work, True, now) + (work - cpu)
    if recording(I):
        F[at(I, R_PXF, px, PX_DELAYED)] += work - cpu
    if last:
        for j in range(I[at(I, R_PXI, px, PX_NEXP)]):
            e = at(I, R_EXPORT, px, 3 * j)
            if F[e + 2] >= 1.0 or draw(I, B, uniform) < F[e + 2]:
                book(I, F, B, int(F[e]), departure, 0.0, -1, draw(I, B, int(F[e + 1])), False, now)
    return departure


@jit
def view_bin(seconds):
    """proxy_views.view_bin: a latency's bin in a view's histogram."""
    if seconds <= VIEW_FLOOR_S:
        return 0
    index = int(math.floor((math.log10(seconds) - math.log10(VIEW_FLOOR_S)) * VIEW_BINS_PER_DECADE))
    return min(index, VIEW_BINS - 1)


@jit
def hold(I, F, px, view, opened, closed):
    """ProxyInstance.hold: a request held from ``opened`` to ``closed``, counted over the window; a hold that
    began in it goes into the histogram of its ``view`` (a row of R_VIEWS)."""
    if F[at(I, R_PXF, px, PX_WINSET)] == 0.0:
        return
    start, end = F[at(I, R_PXF, px, PX_WIN0)], F[at(I, R_PXF, px, PX_WIN1)]
    F[at(I, R_PXF, px, PX_AREA)] += max(0.0, min(closed, end) - max(opened, start))
    if start <= opened < end:
        F[at(I, R_PXF, px, PX_HOLDS)] += 1.0
        F[at(I, R_PXF, px, PX_HELD)] += closed - opened
        F[at(I, R_VIEWS, view, view_bin(closed - opened))] += 1.0
        F[at(I, R_VIEWS, view, VIEW_BINS)] += closed - opened


@jit
def _net(I, col):
    return I[at(I, R_NETI, 0, col)]


@jit_inline
def latency(I, F, B, src, dst, nbytes, loopback):
    """NetworkDelays.loopback / hop: a one-way hop's delay (added to the network's total while recording)."""
    if loopback:
        delay = draw(I, B, _net(I, NET_LOOP))
    else:
        transfer = nbytes * 8.0 / F[at(I, R_NETF, 0, NETF_BANDWIDTH)]
        client, client_node = _net(I, NET_CLIENT), _net(I, NET_CLIENT_NODE)
        if client >= 0 and (src == client_node or dst == client_node):
            delay = 0.5 * draw(I, B, client) + transfer
        else:
            delay = draw(I, B, _net(I, NET_SAME) if src == dst else _net(I, NET_CROSS)) + transfer
    if recording(I):
        F[at(I, R_GF, 0, GF_NET)] += delay
    return delay


@jit
def round_trip(I, F, B, src, dst):
    """NetworkDelays.round_trip."""
    client, client_node = _net(I, NET_CLIENT), _net(I, NET_CLIENT_NODE)
    if client >= 0 and (src == client_node or dst == client_node):
        delay = draw(I, B, client)
        if recording(I):
            F[at(I, R_GF, 0, GF_NET)] += delay
        return delay
    return latency(I, F, B, src, dst, 0, False) + latency(I, F, B, dst, src, 0, False)


@jit
def _value(I, F, B, col, fcol):
    s = _net(I, col)
    return F[at(I, R_NETF, 0, fcol)] if s < 0 else draw(I, B, s)


@jit_inline
def hop(I, F, B, pending, now, src, dst, nbytes, loopback):
    """HostCpu.hop: ``pending`` after a one-way hop, with the kernel's CPU on the sender's and receiver's cores."""
    lat = latency(I, F, B, src, dst, nbytes, loopback)
    if _net(I, NET_KERNEL) == 0:
        return pending + lat
    cpu = _value(I, F, B, NET_PER_HOP, NETF_PER_HOP) + _value(I, F, B, NET_PER_KB, NETF_PER_KB) * nbytes / 1024.0
    same = src == dst  # the sender's and receiver's halves, or all of it on the one node
    sent = node_run(I, F, src, now + pending, cpu if same else 0.5 * cpu, now)
    if same:
        after = sent + lat - now
    else:
        after = node_run(I, F, dst, sent + lat, 0.5 * cpu, now) - now
    if recording(I):
        F[at(I, R_GF, 0, GF_HOST)] += after - pending - lat
    return after


@jit
def pinned_replica(seed, conn, n):
    """sim/engine/balancing.py pinned_replica (a test checks the two agree)."""
    h = seed ^ (conn * 2654435761 % 2147483647)
    h = h * 48271 % 2147483647
    h ^= h >> 15
    h = h * 48271 % 2147483647
    h ^= h >> 13
    h = h * 48271 % 2147483647
    return h * n // 2147483647


@jit
def balance_start(I, F, B, b, conn):
    """Balancer.start: the replica a call on connection ``conn`` goes to (round robin, random, least request, peak
    EWMA or kube-proxy's pick per connection)."""
    n, policy = I[at(I, R_BALI, b, BAL_N)], I[at(I, R_BALI, b, BAL_POLICY)]
    i = 0
    if n > 1:
        stream = I[at(I, R_BALI, b, BAL_STREAM)]
        if policy == PINNED:
            i = pinned_replica(I[at(I, R_BALI, b, BAL_NEXT)], conn, n)
        elif policy == RR:
            i = I[at(I, R_BALI, b, BAL_NEXT)]
            I[at(I, R_BALI, b, BAL_NEXT)] = (i + 1) % n
        elif policy == RANDOM:
            i = min(int(draw(I, B, stream) * n), n - 1)
        else:  # two distinct random replicas (rng.choice(n, 2, replace=False))
            a = min(int(draw(I, B, stream) * n), n - 1)
            c = min(int(draw(I, B, stream) * (n - 1)), n - 2)
            if c >= a:
                c += 1
            act_a, act_c = I[at(I, R_ACTIVE, b, a)], I[at(I, R_ACTIVE, b, c)]
            if policy == LEAST:
                i = a if act_a <= act_c else c
            else:
                cost_a = F[at(I, R_EWMA, b, a)] * (act_a + 1)
                i = a if cost_a <= F[at(I, R_EWMA, b, c)] * (act_c + 1) else c
    I[at(I, R_ACTIVE, b, i)] += 1
    return i


@jit
def balance_done(I, F, b, i, seconds):
    I[at(I, R_ACTIVE, b, i)] -= 1
    if I[at(I, R_BALI, b, BAL_POLICY)] == EWMA:
        e = at(I, R_EWMA, b, i)
        F[e] = max(seconds, F[e] + 0.1 * (seconds - F[e]))


@jit
def _before(HT, HI, a, t, seq):
    return HT[a] < t or (HT[a] == t and HI[a, 0] < seq)


@jit_inline
def heap_push(I, HT, HI, t, entry):
    """Push (t, entry) on the event heap; ties pop in push order (SimPy's FIFO for equal times)."""
    n_slot, seq_slot = at(I, R_FLAGS, 0, G_HEAP_N), at(I, R_FLAGS, 0, G_HEAP_SEQ)
    n, seq = I[n_slot], I[seq_slot]
    if n + 1 >= HT.shape[0]:  # the slot past the heap must stay readable (_sift_down)
        _overflow(I)
        return
    I[seq_slot] = seq + 1
    i = n
    while i > 0:
        parent = (i - 1) >> 1
        if _before(HT, HI, parent, t, seq):
            break
        HT[i], HI[i, 0], HI[i, 1] = HT[parent], HI[parent, 0], HI[parent, 1]
        i = parent
    HT[i], HI[i, 0], HI[i, 1] = t, seq, entry
    I[n_slot] = n + 1


@jit
def heap_pop(I, HT, HI):
    """Pop the earliest entry (the caller has checked the heap is not empty)."""
    n_slot = at(I, R_FLAGS, 0, G_HEAP_N)
    entry = HI[0, 1]
    n = I[n_slot] - 1
    I[n_slot] = n
    _sift_down(HT, HI, n, HT[n], HI[n, 0], HI[n, 1])
    return entry


@jit_inline
def heap_replace(I, HT, HI, t, entry):
    """Pop the earliest entry and push (t, entry) in one sift-down from the top, where a pop and a push take a
    sift-down and a sift-up: the loop leaves a token's own event on top while the token runs (nothing it pushes
    can come before it: every push is due at or after now, with a later sequence number) and replaces it when the
    token waits again. The heap's keys (time, sequence) are unique, so its shape does not change the order in which
    they come out: the same events in the same order."""
    seq_slot = at(I, R_FLAGS, 0, G_HEAP_SEQ)
    seq = I[seq_slot]
    I[seq_slot] = seq + 1
    _sift_down(HT, HI, I[at(I, R_FLAGS, 0, G_HEAP_N)], t, seq, entry)


@jit_inline
def _sift_down(HT, HI, n, t, seq, e):
    """Put (t, seq, e) in the hole at the top of a heap of n entries, moving the earlier child up until it fits."""
    i = 0
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        # the earlier child, without a branch: which one is earlier is a coin toss a predictor mostly misses (slot
        # n, past the heap, is within the array (heap_push keeps a slot free): reading it is safe, and the
        # first term discards it)
        a, b = HT[child], HT[child + 1]
        child += (child + 1 < n) & ((b < a) | ((b == a) & (HI[child + 1, 0] < HI[child, 0])))
        if not _before(HT, HI, child, t, seq):
            break
        HT[i], HI[i, 0], HI[i, 1] = HT[child], HI[child, 0], HI[child, 1]
        i = child
    HT[i], HI[i, 0], HI[i, 1] = t, seq, e


# -- the event loop ---------------------------------------------------------------------------------------------------

(OP_YIELD, OP_HOP, OP_PASS, OP_HOLD, OP_COMPUTE, OP_TLS, OP_HS_RTT, OP_CALL, OP_CALL_END, OP_GOSUB, OP_RET,
 OP_CHOOSE, OP_FORK, OP_END_BRANCH, OP_CLIENT_PRE, OP_RTT, OP_EDGE_LAT, OP_EDGE_SERVE, OP_END_REQUEST) = range(19)
OP_WIDTH = 8
# An op whose code has OP_WAIT added first waits for the delay its token carries (``pending``): the lowering's
# OP_YIELD folded into the op after it (sim/fast/fast_program.py fold_waits), so the linked program has no OP_YIELD
OP_WAIT = 32

# token columns (TI: ints, then 4 per frame; TF: floats, then 4 per frame: the call's send time, 3 opening times)
T_PC, T_SP, T_CONN, T_PARENT, T_KIND, T_WAIT, T_OWNER = range(7)
T_FRAMES = 7
TF_PENDING, TF_SENT = 0, 1
TF_FRAMES = 2
FR_RET, FR_BAL, FR_IDX, FR_SESSION = range(4)
KIND_TIMED, KIND_WARM, KIND_BRANCH = 0, 1, 2
# load columns
(L_KIND, L_THREADS, L_CALLS, L_UNIFORM, L_JITTER, L_NOCATCHUP, L_WARM_MODE, L_STARTED, L_FINISHED, L_BEFORE,
 L_IN_WINDOW, L_PHASE, L_WARM_LEFT, L_ARRIVALS, L_CONN_STREAM, L_CONNECTIONS, L_NLAT, L_CLIENT_PC, L_ENDS,
 L_PROFILE, L_POINTS, L_THINNING, L_SAMPLE_ROWS, L_SAMPLES, L_SAMPLE_K, L_STATIONS) = range(26)
LOAD_I = 26
(LF_DURATION, LF_WARMUP, LF_DRAIN, LF_ORIGIN, LF_MEASURE, LF_RATE, LF_MAX_END, LF_NOW, LF_PEAK, LF_WINDOW,
 LF_SAMPLE_START, LF_SAMPLE_END, LF_INTERVAL, LF_TIMER, LF_CLOCK) = range(15)
LOAD_F = 15
LOAD_OPEN, LOAD_FORTIO, LOAD_SEQUENTIAL, LOAD_WRK2 = range(4)
PROFILE_NONE, PROFILE_RAMP, PROFILE_STEPS = range(3)
SAMPLE = -(1 << 40)  # the heap entry of the time series' next window edge (threads and connections are -2 - id)
WARM_NONE, WARM_PARALLEL, WARM_SEQUENTIAL = range(3)
# fortio threads / sequential users
TH_I, TH_STATE, TH_STREAM = range(3)
THF_START, THF_END = range(2)
DONE, REFILL, GROW = range(3)
MARGIN = 64  # latency slots an event may use at most, and the least room kept in the token and heap tables

# Row widths the code fixes (-1: the scenario sets it; read from I's header). A constant width makes ``at`` a load
# and a shift or lea fewer on the hot path (the stations', proxies', cores' and ops' tables); Layout checks them.
WIDTHS = tuple({
    R_STREAM: 2, R_STI: 6, R_QTAG: QUOTA_RING, R_PXI: 10, R_NCORES: 1, R_NCOUNT: 1, R_NETI: 8, R_BALI: 4,
    R_OPS: OP_WIDTH, R_RBAL: 1, R_CHS: 1, R_CHN: 1, R_FKN: 1, R_LOADI: LOAD_I, R_THI: 3, R_FLAGS: FLAGS, R_STF: 18,
    R_QUSED: QUOTA_RING, R_PXF: PX_PEAK + 1, R_SLOW: SLOW_WIDTH, R_CORE: CORE_WIDTH, R_NETF: 3, R_LOADF: LOAD_F, R_THF: 3,
    R_GF: 4, R_PROFILE: 2, R_VIEWS: VIEW_WIDTH}.get(region, -1) for region in range(REGIONS))
# Offsets the code fixes (-1: after these, where the scenario's sizes put it; read from I's header): the one-row
# tables the loop reads on nearly every event (flags, the load's ints and floats, the network's, the global sums)
# and, last of I's, the streams' positions (two per draw), and of F's the node cores' rows, so ``at`` gives a
# constant index without loading the region's offset first. Layout puts them there.
_FIXED_I = (R_FLAGS, R_LOADI, R_NETI, R_STREAM)
_FIXED_F = (R_LOADF, R_NETF, R_GF, R_CORE)
OFFSETS = tuple(
    HEADER + sum(WIDTHS[r] for r in _FIXED_I[:_FIXED_I.index(region)]) if region in _FIXED_I else
    sum(WIDTHS[r] for r in _FIXED_F[:_FIXED_F.index(region)]) if region in _FIXED_F else -1
    for region in range(REGIONS))


@jit
def _li(I, col):
    return at(I, R_LOADI, 0, col)


@jit
def _lf(I, col):
    return at(I, R_LOADF, 0, col)


@jit
def _alloc(I, TI, TF, FREE, kind, conn, owner, pc, parent, sent):
    """A token from the free list (-1 when there is none: flagged, see _overflow)."""
    n_slot = at(I, R_FLAGS, 0, G_FREE_N)
    if I[n_slot] <= 0:
        _overflow(I)
        return -1
    I[n_slot] -= 1
    tok = FREE[I[n_slot]]
    TI[tok, T_PC], TI[tok, T_SP], TI[tok, T_CONN] = pc, 0, conn
    TI[tok, T_PARENT], TI[tok, T_KIND], TI[tok, T_WAIT], TI[tok, T_OWNER] = parent, kind, 0, owner
    TF[tok, TF_PENDING], TF[tok, TF_SENT] = 0.0, sent
    return tok


@jit
def _release(I, FREE, tok):
    n_slot = at(I, R_FLAGS, 0, G_FREE_N)
    FREE[I[n_slot]] = tok
    I[n_slot] += 1


@jit
def _push_frame(I, TI, TF, tok, ret_pc, bal, idx, sent):
    sp = TI[tok, T_SP]
    if T_FRAMES + 4 * sp + 4 > TI.shape[1]:  # deeper than the graph's calls nest: flagged, see _overflow
        _overflow(I)
        return
    c, f = T_FRAMES + 4 * sp, TF_FRAMES + 4 * sp
    TI[tok, c + FR_RET], TI[tok, c + FR_BAL], TI[tok, c + FR_IDX], TI[tok, c + FR_SESSION] = ret_pc, bal, idx, 0
    TF[tok, f] = sent
    TI[tok, T_SP] = sp + 1


@jit
def _call(I, F, B, TI, TF, tok, route, now, pc):
    """System.call's start: the balancer picks the replica, a frame remembers where to come back."""
    b = I[at(I, R_RBAL, route, 0)]
    idx = balance_start(I, F, B, b, TI[tok, T_CONN])
    _push_frame(I, TI, TF, tok, pc + 1, b, idx, now + TF[tok, TF_PENDING])
    return I[at(I, R_RPC, route, idx)]


@jit_inline
def _path_op(I, F, B, TI, TF, tok, code, o, now):
    """Ops along a request's path: hops, proxy passes and holds, app work, TLS sessions (``code``: the op without
    its wait, ``o``: its index)."""
    top = TI[tok, T_SP] - 1
    session = T_FRAMES + 4 * top + FR_SESSION
    pending = TF[tok, TF_PENDING]
    if code == OP_HOP:
        pending = hop(I, F, B, pending, now, I[o + 1], I[o + 2], I[o + 3], I[o + 4] == 1)
    elif code == OP_PASS:
        handshake = I[o + 5] == 1 and TI[tok, session] == 1
        pending = proxy_pass(I, F, B, I[o + 1], I[o + 2], I[o + 7], now, TI[tok, T_CONN], I[o + 3], I[o + 4] == 1,
                             handshake) - now
        if I[o + 6] >= 0:  # a request's first pass: the proxy's clock starts when its worker took it (book's start;
            # a first pass is never a last one, so no span export booked the collector since)
            TF[tok, TF_FRAMES + 4 * top + 1 + I[o + 6]] = F[at(I, R_GF, 0, GF_START)]
            busy = at(I, R_PXF, I[o + 1], PX_OPEN)  # ProxyInstance.open_pool
            F[busy] += 1.0
            peak = at(I, R_PXF, I[o + 1], PX_PEAK)
            if F[busy] > F[peak]:
                F[peak] = F[busy]
    elif code == OP_HOLD:
        hold(I, F, I[o + 1], I[o + 3], TF[tok, TF_FRAMES + 4 * top + 1 + I[o + 2]], now + pending)
        for k in range(4, 6):  # System.call's close_pool calls: the pools this response frees
            if I[o + k] >= 0:
                F[at(I, R_PXF, I[o + k], PX_OPEN)] -= 1.0
    elif code == OP_COMPUTE or code == OP_EDGE_SERVE:  # System.handle: the step's CPU, then the rest holding no core
        if I[o + 3] == 1:  # a request's first compute step at the app (Station.start_request)
            _start_request(I, F, B, I[o + 1], I[o + 4], now)
        drawn, fraction = draw(I, B, I[o + 2]), F[at(I, R_STF, I[o + 1], ST_FRACTION)]
        pending = book(I, F, B, I[o + 1], now, drawn * fraction, -1, 0.0, True, now) - now + drawn * (1.0 - fraction)
    elif code == OP_TLS:  # System.call: the proxy pair's first call makes its mTLS session
        seen = at(I, R_TLS, I[o + 1], 0)
        if I[seen] == 0:
            I[seen] = 1
            TI[tok, session] = 1
    elif code == OP_HS_RTT:
        if TI[tok, session] == 1:
            pending += round_trip(I, F, B, I[o + 1], I[o + 2]) * I[o + 3]
    elif code == OP_EDGE_LAT:
        pending += draw(I, B, I[o + 1])
    elif code == OP_RTT:
        for _ in range(I[o + 3]):
            pending += round_trip(I, F, B, I[o + 1], I[o + 2])
    TF[tok, TF_PENDING] = pending


@jit
def _start_request(I, F, B, st, phase, now):
    """Station.start_request: a garbage collection the request sets off (CollectionClock.request) runs now, on one
    of the app's threads and the node's cores; the first request draws the clock's phase from stream ``phase``."""
    every = F[at(I, R_STF, st, ST_GC_EVERY)]
    if every <= 0.0:
        return
    count = at(I, R_STF, st, ST_GC_COUNT)
    if F[count] == -1.0:  # collection_clock.UNDRAWN
        F[count] = draw(I, B, phase) * every
    F[count] += 1.0
    if F[count] >= every:
        F[count] -= every
        book(I, F, B, st, now, 0.0, -1, F[at(I, R_STF, st, ST_GC_CPU)], False, now)


@jit
def _client_pre(I, F, B, TF, tok, o, now):
    """System.client_request's start: the load generator's overhead and CPU per call on the client's node."""
    pending = draw(I, B, I[o + 1]) if I[o + 1] >= 0 else 0.0
    client_node = I[o + 3]
    if pending > 0:  # on the client's node's cores (a node without declared cores runs it on a core of its own)
        pending = node_run(I, F, client_node, now, pending, now) - now
    if I[o + 2] >= 0:
        before = pending
        pending = node_run(I, F, client_node, now + pending, draw(I, B, I[o + 2]), now) - now
        if I[at(I, R_FLAGS, 0, G_RECORDING)] == 1:
            F[at(I, R_GF, 0, 1)] += pending - before
    TF[tok, TF_PENDING] = pending


@jit
def _choose(I, F, B, table):
    """System._choose: a weighted draw among the step's services; returns the route to call."""
    u = draw(I, B, I[at(I, R_CHS, table, 0)])
    n = I[at(I, R_CHN, table, 0)]
    acc = 0.0
    for k in range(n):
        acc += F[at(I, R_CHW, table, k)]
        if u < acc:
            return I[at(I, R_CHR, table, k)]
    return I[at(I, R_CHR, table, n - 1)]


@jit
def _fork(I, HT, HI, TI, TF, FREE, tok, table, now):
    """Parallel: one branch token per service, all starting now; the parent waits for the last one."""
    n = I[at(I, R_FKN, table, 0)]
    for k in range(n):
        child = _alloc(I, TI, TF, FREE, KIND_BRANCH, TI[tok, T_CONN], -1, I[at(I, R_FKPC, table, k)], tok, now)
        heap_push(I, HT, HI, now, child)
    TI[tok, T_WAIT] = n


@jit
def _runs_next(I, F, HT, TI, FREE, LAT, t, stale):
    """Whether a token due at ``t`` is the next event: strictly before the heap's earliest and the window's next
    change, and the loop would not stop first to refill a stream or grow its tables. ``stale``: the heap's top is
    the running token's own event (heap_replace), so the earliest other one is the earlier of its children."""
    n = I[at(I, R_FLAGS, 0, G_HEAP_N)]
    if stale:
        n -= 1
        if (n > 0 and HT[1] <= t) or (n > 1 and HT[2] <= t):
            return False
    elif n > 0 and HT[0] <= t:
        return False
    if t >= _control_time(I, F) or I[at(I, R_FLAGS, 0, G_LOW)] == 1:
        return False
    return (I[at(I, R_FLAGS, 0, G_FREE_N)] >= I[at(I, R_FLAGS, 0, G_TOKEN_MARGIN)]
            and n + I[at(I, R_FLAGS, 0, G_HEAP_MARGIN)] <= HT.shape[0]
            and I[_li(I, L_NLAT)] + MARGIN <= LAT.shape[0])


@jit_inline
def step(I, F, B, HT, HI, TI, TF, FREE, LAT, tok, now, stale):
    """Run token ``tok`` at time ``now`` until it waits, forks, or ends. ``stale``: the heap's top is still the
    token's own event, which its wait replaces (heap_replace) and its end pops."""
    while True:
        pc = TI[tok, T_PC]
        o = at(I, R_OPS, pc, 0)
        code = I[o]
        if code >= OP_WAIT:  # first wait for the delay the token carries, then run the op
            code -= OP_WAIT
            pending = TF[tok, TF_PENDING]
            if pending > 0:
                TF[tok, TF_PENDING] = 0.0  # the token resumes at this op with nothing to wait for
                if not _runs_next(I, F, HT, TI, FREE, LAT, now + pending, stale):
                    if stale:
                        heap_replace(I, HT, HI, now + pending, tok)
                    else:
                        heap_push(I, HT, HI, now + pending, tok)
                    return
                now += pending  # nothing else happens before: go on without the heap (same order of events)
                F[_lf(I, LF_NOW)] = now
        if code == OP_CALL:
            TI[tok, T_PC] = _call(I, F, B, TI, TF, tok, I[o + 1], now, pc)
        elif code == OP_CHOOSE:
            TI[tok, T_PC] = _call(I, F, B, TI, TF, tok, _choose(I, F, B, I[o + 1]), now, pc)
        elif code == OP_CALL_END:
            sp = TI[tok, T_SP] - 1
            c = T_FRAMES + 4 * sp
            balance_done(I, F, TI[tok, c + FR_BAL], TI[tok, c + FR_IDX], now - TF[tok, TF_FRAMES + 4 * sp])
            TI[tok, T_SP] = sp
            TI[tok, T_PC] = TI[tok, c + FR_RET]
        elif code == OP_GOSUB:
            _push_frame(I, TI, TF, tok, pc + 1, -1, -1, now)
            TI[tok, T_PC] = I[o + 1]
        elif code == OP_RET:
            sp = TI[tok, T_SP] - 1
            TI[tok, T_SP] = sp
            TI[tok, T_PC] = TI[tok, T_FRAMES + 4 * sp + FR_RET]
        elif code == OP_FORK:
            if stale:
                heap_pop(I, HT, HI)
            TI[tok, T_PC] = pc + 1
            _fork(I, HT, HI, TI, TF, FREE, tok, I[o + 1], now)
            return
        elif code == OP_END_BRANCH:
            if stale:
                heap_pop(I, HT, HI)
            parent = TI[tok, T_PARENT]
            TI[parent, T_WAIT] -= 1
            if TI[parent, T_WAIT] == 0:
                heap_push(I, HT, HI, now, parent)
            _release(I, FREE, tok)
            return
        elif code == OP_END_REQUEST:
            if stale:
                heap_pop(I, HT, HI)
            _request_done(I, F, B, HT, HI, TI, TF, FREE, LAT, tok, now)
            return
        elif code == OP_CLIENT_PRE:
            _client_pre(I, F, B, TF, tok, o, now)
            TI[tok, T_PC] = pc + 1
        else:
            _path_op(I, F, B, TI, TF, tok, code, o, now)
            TI[tok, T_PC] = pc + 1


# -- load generators ----------------------------------------------------------------------------------------------

@jit
def _request_done(I, F, B, HT, HI, TI, TF, FREE, LAT, tok, now):
    """A request's answer is back at the client: record it (timed calls) and let its load generator go on."""
    kind, owner, sent = TI[tok, T_KIND], TI[tok, T_OWNER], TF[tok, TF_SENT]
    _release(I, FREE, tok)
    if kind == KIND_WARM:
        _warm_done(I, F, HT, HI, TI, TF, FREE, owner, now)
        return
    load = I[_li(I, L_KIND)]
    if load == LOAD_WRK2:
        _wrk2_done(I, F, HT, HI, LAT, owner, sent, now)
        return
    I[_li(I, L_FINISHED)] += 1
    if sent >= F[_lf(I, LF_MEASURE)]:
        _record(I, LAT, now - sent, sent)
    if load == LOAD_FORTIO:
        _fortio_next(I, F, B, HT, HI, owner, now)
    elif load == LOAD_SEQUENTIAL:
        heap_push(I, HT, HI, now + draw(I, B, I[at(I, R_THI, owner, TH_STREAM)]), -2 - owner)


@jit
def _record(I, LAT, latency, at_time):
    """A measured answer: its latency, and the time the series files it under (sent, or wrk2's answer time)."""
    n = _li(I, L_NLAT)
    if I[n] >= LAT.shape[0]:
        _overflow(I)
        return
    LAT[I[n], 0] = latency
    LAT[I[n], 1] = at_time
    I[n] += 1


@jit
def _send(I, TI, TF, FREE, owner, conn, sent):
    """client_request: a new timed request (latency counted from ``sent``; wrk2: the intended send time); the
    caller returns its token to the loop, which runs it at once (no other event comes between)."""
    I[_li(I, L_STARTED)] += 1
    return _alloc(I, TI, TF, FREE, KIND_TIMED, conn, owner, I[_li(I, L_CLIENT_PC)], -1, sent)


@jit
def _warm_done(I, F, HT, HI, TI, TF, FREE, tid, now):
    """fortio's warm-up call of thread ``tid`` is back: the next one (sequential), or the timed run starts."""
    left = _li(I, L_WARM_LEFT)
    I[left] -= 1
    if I[_li(I, L_WARM_MODE)] == WARM_SEQUENTIAL and I[left] > 0:
        tok = _alloc(I, TI, TF, FREE, KIND_WARM, tid + 1, tid + 1, I[_li(I, L_CLIENT_PC)], -1, now)
        heap_push(I, HT, HI, now, tok)
    elif I[left] == 0:
        _open_window(I, F, HT, HI, now)


@jit
def _open_window(I, F, HT, HI, now):
    """The load's timed run starts now: measure from now + warm-up; start the fortio threads."""
    F[_lf(I, LF_ORIGIN)] = now
    F[_lf(I, LF_MEASURE)] = now + F[_lf(I, LF_WARMUP)]
    if F[_lf(I, LF_WARMUP)] == 0.0:
        I[at(I, R_FLAGS, 0, G_RECORDING)] = 1
    I[_li(I, L_PHASE)] = 1
    if I[_li(I, L_KIND)] == LOAD_FORTIO:
        for tid in range(I[_li(I, L_THREADS)]):
            heap_push(I, HT, HI, now, -2 - tid)
        _start_samples(I, F, HT, HI)  # after the threads, as engine.py starts its sampler after the load


@jit
def _fortio_wake(I, F, HT, HI, TI, TF, FREE, tid, now):
    """_fortio_thread: the thread starts (uniform offset), or wakes from its pacing sleep and sends (returns the
    request's token, or -1)."""
    if I[at(I, R_THI, tid, TH_STATE)] == 0:
        I[at(I, R_THI, tid, TH_STATE)] = 1
        F[at(I, R_THF, tid, THF_START)] = now
        F[at(I, R_THF, tid, THF_END)] = now + F[_lf(I, LF_DURATION)]
        if I[_li(I, L_UNIFORM)] == 1:
            delay = (1.0 / F[_lf(I, LF_RATE)]) * tid / I[_li(I, L_THREADS)]
            F[at(I, R_THF, tid, THF_START)] += delay
            if delay > 0:
                heap_push(I, HT, HI, now + delay, -2 - tid)
                return -1
    i, n = I[at(I, R_THI, tid, TH_I)], I[_li(I, L_CALLS)]
    if now > F[at(I, R_THF, tid, THF_END)] and i >= 2 and i != n - 1:
        _thread_ends(I, F, now)
        return -1
    return _send(I, TI, TF, FREE, tid, tid, now)


@jit
def _thread_ends(I, F, now):
    F[_lf(I, LF_MAX_END)] = max(F[_lf(I, LF_MAX_END)], now)
    I[_li(I, L_ENDS)] += 1


@jit
def _fortio_next(I, F, B, HT, HI, tid, now):
    """After a call: fortio's pacing (target time of call i, catch-up or -nocatchup, -jitter)."""
    n = I[_li(I, L_CALLS)]
    rate = F[_lf(I, LF_RATE)]
    count = at(I, R_THI, tid, TH_I)
    while True:
        I[count] += 1
        i = I[count]
        if i >= n:
            _thread_ends(I, F, now)
            return
        target = (i + i / (n - 1)) / rate
        sleep = target - (now - F[at(I, R_THF, tid, THF_START)])
        if I[_li(I, L_NOCATCHUP)] == 1 and sleep < 0:
            continue
        jitter = I[_li(I, L_JITTER)]
        if jitter >= 0 and sleep > 0:
            sleep += (2.0 * draw(I, B, jitter) - 1.0) * 0.1 * sleep
        heap_push(I, HT, HI, now + max(sleep, 0.0), -2 - tid)
        return


@jit
def _arrival(I, F, B, HT, HI, TI, TF, FREE, now):
    """An open load's Poisson arrival: a request on a random connection (its token, or -1), and the next
    arrival."""
    if now >= F[_lf(I, LF_DURATION)]:
        return -1
    # the next arrival first: the request may run on past the current time (step's no-heap path) only up to it
    heap_push(I, HT, HI, now + draw(I, B, I[_li(I, L_ARRIVALS)]), -1)
    if I[_li(I, L_PROFILE)] != PROFILE_NONE:  # thinning: arrivals at the peak rate, kept with rate(t) / peak
        peak = F[_lf(I, LF_PEAK)]
        if draw(I, B, I[_li(I, L_THINNING)]) * peak > _rate_at(I, F, now):
            return -1
    connections = I[_li(I, L_CONNECTIONS)]
    conn = min(int(draw(I, B, I[_li(I, L_CONN_STREAM)]) * connections), connections - 1)
    return _send(I, TI, TF, FREE, -1, conn, now)


@jit
def _rate_at(I, F, t):
    """RateProfile.rate_at: linear between points (ramp) or held until the next one (steps)."""
    n = I[_li(I, L_POINTS)]
    if t <= F[at(I, R_PROFILE, 0, 0)]:
        return F[at(I, R_PROFILE, 0, 1)]
    for k in range(n - 1):
        t0, r0 = F[at(I, R_PROFILE, k, 0)], F[at(I, R_PROFILE, k, 1)]
        t1, r1 = F[at(I, R_PROFILE, k + 1, 0)], F[at(I, R_PROFILE, k + 1, 1)]
        if t < t1:
            if I[_li(I, L_PROFILE)] == PROFILE_STEPS:
                return r0
            return r0 + (r1 - r0) * (t - t0) / (t1 - t0)
    return F[at(I, R_PROFILE, n - 1, 1)]


@jit
def _wrk2_wake(I, F, HT, HI, TI, TF, FREE, conn, now):
    """_wrk2_connection's loop: wait on the event loop's timer until the intended send time, or send at once when
    behind (Wrk2Pacer.wait; returns the request's token, or -1); the connection stops at the end of the run."""
    if now >= F[_lf(I, LF_DURATION)]:
        return -1
    intended = F[at(I, R_THF, conn, THF_START)] + I[at(I, R_THI, conn, TH_I)] * F[_lf(I, LF_INTERVAL)]
    if intended - now >= F[_lf(I, LF_CLOCK)]:  # less than one clock tick ahead is on time
        timer = F[_lf(I, LF_TIMER)]
        if timer <= 0:
            wait = intended - now
        else:  # C round(w + 0.5) ticks; float noise must not move a whole tick (numpy's rounding to 9 digits)
            wait = timer * math.floor(np.round((intended - now) / timer, 9) + 1.0)
        heap_push(I, HT, HI, now + wait, -2 - conn)
        return -1
    return _send(I, TI, TF, FREE, conn, conn, intended)


@jit
def _wrk2_done(I, F, HT, HI, LAT, conn, intended, now):
    """An answer on a wrk2 connection: counted, timed from its intended send time and filed under its arrival
    (unread if the run ended while it was on its way); then the connection goes on at once."""
    I[at(I, R_THI, conn, TH_I)] += 1
    if now > F[_lf(I, LF_DURATION)]:
        return
    I[_li(I, L_FINISHED)] += 1
    if now >= F[_lf(I, LF_MEASURE)]:
        _record(I, LAT, now - intended, now)
    heap_push(I, HT, HI, now, -2 - conn)


@jit
def _start_samples(I, F, HT, HI):
    """The time series' window edges (window_series.window_edges): every ``window`` from the warm-up's end, the
    last at the end of the run; at each, every station's booked busy time and jobs (CpuSampler)."""
    window = F[_lf(I, LF_WINDOW)]
    if window <= 0:
        return
    start = F[_lf(I, LF_ORIGIN)] + F[_lf(I, LF_WARMUP)]
    end = F[_lf(I, LF_ORIGIN)] + F[_lf(I, LF_DURATION)]
    count = max(1, int(math.ceil((end - start) / window - 1e-9)))
    I[_li(I, L_SAMPLES)] = min(count, I[_li(I, L_SAMPLE_ROWS)] - 1)
    F[_lf(I, LF_SAMPLE_START)], F[_lf(I, LF_SAMPLE_END)] = start, end
    heap_push(I, HT, HI, start, SAMPLE)


@jit
def _sample(I, F, HT, HI):
    """Snapshot at window edge k, then wait for edge k + 1."""
    k = I[_li(I, L_SAMPLE_K)]
    for st in range(I[_li(I, L_STATIONS)]):
        total = 0.0
        for j in range(I[at(I, R_STI, st, ST_SERVERS)]):
            total += F[at(I, R_BUSY, st, j)]
        F[at(I, R_SAMPLES, k, 2 * st)] = total
        F[at(I, R_SAMPLES, k, 2 * st + 1)] = I[at(I, R_STI, st, ST_JOBS)]
    k += 1
    I[_li(I, L_SAMPLE_K)] = k
    count = I[_li(I, L_SAMPLES)]
    if k < count:
        heap_push(I, HT, HI, F[_lf(I, LF_SAMPLE_START)] + F[_lf(I, LF_WINDOW)] * k, SAMPLE)
    elif k == count:
        heap_push(I, HT, HI, F[_lf(I, LF_SAMPLE_END)], SAMPLE)


@jit
def _timer(I, F, HT, HI, TI, TF, FREE, entry, now):
    """A timer fired: the series' next window edge, a fortio thread's or a wrk2 connection's wake-up, or a
    sequential user's next request (they request, think and repeat until the run ends); returns the token of a
    request it sends, or -1."""
    if entry == SAMPLE:
        _sample(I, F, HT, HI)
        return -1
    kind = I[_li(I, L_KIND)]
    if kind == LOAD_FORTIO:
        return _fortio_wake(I, F, HT, HI, TI, TF, FREE, -2 - entry, now)
    if kind == LOAD_WRK2:
        return _wrk2_wake(I, F, HT, HI, TI, TF, FREE, -2 - entry, now)
    if now < F[_lf(I, LF_DURATION)]:
        return _send(I, TI, TF, FREE, -2 - entry, -2 - entry, now)
    return -1


@jit
def start_load(I, F, B, HT, HI, TI, TF, FREE):
    """Time 0: fortio's warm-up calls (or its timed run), the first arrival, or every user's first request."""
    kind, mode, threads = I[_li(I, L_KIND)], I[_li(I, L_WARM_MODE)], I[_li(I, L_THREADS)]
    if kind == LOAD_FORTIO and mode != WARM_NONE:
        I[_li(I, L_WARM_LEFT)] = threads
        for tid in range(threads if mode == WARM_PARALLEL else 1):
            tok = _alloc(I, TI, TF, FREE, KIND_WARM, tid, tid, I[_li(I, L_CLIENT_PC)], -1, 0.0)
            heap_push(I, HT, HI, 0.0, tok)
        return
    _open_window(I, F, HT, HI, 0.0)
    if kind == LOAD_OPEN:
        heap_push(I, HT, HI, draw(I, B, I[_li(I, L_ARRIVALS)]), -1)
    elif kind == LOAD_SEQUENTIAL or kind == LOAD_WRK2:
        for user in range(threads):  # a wrk2 connection waits for its connect (THF_START) on its timer
            heap_push(I, HT, HI, F[at(I, R_THF, user, THF_START)] if kind == LOAD_WRK2 else 0.0, -2 - user)
    if kind != LOAD_FORTIO:
        _start_samples(I, F, HT, HI)


# -- the loop -----------------------------------------------------------------------------------------------------

@jit
def _control_time(I, F):
    """When the measurement window next changes (after the warm-up, at its end, after the drain)."""
    phase, origin = I[_li(I, L_PHASE)], F[_lf(I, LF_ORIGIN)]
    if phase == 1:
        return origin + F[_lf(I, LF_WARMUP)]
    if phase == 2:
        return origin + F[_lf(I, LF_DURATION)]
    if phase == 3:
        return origin + F[_lf(I, LF_DURATION)] + F[_lf(I, LF_DRAIN)]
    return np.inf


@jit
def _control(I, F, t, proxies):
    """engine.run_replication's window: recording and hold windows on, off, and the end of the drain."""
    phase = I[_li(I, L_PHASE)]
    if phase == 1:
        I[at(I, R_FLAGS, 0, G_RECORDING)] = 1
        for px in range(proxies):
            F[at(I, R_PXF, px, PX_WIN0)] = t
            F[at(I, R_PXF, px, PX_WIN1)] = F[_lf(I, LF_ORIGIN)] + F[_lf(I, LF_DURATION)]
            F[at(I, R_PXF, px, PX_WINSET)] = 1.0
        I[_li(I, L_BEFORE)] = I[_li(I, L_STARTED)] if F[_lf(I, LF_WARMUP)] > 0 else 0
    elif phase == 2:
        I[_li(I, L_IN_WINDOW)] = I[_li(I, L_STARTED)] - I[_li(I, L_BEFORE)]
        I[at(I, R_FLAGS, 0, G_RECORDING)] = 0
    I[_li(I, L_PHASE)] = phase + 1
    F[_lf(I, LF_NOW)] = t


@jit
def run(I, F, B, HT, HI, TI, TF, FREE, LAT, proxies):
    """Process events until the drain ends (DONE), a stream runs low (REFILL) or room runs short (GROW); a table
    found full all the same (G_OVERFLOW) returns as REFILL does."""
    low, heap_n, free_n, nlat = (at(I, R_FLAGS, 0, G_LOW), at(I, R_FLAGS, 0, G_HEAP_N), at(I, R_FLAGS, 0, G_FREE_N),
                                 _li(I, L_NLAT))
    token_margin, heap_margin = I[at(I, R_FLAGS, 0, G_TOKEN_MARGIN)], I[at(I, R_FLAGS, 0, G_HEAP_MARGIN)]
    if I[at(I, R_FLAGS, 0, G_STARTED)] == 0:  # one entry point: one compiled library to load from the cache
        I[at(I, R_FLAGS, 0, G_STARTED)] = 1
        start_load(I, F, B, HT, HI, TI, TF, FREE)
    while True:
        if I[low] == 1:
            return REFILL
        if I[free_n] < token_margin or I[heap_n] + heap_margin > HT.shape[0] or I[nlat] + MARGIN > LAT.shape[0]:
            return GROW
        t_control = _control_time(I, F)
        if I[heap_n] == 0 or HT[0] >= t_control:
            if t_control == np.inf:
                return DONE
            _control(I, F, t_control, proxies)
            if I[_li(I, L_PHASE)] == 4:
                return DONE
            continue
        now = HT[0]
        entry = HI[0, 1]
        F[_lf(I, LF_NOW)] = now
        stale = entry >= 0  # a token's event stays on top while it runs: its next wait replaces it (heap_replace)
        if not stale:
            heap_pop(I, HT, HI)
            if entry == -1:
                entry = _arrival(I, F, B, HT, HI, TI, TF, FREE, now)
            else:
                entry = _timer(I, F, HT, HI, TI, TF, FREE, entry, now)
        if entry >= 0:  # step's one call site: inlined here
            step(I, F, B, HT, HI, TI, TF, FREE, LAT, entry, now, stale)
