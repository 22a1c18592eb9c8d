"""Output faults on the real CLI (issue 29, group 1): every file, folder and stream a command writes fails in one line
naming the option, the path and the cause, with a nonzero exit; a fifo or a device is never replaced; what was
computed before the failure stays (the table on stdout, the sweep cache's points).

No root-only tricks: a fifo, a file where a folder is expected and a missing folder are made by the test, a full
device is /dev/full, a failure at write time is a file-size limit (RLIMIT_FSIZE), a broken pipe is a pipe whose
reader is gone. A character device is made with mknod where the test may (skipped elsewhere). The lab commands are
only pointed at bad paths: they refuse before any process starts.
"""

from __future__ import annotations

import json
import os
import resource
import stat
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from meshsim.cli import main

ROOT = Path(__file__).resolve().parents[1]
MODEL = str(ROOT / "models" / "meshes" / "istio-1.2.yaml")
RUN = str(ROOT / "measurements" / "istio-1.2.0" / "istio-1.2.0-c1-qps1000-baseline")
PREDICT = ["predict", "--rps", "100", "--replications", "2", "--duration", "1"]
VALIDATE = ["validate", "--model", MODEL, RUN, "--replications", "2", "--sim-duration", "2"]
SWEEP = ["sweep", "--rps", "100:200:2", "--duration", "1", "--no-progress", "--cache", "{tmp}/cache"]
FIT = ["fit", RUN, "--mesh", "x"]
STUDY = ["study", "run", "istio-features", "--short"]
CALIBRATE = ["calibrate", "--lab"]

# options naming a file: the command line up to the option, whose value is the bad target
FILE_OPTIONS = {
    "--timeseries-csv": PREDICT + ["--timeseries", "0.5", "--timeseries-csv"],
    "--html": VALIDATE + ["--html"],
    "--out": SWEEP + ["--out"],
    "sweep --html": SWEEP + ["--out", "{tmp}/ok.csv", "--html"],
    "fit --out": FIT + ["--out"],
    "study --html": STUDY + ["--html"],
    "lab validate --html": ["lab", "validate", "--plan", "small", "--out", "{tmp}/lv", "--html"],
    "--model-out": CALIBRATE + ["--lab-out", "{tmp}/runs", "--lab-state-dir", "{tmp}/state", "--model-out"],
}
MAKES_FOLDERS = {"--model-out"}  # its missing folder is made (models/meshes/ in a fresh checkout)
# options naming a folder
FOLDER_OPTIONS = {
    "--cache": SWEEP[:-2] + ["--out", "{tmp}/ok.csv", "--cache"],
    "--report": FIT + ["--out", "{tmp}/ok.yaml", "--report"],
    "study --out": STUDY + ["--out"],
    "lab run --out": ["lab", "run", "--state-dir", "{tmp}/state", "--out"],
    "lab run --state-dir": ["lab", "run", "--out", "{tmp}/runs", "--state-dir"],
    "lab up --state-dir": ["lab", "up", "--state-dir"],
    "lab validate --out": ["lab", "validate", "--plan", "small", "--out"],
    "--lab-out": CALIBRATE + ["--lab-state-dir", "{tmp}/state", "--lab-out"],
    "--lab-state-dir": CALIBRATE + ["--lab-out", "{tmp}/runs", "--lab-state-dir"],
}


def _fifo(tmp: Path, name: str = "fifo") -> Path:
    os.mkfifo(tmp / name)
    return tmp / name


def _char_device(tmp: Path, name: str = "dev") -> Path:
    """A character device of the test's own (major 1, minor 3: what /dev/null is), where mknod is allowed."""
    try:
        os.mknod(tmp / name, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("mknod of a character device is not allowed here")
    return tmp / name


def _folder(tmp: Path, name: str = "folder") -> Path:
    (tmp / name).mkdir()
    (tmp / name / "kept").write_text("x")
    return tmp / name


def _regular_file(tmp: Path, name: str = "file") -> Path:
    (tmp / name).write_text("kept")
    return tmp / name


def _under_a_file(tmp: Path, name: str = "x") -> Path:
    return _regular_file(tmp) / name


def _in_missing_folder(tmp: Path, name: str = "x") -> Path:
    return tmp / "missing" / name


# bad target -> (how to make it, words the error must hold); file targets are named *.csv, as sweep --out wants
FILE_TARGETS: dict[str, tuple[Callable[[Path, str], Path], str]] = {
    "fifo": (_fifo, "it is a fifo, not a regular file"),
    "character device": (_char_device, "it is a character device, not a regular file"),
    "folder": (_folder, "it is a folder, not a regular file"),
    "under a file": (_under_a_file, "file is a regular file, not a folder"),
    "missing folder": (_in_missing_folder, "does not exist"),
}
FOLDER_TARGETS: dict[str, tuple[Callable[[Path], Path], str]] = {
    "fifo": (_fifo, "it is a fifo, not a folder"),
    "character device": (_char_device, "it is a character device, not a folder"),
    "regular file": (_regular_file, "it is a regular file, not a folder"),
    "under a file": (_under_a_file, "file is a regular file, not a folder"),
}


def _state(path: Path) -> tuple[int, tuple[str, ...]] | None:
    """What is at ``path`` (file type, folder entries), to see that a refused target was left alone."""
    if not os.path.lexists(path):
        return None
    mode = os.lstat(path).st_mode
    return stat.S_IFMT(mode), tuple(sorted(os.listdir(path))) if stat.S_ISDIR(mode) else ()


def _line(args: list[str], tmp: Path) -> list[str]:
    return [a.replace("{tmp}", str(tmp)) for a in args]


@pytest.fixture(autouse=True)
def no_lab_binaries(tmp_path: Path, monkeypatch) -> None:
    """Should a lab command get past its checks, it fails at once for want of fortio instead of measuring."""
    monkeypatch.setenv("MESHSIM_BIN", str(tmp_path / "no-bin"))
    monkeypatch.setenv("GOPATH", str(tmp_path / "no-go"))
    monkeypatch.delenv("GOBIN", raising=False)
    monkeypatch.setenv("PATH", os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                                               if p and not (Path(p) / "fortio").exists()))


