"""Benchmark: fit_runs on the shipped Istio 1.2.0 runs, with the cached FFT spectra (calibrate/convolution.py) and
with the former plain FFT convolution, and a check that both write the same model.

Run: python tests/bench_calibrate_fit.py   (about 1.5 min on 2 cores; not collected by pytest)
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import yaml

from meshsim.calibrate.fit import convolution as cv
from meshsim.calibrate.fit_runs import fit_runs
from meshsim.calibrate.measure.tables import measurements_dir


def _fit(out: Path) -> tuple[float, dict]:
    started = time.perf_counter()
    fit_runs([measurements_dir() / "istio-1.2.0"], "istio-1.2", out)
    elapsed = time.perf_counter() - started
    model = yaml.safe_load(out.read_text())
    model["calibration"].pop("fitted_at")
    return elapsed, model


def main() -> int:
    with tempfile.TemporaryDirectory() as work:
        cached_s, cached = _fit(Path(work) / "cached.yaml")
        original = cv.GridPmf.plus
        cv.GridPmf.plus = lambda self, other: cv.GridPmf(self.grid, cv.convolve(self.mass, other.mass),  # type: ignore
                                                         self.terms + other.terms)
        try:
            plain_s, plain = _fit(Path(work) / "plain.yaml")
        finally:
            cv.GridPmf.plus = original  # type: ignore[method-assign]
    print(f"fit_runs istio-1.2.0: cached spectra {cached_s:.1f} s, plain FFT {plain_s:.1f} s "
          f"({plain_s / cached_s:.2f}x); identical models: {cached == plain}")
    return 0 if cached == plain else 1


if __name__ == "__main__":
    sys.exit(main())
