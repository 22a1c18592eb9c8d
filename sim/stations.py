"""Service centres computed at arrival time.

Every station here serves first-come-first-served without preemption, so a job's start time is known when it
arrives: ``start = max(arrival, when its server frees up)`` (Lindley's recursion, and for c servers the
Kiefer-Wolfowitz workload vector). SimPy delivers arrivals in time order, so one timeout per visit gives the exact
FCFS queue. Two dispatch disciplines: *pinned* (each connection is bound to one worker for its life: W separate
FIFO queues, Envoy) and *shared* (one queue feeding W workers: tokio work stealing, the Go scheduler, app cores).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from meshsim.wakeup import WakeUp

CFS_PERIOD = 0.1  # Linux CFS bandwidth period (cpu.cfs_period_us default 100 ms)
NODE_PERIOD = 1e-3  # a node's cores shared at scheduler granularity (~1 ms timeslices)


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


@dataclass
class Station:
    """A service centre with ``servers`` workers; ``pinned`` gives each worker its own FIFO queue."""

    name: str
    servers: int
    pinned: bool = False
    wakeup: WakeUp | None = None
    wake_draw: Callable[[], float] | None = None  # uniform(0, 1) stream deciding cold wake-ups
    quota: CpuQuota | None = None
    node: CpuQuota | None = None  # the cores of the node this station shares with its neighbours
    free_at: list[float] = field(default_factory=list)
    busy: list[float] = field(default_factory=list)
    jobs: int = 0
    cold_wakes: int = 0
    recording: bool = False
    # where the time of recorded jobs went (seconds, summed): waiting for a worker, waking it, the job's own work,
    # and waiting for the node's cores or the CPU quota while running (the time-breakdown of a prediction)
    waited: float = 0.0
    woke: float = 0.0
    worked: float = 0.0
    cpu_waited: float = 0.0
    idle_gaps: list[float] | None = None  # when a list: each recorded job's idle gap of its worker (0 = busy)

    def __post_init__(self) -> None:
        if self.wakeup is not None and self.wake_draw is None:
            raise ValueError(f"station {self.name}: a wakeup needs a wake_draw stream (uniform draws)")
        # Workers start idle at t = 0 (the process just started): the first job pays the wake-up of its idle gap.
        self.free_at = [0.0] * self.servers
        self.busy = [0.0] * self.servers

    @property
    def capacity(self) -> float:
        """Cores this station can use at most."""
        return min(float(self.servers), self.quota.budget / self.quota.period) if self.quota else float(self.servers)

    def _pick(self, now: float) -> int:
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
        start, finish, wake = self._book(now, work, server, post)
        if self.recording:
            self.waited += start - wake[0] - now
            self.woke += wake[0] + wake[1]
            self.worked += work
            self.cpu_waited += finish - start - work - wake[1]
        return finish

    def _book(self, now: float, work: float, server: int | None, post: float
              ) -> tuple[float, float, tuple[float, float]]:
        """(start, finish, (wake delay, wake CPU)) of a job; the worker stays busy until finish + post."""
        if server is None:
            server = 0 if self.servers == 1 else self._pick(now)
        free = self.free_at[server]
        start = now if free <= now else free
        if self.idle_gaps is not None and self.recording:
            self.idle_gaps.append(now - free if free < now else 0.0)
        wake_delay = wake_cpu = 0.0
        wake = self.wakeup
        if wake is not None and free < now:
            wake_cpu = wake.resume_cpu  # switched back in from epoll_wait
            if self._draw() < wake.probability(now - free):
                wake_delay = wake.delay  # exit latency: the thread is not running yet, not CPU
                wake_cpu += wake.cpu  # the cold start itself runs on the worker
                if self.recording:
                    self.cold_wakes += 1
        start += wake_delay
        held = work + wake_cpu
        if self.quota is None and self.node is None:
            finish = start + held
            released = finish + post
        else:
            finish = self._run(start, held)
            released = self._run(finish, post) if post > 0 else finish
        self.free_at[server] = released
        if self.recording:
            self.busy[server] += held + post
            self.jobs += 1
        return start, finish, (wake_delay, wake_cpu)

    def _draw(self) -> float:
        assert self.wake_draw is not None  # checked in __post_init__
        return self.wake_draw()

    def _run(self, start: float, work: float) -> float:
        """Finish of ``work`` from ``start`` under the process's quota and the node's cores (the later of the two)."""
        return max(q.run(start, work) for q in (self.quota, self.node) if q is not None)

    def add_background(self, now: float, work: float, server: int | None = None) -> None:
        """Work not on any request's path (span export to a collector): busy time, no part of a latency."""
        self._book(now, 0.0, server, work)
