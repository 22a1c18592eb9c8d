"""Synthetic fortio run folders for the tests: a closed-loop run whose manifest and result agree, and the edits that
make one impossible (a histogram in milliseconds, a manifest that describes another run, no access log)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml

from meshsim.calibrate.measure.fortio_histogram import result_json
from meshsim.run_folder import LoadSettings, RunManifest, Setup, write_run

RESOLUTION = 1e-5  # the lab's fortio -r


def write_synthetic_run(folder: Path, samples: np.ndarray, rps: float, connections: int = 1, *,
                        path: str = "server-sidecar", actual_rps: float | None = None, log: bool = True,
                        run_id: str | None = None) -> Path:
    """A closed-loop fortio run whose manifest and result agree (rate, connections, resolution, duration)."""
    rps = float(rps)
    achieved = float(actual_rps) if actual_rps is not None else rps
    folder.parent.mkdir(parents=True, exist_ok=True)
    manifest = RunManifest(id=run_id or folder.name, source="lab", provenance="synthetic: tests/synthetic_runs.py",
                           when="2026-11-26T00:00:00Z", where={}, setup=Setup(mesh="envoy", path=path),
                           load=LoadSettings(rps=rps, connections=connections, duration_s=samples.size / achieved,
                                             resolution_s=RESOLUTION))
    entries = folder.parent / f"{folder.name}.jsonl"
    entries.write_text("".join(json.dumps({"latency": float(s), "ok": True}) + "\n" for s in samples))
    result = result_json(samples, RESOLUTION, requested_rps=rps, actual_rps=achieved, connections=connections)
    written = write_run(folder, manifest, result, entries if log else None)
    entries.unlink()
    return written


def lab_like_samples(n: int = 600, seed: int = 3) -> np.ndarray:
    """One connection's latencies through a sidecar: ~0.7 ms, a gamma body."""
    return 0.5e-3 + np.random.default_rng(seed).gamma(3.0, 0.07e-3, n)


def without_log(folder: Path) -> None:
    """The run without its access log (the histogram alone), as the manifest then says."""
    (folder / "access.jsonl").unlink()
    data = yaml.safe_load((folder / "manifest.yaml").read_text())
    data["files"].pop("access_log")
    (folder / "manifest.yaml").write_text(yaml.safe_dump(data))


def edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def edit_load(folder: Path, **values) -> None:
    data = yaml.safe_load((folder / "manifest.yaml").read_text())
    data["load"].update(values)
    (folder / "manifest.yaml").write_text(yaml.safe_dump(data))


def in_milliseconds(data: dict) -> None:
    """The review's case: every latency of the histogram written in ms where fortio writes seconds."""
    hist = data["DurationHistogram"]
    for key in ("Min", "Max", "Sum", "Avg", "StdDev"):
        hist[key] *= 1000
    for bucket in hist["Data"]:
        bucket["Start"] *= 1000
        bucket["End"] *= 1000