def _refused(option: str, args: list[str], target: Path, cause: str, tmp: Path, capsys) -> None:
    blocker = target if os.path.lexists(target) else target.parent
    before = _state(blocker)
    assert main(_line(args, tmp) + [str(target)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    flag = option.split()[-1]
    assert len(err) == 1 and err[0].startswith(f"meshsim: error: {flag}: cannot write {target}: "), err
    assert cause in err[0], err
    assert _state(blocker) == before  # not replaced, not written into
    assert not os.path.lexists(tmp / "missing")  # a missing folder is not made for a refused command


@pytest.mark.parametrize("kind", FILE_TARGETS)
@pytest.mark.parametrize("option", FILE_OPTIONS)
def test_a_file_option_refuses_a_bad_target_before_any_work(option: str, kind: str, tmp_path: Path, capsys) -> None:
    if option in MAKES_FOLDERS and kind == "missing folder":
        pytest.skip(f"{option} makes its folder")
    make, cause = FILE_TARGETS[kind]
    _refused(option, FILE_OPTIONS[option], make(tmp_path, "out.csv"), cause, tmp_path, capsys)


@pytest.mark.parametrize("kind", FOLDER_TARGETS)
@pytest.mark.parametrize("option", FOLDER_OPTIONS)
def test_a_folder_option_refuses_a_bad_target_before_any_work(option: str, kind: str, tmp_path: Path,
                                                              capsys) -> None:
    make, cause = FOLDER_TARGETS[kind]
    _refused(option, FOLDER_OPTIONS[option], make(tmp_path), cause, tmp_path, capsys)


@pytest.mark.parametrize("make", [_fifo, _char_device], ids=["fifo", "character device"])
@pytest.mark.parametrize("command", [FIT + ["--out"], VALIDATE + ["--html"]], ids=["fit --out", "validate --html"])
def test_the_device_stays_a_device(command: list[str], make: Callable[[Path], Path], tmp_path: Path, capsys) -> None:
    """The review's worst case: these two renamed a temporary file over a character device and exited 0."""
    target = make(tmp_path)
    kind = stat.S_IFMT(os.lstat(target).st_mode)
    assert main(command + [str(target)]) != 0
    assert stat.S_IFMT(os.lstat(target).st_mode) == kind
    assert "not a regular file" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]  # no temporary file left beside it


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a folder whatever its mode says")
def test_a_read_only_folder_is_refused_before_any_work(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o555)
    assert main(VALIDATE + ["--html", str(folder / "x.html")]) == 2
    assert "permission denied" in capsys.readouterr().err


# --- the result on stdout ---------------------------------------------------------------------------------------

STDOUT_COMMANDS = {
    "predict": PREDICT + ["--json"],
    "validate": VALIDATE + ["--json"],
    "capacity": ["capacity", "--slo", "p99=50ms", "--replications", "2", "--duration", "1", "--json"],
    "factorial": ["factorial", "--factor", "mtls", "--replications", "2", "--rps", "100", "--duration", "1",
                  "--json"],
    "study": ["study", "list"],
    "study table": ["study", "table", str(ROOT / "docs" / "studies")],
    "sweep": SWEEP + ["--out", "{tmp}/s.csv"],
    "lab": ["lab", "down", "--state-dir", "{tmp}/no-lab"],
}


@pytest.mark.parametrize("command", STDOUT_COMMANDS)
def test_a_full_stdout_is_an_error(command: str, monkeypatch, tmp_path: Path, capsys) -> None:
    with open("/dev/full", "w", encoding="utf-8") as full:
        monkeypatch.setattr(sys, "stdout", full)  # in the test: capsys sets its own stdout when the test starts
        assert main(_line(STDOUT_COMMANDS[command], tmp_path)) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == \
        "meshsim: error: stdout: cannot write the result: the device is full"


@pytest.mark.parametrize("command", STDOUT_COMMANDS)
def test_a_closed_stdout_is_refused_before_any_work(command: str, monkeypatch, tmp_path: Path, capsys) -> None:
    monkeypatch.setattr(sys, "stdout", None)  # what Python makes of a closed descriptor 1 (`>&-`)
    assert main(_line(STDOUT_COMMANDS[command], tmp_path)) == 2
    assert capsys.readouterr().err == "meshsim: error: stdout: cannot write the result: stdout is closed\n"
    assert not (tmp_path / "cache").exists()  # sweep: refused before the first point


@pytest.mark.parametrize("command", ["predict", "sweep", "lab", "study table"])
def test_a_broken_pipe_is_an_error(command: str, monkeypatch, tmp_path: Path, capsys) -> None:
    read, write = os.pipe()
    os.close(read)  # the reader has gone
    with os.fdopen(write, "w") as pipe:
        monkeypatch.setattr(sys, "stdout", pipe)
        assert main(_line(STDOUT_COMMANDS[command], tmp_path)) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith("broken pipe (the reader has gone)")


def _meshsim(args: list[str], *, file_size: int | None = None, **kwargs) -> subprocess.CompletedProcess[str]:
    """The real command in a process of its own, optionally under a file-size limit (RLIMIT_FSIZE)."""
    def limit() -> None:
        if file_size is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))

    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}  # the limit is for meshsim's outputs, not for .pyc files
    return subprocess.run([sys.executable, "-m", "meshsim", *args], preexec_fn=limit, env=env, text=True,
                          timeout=120, **kwargs)


