"""The compiled engine's event loop: requests as tokens running a small program of ops (sim/fast_program.py),
the load generators, and the measurement window.

A token is one request (or one branch of a fork) with a program counter, the delay it carries to its next station
(``pending``, as in sim/system.py) and a stack of call frames. A token runs its ops until it must wait
(``OP_YIELD`` with pending > 0): it goes on the event heap and resumes there, in time order, so every station is
booked in the order of arrivals, as in the SimPy engine. The loop stops and returns to Python when a random stream
runs low (Python refills it from the same named generator) or the token pool or heap runs short (Python grows them):
all state lives in arrays, so the loop simply continues where it was.
"""

from __future__ import annotations

import numpy as np

from meshsim.sim.fast_kernels import (G_FREE_N, G_HEAP_N, G_LOW, G_RECORDING, G_STARTED, PX_WIN0, PX_WIN1,
                                      PX_WINSET, R_CHN, R_CHR, R_CHS, R_CHW, R_FKN, R_FKPC, R_FLAGS, R_GF, R_LOADF,
                                      R_LOADI, R_OPS, R_PXF, R_RBAL, R_RPC, R_THF, R_THI, R_TLS, at, balance_done,
                                      balance_start, book, draw, heap_pop, heap_push, hold, hop, node_run,
                                      jit, proxy_pass, round_trip)

(OP_YIELD, OP_HOP, OP_PASS, OP_HOLD, OP_COMPUTE, OP_TLS, OP_HS_RTT, OP_CALL, OP_CALL_END, OP_GOSUB, OP_RET,
 OP_CHOOSE, OP_FORK, OP_END_BRANCH, OP_CLIENT_PRE, OP_RTT, OP_EDGE_LAT, OP_EDGE_SERVE, OP_END_REQUEST) = range(19)
OP_WIDTH = 8

# token columns (TI: ints, then 4 per frame; TF: floats, then 4 per frame: the call's send time, 3 opening times)
T_PC, T_SP, T_CONN, T_PARENT, T_KIND, T_WAIT, T_OWNER = range(7)
T_FRAMES = 7
TF_PENDING, TF_SENT = 0, 1
TF_FRAMES = 2
FR_RET, FR_BAL, FR_IDX, FR_SESSION = range(4)
KIND_TIMED, KIND_WARM, KIND_BRANCH = 0, 1, 2
# load columns
(L_KIND, L_THREADS, L_CALLS, L_UNIFORM, L_JITTER, L_NOCATCHUP, L_WARM_MODE, L_STARTED, L_FINISHED, L_BEFORE,
 L_IN_WINDOW, L_PHASE, L_WARM_LEFT, L_ARRIVALS, L_CONN_STREAM, L_CONNECTIONS, L_NLAT, L_CLIENT_PC, L_ENDS) = range(19)
(LF_DURATION, LF_WARMUP, LF_DRAIN, LF_ORIGIN, LF_MEASURE, LF_RATE, LF_MAX_END, LF_NOW) = range(8)
LOAD_OPEN, LOAD_FORTIO, LOAD_SEQUENTIAL = range(3)
WARM_NONE, WARM_PARALLEL, WARM_SEQUENTIAL = range(3)
# fortio threads / sequential users
TH_I, TH_STATE, TH_STREAM = range(3)
THF_START, THF_END = range(2)
DONE, REFILL, GROW = range(3)
MARGIN = 64  # free tokens, heap slots and latency slots an event may use at most


@jit
def _li(I, col):
    return at(I, R_LOADI, 0, col)


@jit
def _lf(I, col):
    return at(I, R_LOADF, 0, col)


@jit
def _alloc(I, TI, TF, FREE, kind, conn, owner, pc, parent, sent):
    n_slot = at(I, R_FLAGS, 0, G_FREE_N)
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
def _push_frame(TI, TF, tok, ret_pc, bal, idx, sent):
    sp = TI[tok, T_SP]
    c, f = T_FRAMES + 4 * sp, TF_FRAMES + 4 * sp
    TI[tok, c + FR_RET], TI[tok, c + FR_BAL], TI[tok, c + FR_IDX], TI[tok, c + FR_SESSION] = ret_pc, bal, idx, 0
    TF[tok, f] = sent
    TI[tok, T_SP] = sp + 1


@jit
def _call(I, F, B, TI, TF, tok, route, now, pc):
    """System.call's start: the balancer picks the replica, a frame remembers where to come back."""
    b = I[at(I, R_RBAL, route, 0)]
    idx = balance_start(I, F, B, b)
    _push_frame(TI, TF, tok, pc + 1, b, idx, now + TF[tok, TF_PENDING])
    return I[at(I, R_RPC, route, idx)]


