"""Load-dependent service: what a worker pays when it wakes up cold after being idle."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from meshsim.distributions import MS

US = 1e-6
from meshsim.errors import ModelError
from meshsim.yamlio import Section


MAX_SHAPE = 20.0  # a Weibull hazard's shape: beyond this it is a step, and powers of it lose precision


@dataclass(frozen=True)
class WakeUp:
    """A worker idle for ``g`` seconds wakes *cold* with probability ``1 - exp(-g / tau)``.

    A cold wake is an event -- the core dropped into a deep idle state, the vCPU was descheduled, the thread's
    caches were evicted -- with a constant hazard while the worker sleeps in epoll. When it happens the request
    waits ``delay`` (exit latency: the thread is not running, so it is not CPU) and the worker then spends ``cpu``
    seconds of CPU (scheduler switch-in, cold caches) before the pass's own work. Requests that find their worker
    warm -- busy, or idle only briefly -- pay neither: at low rates most requests are slow, at high rates few, and
    a worker that never idles (saturation) pays no wake-up CPU, which is why CPU per request falls with load.

    ``resume_cpu`` is paid on every wake from idle, however short the gap: the worker blocked in epoll_wait and
    must be switched back in. Passes that arrive while the worker is busy share its current wake, so requests
    arriving together (several connections firing at once, a loaded proxy) cost less CPU each.

    ``shape`` generalises the constant hazard (shape 1) to a Weibull one, ``1 - exp(-(g / tau) ** shape)``: above 1
    the idle time before a deep sleep is concentrated near tau, as when the kernel's idle governor enters a deep
    state only once a core has been idle past that state's target residency (a one-connection run's short gaps
    then almost never wake cold, a burst's long ones nearly always do).

    ``linger`` is how long a worker that finished its work keeps running before it blocks: Envoy finishes its
    event-loop iteration (deferred deletes, timers, the next epoll_wait returning work already queued), Go's
    scheduler spins an M before it parks it. A pass arriving within the linger finds the thread still running: no
    resume CPU, no cold wake (it never slept), and the time it lingered is CPU of the process (under its CPU quota,
    which throttles a spinning thread like any other). A pass arriving later
    pays the whole linger as CPU, then the wake; only the time it slept (the idle gap less the linger) counts
    toward a cold wake. Linger 0 is a worker that blocks the moment it goes idle.

    ``graded`` is the share of the cold cost that every wake pays in part instead of a few wakes paying all of it:
    ``graded x p(g)`` of ``delay`` and ``cpu`` on every wake, the rest a lottery. Both have the same mean; the graded
    part has no spread, so a lower rate moves the median as much as the tail (graded 1), where the lottery moves only
    the tail (graded 0). The lab's one-connection runs move both (a cost that grows with every sleep, as state that
    decays while the thread sleeps would; measured: the shape, not its cause).

    ``spin_share`` is the share of a wake's CPU (resume and cold) that other threads of the process burn beside the
    woken one: Go's scheduler, readying a goroutine while a P is idle, wakes a thread to spin on it looking for work.
    That CPU is the process's, on the node's cores from the same moment, but on no request's path: the woken thread
    runs only the rest before the job's own work. The lab's fortio apps: 0.40-0.51 of a wake's CPU, measured as
    the wake CPU that ``GOMAXPROCS=1`` takes away (measurements/lab-go-spinning-2026-11-29).
    """

    delay: float
    tau: float
    cpu: float = 0.0
    resume_cpu: float = 0.0
    shape: float = 1.0
    linger: float = 0.0
    graded: float = 0.0
    spin_share: float = 0.0

    def slept(self, idle: float) -> float:
        """How long a worker idle for ``idle`` seconds slept (0: it was still lingering when the pass came)."""
        return idle - self.linger if idle > self.linger else 0.0

    def probability(self, idle: float) -> float:
        if idle <= 0.0:
            return 0.0
        return -math.expm1(-((idle / self.tau) ** self.shape))

    def cold_share(self, slept: float, draw: Callable[[], float]) -> float:
        """How much of a cold wake (``delay`` and ``cpu``) a wake after ``slept`` seconds pays: the graded share
        ``graded x p`` every time, the rest all or nothing with probability p (a lottery, drawn)."""
        p = self.probability(slept)
        if self.graded >= 1.0:
            return p
        lottery = 1.0 if draw() < p else 0.0
        return self.graded * p + (1.0 - self.graded) * lottery

    def to_spec(self) -> dict[str, float]:
        spec = {"delay_ms": self.delay / MS, "tau_ms": self.tau / MS, "cpu_ms": self.cpu / MS,
                "resume_cpu_ms": self.resume_cpu / MS}
        if self.shape != 1.0:
            spec["shape"] = self.shape
        if self.linger:
            spec["linger_us"] = self.linger / US
        if self.graded:
            spec["graded"] = self.graded
        if self.spin_share:
            spec["spin_share"] = self.spin_share
        return spec


def parse_wakeup(section: Section | None) -> WakeUp | None:
    if section is None:
        return None
    if section.has("max_ms"):
        raise ModelError(f"{section.key('max_ms')}: renamed delay_ms (the exit latency of a cold wake-up, paid with "
                         "probability 1 - exp(-g/tau_ms)); cpu_ms adds its CPU")
    section.reject_unknown(("delay_ms", "tau_ms", "cpu_ms", "resume_cpu_ms", "shape", "linger_us", "graded", "spin_share",
                             "source", "linger_source", "graded_source", "spin_source", "fit", "note"))
    if not any(section.has(k) for k in ("delay_ms", "cpu_ms", "resume_cpu_ms")):
        raise ModelError(f"{section.key('delay_ms')}: missing (a wakeup block needs delay_ms, cpu_ms and/or "
                         "resume_cpu_ms)")
    shape = section.number("shape", 1.0, strictly_positive=True, maximum=MAX_SHAPE)
    return WakeUp(section.number("delay_ms", 0.0) * MS, section.number("tau_ms", strictly_positive=True) * MS,
                  section.number("cpu_ms", 0.0) * MS, section.number("resume_cpu_ms", 0.0) * MS, shape,
                  section.number("linger_us", 0.0) * US, section.number("graded", 0.0, maximum=1.0),
                  section.number("spin_share", 0.0, maximum=1.0))
