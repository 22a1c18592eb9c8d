"""Interrupts with real signals sent to real `meshsim` processes running a real lab (fortio and Envoy).

Each command runs in its own session (start_new_session), so "every process it started" is found without asking
meshsim: every live process whose session id is the command's pid (or, for `lab up`, its supervisor's pid).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from meshsim.runs import read_manifest

from conftest import alive, require_component, session_members, wait_until  # require_component: fails under CI=true

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def binaries() -> None:
    require_component("fortio")
    require_component("envoy")


def start(tmp_path: Path, *argv: str) -> subprocess.Popen[str]:
    """`python -m meshsim ARGV` in its own session, with its own temp folder (TMPDIR) to check for leftovers."""
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return subprocess.Popen([sys.executable, "-m", "meshsim", *argv], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def envoys_and_fortios(sid: int) -> dict[int, str]:
    members = session_members(sid)
    lab = {pid: cmd for pid, cmd in members.items() if "envoy" in cmd.split(" ")[0] or "fortio" in cmd.split(" ")[0]}
    return lab if sum("envoy" in c.split(" ")[0] for c in lab.values()) >= 2 else {}


def lab_run_argv(state: Path, out: Path) -> list[str]:
    return ["lab", "run", "--topology", "single", "--mode", "sidecar", "--rps", "100,100", "--duration", "3",
            "--state-dir", str(state), "--out", str(out)]


def test_sigkill_of_lab_run_leaves_orphans_that_the_next_lab_down_stops(binaries, tmp_path):
    state, out = tmp_path / "state", tmp_path / "runs"
    cli = start(tmp_path, *lab_run_argv(state, out))
    lab = wait_until("two Envoys and a fortio app", lambda: envoys_and_fortios(cli.pid), proc=cli)
    ledger = state / f"run-{cli.pid}.json"
    wait_until("the ledger lists them", lambda: ledger.exists() and
               {p["pid"] for p in json.loads(ledger.read_text())["processes"]} >= set(lab), proc=cli)
    os.kill(cli.pid, signal.SIGKILL)
    cli.wait(timeout=10)
    cli.stdout.close(), cli.stderr.close()
    # What the review found: the CLI is gone, its Envoys and fortio apps are not, its temp folder stays.
    assert all(alive(pid) for pid in lab), lab
    assert [p.name for p in (tmp_path / "tmp").iterdir() if p.name.startswith("meshsim-lab-")]

    down = start(tmp_path, "lab", "down", "--state-dir", str(state))
    stdout, stderr = down.communicate(timeout=60)
    assert down.returncode == 0, stderr
    assert "stopped" in stdout and "killed lab command" in stderr
    assert not any(alive(pid) for pid in lab)
    assert session_members(cli.pid) == {}
    assert list((tmp_path / "tmp").iterdir()) == []
    assert [p.read_text() for p in state.glob("run-*.json")] == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_or_sigint_during_lab_run_stops_everything_and_keeps_the_finished_probe(binaries, tmp_path, sig):
    state, out = tmp_path / "state", tmp_path / "runs"
    cli = start(tmp_path, *lab_run_argv(state, out))
    wait_until("the first run folder", lambda: out.is_dir() and [p for p in out.iterdir() if
                                                                 not p.name.startswith(".")], 90, proc=cli)
    started = session_members(cli.pid)
    wait_until("the second probe's fortio load", lambda: any(" load " in c for c in session_members(cli.pid).values()),
               proc=cli)
    started.update(session_members(cli.pid))
    os.kill(cli.pid, sig)
    _, stderr = cli.communicate(timeout=30)
    assert cli.returncode == 130, stderr
    assert "lab run interrupted; 1 run(s) kept" in stderr and "Traceback" not in stderr
    assert session_members(cli.pid) == {}  # right after the command exits, nothing it started runs
    assert not any(alive(pid) for pid in started if pid != cli.pid)
    assert sum("envoy" in c.split(" ")[0] for c in started.values()) == 2
    folders = [p for p in out.iterdir()]
    assert len(folders) == 1 and read_manifest(folders[0]).status in ("ok", "saturated")
    assert list((tmp_path / "tmp").iterdir()) == []
    assert [p.read_text() for p in state.glob("run-*.json")] == []


def test_sigterm_during_lab_up_stops_the_half_started_lab(binaries, tmp_path):
    state = tmp_path / "state"
    cli = start(tmp_path, "lab", "up", "--topology", "chain3", "--mode", "sidecar", "--state-dir", str(state))

    def supervisor_started_something() -> int | None:
        for ledger in state.glob("run-*.json") if state.is_dir() else ():
            data = json.loads(ledger.read_text())
            if data["command"] == "lab up supervisor" and data["processes"]:
                return int(data["owner_pid"])
        return None

    daemon = wait_until("the supervisor's first process", supervisor_started_something, proc=cli)
    os.kill(cli.pid, signal.SIGTERM)
    _, stderr = cli.communicate(timeout=30)
    assert cli.returncode == 130, stderr
    assert "lab up interrupted" in stderr and "Traceback" not in stderr
    assert not alive(daemon)
    assert session_members(daemon) == {}  # the supervisor's own session: every lab process
    assert [p.read_text() for p in state.glob("run-*.json")] == []


def test_sigterm_during_calibrate_lab_keeps_finished_stages(binaries, tmp_path):
    state, out = tmp_path / "state", tmp_path / "runs"
    cli = start(tmp_path, "calibrate", "--lab", "--lab-rates", "200", "--lab-payloads", "0", "--lab-duration", "1",
                "--lab-no-batching-probe", "--lab-no-burst-probes", "--lab-out", str(out),
                "--lab-state-dir", str(state), "--model-out", str(tmp_path / "model.yaml"))
    wait_until("two run folders", lambda: out.is_dir() and len([p for p in out.iterdir()
                                                               if not p.name.startswith(".")]) >= 2, 120, proc=cli)
    os.kill(cli.pid, signal.SIGTERM)
    _, stderr = cli.communicate(timeout=30)
    assert cli.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert session_members(cli.pid) == {}
    folders = sorted(out.iterdir())
    assert len(folders) >= 2 and all(read_manifest(f).source == "lab" for f in folders)
    assert not (tmp_path / "model.yaml").exists()
    assert list((tmp_path / "tmp").iterdir()) == []
    assert [p.read_text() for p in state.glob("run-*.json")] == []


def test_reaping_signals_only_the_recorded_process_and_removes_only_lab_temp_folders(tmp_path):
    """A ledger left by a dead command: a pid whose start time differs (a reused pid) is never signalled, a folder
    not made by the lab is never removed; the recorded process and the lab's temp folder go."""
    from meshsim.calibrate.measure.lab.ledger import LEDGER_SCHEMA, reap_orphans
    from meshsim.calibrate.measure.lab.supervisor import pid_start_ticks

    dead = subprocess.Popen(["true"])
    dead.wait()
    ours = subprocess.Popen(["sleep", "60"])
    stranger = subprocess.Popen(["sleep", "60"])  # stands for a process that got a recorded pid after a reboot/reuse
    lab_tmp, precious = tmp_path / "meshsim-lab-x1", tmp_path / "precious"
    lab_tmp.mkdir(), precious.mkdir()
    state = tmp_path / "state"
    state.mkdir()
    (state / f"run-{dead.pid}.json").write_text(json.dumps({
        "schema": LEDGER_SCHEMA, "command": "lab run", "owner_pid": dead.pid, "owner_start_ticks": 1,
        "processes": [{"name": "s/sidecar", "pid": ours.pid, "start_ticks": pid_start_ticks(ours.pid)},
                      {"name": "s/app", "pid": stranger.pid, "start_ticks": pid_start_ticks(stranger.pid) - 1}],
        "temp_dirs": [str(lab_tmp), str(precious), "meshsim-lab-relative"]}))
    live = {"schema": LEDGER_SCHEMA, "command": "lab run", "owner_pid": os.getpid(),
            "owner_start_ticks": pid_start_ticks(os.getpid()), "processes": [], "temp_dirs": []}
    (state / f"run-{os.getpid()}.json").write_text(json.dumps(live))  # a command still running: left alone
    try:
        reaped = reap_orphans(state)
        assert reaped.pids == (ours.pid,) and reaped.temp_dirs == (str(lab_tmp),)
        assert ours.wait(timeout=5) == -signal.SIGTERM
        assert stranger.poll() is None and precious.is_dir() and not lab_tmp.exists()
        assert [p.name for p in state.glob("run-*.json")] == [f"run-{os.getpid()}.json"]
    finally:
        for proc in (ours, stranger):
            proc.kill()
            proc.wait()
