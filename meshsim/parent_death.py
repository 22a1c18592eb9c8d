"""Children that end with the process that started them, even when that process is killed with SIGKILL.

A SIGKILLed command cannot stop its children: its forked workers (replications, sweep points) and the lab's fortio
and Envoy processes would run on under PID 1. So each child, right after it is forked, asks the kernel for SIGKILL
when its parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``; it survives exec, so a started program keeps it), and then
compares ``getppid()`` with the parent it was forked from: a parent that died before the request sends nothing.

The kernel sends the signal when the *thread* that forked the child ends, not the process; only a main thread lives
as long as its process. A child forked from another thread (or on a system without prctl) watches its parent from a
thread of its own instead; a started program cannot, and relies on the lab's ledger (calibrate/measure/lab/ledger.py).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable

from meshsim.interrupts import reset_interrupts_in_child, unblock_interrupts

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
WATCH_INTERVAL_S = 0.5


def _libc_prctl() -> Callable[..., int] | None:
    """libc's prctl, looked up once here: the child that calls it must not load a library (after a fork of a
    threaded process the loader's lock may be held by a thread that no longer exists)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _libc_prctl()


@dataclass(frozen=True)
class Parent:
    """The process a child is forked from, taken in the parent before the fork."""

    pid: int
    main_thread: bool  # forked from the main thread: the kernel's signal comes when the process dies, not sooner

    @classmethod
    def here(cls) -> "Parent":
        """This process and thread, as the parent of children forked from here: a fork-context process pool forks
        its workers on its first ``submit``, so take this where the pool is made and first used."""
        return cls(os.getpid(), threading.current_thread() is threading.main_thread())


def _ask_for_parent_death_signal() -> bool:
    """prctl(PR_SET_PDEATHSIG, SIGKILL) for this process; False where the system has no such call."""
    return _PRCTL is not None and _PRCTL(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0


def _end_now() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _watch(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(WATCH_INTERVAL_S)
    _end_now()


def die_with_parent(parent: Parent, watch: bool = True) -> None:
    """In the child, right after the fork: end when ``parent`` ends. ``watch``: where the kernel cannot be asked,
    a daemon thread polls the parent (not in a ``preexec_fn``: a thread does not survive exec)."""
    if not (parent.main_thread and _ask_for_parent_death_signal()) and watch:
        threading.Thread(target=_watch, args=(parent.pid,), name="meshsim-parent-watch", daemon=True).start()
    if os.getppid() != parent.pid:  # the parent died before the request: nobody will send the signal
        _end_now()


def start_worker(parent: Parent) -> None:
    """Initializer of forked worker processes: they end with ``parent``, and take their interrupts as
    ``reset_interrupts_in_child`` says."""
    die_with_parent(parent)
    reset_interrupts_in_child()


def start_program(parent: Parent) -> None:
    """``preexec_fn`` of the programs a command starts (fortio, Envoy) with the interrupts held back: they end with
    ``parent`` (``Parent.here()`` taken before ``Popen``) and take SIGTERM again."""
    die_with_parent(parent, watch=False)
    unblock_interrupts()
