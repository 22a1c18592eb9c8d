"""Contradictory options and values no run can honour (issue 29, group 3): refused before anything runs, in one line
naming the flag the user typed, with exit status 2 - never resolved silently, never a traceback from a worker.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from meshsim.catalog import load_mesh
from meshsim.cli import main
from meshsim.errors import FieldError, ModelError
from meshsim.scenario import resolve_features

ROOT = Path(__file__).resolve().parents[1]
LINKERD = str(ROOT / "models/meshes/linkerd.yaml")


def refused(capsys, argv: list[str], needle: str) -> str:
    """The command exits 2 with one line holding ``needle`` (and no traceback)."""
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("meshsim: error: ") and needle in err, err
    return err


@pytest.fixture()
def odd_files(tmp_path: Path) -> dict[str, str]:
    """A folder, a device, a pipe and a symlink loop, each where a model file is expected."""
    (tmp_path / "loop-a").symlink_to(tmp_path / "loop-b")
    (tmp_path / "loop-b").symlink_to(tmp_path / "loop-a")
    os.mkfifo(tmp_path / "pipe.yaml")
    return {"folder": str(tmp_path), "device": "/dev/zero", "pipe": str(tmp_path / "pipe.yaml"),
            "loop": str(tmp_path / "loop-a")}


PREDICT_CASES = [
    (["--rps", "100", "--mesh", "istio", "--mesh-model", LINKERD],
     f"--mesh-model: give either --mesh istio or --mesh-model {LINKERD}, not both"),
    (["--rps", "100", "--features", "mtls,no-mtls"], "--features: mtls and no-mtls: mtls is turned on and off"),
    (["--rps", "100", "--features", "tracing,tracing"], "--features: tracing and tracing: tracing is named twice"),
    (["--rps", "1e-300"], "--rps: a replication would last 5e+303 simulated seconds, beyond the engine's clock"),
    (["--rps", "100", "--duration", "1e-300"], "--duration: a replication expects 1e-298 requests"),
    (["--rps", "1e-300", "--duration", "10"], "--rps: a replication expects"),
    (["--rps", "1e308", "--duration", "1"], "--rps: this run would take"),  # the rate, not the duration
    (["--rps", "100", "--mesh", ""], "--mesh: empty: give a built-in name or a FILE.yaml"),
    (["--rps", "100", "--topology", ""], "--topology: empty: give a built-in name or a FILE.yaml"),
    (["--load", "sequential", "--think", "1e12"], "--think: a replication would last"),
]


@pytest.mark.parametrize(("args", "needle"), PREDICT_CASES)
def test_predict_refuses(capsys, args: list[str], needle: str) -> None:
    refused(capsys, ["predict", *args, "--replications", "2", "--processes", "1"], needle)


@pytest.mark.parametrize(("kind", "problem"), [("folder", "is a directory, not a file"),
                                               ("device", "is not a regular file (a device, a pipe or a socket)"),
                                               ("pipe", "is not a regular file"), ("loop", "is a symlink loop")])
@pytest.mark.parametrize("flag", ["--topology", "--mesh-model"])
def test_a_model_file_that_is_no_file_is_named_for_what_it_is(capsys, odd_files, flag: str, kind: str,
                                                               problem: str) -> None:
    refused(capsys, ["predict", "--rps", "100", flag, odd_files[kind]], f"{flag}: file {odd_files[kind]} {problem}")


def test_validate_names_a_model_that_is_a_folder(capsys, tmp_path: Path) -> None:
    refused(capsys, ["validate", str(ROOT / "measurements/istio-1.2.0"), "--model", str(tmp_path)],
            f"--model: file {tmp_path} is a directory, not a file")


SWEEP_CASES = [
    (["--rps", "100:200:2", "--replications", "0"], "--replications: must be >= 1, got 0"),
    (["--rps", "1e300:1e308:2"], "--rps: at point chain3 istio none client open 1e+300 rps: this run would take"),
    (["--rps", "1000000:2000000:2"], "--rps: at point chain3 istio none client open 2e+06 rps: this run would take"),
    (["--rps", "100:200:2", "--duration", "1e9"], "--duration: at point chain3 istio none client open 100 rps: this"),
    (["--rps", "1e-300:1e-299:2"], "--rps: at point chain3 istio none client open 1e-300 rps: a replication would "
                                   "last"),
    (["--rps", "100:200:2", "--features", "mtls", "--vary", "features=none,no-mtls"],
     "--vary: mtls and no-mtls: mtls is turned on and off"),
]


@pytest.mark.parametrize(("args", "needle"), SWEEP_CASES)
def test_sweep_refuses_before_any_worker_starts(capsys, tmp_path: Path, args: list[str], needle: str) -> None:
    """Values a worker would refuse (they raised TypeError and BrokenProcessPool there) are refused up front:
    nothing is computed, cached or written."""
    cache, out = tmp_path / "cache", tmp_path / "points.csv"
    refused(capsys, ["sweep", *args, "--out", str(out), "--cache", str(cache), "--no-progress", "--processes", "2"],
            needle)
    assert not out.exists() and not (cache.exists() and any(cache.iterdir()))


CAPACITY_CASES = [
    (["--slo", "p99=1e308s"], "--slo: p99: the limit must be > 0 and at most 3600 s, got 1e+308 s"),
    (["--slo", "p99=5000s"], "--slo: p99: the limit must be > 0 and at most 3600 s, got 5000 s"),
    (["--slo", "p99=20ms", "--size", "replicas", "--target-rps", "1e12"], "--target-rps: this run would take"),
    (["--slo", "p99=20ms", "--size", "replicas", "--target-rps", "1e-300"], "--target-rps: a replication would"),
    (["--slo", "p99=20ms", "--rps", "1e-300"], "--rps: a replication would last"),
    (["--slo", "p99=20ms", "--duration", "1e-300"], "--duration: a replication expects"),
    (["--slo", "p99=20ms", "--size", "replicas", "--target-rps", "100", "--replications", "1"],
     "--replications: need >= 2 for a confidence interval, got 1"),
]


@pytest.mark.parametrize(("args", "needle"), CAPACITY_CASES)
def test_capacity_refuses(capsys, args: list[str], needle: str) -> None:
    refused(capsys, ["capacity", *args], needle)


FACTORIAL_CASES = [
    (["--factor", "mtls", "--scope", "none"], "--factor: mtls: no cell of the design has a proxy for it to act on"),
    (["--factor", "mtls", "--mesh", "none"], "--factor: mtls: no cell of the design has a proxy for it to act on"),
    (["--factor", "rps=100,1e12"], "--factor: cell rps=1e+12: rps: this run would take"),
    (["--factor", "tls", "--duration", "1e-300"], "--duration: a replication expects"),
    (["--factor", "tls", "--features", "mtls,no-mtls"], "--features: mtls and no-mtls"),
]


@pytest.mark.parametrize(("args", "needle"), FACTORIAL_CASES)
def test_factorial_refuses(capsys, args: list[str], needle: str) -> None:
    rate = [] if any(a.startswith("rps=") for a in args) else ["--rps", "100"]
    refused(capsys, ["factorial", *args, *rate, "--replications", "2"], needle)


def test_factorial_with_proxies_in_some_cells_runs_and_says_so(capsys) -> None:
    """mesh vs none x mTLS is a design (mTLS acts where there is a mesh): run, with the note, not refused."""
    code = main(["factorial", "--factor", "scope=none,both", "--factor", "mtls", "--rps", "100", "--duration", "0.5",
                 "--replications", "2", "--topology", "single"])
    assert code == 0 and "have no proxy to act on in 2 of 4 cells" in capsys.readouterr().out


LAB_CASES = [
    (["lab", "run", "--rps", "nan"], "--rps: every rate must be a finite number > 0, got nan"),
    (["lab", "run", "--duration", "nan"], "--duration: must be a finite number > 0 seconds, got nan"),
    (["lab", "run", "--duration", "inf"], "--duration: must be a finite number > 0 seconds, got inf"),
    (["lab", "probe", "--rps", "nan"], "--rps: must be a finite number >= 0 (0 = as fast as possible), got nan"),
    (["calibrate", "--lab", "--lab-duration", "-3"], "--lab-duration: must be a finite number > 0 seconds, got -3"),
    (["calibrate", "--lab", "--lab-workers", "0"], "--lab-workers: must be 1..64, got 0"),
]


@pytest.mark.parametrize(("args", "needle"), LAB_CASES)
def test_lab_values_are_refused_before_any_process_starts(capsys, tmp_path: Path, args: list[str],
                                                          needle: str) -> None:
    state, out = tmp_path / "state", tmp_path / "runs"
    where = (["--lab-state-dir", str(state), "--lab-out", str(out)] if args[0] == "calibrate"
             else ["--state-dir", str(state), "--out", str(out)])
    refused(capsys, [*args, *where], needle)
    assert not state.exists() and not out.exists()  # no lab was started, nothing was stored


# -- errors from workers ------------------------------------------------------------------------------------------

def test_errors_with_more_than_a_message_survive_pickling() -> None:
    """A worker's exception is pickled back to its parent: FieldError(field, problem) came back as a TypeError and
    broke the pool (sweep --rps 1e300:1e308:2)."""
    from meshsim.calibrate.fit.acceptance import FitRefused

    for error in (FieldError("rps", "too many"), FitRefused("no family fits", "proxy.pass", ["r1"]), ModelError("x")):
        back = pickle.loads(pickle.dumps(error))
        assert type(back) is type(error) and str(back) == str(error) and vars(back) == vars(error)


def test_a_point_refused_inside_a_sweep_worker_comes_back_as_its_error() -> None:
    """Past the up-front check (called here directly), a worker's own refusal reaches the parent as itself."""
    from meshsim.request import PredictOptions
    from meshsim.sim.experiments.sweep_runs import rows_in_local_processes

    point = PredictOptions(topology="single", mesh="none", rps=1e9, replications=1, processes=1, saturation=False)
    with pytest.raises(FieldError) as info:
        list(rows_in_local_processes([point], [0], 1))
    assert info.value.field == "rps" and "station visits" in info.value.problem


# -- generated feature lists ----------------------------------------------------------------------------------------

ISTIO = load_mesh("istio")
FEATURE_WORDS = [w for name in ISTIO.features for w in (name, f"no-{name}")]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(FEATURE_WORDS), max_size=5))
def test_generated_feature_lists_name_each_feature_at_most_once(words: list[str]) -> None:
    """Accepted exactly when no feature is named twice (on and off, or on twice); then each is as it was asked."""
    bases = [w.removeprefix("no-") for w in words]
    if len(set(bases)) < len(bases):
        with pytest.raises(FieldError, match="name each feature once"):
            resolve_features(ISTIO, words)
        return
    active = set(resolve_features(ISTIO, words))
    for word in words:
        assert (word in active) if not word.startswith("no-") else (word[3:] not in active)
