"""Impossible measurements: a run can be well formed and still impossible (a histogram in milliseconds where fortio
writes seconds, an access log of 1000 s latencies, a manifest that describes another run): it is refused where runs
are loaded (calibrate/measure/physical_sense.py), in one line naming the file and what is impossible. Fixed examples,
then generated runs; the shipped runs, all 222 of them, are possible.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from meshsim.calibrate.measure.dataset import load_run, load_runs
from meshsim.calibrate.measure.fortio_histogram import result_json
from meshsim.errors import ModelError
from meshsim.run_folder import LoadSettings, RunManifest, Setup, write_run

from synthetic_runs import (RESOLUTION, edit_json, edit_load, in_milliseconds, lab_like_samples, without_log,
                            write_synthetic_run)

ROOT = Path(__file__).resolve().parents[1]
GENERATED = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                            HealthCheck.too_slow])


@pytest.fixture()
def run(tmp_path: Path) -> Path:
    return write_synthetic_run(tmp_path / "run", lab_like_samples(), rps=200.0)


def refused_line(folder: Path, *needles: str) -> str:
    with pytest.raises(ModelError) as info:
        load_run(folder)
    message = str(info.value)
    assert message and "\n" not in message and "Traceback" not in message
    for needle in needles:
        assert needle in message, message
    return message


def test_a_consistent_run_loads(run: Path) -> None:
    assert load_run(run).result.samples.size == 600


def test_every_shipped_run_is_physically_possible() -> None:
    """The tolerances are justified by these runs: at saturation they reach 0.997 of Little's bound."""
    batch = load_runs(sorted(p.parent for p in (ROOT / "measurements").rglob("manifest.yaml")))
    assert not batch.errors and len(batch.runs) >= 222


# -- fixed examples: each names its file and what is impossible --------------------------------------------------

def test_a_histogram_in_milliseconds_is_refused_by_its_bucket_edges(run: Path) -> None:
    without_log(run)
    edit_json(run / "fortio.json", in_milliseconds)
    refused_line(run, f"{run / 'fortio.json'}: DurationHistogram is in milliseconds, not seconds")


def test_a_resolution_the_manifest_does_not_record_is_refused(run: Path) -> None:
    edit_json(run / "fortio.json", lambda d: d.update(Resolution=RESOLUTION * 1000))
    refused_line(run, f"{run / 'manifest.yaml'}: load.resolution_s is 1e-05 s but", "Resolution 0.01 s")


def test_milliseconds_with_a_matching_resolution_break_littles_law(run: Path) -> None:
    """Edges and resolution scaled alike: the units agree with each other, the latencies cannot be (0.7 s at 200 rps
    on one connection is 140 requests in flight)."""
    without_log(run)
    edit_json(run / "fortio.json", lambda d: (in_milliseconds(d), d.update(Resolution=RESOLUTION * 1000)))
    edit_load(run, resolution_s=RESOLUTION * 1000)
    message = refused_line(run, f"{run / 'fortio.json'}: impossible for a closed loop", "on 1 connection(s)",
                           "Little's law")
    assert float(message.split("keeps ")[1].split(" requests")[0]) > 100


def test_an_access_log_in_milliseconds_is_refused(run: Path) -> None:
    lines = (run / "access.jsonl").read_text().splitlines()
    scaled = [{**json.loads(line), "latency": json.loads(line)["latency"] * 1000} for line in lines]
    (run / "access.jsonl").write_text("".join(json.dumps(e) + "\n" for e in scaled))
    refused_line(run, f"{run / 'access.jsonl'}: latencies from", "the log is not in seconds, or not of this run")


def test_an_access_log_latency_of_1000_s_is_refused(run: Path) -> None:
    with (run / "access.jsonl").open("a") as log:
        log.write(json.dumps({"latency": 1000.0, "ok": True}) + "\n")
    refused_line(run, f"{run / 'access.jsonl'}:", "1000")


