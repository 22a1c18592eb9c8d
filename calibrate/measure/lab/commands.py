"""The lab's library entry points, one per CLI command: ``lab_up``, ``lab_probe``, ``lab_down``, ``lab_run``.

``lab_up`` daemonises a supervisor (``meshsim.calibrate.measure.lab.daemon``) so the lab keeps running after the CLI exits;
its state (pids, ports, commands) lives in ``state.json`` under the lab folder (default ``.meshsim-lab/``), which
``lab_probe`` and ``lab_down`` read. ``lab_run`` does up -> probes -> down inside one process and needs no daemon;
it records every pid and temporary folder in a ledger (``ledger.py``; one folder per user for every lab command,
whatever its state folder), and every lab command first stops what any killed lab command left behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

from meshsim.errors import FieldError, Interrupted, MeshsimError, RunFailed
from meshsim.outputs import check_folder

from meshsim.calibrate.measure.lab.daemon import SPEC_FILE
from meshsim.calibrate.measure.lab.ledger import Ledger, Reaped, reap_orphans
from meshsim.calibrate.measure.lab.running import STATE_FILE, Lab, LabState, read_state_data
from meshsim.calibrate.measure.lab.scrape_config import PROMETHEUS_CONFIG
from meshsim.calibrate.measure.lab.probe import DEFAULT_OUT, ProbeResult, ProbeSettings, probe
from meshsim.calibrate.measure.lab.spec import LabSpec
from meshsim.calibrate.measure.lab.supervisor import interrupts_deferred, pid_alive, pid_start_ticks
from meshsim.calibrate.measure.process_identity import same_started_process
from meshsim.progress import Progress

DEFAULT_LAB_DIR = Path(".meshsim-lab")
UP_TIMEOUT_S = 40.0
DOWN_TIMEOUT_S = 15.0


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _daemon_alive(data: dict) -> bool:
    pid = data.get("daemon_pid")
    return bool(pid) and pid_alive(int(pid)) and pid_start_ticks(int(pid)) == data.get("daemon_start_ticks")


def _alive(processes: list[dict]) -> list[int]:
    """Recorded pids that still run the same process (same start time and command line: pids get reused)."""
    return [p["pid"] for p in processes if same_started_process(p["pid"], p.get("start_ticks"), p.get("command"))]


def check_lab_targets(state_dir: Path, out_dir: Path | None = None) -> None:
    """Before a lab starts: its state folder and the folder for its run folders can be written (OutputError naming
    the option otherwise), so a lab is never started only to find that nothing it measures can be stored."""
    check_folder(state_dir, "state_dir")
    if out_dir is not None:
        check_folder(out_dir, "out")


def reap(progress: Progress | None = _stderr) -> Reaped:
    """Stop what lab commands killed before they could clean up left behind, whatever their state folder, and say
    so."""
    reaped = reap_orphans()
    if progress and reaped.ledgers:
        progress(f"lab: stopped {len(reaped.pids)} processes and removed {len(reaped.temp_dirs)} temporary folders "
                 f"left by {len(reaped.ledgers)} killed lab command(s) (state folder "
                 f"{', '.join(reaped.state_dirs)})")
    return reaped


def lab_up(spec: LabSpec, lab_dir: Path = DEFAULT_LAB_DIR, timeout_s: float = UP_TIMEOUT_S) -> LabState:
    """Start a detached lab supervisor; return once every process listens (RunFailed with its reason otherwise)."""
    lab_dir = Path(lab_dir).resolve()
    check_lab_targets(lab_dir)
    reap()
    existing = read_state_data(lab_dir)
    if existing and (_daemon_alive(existing) or _alive(existing.get("processes") or [])):
        raise FieldError("state_dir", f"{lab_dir}: a lab is already up there (supervisor pid "
                                      f"{existing.get('daemon_pid')}); bring it down first (lab down)")
    lab_dir.mkdir(parents=True, exist_ok=True)
    (lab_dir / STATE_FILE).unlink(missing_ok=True)
    (lab_dir / PROMETHEUS_CONFIG).unlink(missing_ok=True)  # an older lab's ports: written anew once this one is up
    (lab_dir / SPEC_FILE).write_text(json.dumps(spec.to_dict()), encoding="utf-8")
    with open(lab_dir / "daemon.log", "ab") as log:
        daemon = subprocess.Popen(  # noqa: S603
            [sys.executable, "-m", "meshsim.calibrate.measure.lab.daemon", "--lab-dir", str(lab_dir)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
            # not the caller's cwd: run from a source checkout, `-m` would import its meshsim/ folder, which
            # holds only the CLI (the installed package maps calibrate/ and sim/ under meshsim.)
            cwd=lab_dir,
        )
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            data = read_state_data(lab_dir)
            if data and data.get("status") == "ready":
                return LabState.from_dict(data)
            if data and data.get("status") == "failed":
                daemon.wait(timeout=DOWN_TIMEOUT_S)
                raise RunFailed(data.get("error") or f"lab up failed; see {lab_dir / 'daemon.log'}")
            if daemon.poll() is not None:
                raise RunFailed(f"lab up: the supervisor exited with code {daemon.returncode}; "
                                f"see {lab_dir / 'daemon.log'}")
            if time.monotonic() > deadline:
                daemon.send_signal(signal.SIGTERM)
                daemon.wait(timeout=DOWN_TIMEOUT_S)
                raise RunFailed(f"lab up: not ready within {timeout_s:.0f} s; see {lab_dir / 'daemon.log'}")
            time.sleep(0.05)
    except KeyboardInterrupt:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=DOWN_TIMEOUT_S)
        raise Interrupted("lab up interrupted; the lab was stopped") from None


def read_lab(lab_dir: Path = DEFAULT_LAB_DIR) -> LabState:
    """The state of a lab started by ``lab_up`` (MeshsimError when there is none)."""
    lab_dir = Path(lab_dir).resolve()
    data = read_state_data(lab_dir)
    if data is None or data.get("status") != "ready":
        status = "no lab" if data is None else f"lab status {data.get('status')!r}"
        raise FieldError("state_dir", f"{lab_dir}: {status}; start one there first (lab up)")
    return LabState.from_dict(data)


def lab_probe(settings: ProbeSettings, lab_dir: Path = DEFAULT_LAB_DIR, out_dir: Path = DEFAULT_OUT) -> ProbeResult:
    reap()
    state = read_lab(lab_dir)
    check_lab_targets(Path(lab_dir), Path(out_dir))
    ledger = Ledger.open("lab probe", Path(lab_dir))  # the load generator and the probe's temporary folder
    try:
        result = probe(state, settings, Path(out_dir), ledger)
    finally:
        with interrupts_deferred():
            ledger.close_if_clear()
    return result


def lab_down(lab_dir: Path = DEFAULT_LAB_DIR, timeout_s: float = DOWN_TIMEOUT_S) -> list[int]:
    """Stop the lab's supervisor, then make sure every pid it recorded is gone; return the pids that were stopped."""
    lab_dir = Path(lab_dir).resolve()
    reaped = list(reap().pids)  # what killed lab commands (and a killed supervisor's start) left
    data = read_state_data(lab_dir)
    if data is None:
        return reaped  # nothing was up: down is idempotent
    processes = [*(data.get("processes") or []), *([data["exporter"]] if data.get("exporter") else [])]
    daemon_pid = data.get("daemon_pid")
    if _daemon_alive(data):
        os.kill(int(daemon_pid), signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while pid_alive(int(daemon_pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
    # A supervisor that crashed or was killed leaves its children: stop those by pid (same start time = same process).
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in _alive(processes):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline and _alive(processes):
            time.sleep(0.05)
    left = _alive(processes)
    if _daemon_alive(data):
        left.append(int(daemon_pid))
    if left:
        raise RunFailed(f"lab down: pids still alive after SIGKILL: {left}")
    (lab_dir / STATE_FILE).unlink(missing_ok=True)
    return reaped + [p["pid"] for p in processes] + ([int(daemon_pid)] if daemon_pid else [])


def _probe_line(index: int, count: int, settings: ProbeSettings, result: ProbeResult) -> str:
    s = result.summary()
    return (f"probe {index}/{count}: {settings.rps:g} rps c={settings.connections} {settings.payload_bytes} B -> "
            f"p50 {s['p50_ms']} p90 {s['p90_ms']} p99 {s['p99_ms']} ms [{s['status']}] {result.folder}")


def lab_run(
    spec: LabSpec,
    probes: Sequence[ProbeSettings],
    out_dir: Path = DEFAULT_OUT,
    lab_dir: Path | None = None,
    progress: Progress | None = _stderr,
    state_dir: Path = DEFAULT_LAB_DIR,
) -> list[ProbeResult]:
    """Up -> each probe -> down in this process; runs already stored stay stored when a later one fails or the
    command is interrupted. Every pid and temporary folder is in a ledger until it is gone, so a SIGKILL leaves
    nothing the next lab command cannot find, whatever its ``state_dir`` (see ``reap``)."""
    check_lab_targets(Path(state_dir), Path(out_dir))
    reap(progress)
    results: list[ProbeResult] = []
    ledger: Ledger | None = None
    work: tempfile.TemporaryDirectory[str] | None = None
    try:
        with interrupts_deferred():  # an interrupt cannot fall between making the temp folder and recording it
            ledger = Ledger.open("lab run", Path(state_dir))
            work = tempfile.TemporaryDirectory(prefix="meshsim-lab-")
            ledger.add_temp_dir(Path(work.name))
        lab = Lab(spec, Path(lab_dir) if lab_dir else Path(work.name), ledger=ledger)
        try:
            state = lab.up()
            if progress:
                progress(f"lab up: {spec.topology} {spec.mode}, {len(state.processes)} processes, "
                         f"entry {state.entry_url}")
            for index, settings in enumerate(probes, 1):
                result = probe(state, settings, Path(out_dir), ledger)
                results.append(result)
                if progress:
                    progress(_probe_line(index, len(probes), settings, result))
        except (KeyboardInterrupt, Interrupted):
            raise Interrupted(f"lab run interrupted; {len(results)} run(s) kept in {out_dir}, every lab process "
                              f"stopped") from None
        finally:
            with interrupts_deferred():  # a signal during the stop must not cut it short (it is bounded: SIGKILL)
                lab.down()
    except KeyboardInterrupt:  # before the lab started
        raise Interrupted(f"lab run interrupted; {len(results)} run(s) kept in {out_dir}") from None
    finally:
        # held back too: an interrupt landing here (a stage that had just ended) once left the ledger behind
        with interrupts_deferred():
            if work is not None:
                work.cleanup()
            if ledger is not None:
                ledger.close_if_clear()  # else the next lab command stops what is left from the ledger
    return results
