"""Resident memory of the lab's processes sampled while a load runs (VmRSS from /proc/PID/status).

A single reading after the load misses what the load itself holds (buffers of requests in flight are freed as the
last answers return); sampling during the load and keeping the steady part (the second half of the samples, after
connections are open and the first allocations are done) gives the memory a proxy holds under that load.
"""

from __future__ import annotations

import statistics
import threading
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from meshsim.calibrate.measure.lab.supervisor import rss_mb_of
from meshsim.interrupts import leave_interrupts_to_the_main_thread

DEFAULT_INTERVAL_S = 0.25


@dataclass
class RssSampler:
    """Samples every pid's RSS (MB) each ``interval_s`` in a background thread between ``start`` and ``stop``.

    ``pids``: name -> pid. ``read``: how one pid's RSS is read (tests give a fake clockwork; the lab uses /proc)."""

    pids: Mapping[str, int]
    interval_s: float = DEFAULT_INTERVAL_S
    read: Callable[[int], float | None] = rss_mb_of
    samples: dict[str, list[float]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _sample_once(self) -> None:
        for name, pid in self.pids.items():
            rss = self.read(pid)
            if rss is not None:
                self.samples.setdefault(name, []).append(rss)

    def _loop(self) -> None:
        leave_interrupts_to_the_main_thread()
        while not self._stop.is_set():
            self._sample_once()
            self._stop.wait(self.interval_s)

    def start(self) -> "RssSampler":
        self._thread = threading.Thread(target=self._loop, name="meshsim-rss-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict[str, list[float]]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5 * self.interval_s + 1)
        return self.samples


def steady_mb(samples: Sequence[float]) -> float | None:
    """The steady-state RSS of a run: the median of the second half of its samples (None without samples)."""
    if not samples:
        return None
    return float(statistics.median(samples[len(samples) // 2:]))
