"""Which process a pid is: a pid with its start time names one process, so a recycled pid is never signalled; the
command line it runs is checked too before the lab stops a process another command started.

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


def command_line(pid: int) -> list[str] | None:
    """The arguments ``pid`` runs with, from /proc/PID/cmdline (None when gone; empty for a zombie)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    return [part.decode(errors="surrogateescape") for part in raw.split(b"\0")[:-1]]


def runs_command(pid: int, argv: list[str]) -> bool:
    """``pid`` runs ``argv``, or what ``argv`` started, or ``argv`` through an interpreter: a launcher execs its
    program in the same pid (``taskset -c 1 envoy -c CONFIG`` becomes ``envoy -c CONFIG``), and a script runs as
    ``python SCRIPT ARGS``. So one of the two command lines ends with the whole other."""
    live = command_line(pid)
    if not live or not argv:
        return False
    shorter, longer = sorted((live, list(argv)), key=len)
    return longer[len(longer) - len(shorter):] == shorter


def same_started_process(pid: int, start_ticks: int | None, argv: list[str] | None) -> bool:
    """``pid`` is the process recorded with this start time and this command line (``same_process`` and
    ``runs_command``): only such a process is ever signalled for a command that cannot do it itself."""
    return bool(argv) and same_process(pid, start_ticks) and runs_command(pid, list(argv or []))
