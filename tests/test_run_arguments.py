"""The runs a fit or a validation is given: a run that counts twice however it is spelt, names that name nothing,
runs that identify nothing (baseline only, or the one sidecar run impossible): refused in one line, no model written.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from meshsim.cli import main

from synthetic_runs import edit_json, in_milliseconds, lab_like_samples, without_log, write_synthetic_run

ROOT = Path(__file__).resolve().parents[1]


def fit(capsys, tmp_path: Path, *args: str) -> tuple[int, str]:
    code = main(["fit", *args, "--out", str(tmp_path / "model.yaml"), "--families", "lognormal", "--no-mixtures"])
    err = capsys.readouterr().err
    return code, err.strip().splitlines()[-1] if err.strip() else ""


@pytest.fixture()
def pair(tmp_path: Path) -> Path:
    """A baseline and a sidecar run, the smallest set a fit identifies a proxy pass from."""
    root = tmp_path / "runs"
    write_synthetic_run(root / "base", 0.3e-3 + np.random.default_rng(1).gamma(3.0, 0.03e-3, 600), 200.0,
                        path="baseline")
    write_synthetic_run(root / "side", lab_like_samples(), 200.0)
    return root


def test_fit_skips_the_millisecond_run_and_then_has_nothing_to_identify(capsys, tmp_path: Path, pair: Path) -> None:
    without_log(pair / "side")
    edit_json(pair / "side" / "fortio.json", in_milliseconds)
    code, last = fit(capsys, tmp_path, str(pair), "--mesh", "m")
    assert code == 2 and "the runs identify nothing: the reference runs (1) are baseline only" in last
    assert not (tmp_path / "model.yaml").exists()


def test_fit_from_baseline_runs_only_is_an_error(capsys, tmp_path: Path, pair: Path) -> None:
    code, last = fit(capsys, tmp_path, str(pair / "base"), "--mesh", "m")
    assert code == 2 and last.startswith("meshsim: error: meshsim fit: the runs identify nothing")
    assert not (tmp_path / "model.yaml").exists()


def test_the_same_run_folder_twice_is_refused_however_it_is_spelt(capsys, tmp_path: Path, pair: Path,
                                                                  monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "link").symlink_to(pair / "side")
    shutil.copytree(pair / "side", tmp_path / "copy")
    for twice in (["runs/side", "./runs/side/"], ["runs/side", "link"], ["runs", "runs/side"],
                  ["runs/side", str(pair / "side")]):
        code, last = fit(capsys, tmp_path, *twice, "--mesh", "m")
        assert code == 2 and last.startswith("meshsim: error: RUN_DIR: ") and "each run counts once" in last, last
    code, last = fit(capsys, tmp_path, "runs", "copy", "--mesh", "m")
    assert code == 2 and "run id 'side' is in" in last and "(a copy?)" in last


@pytest.mark.parametrize(("args", "needle"), [
    (["--mesh", ""], "--mesh: empty: the fitted model needs a name"),
    (["--mesh", "m", "--default-on", "warpdrive"], "--default-on: no run measured a feature 'warpdrive'"),
    (["--mesh", "m", "--default-on", ""], "--default-on: an empty feature name"),
    (["--mesh", "m", "--describe", "warpdrive=fast"], "--describe: no run measured a feature 'warpdrive'"),
])
def test_fit_refuses_names_that_name_nothing(capsys, tmp_path: Path, pair: Path, args, needle: str) -> None:
    code, last = fit(capsys, tmp_path, str(pair), *args)
    assert code == 2 and needle in last, last


def test_validate_refuses_the_same_run_twice(capsys, pair: Path) -> None:
    code = main(["validate", str(pair), str(pair / "side"), "--model", str(ROOT / "models/meshes/istio.yaml")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and f"RUN_DIR: {pair / 'side'} is given twice" in err
