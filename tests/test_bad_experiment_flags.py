"""Bad sweep, capacity and factorial flags: values a worker would refuse and designs no run can honour are refused
before any worker starts, in one line naming the flag the user typed, with exit status 2; nothing is computed, cached
or written."""

from __future__ import annotations

from pathlib import Path

import pytest

from meshsim.cli import main

from refusals import cli_refuses


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
    cli_refuses(capsys, ["sweep", *args, "--out", str(out), "--cache", str(cache), "--no-progress", "--processes", "2"],
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
    cli_refuses(capsys, ["capacity", *args], needle)


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
    cli_refuses(capsys, ["factorial", *args, *rate, "--replications", "2"], needle)


def test_factorial_with_proxies_in_some_cells_runs_and_says_so(capsys) -> None:
    """mesh vs none x mTLS is a design (mTLS acts where there is a mesh): run, with the note, not refused."""
    code = main(["factorial", "--factor", "scope=none,both", "--factor", "mtls", "--rps", "100", "--duration", "0.5",
                 "--replications", "2", "--topology", "single"])
    assert code == 0 and "have no proxy to act on in 2 of 4 cells" in capsys.readouterr().out
