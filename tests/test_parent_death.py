"""Workers end with the command that forked them, even when it is killed with SIGKILL (meshsim/parent_death.py).

The review found the workers of a SIGKILLed `meshsim sweep` and `meshsim predict --processes 2` running on under
PID 1 52 s later. Each command here runs in its own session, so its workers are found by session id, not through
meshsim.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from meshsim.parent_death import Parent, start_worker

from conftest import alive, cpu_ticks, session_members, wait_until

SIMULATING_TICKS = 20  # CPU ticks (0.2 s at 100 Hz) each worker has used: it is inside a simulation


def _kill_while_workers_simulate(argv: list[str], cwd: Path) -> tuple[int, dict[int, str]]:
    """Start ``meshsim ARGV`` in its own session and SIGKILL it once two workers of it are simulating; its pid (the
    session's id) and its workers."""
    on_disk = subprocess.run([sys.executable, "-c", "from meshsim.sim.fast.fast_native import loop_on_disk; "
                              "print(loop_on_disk())"], cwd=cwd, capture_output=True, text=True, timeout=60)
    # else the command spends minutes building it before any worker starts, and the wait below times out
    assert on_disk.stdout.strip() == "True", ("the compiled engine of the meshsim imported outside the checkout is not "
                                              f"built (tools/setup-test-env.sh builds it): {on_disk.stderr[-500:]}")
    cli = subprocess.Popen([sys.executable, "-m", "meshsim", *argv], cwd=cwd, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        def busy_workers() -> dict[int, str]:
            workers = {pid: cmd for pid, cmd in session_members(cli.pid).items() if pid != cli.pid}
            busy = {pid: cmd for pid, cmd in workers.items() if cpu_ticks(pid) >= SIMULATING_TICKS}
            return busy if len(busy) == 2 else {}

        workers = wait_until("two workers simulating", busy_workers, timeout_s=60, proc=cli)
        os.kill(cli.pid, signal.SIGKILL)
        cli.wait(timeout=10)
        return cli.pid, workers
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
        cli.stderr.close()


@pytest.mark.parametrize("argv", [
    ["sweep", "--topology", "chain3", "--mesh", "istio", "--rps", "200:1600:8", "--duration", "20",
     "--processes", "2", "--seed", "9", "--out", "o.csv", "--cache", "cache", "--no-progress"],
    ["predict", "--topology", "chain3", "--mesh", "istio", "--rps", "1000", "--duration", "20", "--processes", "2",
     "--replications", "40"],
], ids=["sweep", "predict"])
def test_sigkill_of_the_command_ends_its_workers(tmp_path: Path, argv: list[str]) -> None:
    session, workers = _kill_while_workers_simulate(argv, tmp_path)
    try:
        wait_until("the workers to end with the command", lambda: not any(alive(pid) for pid in workers), 10)
        assert session_members(session) == {}
    finally:
        for pid in session_members(session):  # a failed test leaves nothing running either
            os.kill(pid, signal.SIGKILL)


CHILD_OF_A_SHORT_LIVED_PARENT = textwrap.dedent("""
    import os, pathlib, signal, time
    from meshsim.parent_death import Parent, die_with_parent

    folder = pathlib.Path({folder!r})
    parent = Parent(os.getpid(), main_thread={main_thread})
    child = os.fork()
    if child == 0:
        while {wait_for_orphaning} and os.getppid() == parent.pid:
            time.sleep(0.01)
        die_with_parent(parent)
        (folder / "past-die-with-parent").write_text("yes")
        time.sleep(60)
        os._exit(0)
    (folder / "child").write_text(str(child))
    while not {wait_for_orphaning} and not (folder / "past-die-with-parent").exists():
        time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def _short_lived_parent(folder: Path, main_thread: bool, wait_for_orphaning: bool) -> int:
    """A parent that forks a worker and dies by SIGKILL (before the worker calls ``die_with_parent`` when
    ``wait_for_orphaning``, else after); the worker's pid."""
    script = CHILD_OF_A_SHORT_LIVED_PARENT.format(folder=str(folder), main_thread=main_thread,
                                                  wait_for_orphaning=wait_for_orphaning)
    parent = subprocess.run([sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, timeout=60)
    assert parent.returncode == -signal.SIGKILL, parent.stderr
    return int((folder / "child").read_text())


def test_a_worker_whose_parent_died_before_it_asked_ends_at_once(tmp_path: Path) -> None:
    """The race the getppid check closes: the parent is gone before the worker asks for the signal."""
    worker = _short_lived_parent(tmp_path, main_thread=True, wait_for_orphaning=True)
    try:
        wait_until("the orphaned worker to end", lambda: not alive(worker), 10)
        assert not (tmp_path / "past-die-with-parent").exists()
    finally:
        if alive(worker):
            os.kill(worker, signal.SIGKILL)


@pytest.mark.parametrize("main_thread", [True, False], ids=["kernel-signal", "watching-thread"])
def test_a_worker_ends_soon_after_a_sigkill_of_its_parent(tmp_path: Path, main_thread: bool) -> None:
    """Forked from the main thread the kernel kills the worker; forked from another thread (whose end would fire
    the kernel's signal too early) it watches its parent from a thread of its own."""
    worker = _short_lived_parent(tmp_path, main_thread=main_thread, wait_for_orphaning=False)
    try:
        assert (tmp_path / "past-die-with-parent").exists()
        wait_until("the worker to end with its parent", lambda: not alive(worker), 10)
    finally:
        if alive(worker):
            os.kill(worker, signal.SIGKILL)


def test_a_pool_forked_from_a_thread_that_ended_keeps_its_workers() -> None:
    """The kernel's parent-death signal follows the thread that forked: a pool made in a thread that has ended
    must keep working (its workers watch the process instead)."""
    pools: list[ProcessPoolExecutor] = []

    def make_pool() -> None:
        pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("fork"),
                                   initializer=start_worker, initargs=(Parent.here(),))
        pools.append(pool)
        pool.submit(os.getpid).result(timeout=30)

    thread = threading.Thread(target=make_pool)
    thread.start()
    thread.join()
    wait_until("the thread to be gone", lambda: not Path(f"/proc/self/task/{thread.native_id}").exists(), 10)
    try:
        first = pools[0].submit(os.getpid).result(timeout=30)
        assert alive(first) and pools[0].submit(os.getpid).result(timeout=30) == first
    finally:
        pools[0].shutdown()


FIXTURE_THAT_IS_KILLED = textwrap.dedent("""
    import os, pathlib, signal, sys, time
    sys.path.insert(0, {tests!r})
    from kube_cluster import ControlPlane, spawn

    folder = pathlib.Path({folder!r})
    cp = ControlPlane(workdir=folder, kubeconfig=folder / "kubeconfig", host="")
    program = spawn(cp, "sleeper", ["sleep", "600"])
    (folder / "program").write_text(str(program.pid))
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_the_kube_fixtures_programs_end_with_a_killed_pytest(tmp_path: Path) -> None:
    """A pytest killed during the --kube tests left etcd, kube-apiserver, the scheduler, the controller-manager, kwok
    and fortio under PID 1: the fixture starts each through ``kube_cluster.spawn``, which asks for the kernel's
    parent-death signal. Checked with a program that would run ten minutes, started as the fixture starts them by a
    process that is then SIGKILLed (the same preexec_fn whatever the program; no cluster needed)."""
    script = FIXTURE_THAT_IS_KILLED.format(tests=str(Path(__file__).parent), folder=str(tmp_path))
    parent = subprocess.run([sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, timeout=60)
    assert parent.returncode == -signal.SIGKILL, parent.stderr
    program = int((tmp_path / "program").read_text())
    try:
        wait_until("the fixture's program to end with its parent", lambda: not alive(program), 10)
    finally:
        if alive(program):
            os.kill(program, signal.SIGKILL)
