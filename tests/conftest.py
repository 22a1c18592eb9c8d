"""Shared test helpers: real components are required under CI=true, optional (skipped with a reason) elsewhere."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from meshsim.errors import ComponentMissing
from meshsim.calibrate.measure.lab.binaries import find_binary


def pytest_configure(config: pytest.Config) -> None:
    """Run as a background job (``.ci/run &`` in a script), the tests would inherit SIGINT ignored (POSIX shells
    start background jobs so), and so would every command they start: the tests that interrupt a real ``meshsim``
    with SIGINT would see it run to the end. An ignored SIGINT becomes Python's own again (an exec resets a handler
    to the default, but not an ignored signal)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The kube tests' control plane (kube-apiserver, etcd, controllers, kwok) runs from the first of them to the end
    # of the session: they come last, so that in a run of everything the lab's measurements never share the cores
    # with it. tools/run-tests.sh runs them in a pytest process of their own beside the simulations (not on an xdist
    # worker: --dist loadgroup did not keep them on one, and two control planes' network namespaces collide).
    items.sort(key=lambda item: item.get_closest_marker("kube") is not None)


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require_component(name: str) -> Path:
    """Path of a real binary; under CI=true a missing one fails the test, elsewhere it skips with the install hint."""
    try:
        return find_binary(name)
    except ComponentMissing as exc:
        if in_ci():
            pytest.fail(f"required component missing under CI=true: {exc}")
        pytest.skip(str(exc))


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def session_members(sid: int) -> dict[int, str]:
    """Live (non-zombie) processes of session ``sid``: pid -> command line. A command started in its own session
    (start_new_session) finds every process it started this way, without asking meshsim."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat(int(entry.name))
        if fields and fields[0] not in ("Z", "X") and int(fields[3]) == sid:
            try:
                out[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
    return out


def alive(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def cpu_ticks(pid: int) -> int:
    """User and system clock ticks ``pid`` has used (0 when it is gone)."""
    fields = _stat(pid)
    return int(fields[11]) + int(fields[12]) if fields else 0


def wait_until(what: str, check, timeout_s: float = 60.0, proc: subprocess.Popen | None = None):
    """Poll ``check`` until it gives something true (returned); fail at the deadline or when ``proc`` exits first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"exited ({proc.returncode}) before {what}: {proc.stderr.read()}")
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def fortio_echo_server(fortio: Path, folder: Path) -> Iterator[int]:
    """A real ``fortio server`` on a free 127.0.0.1 port (HTTP echo only), stopped on exit; yields the port."""
    port = free_port()
    server = subprocess.Popen(
        [str(fortio), "server", "-http-port", f"127.0.0.1:{port}", "-grpc-port", "disabled", "-redirect-port",
         "disabled", "-tcp-port", "disabled", "-udp-port", "disabled"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=folder)
    try:
        for _ in range(50):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        yield port
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.fixture(scope="session")
def kube_control_plane() -> Iterator[object]:
    """The --kube tests' kube-apiserver, etcd, scheduler, controller-manager and kwok (tests/kube_cluster.py)."""
    from kube_cluster import control_plane_for_session

    yield from control_plane_for_session()