@jit
def _path_op(I, F, B, TI, TF, tok, o, now):
    """Ops along a request's path: hops, proxy passes and holds, app work, TLS sessions (``o``: the op's index)."""
    code = I[o]
    top = TI[tok, T_SP] - 1
    session = T_FRAMES + 4 * top + FR_SESSION
    pending = TF[tok, TF_PENDING]
    if code == OP_HOP:
        pending = hop(I, F, B, pending, now, I[o + 1], I[o + 2], I[o + 3], I[o + 4] == 1)
    elif code == OP_PASS:
        handshake = I[o + 5] == 1 and TI[tok, session] == 1
        pending = proxy_pass(I, F, B, I[o + 1], I[o + 2], now, TI[tok, T_CONN], I[o + 3], I[o + 4] == 1,
                             handshake) - now
        if I[o + 6] >= 0:
            TF[tok, TF_FRAMES + 4 * top + 1 + I[o + 6]] = now
    elif code == OP_HOLD:
        hold(I, F, I[o + 1], TF[tok, TF_FRAMES + 4 * top + 1 + I[o + 2]], now + pending)
    elif code == OP_COMPUTE or code == OP_EDGE_SERVE:
        pending = book(I, F, B, I[o + 1], now, draw(I, B, I[o + 2]), -1, 0.0, True) - now
    elif code == OP_TLS:
        seen = at(I, R_TLS, I[o + 1], TI[tok, T_CONN])
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
def _runs_next(I, F, HT, TI, FREE, LAT, t):
    """Whether a token due at ``t`` is the next event: strictly before the heap's earliest and the window's next
    change, and the loop would not stop first to refill a stream or grow its tables."""
    n = I[at(I, R_FLAGS, 0, G_HEAP_N)]
    if n > 0 and HT[0] <= t:
        return False
    if t >= _control_time(I, F) or I[at(I, R_FLAGS, 0, G_LOW)] == 1:
        return False
    return (I[at(I, R_FLAGS, 0, G_FREE_N)] >= MARGIN and n + MARGIN <= HT.shape[0]
            and I[_li(I, L_NLAT)] + MARGIN <= LAT.shape[0])


@jit
def step(I, F, B, HT, HI, TI, TF, FREE, LAT, tok, now):
    """Run token ``tok`` at time ``now`` until it waits, forks, or ends."""
    while True:
        pc = TI[tok, T_PC]
        o = at(I, R_OPS, pc, 0)
        code = I[o]
        if code == OP_YIELD:
            TI[tok, T_PC] = pc + 1
            pending = TF[tok, TF_PENDING]
            if pending > 0:
                TF[tok, TF_PENDING] = 0.0
                if not _runs_next(I, F, HT, TI, FREE, LAT, now + pending):
                    heap_push(I, HT, HI, now + pending, tok)
                    return
                now += pending  # nothing else happens before: go on without the heap (same order of events)
                F[_lf(I, LF_NOW)] = now
        elif code == OP_CALL:
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
            _push_frame(TI, TF, tok, pc + 1, -1, -1, now)
            TI[tok, T_PC] = I[o + 1]
        elif code == OP_RET:
            sp = TI[tok, T_SP] - 1
            TI[tok, T_SP] = sp
            TI[tok, T_PC] = TI[tok, T_FRAMES + 4 * sp + FR_RET]
        elif code == OP_FORK:
            TI[tok, T_PC] = pc + 1
            _fork(I, HT, HI, TI, TF, FREE, tok, I[o + 1], now)
            return
        elif code == OP_END_BRANCH:
            parent = TI[tok, T_PARENT]
            TI[parent, T_WAIT] -= 1
            if TI[parent, T_WAIT] == 0:
                heap_push(I, HT, HI, now, parent)
            _release(I, FREE, tok)
            return
        elif code == OP_END_REQUEST:
            _request_done(I, F, B, HT, HI, TI, TF, FREE, LAT, tok, now)
            return
        elif code == OP_CLIENT_PRE:
            _client_pre(I, F, B, TF, tok, o, now)
            TI[tok, T_PC] = pc + 1
        else:
            _path_op(I, F, B, TI, TF, tok, o, now)
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
    I[_li(I, L_FINISHED)] += 1
    if sent >= F[_lf(I, LF_MEASURE)]:
        n = _li(I, L_NLAT)
        LAT[I[n]] = now - sent
        I[n] += 1
    load = I[_li(I, L_KIND)]
    if load == LOAD_FORTIO:
        _fortio_next(I, F, B, HT, HI, owner, now)
    elif load == LOAD_SEQUENTIAL:
        heap_push(I, HT, HI, now + draw(I, B, I[at(I, R_THI, owner, TH_STREAM)]), -2 - owner)