def test_a_request_longer_than_its_run_is_refused(run: Path) -> None:
    without_log(run)

    def one_slow_request(data: dict) -> None:
        data["DurationHistogram"]["Max"] = 50.0
        data["DurationHistogram"]["Data"][-1]["End"] = 50.0

    edit_json(run / "fortio.json", one_slow_request)
    refused_line(run, f"{run / 'fortio.json'}: a request took 50 s in a run that lasted 3 s")


@pytest.mark.parametrize(("values", "needle"), [
    ({"connections": 4}, "load.connections is 4 but"),
    ({"rps": 200_000.0}, "load.rps is 200000 but"),
    ({"duration_s": 3000.0}, "load.duration_s is 3000 s but the run in"),
])
def test_a_manifest_that_describes_another_run_is_refused(run: Path, values: dict, needle: str) -> None:
    edit_load(run, **values)
    refused_line(run, f"{run / 'manifest.yaml'}: {needle}")


def test_a_symlink_loop_in_a_run_folder_is_one_line(run: Path) -> None:
    (run / "fortio.json").unlink()
    (run / "fortio.json").symlink_to("fortio.json")
    refused_line(run, "fortio.json: is a symlink loop")


def test_a_fifo_named_as_the_result_is_refused_without_blocking(run: Path) -> None:
    (run / "fortio.json").unlink()
    import os

    os.mkfifo(run / "fortio.json")
    refused_line(run, "fortio.json: is not a regular file")


# -- generated runs --------------------------------------------------------------------------------------------------

# a closed loop's shape: its connections and 400 lognormal latencies around a median of 0.05-50 ms
SHAPES = st.builds(lambda c, median_s, seed: (c, median_s * np.random.default_rng(seed).lognormal(0.0, 0.5, 400)),
                   st.integers(1, 64), st.floats(0.05e-3, 50e-3), st.integers(0, 2**16))


def run_at(factory, shape: tuple[int, np.ndarray], rps: float) -> Path:
    connections, samples = shape
    return write_synthetic_run(factory.mktemp("gen") / "run", samples, rps, connections)


@GENERATED
@given(SHAPES, st.floats(0.05, 1.0))
def test_generated_closed_loop_runs_within_littles_law_load(tmp_path_factory, shape, busy: float) -> None:
    """A closed loop keeps ``busy`` x connections in flight (busy <= 1: anything fortio can do) and loads."""
    connections, samples = shape
    folder = run_at(tmp_path_factory, shape, busy * connections / samples.mean())
    assert load_run(folder).result.count == 400


@GENERATED
@given(SHAPES, st.floats(1.2, 1e4))
def test_generated_runs_past_littles_law_are_refused(tmp_path_factory, shape, excess: float) -> None:
    """More in flight than connections (every request at least the fastest one's latency): refused in one line."""
    connections, samples = shape
    folder = run_at(tmp_path_factory, shape, excess * connections / samples.min())
    message = refused_line(folder, str(folder))
    assert "Little's law" in message or "a request took" in message


@GENERATED
@given(st.floats(0.05e-3, 50e-3), st.sampled_from([1e-6, 1e-5, 1e-4]), st.integers(0, 2**16))
def test_generated_histograms_in_milliseconds_are_refused(tmp_path_factory, median_s: float, resolution: float,
                                                          seed: int) -> None:
    """Latencies spread over many of fortio's buckets, written 1000x: no longer on fortio's edges at the recorded
    resolution, so refused (by their unit, or else by Little's law at the rate they ran)."""
    samples = median_s * np.random.default_rng(seed).lognormal(0.0, 0.8, 400)
    folder = tmp_path_factory.mktemp("ms") / "run"
    manifest = RunManifest(id="run", source="lab", provenance="synthetic", when="2026-11-26T00:00:00Z", where={},
                           setup=Setup(mesh="envoy", path="baseline"),
                           load=LoadSettings(rps=float(0.5 / samples.mean()), connections=1,
                                             resolution_s=resolution))
    data = result_json(samples, resolution, requested_rps=0.5 / samples.mean())
    in_milliseconds(data)
    write_run(folder, manifest, data)
    message = refused_line(folder, str(folder / "fortio.json"))
    assert "milliseconds" in message or "Little's law" in message or "a request took" in message
