"""Synthetic run folders of known passes for the fit's tests: a baseline and the passes of a sidecar with known
distributions, summed per request and written as fortio runs; one random stream, fresh for each test that uses the
``fresh_draws`` fixture (order-independent draws)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from meshsim.calibrate.fit.families import Family
from meshsim.calibrate.measure.fortio_histogram import result_json
from meshsim.distributions import Gamma, LogNormal, Shifted
from meshsim.run_folder import LoadSettings, RunManifest, Setup, write_run

SEED = 11
RNG = np.random.default_rng(SEED)


@pytest.fixture(autouse=True)
def fresh_draws() -> None:
    """Each test draws its synthetic runs from the same seed, whichever tests ran before it (order-independent)."""
    RNG.bit_generator.state = np.random.default_rng(SEED).bit_generator.state


N = 20000
BASE = Shifted(LogNormal(math.log(0.12e-3), 0.3), 0.16e-3)
INBOUND = Shifted(Gamma(3.0, 0.03e-3), 0.04e-3)
OUTBOUND = Shifted(LogNormal(math.log(0.08e-3), 0.4), 0.05e-3)
GAMMA = [Family("gamma", True)]
PASS_FAMILIES = [Family("gamma", True), Family("lognormal", True)]  # INBOUND's and OUTBOUND's own


def write_pass_run(root: Path, rid: str, path: str, rps: float, samples: np.ndarray,
                   cpu: dict[str, float] | None = None, topology: str = "single", connections: int = 1) -> None:
    manifest = RunManifest(
        id=rid, source="lab", provenance="synthetic: tests/synthetic_passes.py", when="2026-11-22T00:00:00Z",
        where={}, setup=Setup(mesh="envoy", path=path, topology=topology, proxy_workers=2),
        load=LoadSettings(rps=rps, connections=connections, duration_s=N / rps), cpu_seconds=cpu or {})
    write_run(root / rid, manifest, result_json(samples, 1e-5, requested_rps=rps, actual_rps=rps, labels=rid,
                                                connections=connections))


def sum_of(*dists) -> np.ndarray:
    return sum(d.sample(RNG, N) for d in dists)