@jit
def _send(I, F, B, HT, HI, TI, TF, FREE, LAT, owner, conn, now):
    """client_request: a new timed request, run at once (the caller is not inside another token's step)."""
    I[_li(I, L_STARTED)] += 1
    tok = _alloc(I, TI, TF, FREE, KIND_TIMED, conn, owner, I[_li(I, L_CLIENT_PC)], -1, now)
    step(I, F, B, HT, HI, TI, TF, FREE, LAT, tok, now)


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


@jit
def _fortio_wake(I, F, B, HT, HI, TI, TF, FREE, LAT, tid, now):
    """_fortio_thread: the thread starts (uniform offset), or wakes from its pacing sleep and sends."""
    if I[at(I, R_THI, tid, TH_STATE)] == 0:
        I[at(I, R_THI, tid, TH_STATE)] = 1
        F[at(I, R_THF, tid, THF_START)] = now
        F[at(I, R_THF, tid, THF_END)] = now + F[_lf(I, LF_DURATION)]
        if I[_li(I, L_UNIFORM)] == 1:
            delay = (1.0 / F[_lf(I, LF_RATE)]) * tid / I[_li(I, L_THREADS)]
            F[at(I, R_THF, tid, THF_START)] += delay
            if delay > 0:
                heap_push(I, HT, HI, now + delay, -2 - tid)
                return
    i, n = I[at(I, R_THI, tid, TH_I)], I[_li(I, L_CALLS)]
    if now > F[at(I, R_THF, tid, THF_END)] and i >= 2 and i != n - 1:
        _thread_ends(I, F, now)
        return
    _send(I, F, B, HT, HI, TI, TF, FREE, LAT, tid, tid, now)


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
def _arrival(I, F, B, HT, HI, TI, TF, FREE, LAT, now):
    """An open load's Poisson arrival: a request on a random connection, and the next arrival."""
    if now >= F[_lf(I, LF_DURATION)]:
        return
    connections = I[_li(I, L_CONNECTIONS)]
    conn = min(int(draw(I, B, I[_li(I, L_CONN_STREAM)]) * connections), connections - 1)
    # the next arrival first: the request may run on past the current time (step's no-heap path) only up to it
    heap_push(I, HT, HI, now + draw(I, B, I[_li(I, L_ARRIVALS)]), -1)
    _send(I, F, B, HT, HI, TI, TF, FREE, LAT, -1, conn, now)


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
    elif kind == LOAD_SEQUENTIAL:
        for user in range(threads):
            heap_push(I, HT, HI, 0.0, -2 - user)


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
    """Process events until the drain ends (DONE), a stream runs low (REFILL) or room runs short (GROW)."""
    low, heap_n, free_n, nlat = (at(I, R_FLAGS, 0, G_LOW), at(I, R_FLAGS, 0, G_HEAP_N), at(I, R_FLAGS, 0, G_FREE_N),
                                 _li(I, L_NLAT))
    kind = I[_li(I, L_KIND)]
    if I[at(I, R_FLAGS, 0, G_STARTED)] == 0:  # one entry point: one compiled library to load from the cache
        I[at(I, R_FLAGS, 0, G_STARTED)] = 1
        start_load(I, F, B, HT, HI, TI, TF, FREE)
    while True:
        if I[low] == 1:
            return REFILL
        if I[free_n] < MARGIN or I[heap_n] + MARGIN > HT.shape[0] or I[nlat] + MARGIN > LAT.shape[0]:
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
        entry = heap_pop(I, HT, HI)
        F[_lf(I, LF_NOW)] = now
        if entry >= 0:
            step(I, F, B, HT, HI, TI, TF, FREE, LAT, entry, now)
        elif entry == -1:
            _arrival(I, F, B, HT, HI, TI, TF, FREE, LAT, now)
        elif kind == LOAD_FORTIO:
            _fortio_wake(I, F, B, HT, HI, TI, TF, FREE, LAT, -2 - entry, now)
        elif now < F[_lf(I, LF_DURATION)]:  # a sequential user: request, think, repeat until the run ends
            _send(I, F, B, HT, HI, TI, TF, FREE, LAT, -2 - entry, -2 - entry, now)