def test_the_process_exits_nonzero_with_one_line(tmp_path: Path) -> None:
    """The exit status of the whole process: the interpreter's last flush must not fail again (exit 120)."""
    with open("/dev/full", "w") as full:
        p = _meshsim(PREDICT + ["--json"], stdout=full, stderr=subprocess.PIPE)
    assert (p.returncode, p.stderr) == (2, "meshsim: error: stdout: cannot write the result: the device is full\n")
    p = subprocess.run(f"exec {sys.executable} -m meshsim {' '.join(PREDICT)} --json >&-", shell=True,
                       capture_output=True, text=True, timeout=120)
    assert (p.returncode, p.stderr) == (2, "meshsim: error: stdout: cannot write the result: stdout is closed\n")
    with subprocess.Popen([sys.executable, "-m", "meshsim", *PREDICT, "--json"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:
        proc.stdout.close()  # type: ignore[union-attr]  # the reader goes before the result is written
        err = proc.stderr.read()  # type: ignore[union-attr]
    assert (proc.returncode, err) == (2, "meshsim: error: stdout: cannot write the result: broken pipe (the reader "
                                         "has gone)\n")


# --- a failure at write time: what was computed stays ------------------------------------------------------------

def test_a_csv_over_the_file_size_limit_keeps_the_prediction_on_stdout(tmp_path: Path) -> None:
    csv = tmp_path / "series.csv"
    p = _meshsim(PREDICT + ["--timeseries", "0.5", "--timeseries-csv", str(csv), "--json"], file_size=200,
                 capture_output=True)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines()[-1] == \
        f"meshsim: error: --timeseries-csv: cannot write {csv}: the file-size limit was reached"
    assert json.loads(p.stdout)["latency_ms"]["p99"] > 0  # the prediction is printed all the same
    assert list(tmp_path.iterdir()) == []  # no CSV, no half CSV, no temporary file


def test_an_html_report_over_the_limit_keeps_the_table(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    p = _meshsim(VALIDATE + ["--html", str(page)], file_size=1000, capture_output=True)
    assert p.returncode == 2 and "istio-1.2.0-c1-qps1000-baseline  FIT" in p.stdout
    assert p.stderr.strip().splitlines()[-1] == \
        f"meshsim: error: --html: cannot write {page}: the file-size limit was reached"
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_keeps_its_finished_points_when_the_output_cannot_be_written(tmp_path: Path) -> None:
    out, line = tmp_path / "s.csv", _line(SWEEP, tmp_path)
    # a cached point is about 900 bytes, the table of two about 1400
    p = _meshsim(line + ["--out", str(out)], file_size=1100, capture_output=True)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines()[-1] == f"meshsim: error: --out: cannot write {out}: the file-size limit " \
                                                "was reached"
    assert len(list((tmp_path / "cache").rglob("*.json"))) == 2 and not out.exists()
    p = _meshsim(line + ["--out", str(out)], capture_output=True)
    assert p.returncode == 0 and "(0 computed, 2 from the cache)" in p.stdout
    assert len(out.read_text().splitlines()) == 3


def test_a_cache_that_cannot_take_a_point_is_named(tmp_path: Path) -> None:
    p = _meshsim(_line(SWEEP, tmp_path) + ["--out", str(tmp_path / "s.csv")], file_size=500, capture_output=True)
    last = p.stderr.strip().splitlines()[-1]
    assert p.returncode == 2 and last.startswith(f"meshsim: error: --cache: cannot write {tmp_path}/cache/")
    assert last.endswith("the file-size limit was reached")
    assert not list((tmp_path / "cache").rglob("*.json*"))  # no half point, no temporary file
