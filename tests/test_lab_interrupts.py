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

from meshsim.run_folder import read_manifest

from conftest import alive, require_component, session_members, wait_until  # require_component: fails under CI=true

pytestmark = [pytest.mark.lab, pytest.mark.unmeasured]  # asserts no timing: may run beside the simulations


@pytest.fixture(scope="module")
def binaries() -> None:
    require_component("fortio")
    require_component("envoy")


def start(tmp_path: Path, *argv: str) -> subprocess.Popen[str]:
    """`python -m meshsim ARGV` in its own session, with its own temp folder (TMPDIR) to check for leftovers and
    its own per-user state (XDG_STATE_HOME: where every lab command keeps its ledger)."""
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp"), "XDG_STATE_HOME": str(tmp_path / "xdg-state")}
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return subprocess.Popen([sys.executable, "-m", "meshsim", *argv], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def ledgers(tmp_path: Path) -> list[Path]:
    """The ledgers of the lab commands ``start`` ran (one folder for all of them, whatever their --state-dir)."""
    folder = tmp_path / "xdg-state" / "meshsim" / "lab-ledgers"
    return sorted(folder.glob("run-*.json")) if folder.is_dir() else []


def envoys_and_fortios(sid: int) -> dict[int, str]:
    members = session_members(sid)
    lab = {pid: cmd for pid, cmd in members.items() if "envoy" in cmd.split(" ")[0] or "fortio" in cmd.split(" ")[0]}
    return lab if sum("envoy" in c.split(" ")[0] for c in lab.values()) >= 2 else {}


def lab_run_argv(state: Path, out: Path) -> list[str]:
    return ["lab", "run", "--topology", "single", "--mode", "sidecar", "--rps", "100,100", "--duration", "3",
            "--state-dir", str(state), "--out", str(out)]


@pytest.mark.parametrize("next_command", ["down", "run"])
def test_sigkill_of_lab_run_leaves_nothing_past_the_next_lab_command_of_any_state_folder(binaries, tmp_path,
                                                                                          next_command):
    """What the review found: after SIGKILL of `lab run`, its Envoys and fortio apps ran on, and only a later lab
    command with the same --state-dir stopped them. Now they end with the killed command, and the next lab command,
    given another state folder, removes what it left (its temporary folder, its ledger)."""
    state, out = tmp_path / "state", tmp_path / "runs"
    cli = start(tmp_path, *lab_run_argv(state, out))
    lab = wait_until("two Envoys and a fortio app", lambda: envoys_and_fortios(cli.pid), proc=cli)
    wait_until("the ledger lists them", lambda: ledgers(tmp_path) and {p["pid"] for p in json.loads(
        ledgers(tmp_path)[0].read_text())["processes"]} >= set(lab), proc=cli)
    os.kill(cli.pid, signal.SIGKILL)
    cli.wait(timeout=10)
    cli.stdout.close(), cli.stderr.close()
    wait_until("the killed command's Envoys and fortio apps end with it",
               lambda: not any(alive(pid) for pid in lab), timeout_s=10)
    assert [p.name for p in (tmp_path / "tmp").iterdir() if p.name.startswith("meshsim-lab-")]  # left for the next
    assert len(ledgers(tmp_path)) == 1

    other = tmp_path / "another-state"
    argv = ["lab", "down", "--state-dir", str(other)] if next_command == "down" else \
        ["lab", "run", "--topology", "single", "--mode", "baseline", "--rps", "100", "--duration", "0.5",
         "--state-dir", str(other), "--out", str(tmp_path / "more-runs")]
    after = start(tmp_path, *argv)
    _, stderr = after.communicate(timeout=60)
    assert after.returncode == 0, stderr
    assert f"left by 1 killed lab command(s) (state folder {state.resolve()})" in stderr
    assert session_members(cli.pid) == {} and not any(alive(pid) for pid in lab)
    assert list((tmp_path / "tmp").iterdir()) == []
    assert ledgers(tmp_path) == []


def test_a_lab_command_stops_what_a_killed_one_left_whatever_its_state_folder(tmp_path):
    """Where the kernel sends no parent-death signal (another system, or a child started from a thread that has
    ended), the killed command's processes run on: the next lab command, with another state folder, stops them by
    their ledger -- a real process recorded by a command that is gone."""
    orphan = subprocess.Popen(["sleep", "60"], start_new_session=True)
    gone = subprocess.Popen(["true"])
    gone.wait()
    folder = tmp_path / "xdg-state" / "meshsim" / "lab-ledgers"
    folder.mkdir(parents=True)
    from meshsim.calibrate.measure.lab.ledger import LEDGER_SCHEMA
    from meshsim.calibrate.measure.process_identity import pid_start_ticks

    (folder / f"run-{gone.pid}-1.json").write_text(json.dumps({
        "schema": LEDGER_SCHEMA, "command": "lab run", "state_dir": "/somewhere/else", "owner_pid": gone.pid,
        "owner_start_ticks": 1, "temp_dirs": [],
        "processes": [{"name": "s/app", "pid": orphan.pid, "start_ticks": pid_start_ticks(orphan.pid),
                       "argv": ["sleep", "60"]}]}))
    try:
        down = start(tmp_path, "lab", "down", "--state-dir", str(tmp_path / "mine"))
        _, stderr = down.communicate(timeout=60)
        assert down.returncode == 0, stderr
        assert "stopped 1 processes" in stderr and "(state folder /somewhere/else)" in stderr
        assert orphan.wait(timeout=10) == -signal.SIGTERM
        assert ledgers(tmp_path) == []
    finally:
        orphan.kill()
        orphan.wait()


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
    assert [p.read_text() for p in ledgers(tmp_path)] == []


def test_sigterm_during_lab_up_stops_the_half_started_lab(binaries, tmp_path):
    state = tmp_path / "state"
    cli = start(tmp_path, "lab", "up", "--topology", "chain3", "--mode", "sidecar", "--state-dir", str(state))

    def supervisor_started_something() -> int | None:
        for ledger in ledgers(tmp_path):
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
    assert [p.read_text() for p in ledgers(tmp_path)] == []


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
    assert [p.read_text() for p in ledgers(tmp_path)] == []


def test_reaping_signals_only_the_recorded_process_and_removes_only_lab_temp_folders(tmp_path):
    """A ledger left by a dead command: a pid whose start time differs (a reused pid), one that runs another command
    line than the one recorded, and one recorded without its command line are never signalled; a folder not made by
    the lab is never removed; the recorded process and the lab's temp folder go."""
    from meshsim.calibrate.measure.lab.ledger import LEDGER_SCHEMA, reap_orphans
    from meshsim.calibrate.measure.lab.supervisor import pid_start_ticks

    dead = subprocess.Popen(["true"])
    dead.wait()
    ours = subprocess.Popen(["sleep", "60"])
    # stand for processes that got a recorded pid after a reboot or a reuse
    strangers = [subprocess.Popen(["sleep", "61"]) for _ in range(3)]
    lab_tmp, precious = tmp_path / "meshsim-lab-x1", tmp_path / "precious"
    lab_tmp.mkdir(), precious.mkdir()
    folder = tmp_path / "ledgers"
    folder.mkdir()

    def entry(proc: subprocess.Popen, ticks_off: int = 0, argv: list[str] | None = None) -> dict:
        return {"name": "s/app", "pid": proc.pid, "start_ticks": pid_start_ticks(proc.pid) - ticks_off,
                **({"argv": argv} if argv is not None else {})}

    (folder / f"run-{dead.pid}-1.json").write_text(json.dumps({
        "schema": LEDGER_SCHEMA, "command": "lab run", "owner_pid": dead.pid, "owner_start_ticks": 1,
        "processes": [entry(ours, argv=["sleep", "60"]), entry(strangers[0], 1, ["sleep", "61"]),
                      entry(strangers[1], argv=["envoy", "-c", "61"]), entry(strangers[2])],
        "temp_dirs": [str(lab_tmp), str(precious), "meshsim-lab-relative"]}))
    live = {"schema": LEDGER_SCHEMA, "command": "lab run", "owner_pid": os.getpid(),
            "owner_start_ticks": pid_start_ticks(os.getpid()), "processes": [], "temp_dirs": []}
    (folder / f"run-{os.getpid()}.json").write_text(json.dumps(live))  # a command still running: left alone
    try:
        reaped = reap_orphans(folder)
        assert reaped.pids == (ours.pid,) and reaped.temp_dirs == (str(lab_tmp),)
        assert ours.wait(timeout=5) == -signal.SIGTERM
        assert all(p.poll() is None for p in strangers) and precious.is_dir() and not lab_tmp.exists()
        assert [p.name for p in folder.glob("run-*.json")] == [f"run-{os.getpid()}.json"]
    finally:
        for proc in (ours, *strangers):
            proc.kill()
            proc.wait()


def test_a_launched_program_is_known_by_its_arguments():
    """The lab records what it started; ``taskset -c 0 PROGRAM ARGS`` execs PROGRAM ARGS in its pid, and a
    script runs as INTERPRETER SCRIPT ARGS: still the recorded process. Another program or other arguments are not."""
    from meshsim.calibrate.measure.process_identity import command_line, runs_command

    sleeper = subprocess.Popen(["taskset", "-c", "0", "sleep", "60"])
    try:
        # exactly sleep's arguments: runs_command(pid, ["sleep", "60"]) holds for taskset's too (a suffix), and while
        # taskset execs sleep the pid's command line can read empty (a CI run's first assert failed right after the
        # old wait, most likely in that window)
        wait_until("taskset to exec sleep", lambda: command_line(sleeper.pid) == ["sleep", "60"], 10)
        assert runs_command(sleeper.pid, ["taskset", "-c", "0", "sleep", "60"])
        assert runs_command(sleeper.pid, ["60"])  # `sleep` as an interpreter of the script 60
        assert not runs_command(sleeper.pid, ["taskset", "-c", "0", "sleep", "61"])
        assert not runs_command(sleeper.pid, ["envoy", "60"]) and not runs_command(sleeper.pid, ["sleep"])
        assert not runs_command(sleeper.pid, [])
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_ledger_folder_that_cannot_be_written_is_one_line_naming_it(tmp_path, monkeypatch, capsys):
    """The lab refuses to start what it could not record: a per-user state folder that is a file is one line naming
    it (and the variable that moves it), before any process starts."""
    from meshsim.cli import main

    blocker = tmp_path / "state-is-a-file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_STATE_HOME", str(blocker))
    assert main(["lab", "run", "--topology", "single", "--mode", "baseline", "--rps", "100", "--duration", "0.5",
                 "--state-dir", str(tmp_path / "state"), "--out", str(tmp_path / "runs")]) == 4
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and str(blocker) in lines[0] and "XDG_STATE_HOME" in lines[0], lines
    assert not (tmp_path / "runs").exists()
