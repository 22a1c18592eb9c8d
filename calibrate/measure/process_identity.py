"""Which process a pid is: a pid with its start time names one process, so a recycled pid is never signalled.

Used by the lab's ledger and by ``calibrate --kube`` to tell an owner that is gone (killed with SIGKILL) from one
that still runs.
"""

from __future__ import annotations


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def pid_start_ticks(pid: int) -> int | None:
    """The process start time in clock ticks since boot: with the pid it identifies one process (pids are reused)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def same_process(pid: int, start_ticks: int | None) -> bool:
    """``pid`` is alive and is the process recorded (same start time); unknown start time: never ours."""
    return start_ticks is not None and pid_alive(pid) and pid_start_ticks(pid) == start_ticks
