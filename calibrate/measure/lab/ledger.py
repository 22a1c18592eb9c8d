"""A ledger of what one lab command started, on disk, so a SIGKILL of that command leaves nothing unfindable.

Every process the lab starts (Envoy, fortio apps, the collector, the fortio load) and every temporary folder it
makes is written to ``run-PID-TICKS.json`` in one folder per user, shared by every lab command whatever its
``--state-dir`` (``$XDG_STATE_HOME/meshsim/lab-ledgers``, else ``~/.local/state/meshsim/lab-ledgers``), before the
command waits on it; the file goes away when the command has stopped all of them. A command killed with SIGKILL
cannot clean up (its processes die with it, meshsim.parent_death, but its temporary folders stay, and a system
without a parent-death signal keeps the processes too), so every lab command first calls ``reap_orphans``: for every
ledger whose owner is gone it stops the recorded processes by pid and removes the recorded temporary folders. A pid
is only signalled while it still has the start time (from /proc/PID/stat) and the command line recorded with it: a
recycled pid is never killed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from meshsim.errors import RunFailed

from meshsim.calibrate.measure.process_identity import pid_start_ticks, same_process, same_started_process

LEDGER_SCHEMA = "meshsim/lab-ledger/v1"
LEDGER_GLOB = "run-*.json"
# Only folders the lab itself makes in the system temp folder are ever removed, whatever a ledger says.
TEMP_PREFIXES = ("meshsim-lab-", "meshsim-probe-")
STOP_GRACE_S = 3.0


def ledger_dir() -> Path:
    """The one folder every lab command keeps its ledger in: ``$XDG_STATE_HOME/meshsim/lab-ledgers``, else
    ``~/.local/state/meshsim/lab-ledgers`` (per user, whatever ``--state-dir`` a command was given)."""
    base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return base / "meshsim" / "lab-ledgers"


@dataclass
class Ledger:
    """The ledger of the running command (its owner is this process)."""

    path: Path
    command: str
    state_dir: str  # the command's --state-dir, for the message of the command that reaps it
    processes: dict[int, dict[str, Any]]
    temp_dirs: list[str]

    @classmethod
    def open(cls, command: str, state_dir: Path, folder: Path | None = None) -> "Ledger":
        """The ledger of this process's lab ``command``, in ``folder`` (default ``ledger_dir()``)."""
        folder = Path(folder) if folder is not None else ledger_dir()
        me = os.getpid()
        ledger = cls(folder / f"run-{me}-{pid_start_ticks(me)}.json", command, str(Path(state_dir).resolve()), {}, [])
        try:
            folder.mkdir(parents=True, exist_ok=True)
            ledger._write()
        except OSError as exc:
            raise RunFailed(f"{folder}: cannot record the lab's processes there ({exc.strerror or exc}); "
                            f"set XDG_STATE_HOME to a writable folder") from None
        return ledger

    def add_process(self, name: str, pid: int, start_ticks: int | None, argv: list[str]) -> None:
        self.processes[pid] = {"name": name, "pid": pid, "start_ticks": start_ticks, "argv": list(argv)}
        self._write()

    def forget_process(self, pid: int) -> None:
        if self.processes.pop(pid, None) is not None:
            self._write()

    def add_temp_dir(self, path: Path) -> None:
        self.temp_dirs.append(str(Path(path).resolve()))
        self._write()

    def close(self) -> None:
        """Everything recorded is stopped and removed: the ledger is no longer needed."""
        self.path.unlink(missing_ok=True)

    def close_if_clear(self) -> bool:
        """Close unless a recorded process still runs (an interrupt may have come between a child's exit and its
        removal from the ledger, so look at the processes, not the records); True when closed."""
        if any(same_process(pid, p.get("start_ticks")) for pid, p in self.processes.items()):
            return False
        self.close()
        return True

    def _write(self) -> None:
        data = {"schema": LEDGER_SCHEMA, "command": self.command, "state_dir": self.state_dir,
                "owner_pid": os.getpid(), "owner_start_ticks": pid_start_ticks(os.getpid()),
                "processes": list(self.processes.values()), "temp_dirs": self.temp_dirs}
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
        os.replace(tmp, self.path)  # atomic: a reader never sees half a ledger


@dataclass(frozen=True)
class Reaped:
    """What ``reap_orphans`` did: pids stopped, temporary folders removed, ledgers cleared (and the state folders
    their commands were given)."""

    pids: tuple[int, ...] = ()
    temp_dirs: tuple[str, ...] = ()
    ledgers: tuple[str, ...] = ()
    state_dirs: tuple[str, ...] = ()


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # half-written by a killed writer is impossible (atomic), so this is not ours
    return data if isinstance(data, dict) and data.get("schema") == LEDGER_SCHEMA else None


def _stop(processes: list[dict[str, Any]]) -> list[int]:
    """SIGTERM, then SIGKILL after a grace period, each recorded process that is still the same process (same
    start time and command line; an entry without its command line is never signalled)."""
    ours = [(p["pid"], p.get("start_ticks")) for p in processes if isinstance(p.get("pid"), int)
            and same_started_process(p["pid"], p.get("start_ticks"), p.get("argv"))]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid, ticks in ours:
            if same_process(pid, ticks):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline and any(same_process(pid, ticks) for pid, ticks in ours):
            time.sleep(0.05)
    return [pid for pid, _ in ours]


def _remove_temp(paths: list[Any]) -> list[str]:
    removed = []
    for text in paths:
        path = Path(str(text))
        if path.is_absolute() and path.name.startswith(TEMP_PREFIXES) and path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(str(path))
    return removed


def reap_orphans(folder: Path | None = None) -> Reaped:
    """Stop the processes and remove the temporary folders of every lab command with a ledger in ``folder``
    (default ``ledger_dir()``: every lab command's) that died."""
    pids: list[int] = []
    temps: list[str] = []
    ledgers: list[str] = []
    state_dirs: list[str] = []
    folder = Path(folder) if folder is not None else ledger_dir()
    if not folder.is_dir():
        return Reaped()
    for path in sorted(folder.glob(LEDGER_GLOB)):
        data = _read(path)
        owner = data.get("owner_pid") if data else None
        if data is None or (isinstance(owner, int) and same_process(owner, data.get("owner_start_ticks"))):
            continue  # not a ledger, or its command still runs and cleans up after itself
        pids += _stop(list(data.get("processes") or []))
        temps += _remove_temp(list(data.get("temp_dirs") or []))
        path.unlink(missing_ok=True)
        ledgers.append(str(path))
        state_dirs.append(str(data.get("state_dir") or "?"))
    return Reaped(tuple(pids), tuple(temps), tuple(ledgers), tuple(dict.fromkeys(state_dirs)))
