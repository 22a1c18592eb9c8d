"""Service centres computed at arrival time.

Every station here serves first-come-first-served without preemption, so a job's start time is known when it
arrives: ``start = max(arrival, when its server frees up)`` (Lindley's recursion, and for c servers the
Kiefer-Wolfowitz workload vector). SimPy delivers arrivals in time order, so one timeout per visit gives the exact
FCFS queue. Two dispatch disciplines: *pinned* (each connection is bound to one worker for its life: W separate
FIFO queues, Envoy) and *shared* (one queue feeding W workers: tokio work stealing, the Go scheduler, app cores).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Callable

from meshsim.sim.engine.collection_clock import CollectionClock
from meshsim.tick_hold import TickHold
from meshsim.wakeup import WakeUp

CFS_PERIOD = 0.1  # Linux CFS bandwidth period (cpu.cfs_period_us default 100 ms)
NODE_PERIOD = 1e-3  # a node's cores shared at scheduler granularity (~1 ms timeslices)
PRUNE_AT = 32  # booked intervals a core keeps before it forgets those that ended before the clock


class CpuQuota:
    """cgroup CPU limit: at most ``cores * period`` CPU seconds per 100 ms period, shared by the process's threads.

    Work that finds the period's budget spent waits for the next period (CFS throttling: the tail-latency cliff of
    CPU-limited sidecars). Budgets are booked in arrival order, which can differ slightly from execution order
    across workers; the CPU booked per period is exact.
    """

    def __init__(self, cores: float, period: float = CFS_PERIOD) -> None:
        self.budget = cores * period
        self.period = period
        self.used: dict[int, float] = {}

    def run(self, start: float, work: float) -> float:
        t, remaining = start, work
        while remaining > 1e-12:
            p = int(t // self.period)
            period_end = (p + 1) * self.period
            if period_end - t <= 1e-12:  # t sits on a boundary up to rounding: it belongs to the next period
                p += 1
                period_end = (p + 1) * self.period
            available = self.budget - self.used.get(p, 0.0)
            if available <= 1e-12:
                t = period_end
                continue
            take = min(remaining, available, period_end - t)
            self.used[p] = self.used.get(p, 0.0) + take
            t += take
            remaining -= take
        if len(self.used) > 64:  # forget periods long past
            horizon = int(start // self.period) - 8
            for old in [k for k in self.used if k < horizon]:
                del self.used[old]
        return t


class NodeCores:
    """A node's cores: every CPU consumer placed on the node (apps, proxies, the load generator, the kernel's network
    stack) runs its bursts on them first-come-first-served, without preemption, on the core that can start it first.

    Short bursts (tens of microseconds) run to completion on Linux, so a burst of c requests arriving together on a
    W-core node finishes in waves: the k-th at ceil(k/W) x its cost (M/M/c for Poisson arrivals). Bookings can be
    made ahead of time (a hop's receive-side CPU is booked when the request leaves the sender), so each core keeps its
    booked intervals and a booking takes the earliest gap that fits; booked in time order, this is exactly the
    Kiefer-Wolfowitz c-server FCFS queue. A fractional core count (``cores: 1.5``) is ceil(cores) cores each running
    at cores/ceil(cores) speed: the same capacity.

    With ``per_core_queues`` (Linux's per-CPU run queues) a burst that finds no core idle is queued on one core chosen
    at its wake-up, which cannot know which core frees first: the next core in turn (a deterministic stand-in for the
    kernel's choice between the wakee's previous core and the waker's). It waits there even when another core frees
    sooner: the measured kernel placed woken threads so (measurements/lab-runqueue-2026-11-27).

    With ``tick_hold`` a share of the bursts that find no core idle first wait for the scheduler's next tick (a
    thread with a backlog kept the core; meshsim/tick_hold.py), counted deterministically: each such burst adds the
    share to ``owed`` and the one that takes it past a whole waits.
    """

    window = 0.0  # a woken thread first (sim/engine/woken_first_cores.py): its load's window; 0 here, where it is not

    def __init__(self, cores: float, clock: Callable[[], float] = lambda: 0.0, per_core_queues: bool = False,
                 tick_hold: TickHold | None = None) -> None:
        if not cores > 0:
            raise ValueError(f"a node needs cores > 0, got {cores}")
        n = math.ceil(cores)
        self.slowdown = n / cores
        # per core: the starts and the ends of its booked intervals, sorted (disjoint, so both ascend)
        self.starts: list[list[float]] = [[] for _ in range(n)]
        self.ends: list[list[float]] = [[] for _ in range(n)]
        # per core: when its last booked interval ends (-inf: nothing booked); the idle-core test reads only this
        self.last = [-math.inf] * n
        # per core: no booking begins before this (the end of intervals forgotten from a long backlog)
        self.floor = [0.0] * n
        self.clock = clock  # the simulation's now: intervals that ended before it are forgotten
        self.recording = False  # while on, bookings add to busy (System.set_recording: the measurement window)
        self.busy = 0.0  # core-seconds booked while recording, in units of the ceil(cores) cores
        self.turn = 0 if per_core_queues else -1  # per-core queues: the core the next queued burst goes to
        self.tick_hold = tick_hold if tick_hold is not None and tick_hold.share > 0.0 else None
        self.owed = 0.0  # tick holds: the shares added by bursts that found no core idle, less the holds made

    def utilization(self, window: float) -> float:
        """The share of the node's capacity the bookings of a ``window`` seconds long measurement took."""
        return self.busy / (len(self.last) * window)

    @property
    def cores(self) -> list[tuple[list[float], list[float]]]:
        """Per core: (starts, ends) of its booked intervals."""
        return list(zip(self.starts, self.ends))

    def run(self, start: float, work: float) -> float:
        """When ``work`` CPU seconds ready at ``start`` finish."""
        if work <= 0.0:
            return start
        return self.place(start, self.booked(work))

    def booked(self, work: float) -> float:
        """``work`` CPU seconds as core time (a fractional node's cores run slower), counted busy while recording."""
        if self.slowdown != 1.0:
            work *= self.slowdown
        if self.recording:
            self.busy += work
        return work

    def run_woken(self, start: float, work: float) -> float:
        """The same for a burst of a thread that slept: first come, first served like any other here
        (sim/engine/woken_first_cores.py runs it first)."""
        return self.run(start, work)

    def place(self, start: float, work: float) -> float:
        """Book ``work`` seconds of a core (slowdown applied) from ``start`` on; its finish."""
        last = self.last
        core = 0
        for end in last:  # the usual case: a core is idle from `start` on (the first such core takes it)
            if end <= start:
                end = last[core] = start + work
                ends = self.ends[core]
                if len(ends) >= PRUNE_AT:
                    self._trim(core)
                self.starts[core].append(start)
                ends.append(end)
                return end
            core += 1
        return self._fit(start, work)

    def _fit(self, start: float, work: float) -> float:
        """Every core has work booked past ``start``: the earliest gap that fits on any core."""
        if self.tick_hold is not None:
            self.owed += self.tick_hold.share
            if self.owed >= 1.0:
                self.owed -= 1.0
                start = self.tick_hold.next_tick(start)
        best_begin, best_core, best_index = math.inf, 0, 0
        floors, all_starts, all_ends = self.floor, self.starts, self.ends
        cores = range(len(floors))
        if self.turn >= 0:  # per-core run queues: the one core this burst is queued on
            cores = range(self.turn, self.turn + 1)
            self.turn = (self.turn + 1) % len(floors)
        for core in cores:
            floor, starts, ends = floors[core], all_starts[core], all_ends[core]
            t = start if start > floor else floor
            index = bisect_right(ends, t)
            if index < len(starts) and starts[index] - t < work - 1e-15:  # no gap right at t: search on
                t, index = _earliest_gap(starts, ends, ends[index] if ends[index] > t else t, index + 1, work)
            if t < best_begin:
                best_begin, best_core, best_index = t, core, index
                if t <= start:
                    break
        starts, ends = all_starts[best_core], all_ends[best_core]
        end = best_begin + work
        if best_index == len(ends):
            self.last[best_core] = end
        starts.insert(best_index, best_begin)
        ends.insert(best_index, end)
        if len(ends) > PRUNE_AT:
            self._trim(best_core)
        return end

    def _trim(self, core: int) -> None:
        """Forget intervals that ended before now; of a long backlog (a saturated node) keep only the latest
        PRUNE_AT / 2 and treat the core as busy until the forgotten ones end (bounds the gap search)."""
        starts, ends = self.starts[core], self.ends[core]
        gone = bisect_right(ends, self.clock())
        if len(ends) - gone > PRUNE_AT // 2:
            gone = len(ends) - PRUNE_AT // 2
            self.floor[core] = max(self.floor[core], ends[gone - 1])
        del starts[:gone], ends[:gone]


def _earliest_gap(starts: list[float], ends: list[float], t: float, i: int, work: float) -> tuple[float, int]:
    """Earliest begin >= t of a gap of ``work`` between a core's sorted, disjoint intervals from the i-th on (the
    ones before end by t), and where it goes."""
    while i < len(starts):
        if starts[i] - t >= work - 1e-15:
            return t, i
        t = ends[i] if ends[i] > t else t
        i += 1
    return t, i


def _no_draw() -> float:
    raise AssertionError("a station without a wakeup draws no wake-ups")


@dataclass
class Station:
    """A service centre with ``servers`` workers; ``pinned`` gives each worker its own FIFO queue."""

    name: str
    servers: int
    pinned: bool = False
    wakeup: WakeUp | None = None
    wake_draw: Callable[[], float] | None = None  # uniform(0, 1) stream deciding cold wake-ups
    quota: CpuQuota | None = None
    node: NodeCores | None = None  # the cores of the node this station shares with its neighbours
    cpu_fraction: float = 1.0  # of an app's compute step, the share that holds a core (Service.cpu_fraction)
    free_at: list[float] = field(default_factory=list)
    busy: list[float] = field(default_factory=list)
    jobs: int = 0
    cold_wakes: float = 0.0  # cold wakes while recording (a graded cost counts the share each wake paid)
    recording: bool = False
    # where the time of recorded jobs went (seconds, summed): waiting for a worker, waking it, the job's own work,
    # and waiting for the node's cores or the CPU quota while running (the time-breakdown of a prediction)
    waited: float = 0.0
    woke: float = 0.0
    worked: float = 0.0
    cpu_waited: float = 0.0
    idle_gaps: list[float] | None = None  # when a list: each recorded job's idle gap of its worker (0 = busy)
    last_start: float = 0.0  # when the last job booked began its own work (after its wait and its wake-up)
    collection: CollectionClock | None = None  # an app's garbage collections (none: its CPU is all per request)

    def __post_init__(self) -> None:
        if self.wakeup is not None and self.wake_draw is None:
            raise ValueError(f"station {self.name}: a wakeup needs a wake_draw stream (uniform draws)")
        # the draw step itself (a Sampler's, without its Python call) when the stream is a Sampler
        self._wake_next: Callable[[], float] = getattr(self.wake_draw, "draw", self.wake_draw) or _no_draw
        # Workers start idle at t = 0 (the process just started): the first job pays the wake-up of its idle gap.
        self.free_at = [0.0] * self.servers
        self.busy = [0.0] * self.servers

    @property
    def capacity(self) -> float:
        """Cores this station can use at most."""
        return min(float(self.servers), self.quota.budget / self.quota.period) if self.quota else float(self.servers)

    def pick(self, now: float) -> int:
        free = self.free_at
        best, best_free = -1, float("-inf")
        for i, f in enumerate(free):  # an idle worker: the one idle the shortest time (still warm)
            if best_free < f <= now:
                best, best_free = i, f
        if best >= 0:
            return best
        return min(range(self.servers), key=free.__getitem__)

    def serve(self, now: float, work: float, server: int | None = None, post: float = 0.0) -> float:
        """Book a job arriving at ``now``; return when its response leaves (``post`` keeps the worker busy after)."""
        return self._book(now, work, server, post, True)

    def _book(self, now: float, work: float, server: int | None, post: float, timed: bool) -> float:
        """Book a job; the worker stays busy until its finish + ``post``. Returns the finish. While recording, a
        ``timed`` job (on a request's path) adds where its time went: waiting, waking, working, waiting for CPU.
        One flat function: it runs on every station visit."""
        if server is None:
            server = 0 if self.servers == 1 else self.pick(now)
        free = self.free_at[server]
        recording = self.recording
        if recording and self.idle_gaps is not None:
            self.idle_gaps.append(now - free if free < now else 0.0)
        wake_delay = wake_cpu = lingered = 0.0
        wake = self.wakeup
        if wake is not None and free < now:
            slept = wake.slept(now - free)
            lingered = now - free - slept  # its loop kept running after its work: CPU of the process, not the pass's
            if lingered > 0.0 and self.quota is not None:  # the kernel counts it against the quota (booked up to now)
                self.quota.run(now - lingered, lingered)
            if slept > 0.0:
                wake_cpu = wake.resume_cpu  # switched back in from epoll_wait
                cold = wake.cold_share(slept, self._wake_next)
                if cold > 0.0:
                    wake_delay = wake.delay * cold  # exit latency: the thread is not running yet, not CPU
                    wake_cpu += wake.cpu * cold  # the cold start itself runs on the worker
                    if recording:
                        self.cold_wakes += cold
                if wake.spin_share > 0.0:  # threads woken beside it burn this share, on no request's path
                    spun = wake_cpu * wake.spin_share
                    wake_cpu -= spun
                    if self.quota is not None or self.node is not None:
                        self._run(now, spun)
                    if recording:
                        self.busy[server] += spun
        start = (now if free <= now else free) + wake_delay
        self.last_start = start + wake_cpu  # the thread is switched in before its own code reads the job
        held = work + wake_cpu
        node = self.node
        if self.quota is not None:
            finish = self._run(start, held)
            released = self._run(finish, post) if post > 0 else finish
        elif node is not None:
            finish = node.run_woken(start, held) if free < now else node.run(start, held)
            released = node.run(finish, post) if post > 0 else finish
        else:
            finish = start + held
            released = finish + post
        self.free_at[server] = released
        if recording:
            self.busy[server] += held + post + lingered
            self.jobs += 1
            if timed:
                self.waited += start - wake_delay - now
                self.woke += wake_delay + wake_cpu
                self.worked += work
                self.cpu_waited += finish - start - work - wake_cpu
        return finish

    def _run(self, start: float, work: float) -> float:
        """Finish of ``work`` from ``start`` under the process's quota and the node's cores (the later of the two)."""
        return max(q.run(start, work) for q in (self.quota, self.node) if q is not None)

    def start_request(self, now: float) -> None:
        """A request reaches the app's first compute step: a garbage collection it sets off runs now, on one of
        the app's threads and the node's cores, before the step's own work is booked."""
        if self.collection is not None:
            due = self.collection.request()
            if due > 0.0:
                self.add_background(now, due)

    def add_background(self, now: float, work: float, server: int | None = None) -> None:
        """Work not on any request's path (span export to a collector): busy time, no part of a latency."""
        self._book(now, 0.0, server, work, False)
