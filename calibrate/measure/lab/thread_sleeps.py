"""How often a lab process's worker threads slept during a run: their voluntary context switches.

A thread that blocks (epoll_wait with nothing ready, a futex park) and is woken again counts one voluntary
context switch in ``/proc/PID/task/TID/status``. Envoy's workers are its ``wrk:worker_N`` threads (its main thread
and the stats flusher sleep on timers, not on traffic); a process without such threads counts every thread. The
difference of two readings around a run is how often the workers slept: what a model's count of wakes from idle
is compared with (``calibrate/load/linger_fit.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

from meshsim.calibrate.measure.lab.processes import component_of

ENVOY_WORKER_PREFIX = "wrk:worker_"
SLEEPS_NOTE = ("sleeps: voluntary context switches of each process's worker threads (Envoy's wrk:worker_N, else "
               "every thread) from /proc/PID/task/TID/status over the cpu_seconds window (client/app not counted)")


def _switches(task: Path) -> tuple[str, int] | None:
    try:
        name = (task / "comm").read_text().strip()
        for line in (task / "status").read_text().splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                return name, int(line.split()[1])
    except (OSError, ValueError):  # the thread ended between listing and reading
        return None
    return None


def worker_sleeps_of(pid: int) -> int | None:
    """Voluntary context switches summed over the process's worker threads (None: the process is gone)."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return None
    counts = [c for c in map(_switches, tasks) if c is not None]
    workers = [n for name, n in counts if name.startswith(ENVOY_WORKER_PREFIX)]
    return sum(workers) if workers else sum(n for _, n in counts)


def sleep_snapshot(processes: Sequence) -> dict[str, int | None]:
    """Process name -> its workers' voluntary switches now."""
    return {p.name: worker_sleeps_of(p.pid) for p in processes}


def sleep_deltas(processes: Sequence, before: Mapping[str, int | None],
                 after: Mapping[str, int | None]) -> dict[str, float]:
    """Component -> its workers' sleeps between two snapshots (replicas add up)."""
    out: dict[str, float] = {}
    for proc in processes:
        b, a = before.get(proc.name), after.get(proc.name)
        if b is not None and a is not None:
            key = component_of(proc.name)
            out[key] = out.get(key, 0) + a - b
    return out
