"""How long each lab process's threads waited for a core over a probe's load: the kernel's run-queue delay.

Linux keeps, per thread, ``/proc/PID/task/TID/schedstat``: nanoseconds run on a core, nanoseconds spent runnable
but waiting on a run queue, and the number of timeslices run (CONFIG_SCHED_INFO; no root, no tracing). The
probe reads every thread of every lab process before and after the load; the differences, summed per component
(replicas and threads add up), go into the run folder as ``run-queue.json``: beside the CPU the manifest reads
from each process's CPU clock, the time the same work waited for a core, per request and per timeslice. A thread
that ended during the load is missed (the lab's Envoys and fortio apps keep theirs); one started during it counts
from zero. ``/proc/PID/task/TID/status`` adds the context switches: a thread preempted while runnable (an
involuntary switch) against one that gave its core up to wait.

The kernel's own slice (``se.slice`` in ``/proc/PID/sched``: EEVDF's base slice, scaled by the core count) is read
once beside them: the longest a woken thread waits for a running one of equal weight when wake-up preemption does
not apply.
"""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

FILE_KEY, FILE_NAME = "run_queue", "run-queue.json"
SOURCE = ("/proc/PID/task/TID/schedstat (run ns, run-queue wait ns, timeslices) and /proc/PID/task/TID/status "
          "(voluntary_ctxt_switches, nonvoluntary_ctxt_switches) of every thread of every lab process, read before "
          "and after the load; the counts are the difference, summed per component (client/app: not read, fortio "
          "is started per load)")


@dataclass(frozen=True)
class ThreadSched:
    """One thread's scheduler counters (cumulative since it started)."""

    run_ns: int
    wait_ns: int
    slices: int
    voluntary: int = 0
    involuntary: int = 0

    def minus(self, earlier: "ThreadSched | None") -> "ThreadSched":
        """What this thread did since ``earlier`` (None: since it started)."""
        if earlier is None:
            return self
        return ThreadSched(self.run_ns - earlier.run_ns, self.wait_ns - earlier.wait_ns, self.slices - earlier.slices,
                           self.voluntary - earlier.voluntary, self.involuntary - earlier.involuntary)

    def plus(self, other: "ThreadSched") -> "ThreadSched":
        return ThreadSched(self.run_ns + other.run_ns, self.wait_ns + other.wait_ns, self.slices + other.slices,
                           self.voluntary + other.voluntary, self.involuntary + other.involuntary)


NOTHING = ThreadSched(0, 0, 0)
Snapshot = dict[str, dict[int, ThreadSched]]  # process name -> thread id -> its counters


def _switches(path: str) -> tuple[int, int]:
    """(voluntary, involuntary) context switches from a thread's status file ((0, 0) when unreadable)."""
    counts = {"voluntary_ctxt_switches": 0, "nonvoluntary_ctxt_switches": 0}
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key in counts:
                    counts[key] = int(value)
    except OSError:
        pass
    return counts["voluntary_ctxt_switches"], counts["nonvoluntary_ctxt_switches"]


def thread_sched(pid: int, tid: int) -> ThreadSched | None:
    """A thread's counters now; None when it is gone (or the kernel keeps no schedstat)."""
    base = f"/proc/{pid}/task/{tid}"
    try:
        with open(f"{base}/schedstat", encoding="ascii") as handle:
            run_ns, wait_ns, slices = (int(v) for v in handle.read().split()[:3])
    except (OSError, ValueError):
        return None
    return ThreadSched(run_ns, wait_ns, slices, *_switches(f"{base}/status"))


def process_threads(pid: int) -> dict[int, ThreadSched]:
    """Every live thread of ``pid`` and its counters (empty when the process is gone)."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return {}
    read = {tid: thread_sched(pid, tid) for tid in tids}
    return {tid: sched for tid, sched in read.items() if sched is not None}


def snapshot(pids: Mapping[str, int]) -> Snapshot:
    """Every thread's counters of every named process now."""
    return {name: process_threads(pid) for name, pid in pids.items()}


def over_load(before: Snapshot, after: Snapshot, component_of: Callable[[str], str] = str) -> dict[str, ThreadSched]:
    """Per component (``component_of`` maps a process name to it; replicas add up): what its threads did between
    the two snapshots, the threads alive at the second."""
    out: dict[str, ThreadSched] = {}
    for name, threads in after.items():
        earlier = before.get(name, {})
        done = NOTHING
        for tid, sched in threads.items():
            done = done.plus(sched.minus(earlier.get(tid)))
        key = component_of(name)
        out[key] = out.get(key, NOTHING).plus(done)
    return out


def kernel_slice_ms(pid: int | None = None) -> float | None:
    """The scheduler's slice for a normal task, in ms, from ``/proc/PID/sched`` (``se.slice``, EEVDF kernels);
    None when the kernel does not show it."""
    try:
        with open(f"/proc/{pid or 'self'}/sched", encoding="ascii", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() == "se.slice":
                    return float(value) / 1e6
    except (OSError, ValueError):
        return None
    return None


def kernel_tick_ms(config: str = "/proc/config.gz") -> float | None:
    """The scheduler's tick in ms (1000 / CONFIG_HZ) from the running kernel's configuration; None when the kernel
    does not publish it (no CONFIG_IKCONFIG_PROC)."""
    try:
        with gzip.open(config, "rt", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("CONFIG_HZ="):
                    return 1000.0 / int(line.partition("=")[2])
    except (OSError, ValueError, EOFError, ZeroDivisionError):
        return None
    return None


def recorded_tick_ms(folder: Path, files: Mapping[str, str]) -> float | None:
    """The kernel tick a run folder's run-queue file recorded (None: no file, an older one without it, or unreadable:
    the tick is then unknown, not an error)."""
    name = files.get(FILE_KEY)
    if name is None:
        return None
    try:
        tick = json.loads((folder / name).read_text()).get("kernel_tick_ms")
    except (OSError, ValueError, AttributeError):
        return None
    return float(tick) if isinstance(tick, (int, float)) and tick > 0 else None


def summary(done: Mapping[str, ThreadSched], requests: int) -> dict[str, dict[str, float]]:
    """Per component: seconds run and waited, timeslices and switches, and the wait per request and per slice."""
    out: dict[str, dict[str, float]] = {}
    for component, d in sorted(done.items()):
        out[component] = {
            "run_s": round(d.run_ns / 1e9, 6), "wait_s": round(d.wait_ns / 1e9, 6), "timeslices": d.slices,
            "voluntary_switches": d.voluntary, "involuntary_switches": d.involuntary,
            "wait_ms_per_request": round(d.wait_ns / 1e6 / max(requests, 1), 5),
            "wait_ms_per_timeslice": round(d.wait_ns / 1e6 / max(d.slices, 1), 5),
            "run_ms_per_timeslice": round(d.run_ns / 1e6 / max(d.slices, 1), 5),
        }
    return out


def to_json(done: Mapping[str, ThreadSched], requests: int, slice_ms: float | None) -> bytes:
    return json.dumps({"source": SOURCE, "requests": requests, "kernel_slice_ms": slice_ms,
                       "kernel_tick_ms": kernel_tick_ms(), "components": summary(done, requests)}, indent=1).encode()


def run_files(done: Mapping[str, ThreadSched], requests: int,
              slice_ms: float | None) -> dict[str, tuple[str, bytes]] | None:
    """The file a run folder keeps them in (write_run's ``extra``); None when no thread could be read."""
    return {FILE_KEY: (FILE_NAME, to_json(done, requests, slice_ms))} if done else None
