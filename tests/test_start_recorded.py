"""A lab child is started and recorded with the interrupts held back (calibrate/measure/lab/supervisor.py
``start_recorded``): an interrupt that lands meanwhile is raised as the block ends, before the caller holds the child,
so the child is stopped and forgotten there. Before, a SIGTERM in that window left the second probe's fortio load
running and recorded until the command exited, and the command's ledger behind (tests/test_lab_interrupts.py saw it
on a clean-clone CI run of 2026-11-29)."""

from __future__ import annotations

import gc
import json
import signal
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from meshsim.calibrate.measure.lab.ledger import Ledger
from meshsim.calibrate.measure.lab.rss_sampler import RssSampler
from meshsim.calibrate.measure.lab.supervisor import start_recorded
from meshsim.calibrate.measure.process_identity import pid_alive
from meshsim.interrupts import INTERRUPT_SIGNALS

SLEEPER = ["sleep", "30"]


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


@pytest.fixture
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt, as meshsim's command line makes it; no collection runs meanwhile (an
    exception a signal handler raises inside a finalizer, such as an earlier test's Popen.__del__, is swallowed)."""
    previous = signal.signal(signal.SIGTERM, _interrupt)
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        signal.signal(signal.SIGTERM, previous)


class SignalledLedger(Ledger):
    """A ledger whose recording of a process sends the main thread a SIGTERM: it waits there while the start is held
    back (sent to the process instead, a thread that does not hold it back, left by an earlier test in the same
    worker, would take it at once)."""

    def add_process(self, name: str, pid: int, start_ticks: int | None, argv: list[str]) -> None:
        super().add_process(name, pid, start_ticks, argv)
        self.started = pid
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGTERM)


def _recorded(path: Path) -> list[Any]:
    return json.loads(path.read_text())["processes"]


def test_an_interrupt_held_back_during_the_start_stops_and_forgets_the_child(tmp_path: Path,
                                                                           sigterm_interrupts: None) -> None:
    plain = Ledger.open("test", tmp_path, folder=tmp_path / "ledgers")
    ledger = SignalledLedger(plain.path, plain.command, plain.state_dir, {}, [])
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        start_recorded("client/load", SLEEPER, ledger)
    assert not pid_alive(ledger.started)  # stopped and reaped, not left to run until this process exits
    assert ledger.processes == {} and _recorded(ledger.path) == []
    assert ledger.close_if_clear() and not ledger.path.exists()


def test_without_an_interrupt_the_child_runs_recorded(tmp_path: Path) -> None:
    ledger = Ledger.open("test", tmp_path, folder=tmp_path / "ledgers")
    proc = start_recorded("client/load", SLEEPER, ledger)
    try:
        assert pid_alive(proc.pid) and [p["pid"] for p in _recorded(ledger.path)] == [proc.pid]
        assert not ledger.close_if_clear()  # a recorded process still runs: the ledger stays
    finally:
        proc.kill()
        proc.wait()
    ledger.forget_process(proc.pid)
    assert ledger.close_if_clear()


def _blocked_signals(tid: int) -> int:
    """The thread's blocked-signal mask (SigBlk of /proc/self/task/TID/status)."""
    with open(f"/proc/self/task/{tid}/status", encoding="ascii") as handle:
        line = next(x for x in handle if x.startswith("SigBlk:"))
    return int(line.split()[1], 16)


def test_the_labs_sampler_thread_leaves_the_interrupts_to_the_main_thread() -> None:
    """A process-directed SIGTERM goes to a thread that does not block it; the sampler that runs beside every fortio
    load blocks the interrupt signals, so they reach the main thread, which holds them back where it must."""
    sampler = RssSampler({"none": 0}, interval_s=0.01, read=lambda pid: 1.0).start()
    try:
        deadline = time.monotonic() + 30.0  # its first sample: the loop is past its first line, however slow the host
        while not sampler.samples and time.monotonic() < deadline:
            time.sleep(0.01)
        thread = next(t for t in threading.enumerate() if t.name == "meshsim-rss-sampler")
        assert thread.native_id is not None
        mask = _blocked_signals(thread.native_id)
    finally:
        sampler.stop()
    assert all(mask & (1 << (int(sig) - 1)) for sig in INTERRUPT_SIGNALS)
    assert not _blocked_signals(threading.main_thread().native_id or 0) & (1 << (int(signal.SIGTERM) - 1))
