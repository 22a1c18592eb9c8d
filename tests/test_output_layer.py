"""The output layer itself (meshsim/outputs.py): atomic writes onto regular files only, the targets' checks, and the
library writers that go through it failing at write time under a real file-size limit (RLIMIT_FSIZE)."""

from __future__ import annotations

import os
import resource
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meshsim.outputs import (OutputError, check_file, check_folder, make_folder, write_file, write_file_with,
                             write_folder_with)

NAMES = st.text(st.characters(whitelist_categories=("Ll", "Lu", "Nd"), whitelist_characters="-_"),
                min_size=1, max_size=12).filter(lambda n: n not in (".", ".."))


@contextmanager
def file_size_limit(size: int) -> Iterator[None]:
    """A soft RLIMIT_FSIZE for this process (Python ignores SIGXFSZ, so a write past it fails with EFBIG)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


@settings(max_examples=40, deadline=None)
@given(content=st.one_of(st.binary(max_size=4096), st.text(max_size=2000)), name=NAMES, mode=st.sampled_from(
    [0o600, 0o640, 0o644, 0o664]))
def test_a_write_replaces_a_regular_file_whole_and_keeps_its_mode(content: str | bytes, name: str, mode: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / f"{name}.txt"
        target.write_text("old")
        os.chmod(target, mode)
        assert write_file(target, content, "out") == target
        expected = content.encode("utf-8") if isinstance(content, str) else content
        assert target.read_bytes() == expected
        assert stat.S_IMODE(target.stat().st_mode) == mode
        assert os.listdir(tmp) == [target.name]  # no temporary file left


def test_a_write_through_a_symlink_keeps_the_link(tmp_path: Path) -> None:
    (tmp_path / "real.yaml").write_text("old")
    (tmp_path / "link.yaml").symlink_to("real.yaml")
    write_file(tmp_path / "link.yaml", "new", "out")
    assert (tmp_path / "link.yaml").is_symlink() and (tmp_path / "real.yaml").read_text() == "new"


def test_a_target_that_becomes_a_fifo_during_the_write_is_not_replaced(tmp_path: Path) -> None:
    """Checked again right before the rename: what is there may have changed since the check before the work."""
    target = tmp_path / "out.csv"

    def write(tmp: Path) -> None:
        tmp.write_text("x")
        os.mkfifo(target)

    with pytest.raises(OutputError, match="it is a fifo, not a regular file"):
        write_file_with(target, "out", write)
    assert stat.S_ISFIFO(os.lstat(target).st_mode) and os.listdir(tmp_path) == ["out.csv"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(depth=st.integers(1, 4), blocked_at=st.integers(0, 3), blocker=st.sampled_from(["file", "fifo"]))
def test_a_file_where_a_folder_is_expected_is_named(depth: int, blocked_at: int, blocker: str) -> None:
    """Whatever the depth of the path and wherever the file or fifo sits in it, each check and writer names it and
    makes nothing."""
    with tempfile.TemporaryDirectory() as tmp:
        parts = [f"d{i}" for i in range(depth)]
        at = min(blocked_at, depth - 1)
        block = Path(tmp, *parts[:at + 1])
        block.parent.mkdir(parents=True, exist_ok=True)
        block.write_text("x") if blocker == "file" else os.mkfifo(block)
        path = Path(tmp, *parts, "out.txt")
        kind = "a regular file" if blocker == "file" else "a fifo"
        calls = (lambda: check_file(path, "out", parents=True), lambda: check_folder(path.parent, "report"),
                 lambda: make_folder(path.parent, "report"), lambda: write_file(path, "x", "out", parents=True),
                 lambda: write_folder_with(path, "out", lambda _tmp: None))
        before = sorted(str(p.relative_to(tmp)) for p in Path(tmp).rglob("*"))
        for call in calls:
            with pytest.raises(OutputError) as err:
                call()
            assert str(block) in str(err.value) and f"is {kind}, not a folder" in str(err.value)
        assert sorted(str(p.relative_to(tmp)) for p in Path(tmp).rglob("*")) == before


def test_the_checks_leave_nothing_behind(tmp_path: Path) -> None:
    check_file(tmp_path / "a.html", "html")
    check_folder(tmp_path / "new" / "deeper", "out")
    assert list(tmp_path.iterdir()) == []  # the probe file is removed and no folder is made


def test_an_error_survives_the_trip_from_a_worker() -> None:
    import pickle

    err = pickle.loads(pickle.dumps(OutputError("cache", "/x/y.json", "the device is full")))
    assert (err.field, err.path, str(err)) == ("cache", "/x/y.json", "cache: cannot write /x/y.json: the device is full")


def test_write_time_failures_of_the_library_writers_name_their_option(tmp_path: Path) -> None:
    """Past the checks (the disk fills during the run): the fitted model, a sweep point and the study's out folder
    each fail in one line naming their option, and leave no half file and no temporary file."""
    import yaml

    from meshsim.calibrate.fit.model_file import write_model
    from meshsim.sim.experiments.sweep_cache import PointCache

    model = yaml.safe_load((Path(__file__).resolve().parents[1] / "models/meshes/istio-1.2.yaml").read_text())
    with file_size_limit(512):
        with pytest.raises(OutputError, match=r"^out: cannot write .*m\.yaml: the file-size limit was reached$"):
            write_model(model, tmp_path / "models" / "m.yaml")
        with pytest.raises(OutputError, match=r"^cache: cannot write .*: the file-size limit was reached$"):
            PointCache(tmp_path / "cache").put("ab" * 32, {"p50_ms": [1.0] * 200})
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_a_run_folder_is_written_whole_or_not_at_all(tmp_path: Path) -> None:
    """A lab or cluster run folder that cannot be written leaves the run stored before it as it was."""
    from meshsim.run_folder import read_manifest, write_run

    shipped = Path(__file__).resolve().parents[1] / "measurements/istio-1.2.0/istio-1.2.0-c1-qps1000-baseline"
    manifest, raw = read_manifest(shipped), (shipped / "fortio.json").read_bytes()
    folder = write_run(tmp_path / "runs" / "r1", manifest, raw)
    before = sorted((p.name, p.read_bytes()) for p in folder.iterdir())
    with file_size_limit(len(raw) // 2):
        with pytest.raises(OutputError, match=r"^out: cannot write .*r1: the file-size limit was reached$"):
            write_run(folder, manifest, raw)
    assert sorted((p.name, p.read_bytes()) for p in folder.iterdir()) == before
    assert os.listdir(tmp_path / "runs") == ["r1"]  # no temporary folder left
    (tmp_path / "runs" / "r2").write_text("not a folder")
    with pytest.raises(OutputError, match="it is a regular file, not a folder"):
        write_run(tmp_path / "runs" / "r2", manifest, raw)
