"""The detached lab supervisor behind ``meshsim lab up``: it outlives the CLI and holds the lab's processes.

``meshsim lab up`` writes ``spec.json`` into the lab folder and starts this module in its own session; it starts the
lab with its process exporter, writes the lab's Prometheus configuration (``scrape_config``) and ``state.json``
(status ready, pids, ports) and then waits. SIGTERM/SIGINT/SIGHUP (``meshsim lab down``)
stops every process by pid, and the final state (status stopped, pids left alive) is written before it exits.

Run: ``python -m meshsim.calibrate.measure.lab.daemon --lab-dir DIR``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import traceback
from pathlib import Path

from meshsim.errors import MeshsimError

from meshsim.calibrate.measure.lab.ledger import Ledger
from meshsim.calibrate.measure.lab.running import Lab, read_state_data, write_state
from meshsim.calibrate.measure.lab.scrape_config import PROMETHEUS_CONFIG, write_scrape_config
from meshsim.calibrate.measure.lab.spec import LabSpec

SPEC_FILE = "spec.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="meshsim lab supervisor (started by `meshsim lab up`)")
    parser.add_argument("--lab-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    lab_dir: Path = args.lab_dir
    stop = threading.Event()
    ready = threading.Event()

    def on_signal(*_: object) -> None:
        stop.set()
        if not ready.is_set():  # still starting: abort the start (Lab.up stops what it started) instead of finishing it
            raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    lab: Lab | None = None
    ledger = Ledger.open("lab up supervisor", lab_dir)  # a SIGKILLed supervisor's children stay findable
    try:
        spec = LabSpec.from_dict(json.loads((lab_dir / SPEC_FILE).read_text(encoding="utf-8")))
        lab = Lab(spec, lab_dir, ledger=ledger, exporter=True)
        state = lab.up()
        write_scrape_config(state, lab_dir / PROMETHEUS_CONFIG)  # before ready: `lab up` names it
        write_state(lab_dir, state.to_dict())
        ready.set()
        while not stop.wait(0.5):
            pass
        left = lab.down()
        data = read_state_data(lab_dir) or state.to_dict()
        write_state(lab_dir, {**data, "status": "stopped", "left_alive": left})
        ledger.close_if_clear()
        return 0
    except KeyboardInterrupt:
        write_state(lab_dir, {"schema": "meshsim/lab-state/v1", "status": "stopped", "error": "interrupted while "
                              "starting", "left_alive": list(ledger.processes)})
        ledger.close_if_clear()
        return 130
    except (MeshsimError, OSError, ValueError, TypeError, KeyError) as exc:
        message = str(exc) if isinstance(exc, MeshsimError) else f"lab supervisor: {type(exc).__name__}: {exc}"
        traceback.print_exc(file=sys.stderr)  # into daemon.log, for the developer; the CLI shows `message`
        left = []
        if lab is not None:
            try:
                left = lab.down()
            except MeshsimError as down_exc:
                message += f"; {down_exc}"
        write_state(lab_dir, {"schema": "meshsim/lab-state/v1", "status": "failed", "error": message,
                              "left_alive": left})
        ledger.close_if_clear()
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
