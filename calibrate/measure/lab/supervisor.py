"""The lab's process supervisor: starts, holds and stops the real processes of a lab by pid.

Envoy exits when the process that launched it exits, so the supervisor must be the long-lived launcher: it keeps the
``Popen`` objects, stops each child by its own pid (SIGTERM, then SIGKILL after a grace period) on ``stop_all``,
on Ctrl-C and on errors, and verifies afterwards that no pid it started is still alive. Every child also ends when
the supervisor's process dies, even by SIGKILL (``start_recorded``).
"""

from __future__ import annotations

import functools
import os
import random
import shlex
import signal
import socket
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

from meshsim.errors import RunFailed

from meshsim.calibrate.measure.lab.cpulimit import CpuLimiter
from meshsim.calibrate.measure.process_identity import pid_alive, pid_start_ticks
from meshsim.interrupts import INTERRUPT_SIGNALS, interrupts_deferred  # noqa: F401 (re-exported)
from meshsim.parent_death import Parent, start_program

if TYPE_CHECKING:
    from meshsim.calibrate.measure.lab.ledger import Ledger

STOP_GRACE_S = 3.0
_handed_out: set[int] = set()
LOWEST_PORT = 10000


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now and not handed out before by this process.

    Preferably below the kernel's ephemeral range: a port the kernel gives for binding port 0 comes from the range
    it also uses for outgoing connections, and on a busy machine one of those can take it before the lab binds it.
    Falls back to binding port 0.
    """
    low, _ = _ephemeral_range()
    if low - LOWEST_PORT > 1000:
        rng = random.Random()
        for _ in range(100):
            port = rng.randint(LOWEST_PORT, low - 1)
            if port not in _handed_out and _bindable(port):
                _handed_out.add(port)
                return port
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise RunFailed("lab: no free TCP port on 127.0.0.1")


def port_clash(message: str) -> bool:
    """True when a start failed because another process took a planned port first (worth retrying)."""
    return "address already in use" in message.lower()


def cpu_seconds_of(pid: int) -> float | None:
    """CPU seconds of a live process, user and system, every thread's (exited ones too), from its CPU-time clock in
    nanoseconds; None when it is gone. /proc/PID/stat counts whole 10 ms ticks: a sidecar at 200 rps burns
    about ten of them in a 3 s probe, so each reading was off by up to a tenth, and the per-side CPU fitted from
    such runs with it (the lab test of the sides' split failed on it once)."""
    try:
        return time.clock_gettime(_process_cpu_clock(pid))
    except OSError:  # gone, or a kernel without per-process CPU clocks: the ticks, if it is there at all
        return _stat_cpu_seconds(pid)


def _process_cpu_clock(pid: int) -> int:
    """clock_getcpuclockid(pid), which Python does not expose: the process-wide CPU clock of ``pid`` (Linux's
    MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED))."""
    return ((~pid) << 3) | 2


def _stat_cpu_seconds(pid: int) -> float | None:
    """utime + stime of a live process from /proc/PID/stat, in seconds (None when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))
    return ticks / os.sysconf("SC_CLK_TCK")


def _status_mb(pid: int, key: str) -> float | None:
    """A kB field of /proc/PID/status in MB (None when the process is gone or, as a zombie, has no memory)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith(key):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def rss_mb_of(pid: int) -> float | None:
    """Resident set size of a live process from /proc/PID/status, in MB (None when it is gone)."""
    return _status_mb(pid, "VmRSS:")


def peak_rss_mb_of(pid: int) -> float | None:
    """The highest resident set size a live process has had since its last execve (VmHWM), in MB. Unlike
    getrusage's ru_maxrss, which Linux keeps across execve, it does not hold the peak of the process that started
    it."""
    return _status_mb(pid, "VmHWM:")


def start_recorded(name: str, argv: Sequence[str], ledger: "Ledger | None", **popen: Any) -> subprocess.Popen[bytes]:
    """Start ``argv`` as a child that ends with this process (meshsim.parent_death) and record it in ``ledger``,
    with the interrupts held back: it is started and recorded, or neither. An interrupt that came meanwhile is
    raised as the block ends, before the caller holds the child: the child is stopped and forgotten first (else it
    ran on, recorded, until this process exited, and the ledger outlived the command)."""
    proc: subprocess.Popen[bytes] | None = None
    try:
        with interrupts_deferred():
            proc = subprocess.Popen(  # noqa: S603 - argv is built by the lab, never a shell string
                list(argv), stdin=subprocess.DEVNULL, close_fds=True,
                preexec_fn=functools.partial(start_program, Parent.here()),  # noqa: PLW1509 - no locks taken
                **popen)
            if ledger is not None:
                ledger.add_process(name, proc.pid, pid_start_ticks(proc.pid), list(argv))
    except KeyboardInterrupt:
        if proc is not None:
            stop_recorded(proc, ledger)
        raise
    assert proc is not None
    return proc


def stop_recorded(proc: subprocess.Popen[bytes], ledger: "Ledger | None") -> None:
    """Stop a child ``start_recorded`` started (SIGTERM, SIGKILL after the grace period), reap it and take it out of
    ``ledger``, with the interrupts held back: an interrupt path calls it, and a second signal must not cut it short."""
    with interrupts_deferred():
        proc.terminate()
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if ledger is not None:
            ledger.forget_process(proc.pid)


@dataclass
class Managed:
    """One process the supervisor started."""

    name: str  # component name, e.g. "s1/sidecar", "lb:server", "collector"
    argv: list[str]
    popen: subprocess.Popen[bytes]
    log: Path
    start_ticks: int | None
    cgroup: Path | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def command_line(self) -> str:
        return shlex.join(self.argv)


@dataclass
class Supervisor:
    """Holds every process of one lab; ``stop_all`` leaves nothing running (checked by pid)."""

    log_dir: Path
    cpu_limiter: CpuLimiter | None = None
    processes: list[Managed] = field(default_factory=list)
    ledger: "Ledger | None" = None  # every pid goes on disk at once: a SIGKILLed command leaves no unknown orphan

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        cpus: str | None = None,
        cpu_limit: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Managed:
        """Start ``argv`` (optionally under ``taskset -c cpus`` and a CPU quota, with ``env`` beside this process's
        environment) and hold it."""
        full = [*(["taskset", "-c", cpus] if cpus else []), *argv]
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_dir / (name.replace("/", "_").replace(":", "_") + ".log")
        with open(log, "ab") as out, interrupts_deferred():  # started, recorded and held, or none of these
            try:
                popen = start_recorded(name, full, self.ledger, stdout=out, stderr=subprocess.STDOUT,
                                       env={**os.environ, **env} if env else None)
            except OSError as exc:
                raise RunFailed(f"lab: cannot start {name} ({shlex.join(full)}): {exc.strerror or exc}") from None
            managed = Managed(name, full, popen, log, pid_start_ticks(popen.pid))
            self.processes.append(managed)
        if cpu_limit is not None:
            if self.cpu_limiter is None:
                raise RunFailed(f"lab: --cpu-limit given but no CPU limiter for {name}")
            managed.cgroup = self.cpu_limiter.limit(name, popen.pid, cpu_limit)
        return managed

    def by_name(self, name: str) -> Managed:
        for managed in self.processes:
            if managed.name == name:
                return managed
        raise KeyError(name)

    def dead(self) -> list[Managed]:
        """Processes that have exited (a lab with any of these is broken)."""
        return [m for m in self.processes if m.popen.poll() is not None]

    def check_alive(self) -> None:
        gone = self.dead()
        if gone:
            first = gone[0]
            tail = _tail(first.log)
            raise RunFailed(
                f"lab: {first.name} (pid {first.pid}) exited with code {first.popen.returncode}; log {first.log}: {tail}"
            )

    def stop_all(self, grace_s: float = STOP_GRACE_S) -> list[int]:
        """SIGTERM every child by pid (reverse start order), SIGKILL stragglers; return pids still alive (none)."""
        for managed in reversed(self.processes):
            if managed.popen.poll() is None:
                try:
                    os.kill(managed.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + grace_s
        for managed in self.processes:
            remaining = max(0.0, deadline - time.monotonic())
            try:
                managed.popen.wait(timeout=remaining)
            except subprocess.TimeoutExpired:
                try:
                    os.kill(managed.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                managed.popen.wait(timeout=grace_s)
        left = [m.pid for m in self.processes if pid_alive(m.pid)]
        if self.ledger is not None:
            for managed in self.processes:
                if managed.pid not in left:
                    self.ledger.forget_process(managed.pid)
        if self.cpu_limiter is not None:
            self.cpu_limiter.cleanup()
        return left


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:]) if text else "(empty log)"


def wait_for_port(port: int, timeout_s: float, supervisor: Supervisor, what: str) -> None:
    """Wait until something accepts TCP connections on 127.0.0.1:port, failing fast when a child died."""
    deadline = time.monotonic() + timeout_s
    while True:
        supervisor.check_alive()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RunFailed(f"lab: {what} did not listen on 127.0.0.1:{port} within {timeout_s:.0f} s")
        time.sleep(0.05)
