"""The signals every command turns into an interrupt (``meshsim.cli.entry_point``), and holding them back.

A signal that lands inside ``os.fork`` runs its Python handler in an after-fork hook, where the exception it raises
is swallowed ("Exception ignored in _releaseLock"): the interrupt is lost. So whatever forks or starts a child and
records it does so with the interrupts held back; a signal that came meanwhile is handled right after the block.
"""

from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Iterator

# The signals a command turns into an interrupt (meshsim.cli.entry_point): held back while a child is started and
# recorded, so an interrupt never falls between the two and leaves a process nobody knows of.
INTERRUPT_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold back SIGINT/SIGTERM/SIGHUP in the block; a signal that came meanwhile is handled right after it."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, INTERRUPT_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def leave_interrupts_to_the_main_thread() -> None:
    """In a helper thread, first thing: block the interrupt signals here, so the kernel delivers them to the main
    thread, which holds them back where it must. A helper that took one would have Python run the handler in the main
    thread at once, held back or not, and one run inside a finalizer is lost ("Exception ignored")."""
    signal.pthread_sigmask(signal.SIG_BLOCK, INTERRUPT_SIGNALS)


def unblock_interrupts() -> None:
    """``preexec_fn`` of children started in ``interrupts_deferred``: a child inherits the blocked mask otherwise,
    and would ignore the SIGTERM that stops it."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, INTERRUPT_SIGNALS)


def reset_interrupts_in_child() -> None:
    """A forked worker's signals (its initializer, meshsim.parent_death.start_worker, calls this): SIGTERM/SIGHUP
    kill it (the parent stops it so), SIGINT is the parent's to handle (a terminal's Ctrl-C reaches the whole
    group), and nothing stays blocked."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    unblock_interrupts()
