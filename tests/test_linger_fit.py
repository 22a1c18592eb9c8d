"""The linger fitted from counted sleeps: the counts read from a real process, carried by a run's manifest, and the
linger whose wakes match them recovered from gaps with a known answer."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshsim.calibrate.load.cold_wake import WakePoint
from meshsim.calibrate.load.linger_fit import SleepPoint, fit_linger, lingering
from meshsim.calibrate.measure.lab.thread_sleeps import worker_sleeps_of
from meshsim.errors import ModelError
from meshsim.run_folder import LoadSettings, RunManifest, Setup, read_manifest, write_run
from meshsim.wakeup import parse_wakeup
from meshsim.yamlio import Section


def test_a_thread_that_sleeps_counts_voluntary_switches() -> None:
    """This process (no Envoy workers: every thread counts) blocks in nanosleep: each block is one more switch."""
    before = worker_sleeps_of(os.getpid())
    for _ in range(5):
        time.sleep(0.002)
    after = worker_sleeps_of(os.getpid())
    assert before is not None and after is not None and after - before >= 5


def test_a_process_that_is_gone_has_no_count() -> None:
    assert worker_sleeps_of(2 ** 22 + 7) is None


def test_sleeps_ride_in_the_manifest_and_bad_ones_are_refused(tmp_path: Path) -> None:
    manifest = RunManifest(id="r", source="lab", provenance="test", when="2026-11-27T00:00:00Z", where={},
                           setup=Setup(mesh="envoy", path="both-sidecars"), load=LoadSettings(rps=100.0),
                           sleeps={"server/sidecar": 180, "client/sidecar": 175})
    folder = write_run(tmp_path / "r", manifest, b'{}')
    assert read_manifest(folder).sleeps == {"server/sidecar": 180, "client/sidecar": 175}
    text = (folder / "manifest.yaml").read_text().replace("server/sidecar: 180", "server/sidecar: -3")
    (folder / "manifest.yaml").write_text(text)
    with pytest.raises(ModelError, match=r"sleeps.server/sidecar: must be a finite number >= 0"):
        read_manifest(folder)


@settings(max_examples=40, deadline=None)
@given(st.floats(5e-6, 1e-3), st.lists(st.floats(0.3, 3.0), min_size=1, max_size=4), st.integers(0, 2 ** 31))
def test_the_linger_that_made_the_counts_is_found(true_linger: float, scales: list[float], seed: int) -> None:
    """Runs whose workers slept on every gap longer than a known linger: the fitted linger gives the same counts
    within 5 % (the grid's step and the gaps between two neighbouring gaps)."""
    rng = np.random.default_rng(seed)
    points = []
    for k, scale in enumerate(scales):
        gaps = np.where(rng.random(4000) < 0.3, 0.0, rng.exponential(scale * true_linger, 4000))
        requests = 2000
        measured = np.count_nonzero(gaps > true_linger) / requests
        points.append(SleepPoint(f"run{k}", "server/sidecar", measured, gaps, requests))
    fit = fit_linger(points)
    assert fit is not None
    for p in points:
        assert p.wakes(fit.linger_s) == pytest.approx(p.measured, rel=0.05, abs=2 / p.requests)


def test_without_counted_sleeps_nothing_is_fitted() -> None:
    assert fit_linger([]) is None
    assert fit_linger([SleepPoint("r", "server/sidecar", 0.0, np.array([1e-4]), 1)]) is None


def test_the_wake_fit_sees_only_the_time_slept_and_the_linger_cpu_as_known() -> None:
    point = WakePoint(1000.0, np.array([0.0, 5e-5, 3e-4]), 2.0, 1e-4, 1e-5)
    cpu = lingering(point, 1e-4, cpu=True)
    np.testing.assert_allclose(cpu.gaps_s, [0.0, 0.0, 2e-4])
    assert cpu.value_s == pytest.approx(1e-4 - (5e-5 + 1e-4) / 2)  # lingered 50 us and 100 us over 2 requests
    assert lingering(point, 1e-4, cpu=False).value_s == point.value_s
    assert lingering(point, 0.0, cpu=True) is point


def test_a_wakeup_block_reads_its_linger_and_refuses_a_negative_one() -> None:
    block = {"cpu_ms": 0.1, "tau_ms": 5.0, "linger_us": 40.0, "linger_source": "test"}
    assert parse_wakeup(Section(block, "m.yaml: proxy.wakeup")).linger == pytest.approx(40e-6)
    with pytest.raises(ModelError, match="linger_us"):
        parse_wakeup(Section({**block, "linger_us": -1.0}, "m.yaml: proxy.wakeup"))
