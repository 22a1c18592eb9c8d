"""The host's load beside a lab run (``where.host_load``): the arithmetic, the cores it leaves the lab, and a real
probe beside a spinning neighbour."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from meshsim.calibrate.measure.lab.host_load import NOISE_CORES, cores_left, host_load, host_seconds
from meshsim.run_folder import read_manifest

from conftest import require_component  # tests/conftest.py: fails under CI=true, skips otherwise


def test_the_load_splits_into_interrupts_the_lab_and_the_rest() -> None:
    load = host_load((100.0, 10.0), (108.0, 11.0), 4.0, {"client/app": 1.0, "server/sidecar": 3.0})
    assert (load["busy_cores"], load["irq_cores"], load["lab_cores"], load["other_cores"]) == (2.0, 0.25, 1.0, 0.75)
    assert host_load((0.0, 0.0), (1.0, 0.5), 1.0, {"a": 2.0})["other_cores"] == 0.0  # never negative


@pytest.mark.parametrize("where, left", [
    ({"cpus": 2}, None),  # not recorded
    ({"cpus": 2, "host_load": {"other_cores": NOISE_CORES / 2}}, None),  # the probe's own bookkeeping
    ({"cpus": 2, "host_load": {"other_cores": 0.5}}, 1.5),
    ({"cpus": 2, "host_load": {"other_cores": 1.9}}, 0.5),  # at least half a core: the lab ran
])
def test_the_cores_a_neighbour_leaves(where: dict, left: float | None) -> None:
    assert cores_left(where) == left


def test_host_seconds_grow_with_the_host_busy() -> None:
    before = host_seconds()
    spin = 0
    for _ in range(3_000_000):
        spin += 1
    after = host_seconds()
    assert after[0] > before[0] and after[1] >= before[1]  # ~0.1 s of CPU: several 10 ms ticks


@pytest.mark.lab
def test_a_probe_records_a_spinning_neighbour(tmp_path: Path) -> None:
    """A process spinning during the probe is counted in the other processes' cores (which hold it and whatever
    else the machine ran, so at least the spinner's own CPU clock over the window), the lab's own in lab_cores."""
    require_component("fortio")
    require_component("envoy")
    from meshsim.calibrate.measure.lab.probe import ProbeSettings, probe
    from meshsim.calibrate.measure.lab.running import Lab
    from meshsim.calibrate.measure.lab.spec import LabSpec
    from meshsim.calibrate.measure.lab.supervisor import cpu_seconds_of

    settings = ProbeSettings(rps=200, connections=1, duration_s=3.0, payload_bytes=512)
    with Lab(LabSpec(topology="single", mode="baseline"), tmp_path / "lab") as state:
        spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            before = cpu_seconds_of(spinner.pid)
            result = probe(state, settings, tmp_path / "runs")
            after = cpu_seconds_of(spinner.pid)
        finally:
            spinner.kill()
            spinner.wait()
    load = read_manifest(result.folder).where["host_load"]
    assert before is not None and after is not None
    spun = (after - before) / load["window_s"]  # the spinner's cores: its clock runs a little past the window
    assert spun > 0.1, "the spinner did not run"
    assert load["lab_cores"] > 0
    assert load["other_cores"] >= spun - 0.15  # 10 ms ticks over a 3 s window, and the clocks' edges
    assert load["busy_cores"] <= 1.03 * (os.cpu_count() or 1)  # never more than the host has, to a tick
