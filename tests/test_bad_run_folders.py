"""Hostile but fair run folders (issue 14): fortio results with strings for numbers, manifests with wrong types or
bytes, symlinks out of the folder, corrupt or endless access logs; fixed examples, then generated ones. Each loads or
gives one clean line naming the file and key; the fit and validate commands say so in one line too."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, strategies as st

from meshsim.calibrate.measure import fortio_access_log
from meshsim.calibrate.measure.dataset import load_run
from meshsim.calibrate.measure.fortio_histogram import result_json
from meshsim.cli import main
from meshsim.errors import MeshsimError
from meshsim.run_folder import LoadSettings, RunManifest, Setup, write_run

from refusals import FAST, HOSTILE_NUMBERS, ROOT, one_clean_line, refused

def good_run(root: Path, name: str = "run1") -> Path:
    rng = np.random.default_rng(3)
    samples = 0.5e-3 + rng.gamma(3.0, 0.1e-3, 400)
    manifest = RunManifest(id=name, source="lab", provenance="synthetic: test_bad_run_folders.py",
                           when="2026-11-23T00:00:00Z", where={}, setup=Setup(mesh="envoy", path="server-sidecar"),
                           load=LoadSettings(rps=100.0, connections=1, duration_s=4.0))
    log = root / "access.jsonl"
    log.write_text("".join(json.dumps({"latency": float(s), "ok": True}) + "\n" for s in samples))
    folder = write_run(root / name, manifest, result_json(samples, 1e-5, requested_rps=100, actual_rps=100), log)
    log.unlink()
    return folder


def edit_json(path: Path, key: tuple[str, ...], value) -> None:
    data = json.loads(path.read_text())
    node = data
    for part in key[:-1]:
        node = node[part]
    node[key[-1]] = value
    path.write_text(json.dumps(data))


def edit_manifest(folder: Path, key: str, value) -> None:
    data = yaml.safe_load((folder / "manifest.yaml").read_text())
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        node = node[part]
    node[parts[-1]] = value
    (folder / "manifest.yaml").write_text(yaml.safe_dump(data))


def run_refused(folder: Path, *needles: str) -> str:
    return refused(load_run, folder, *needles)


def test_a_good_run_folder_loads(tmp_path: Path) -> None:
    run = load_run(good_run(tmp_path))
    assert run.result.count == 400 and run.result.samples is not None and run.result.samples.size == 400


@pytest.mark.parametrize(("key", "value", "needle"), [
    (("ActualQPS",), "100", "fortio.json: ActualQPS: expected a number, got '100'"),
    (("NumThreads",), "1", "fortio.json: NumThreads: expected an integer"),
    (("RetCodes", "200"), "400", "fortio.json: RetCodes.200: expected an integer"),
    (("DurationHistogram", "Avg"), "0.001", "fortio.json: DurationHistogram.Avg: expected a number"),
    (("DurationHistogram", "Data", 0, "End"), 1e400, "DurationHistogram.Data[0]: bad bucket"),
])
def test_fortio_json_with_strings_for_numbers(tmp_path: Path, key, value, needle: str) -> None:
    folder = good_run(tmp_path)
    edit_json(folder / "fortio.json", key, value)
    run_refused(folder, needle)


@pytest.mark.parametrize(("key", "value", "needle"), [
    ("load.connections", "many", "manifest.yaml: load.connections: expected an integer, got 'many'"),
    ("load.rps", "fast", "manifest.yaml: load.rps: expected a finite number, got 'fast'"),
    ("load.rps", float("nan"), "manifest.yaml: load.rps: expected a finite number"),
    ("id", 7, "manifest.yaml: id: expected text, got 7"),
    ("setup.features", 3, "manifest.yaml: setup.features: expected a list of feature names, got 3"),
    ("files", {"result": "../../../etc/hostname"}, "files.result: must be a file name inside the run folder"),
    ("files", {"result": "/etc/hostname"}, "files.result: must be a file name inside the run folder"),
    ("files", {"result": "\n"}, "files.result: must be a file name inside the run folder"),  # one line, found by hypothesis
])
def test_manifest_with_wrong_types(tmp_path: Path, key: str, value, needle: str) -> None:
    folder = good_run(tmp_path)
    edit_manifest(folder, key, value)
    run_refused(folder, needle)


def test_manifest_with_a_0xff_byte(tmp_path: Path) -> None:
    folder = good_run(tmp_path)
    (folder / "manifest.yaml").write_bytes((folder / "manifest.yaml").read_bytes() + b"\nnotes: \xff\n")
    run_refused(folder, "manifest.yaml: not UTF-8 text (byte 0xff")


def test_a_symlink_out_of_the_run_folder_is_refused(tmp_path: Path) -> None:
    folder = good_run(tmp_path)
    (tmp_path / "outside.json").write_text((folder / "fortio.json").read_text())
    (folder / "fortio.json").unlink()
    (folder / "fortio.json").symlink_to(tmp_path / "outside.json")
    run_refused(folder, "files.result: 'fortio.json' points outside the run folder")


def test_corrupt_gzip_and_infinity_in_the_access_log(tmp_path: Path) -> None:
    folder = good_run(tmp_path)
    log = folder / "access.jsonl"
    gz = folder / "access.jsonl.gz"
    gz.write_bytes(gzip.compress(log.read_bytes())[:200] + b"garbage" * 50)
    log.unlink()
    run_refused(folder, "access.jsonl.gz: cannot read access log")
    gz.unlink()
    log.write_text('{"latency": 0.001, "ok": true}\n{"latency": Infinity, "ok": true}\n')
    run_refused(folder, "access.jsonl: line 2: latency must be a finite number >= 0")


def test_a_gzip_bomb_stops_at_the_cap_while_streaming(tmp_path: Path, monkeypatch) -> None:
    """Valid lines only, so the cap is the one reason for refusing; the cap is lowered to keep the test fast."""
    monkeypatch.setattr(fortio_access_log, "MAX_ACCESS_LOG_BYTES", 1_000_000)
    folder = good_run(tmp_path)
    line = b'{"latency": 0.001, "ok": true}\n'
    (folder / "access.jsonl").unlink()
    with gzip.open(folder / "access.jsonl.gz", "wb") as fh:
        for _ in range(100):
            fh.write(line * 1000)  # 3 MB decompressed from a few KB
    assert (folder / "access.jsonl.gz").stat().st_size < 50_000
    run_refused(folder, "access log larger than 1000000 bytes (decompressed)")
    monkeypatch.setattr(fortio_access_log, "MAX_ACCESS_LOG_BYTES", 10_000_000)
    assert load_run(folder).result.samples.size == 100_000  # the same file within the cap loads
    with gzip.open(folder / "access.jsonl.gz", "wb") as fh:  # one endless line: refused after 64 KB
        for _ in range(100):
            fh.write(b"1" * 100_000)
    run_refused(folder, "a line longer than 65536 characters")


def test_fit_out_into_a_missing_folder(tmp_path: Path, capsys) -> None:
    folder = good_run(tmp_path)
    assert main(["fit", str(folder), "--mesh", "x", "--out", str(tmp_path / "nope" / "x.yaml")]) == 2
    assert f"--out: cannot write {tmp_path / 'nope' / 'x.yaml'}: folder {tmp_path / 'nope'} does not exist" in \
        capsys.readouterr().err


def test_validate_fails_when_no_run_could_be_validated(tmp_path: Path, capsys) -> None:
    folder = good_run(tmp_path)
    edit_manifest(folder, "load.connections", "many")
    assert main(["validate", str(folder), "--model", str(ROOT / "models/meshes/istio.yaml")]) == 2
    err = capsys.readouterr().err
    assert "RUN_DIR: no run could be validated (1 skipped; first:" in err and "load.connections" in err


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    return good_run(tmp_path_factory.mktemp("template"))


def copy_run(template: Path, root: Path) -> Path:
    folder = root / "run"
    folder.mkdir()
    for f in template.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    return folder


MANIFEST_KEYS = ["id", "source", "provenance", "status", "setup.path", "setup.features", "setup.replicas",
                 "setup.proxy_workers", "setup.proxy_cpu_limit", "load.rps", "load.connections", "load.duration_s",
                 "load.uniform", "cpu_seconds", "sleeps", "files", "files.result", "where"]
FORTIO_KEYS = [("ActualQPS",), ("NumThreads",), ("RequestedQPS",), ("RetCodes",), ("RetCodes", "200"),
               ("DurationHistogram",), ("DurationHistogram", "Count"), ("DurationHistogram", "Avg"),
               ("DurationHistogram", "Data"), ("DurationHistogram", "Data", 0, "Start"), ("Labels",), ("URL",)]
ANY_VALUE = st.one_of(HOSTILE_NUMBERS, st.text(max_size=20), st.lists(st.integers(), max_size=3),
                      st.dictionaries(st.text(max_size=5), HOSTILE_NUMBERS, max_size=2))


def loads_or_one_line(folder: Path) -> None:
    try:
        run = load_run(folder)
    except MeshsimError as exc:
        one_clean_line(exc)
        return
    assert run.result.count > 0 and math.isfinite(run.result.actual_rps)


@FAST
@given(st.sampled_from(MANIFEST_KEYS), ANY_VALUE)
def test_generated_manifests(tmp_path_factory, template: Path, key: str, value) -> None:
    folder = copy_run(template, tmp_path_factory.mktemp("m"))
    edit_manifest(folder, key, value)
    loads_or_one_line(folder)


@FAST
@given(st.sampled_from(FORTIO_KEYS), ANY_VALUE)
def test_generated_fortio_results(tmp_path_factory, template: Path, key, value) -> None:
    folder = copy_run(template, tmp_path_factory.mktemp("f"))
    edit_json(folder / "fortio.json", key, value)
    loads_or_one_line(folder)


@FAST
@given(st.binary(max_size=300), st.booleans(), st.booleans())
def test_generated_access_logs_and_gzip(tmp_path_factory, template: Path, blob: bytes, gzipped: bool,
                                        valid_gzip: bool) -> None:
    folder = copy_run(template, tmp_path_factory.mktemp("a"))
    (folder / "access.jsonl").unlink()
    if gzipped:
        (folder / "access.jsonl.gz").write_bytes(gzip.compress(blob) if valid_gzip else blob)
    else:
        (folder / "access.jsonl").write_bytes(blob)
    loads_or_one_line(folder)
