"""Bad lab and lab-calibration flags: refused before any process starts, in one line naming the flag, with exit
status 2; no lab state or run folder is created."""

from __future__ import annotations

from pathlib import Path

import pytest

from refusals import cli_refuses


LAB_CASES = [
    (["lab", "run", "--rps", "nan"], "--rps: every rate must be a finite number > 0, got nan"),
    (["lab", "run", "--duration", "nan"], "--duration: must be a finite number > 0 seconds, got nan"),
    (["lab", "run", "--duration", "inf"], "--duration: must be a finite number > 0 seconds, got inf"),
    (["lab", "probe", "--rps", "nan"], "--rps: must be a finite number >= 0 (0 = as fast as possible), got nan"),
    (["calibrate", "--lab", "--lab-duration", "-3"], "--lab-duration: must be a finite number > 0 seconds, got -3"),
    (["lab", "probe", "--leaf-delay", "nan"], "--leaf-delay: must be 0..1000 ms (fortio echo's delay limit), got nan"),
    (["lab", "run", "--trace-backend", "jaeger"], "--trace-backend: jaeger: needs mode tracing, got sidecar"),
    (["calibrate", "--lab", "--lab-workers", "0"], "--lab-workers: must be 1..64, got 0"),
]


@pytest.mark.parametrize(("args", "needle"), LAB_CASES)
def test_lab_values_are_refused_before_any_process_starts(capsys, tmp_path: Path, args: list[str],
                                                          needle: str) -> None:
    state, out = tmp_path / "state", tmp_path / "runs"
    where = (["--lab-state-dir", str(state), "--lab-out", str(out)] if args[0] == "calibrate"
             else ["--state-dir", str(state), "--out", str(out)])
    cli_refuses(capsys, [*args, *where], needle)
    assert not state.exists() and not out.exists()  # no lab was started, nothing was stored
