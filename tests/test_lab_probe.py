"""Real lab probes: fortio load through real fortio apps and Envoy sidecars on 127.0.0.1, stored as run folders."""

from __future__ import annotations

import json
from dataclasses import replace
import os
import signal
import time
from pathlib import Path

import pytest

from meshsim.errors import MeshsimError, RunFailed
from meshsim.run_folder import read_manifest

from conftest import require_component  # tests/conftest.py: fails under CI=true, skips otherwise

pytestmark = [pytest.mark.lab, pytest.mark.unmeasured]  # asserts no timing: may run beside the simulations


@pytest.fixture(scope="module")
def binaries() -> None:
    require_component("fortio")
    require_component("envoy")


def _lab(spec_kwargs: dict, tmp_path: Path):
    from meshsim.calibrate.measure.lab.running import Lab
    from meshsim.calibrate.measure.lab.spec import LabSpec

    return Lab(LabSpec(**spec_kwargs), tmp_path / "lab")


BALLAST_MB = 400


def _touched_mb(mb: int) -> bytearray:
    """``mb`` MB of this process's memory, every page written (resident)."""
    block = bytearray(mb * 2**20)
    block[::4096] = b"\1" * len(block[::4096])
    return block


def _admin_stats(port: int) -> dict[str, int]:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats?format=json", timeout=3) as resp:
        stats = json.load(resp)["stats"]
    return {s["name"]: s["value"] for s in stats if "value" in s}


@pytest.mark.parametrize("mode, connections", [("baseline", 1), ("sidecar", 2)])
def test_chain3_probe_gives_valid_fortio_run_with_expected_count(binaries, tmp_path, mode, connections):
    from meshsim.calibrate.measure.lab.probe import ProbeSettings, probe

    settings = ProbeSettings(rps=200, connections=connections, duration_s=2.0, payload_bytes=512)
    out = tmp_path / "runs"
    with _lab({"topology": "chain3", "mode": mode}, tmp_path) as state:
        result = probe(state, settings, out)
        data = json.loads((result.folder / "fortio.json").read_text())
        count = int(data["DurationHistogram"]["Count"])
        if mode == "sidecar":
            # The leaf's inbound sidecar saw every measured call plus fortio's one warm-up call per connection.
            want = count + connections
            deadline = time.monotonic() + 5  # Envoy's counters may trail the last response a little
            while (seen := _admin_stats(state.process("s3/sidecar").admin_port)["http.inbound.downstream_rq_2xx"]) \
                    != want and time.monotonic() < deadline:
                time.sleep(0.1)
            assert seen == want

    expected = int(200 * 2.0) // connections * connections  # fortio: int(rps*duration)/c calls per connection
    assert settings.expected_calls == expected
    if "fell behind" in result.manifest.notes:
        # fortio ends a run at its deadline; on a busy machine a late run misses its last few calls (and says so).
        assert 0.9 * expected <= count < expected
    else:
        assert count == expected
    assert data["RetCodes"] == {"200": count}
    assert data["Sizes"]["Min"] >= 512  # the echo really returned the requested payload through the chain
    access = (result.folder / "access.jsonl").read_text().splitlines()
    assert len(access) == count
    manifest = read_manifest(result.folder)
    assert manifest.source == "lab" and manifest.status == "ok"
    assert manifest.setup.path == ("baseline" if mode == "baseline" else "both-sidecars")
    assert manifest.setup.topology == "chain3" and manifest.setup.payload_bytes == 512
    assert manifest.load.rps == 200 and manifest.load.connections == connections and manifest.load.resolution_s == 1e-5
    apps = {"client/app", "s1/app", "s2/app", "s3/app"}
    sidecars = {"client/sidecar", "s1/sidecar", "s2/sidecar", "s3/sidecar"} if mode == "sidecar" else set()
    assert set(manifest.cpu_seconds) == apps | sidecars
    # every process the lab started counted its workers' sleeps; a sidecar's workers slept at least once per call
    # at 200 rps (5 ms apart, far longer than any pass); fortio's client (not the lab's) is not counted
    assert set(manifest.sleeps) == (apps - {"client/app"}) | sidecars
    assert all(manifest.sleeps[k] >= count for k in sidecars)
    assert all(manifest.cpu_seconds[k] > 0 for k in apps | sidecars)
    assert set(manifest.memory_mb) == apps | sidecars and all(v > 1 for v in manifest.memory_mb.values())
    assert "fortio load -qps 200" in manifest.provenance
    # No path of this machine in what may be committed: binaries by name, folders as $LAB / $RUN.
    for private in (str(require_component("fortio").parent), str(tmp_path), str(Path.home())):
        assert private not in manifest.provenance
    assert "/tmp" not in (result.folder / "fortio.json").read_text() and data["Labels"] == f"meshsim lab chain3 {mode}"
    assert manifest.where["fortio_version"] == "1.68.2"
    p50, p99 = result.percentiles_ms()["p50"], result.percentiles_ms()["p99"]
    assert 0 < p50 <= p99
    if mode == "sidecar":
        _check_proxy_histograms(result.folder, count + connections, p50)
    _check_run_queue(result.folder, manifest.cpu_seconds, count)


def _check_run_queue(folder: Path, cpu_seconds: dict[str, float], requests: int) -> None:
    """Each lab process's threads' run-queue delay over the load is stored with the run: every component but the
    load generator (started per load), its time on a core agreeing with its CPU clock (the schedstat window ends at
    the load's end, the CPU clock's after it: within a few ms each, plus 20 %), and per request over fortio's count."""
    from meshsim.calibrate.measure.lab.run_queue import FILE_KEY, FILE_NAME

    assert read_manifest(folder).files[FILE_KEY] == FILE_NAME
    data = json.loads((folder / FILE_NAME).read_text())
    parts = data["components"]
    assert set(parts) == set(cpu_seconds) - {"client/app"} and data["requests"] == requests
    for name, part in parts.items():
        assert part["timeslices"] > 0 and part["wait_s"] >= 0, (name, part)
        assert part["run_s"] <= 1.2 * cpu_seconds[name] + 0.01, (name, part, cpu_seconds[name])
        assert part["wait_ms_per_request"] == pytest.approx(part["wait_s"] * 1e3 / requests, rel=1e-3, abs=1e-5)


CHAIN3_VIEWS = ("client/sidecar to s1", "s1/sidecar inbound", "s1/sidecar to s2", "s2/sidecar inbound",
                "s2/sidecar to s3", "s3/sidecar inbound")


def _check_proxy_histograms(folder: Path, requests: int, fortio_p50_ms: float) -> None:
    """Each Envoy's own request-time histogram over the load, stored with the run under the model's view names:
    every view saw every request (and fortio's warm-up calls); the spans nest (each view's request contains the
    next one's), so each quantile of an outer view is at least the inner one's, and the client sidecar's is at most
    fortio's (each to its bucket)."""
    from meshsim.calibrate.measure.lab.proxy_histograms import FILE_KEY, FILE_NAME, from_json
    from meshsim.calibrate.measure.prometheus.prom_histogram import bucket_quantile

    assert read_manifest(folder).files[FILE_KEY] == FILE_NAME
    views = from_json(json.loads((folder / FILE_NAME).read_text()))
    assert tuple(sorted(views)) == tuple(sorted(CHAIN3_VIEWS))
    assert all(buckets[-1].count == requests for buckets in views.values()), {v: b[-1] for v, b in views.items()}
    for q in (0.5, 0.9):
        found = [bucket_quantile(q, views[view]) for view in CHAIN3_VIEWS]
        for outer, inner in zip(found, found[1:]):
            assert outer.upper >= inner.lower, (q, found)
    assert bucket_quantile(0.5, views["client/sidecar to s1"]).lower <= fortio_p50_ms


def test_probe_against_stopped_service_fails_and_stores_nothing(binaries, tmp_path):
    from meshsim.calibrate.measure.lab.probe import ProbeSettings, probe

    out = tmp_path / "runs"
    lab = _lab({"topology": "chain3", "mode": "sidecar"}, tmp_path)
    with lab as state:
        leaf = state.process("s3/app")
        os.kill(leaf.pid, signal.SIGTERM)
        lab.supervisor.by_name("s3/app").popen.wait(timeout=5)
        with pytest.raises(RunFailed, match="s3/app"):
            probe(state, ProbeSettings(rps=100, duration_s=1.0), out)
    assert not out.exists() or not any(out.iterdir())


def test_error_fraction_of_a_real_failing_fortio_run(binaries, tmp_path):
    """fortio against an echo answering 503 for ~20 % of calls: the probe's error check sees it."""
    from meshsim.calibrate.measure.lab.probe import ProbeSettings, error_fraction, run_fortio

    fortio = require_component("fortio")
    with _lab({"topology": "single", "mode": "baseline"}, tmp_path) as state:
        settings = ProbeSettings(rps=200, duration_s=1.0)
        ballast = _touched_mb(BALLAST_MB)  # this process's peak, far above fortio's own
        # -allow-initial-errors: a 503 on the warm-up call would otherwise abort fortio (that alone fails a probe).
        run = run_fortio(fortio, f"{state.entry_url}/echo?status=503:20", settings, tmp_path,
                         extra=["-allow-initial-errors"])
        del ballast
    result = run.result
    fraction, errors, total = error_fraction(result)
    assert total == 200 and 0.08 < fraction < 0.35 and errors == result["RetCodes"].get("503")
    assert fraction > settings.max_error_fraction
    # fortio's own peak (tens of MB), not the ballast's: wait4's ru_maxrss, kept across execve, held the latter
    assert run.cpu_seconds > 0 and run.peak_rss_mb is not None and 1 < run.peak_rss_mb < BALLAST_MB / 2


def test_probe_settings_reject_bad_input():
    from meshsim.calibrate.measure.lab.probe import ProbeSettings

    with pytest.raises(MeshsimError, match="^connections: "):
        ProbeSettings(connections=0)
    with pytest.raises(MeshsimError, match="^payload_bytes: "):
        ProbeSettings(payload_bytes=10**7)


def test_lab_run_keeps_runs_and_reports_percentiles(binaries, tmp_path):
    from meshsim.calibrate.measure.lab.commands import lab_run
    from meshsim.calibrate.measure.lab.probe import ProbeSettings
    from meshsim.calibrate.measure.lab.spec import LabSpec

    messages: list[str] = []
    started = time.monotonic()
    results = lab_run(LabSpec(topology="single", mode="server-sidecar"),
                      [ProbeSettings(rps=100, duration_s=1.0),
                       ProbeSettings(rps=300, connections=2, duration_s=1.0, uniform=True, jitter=True, nocatchup=True)],
                      tmp_path / "runs", progress=messages.append)
    assert time.monotonic() - started < 60  # hang guard: two 1 s probes
    assert [r.manifest.load.rps for r in results] == [100, 300]
    assert all(r.folder.parent == tmp_path / "runs" for r in results)
    assert {"client/app", "server/app", "server/sidecar"} == set(results[0].manifest.cpu_seconds)
    assert results[0].manifest.setup.path == "server-sidecar"
    # fortio really ran with the pacing flags, and the manifest says so.
    second = json.loads((results[1].folder / "fortio.json").read_text())
    assert (second["Uniform"], second["Jitter"], second["NoCatchUp"], second["NumThreads"]) == (True, True, True, 2)
    assert (results[0].result["Uniform"], results[0].result["Jitter"], results[0].result["NoCatchUp"]) == (False,) * 3
    load = results[1].manifest.load
    assert (load.uniform, load.jitter, load.nocatchup) == (True, True, True)
    summary = results[1].summary()
    assert summary["p50_ms"] <= summary["p90_ms"] <= summary["p99_ms"]
    assert any("probe 2/2" in m for m in messages)


def test_calibrate_plan_stores_every_run_and_reports_progress(binaries, tmp_path):
    """A shrunken standard plan (two setups, one rate, two payloads, short runs), without the fitter."""
    from meshsim.calibrate.lab_calibration import calibrate_lab
    from meshsim.calibrate.lab_plan import LabPlan

    messages: list[str] = []
    report = calibrate_lab(LabPlan("envoy-lab-test", tmp_path / "runs", None, rates=(200,), payloads=(0, 4096),
                                   duration_s=0.5, stages=(("single", "baseline"), ("lb3", "proxy-lb")), fit=False),
                           messages.append)
    assert len(report.run_dirs) == 4 and all(d.is_dir() for d in report.run_dirs)
    manifests = [read_manifest(d) for d in report.run_dirs]
    assert [(m.setup.path, m.setup.payload_bytes) for m in manifests] == [
        ("baseline", 0), ("baseline", 4096), ("proxy-lb", 0), ("proxy-lb", 4096)]
    assert {m.setup.mesh for m in manifests} == {"envoy-lab-test"}
    assert any("[2/2] proxy-lb done, 4/4 runs" in m for m in messages)


def test_calibrate_resume_skips_every_stored_probe_and_fits_from_the_same_folders(binaries, tmp_path):
    """Run a tiny plan, then again with resume: no new probe, the same folders, each skip said."""
    from meshsim.calibrate.lab_calibration import calibrate_lab
    from meshsim.calibrate.lab_plan import LabPlan

    plan = LabPlan("envoy-lab-test", tmp_path / "runs", None, rates=(200,), payloads=(0, 4096), duration_s=0.5,
                   stages=(("single", "baseline"),), fit=False, state_dir=tmp_path / "state")
    first = calibrate_lab(plan)
    assert len(first.run_dirs) == 2
    # A third setup's run and an unreadable folder in the same place are not mistaken for the plan's probes.
    (tmp_path / "runs" / "junk").mkdir()
    (tmp_path / "runs" / "junk" / "manifest.yaml").write_bytes(b"\xff")
    messages: list[str] = []
    again = calibrate_lab(replace(plan, resume=True), messages.append)
    assert sorted(again.run_dirs) == sorted(first.run_dirs)
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == sorted([d.name for d in first.run_dirs] + ["junk"])
    assert sum("resume: skipped 200 rps" in m for m in messages) == 2
    assert any("resume: skipped 2 probes" in m and "measured 0" in m for m in messages)
    assert not any(m.strip().startswith("lab up:") for m in messages)  # no lab was even started
    # Another mesh name is another setup: resume measures it.
    other = calibrate_lab(replace(plan, mesh="envoy-lab-other", resume=True))
    assert not set(other.run_dirs) & set(first.run_dirs) and len(other.run_dirs) == 2


def test_calibrate_lab_cli_passes_resume_and_state_dir():
    from meshsim.cli.entry_point import build_parser
    from meshsim.cli.lab_command import lab_plan_of

    def plan(*flags: str):
        return lab_plan_of(build_parser().parse_args(["calibrate", "--lab", *flags]), "envoy-lab", Path("m.yaml"))

    resumed = plan("--resume", "--lab-state-dir", "somewhere")
    assert resumed.resume is True and str(resumed.state_dir) == "somewhere"
    assert plan().resume is False
    assert resumed.load_ladder is True
    assert plan("--lab-no-load-ladder").load_ladder is False


def test_the_load_ladder_reaches_below_the_wake_ups_time_scale():
    """The ladder's runs: plain baseline and both sidecars, many connections, rates past every calibration rate, so
    that a worker's idle gap between passes falls well under a millisecond at the top (the wake-ups' tau measured in
    the lab is 13-22 ms, and at 1-5 ms every pass is cold)."""
    from meshsim.calibrate.lab_plan import LADDER_CONNECTIONS, LADDER_STAGES, ladder_plan
    from meshsim.calibrate.measure.lab.spec import DEFAULT_RATES

    ladder = ladder_plan((1024, 0), 2.0)
    assert {p.connections for p in ladder} == {LADDER_CONNECTIONS} and {p.payload_bytes for p in ladder} == {1024}
    assert min(p.rps for p in ladder) > max(DEFAULT_RATES)
    passes_per_worker = 2 * max(p.rps for p in ladder) / 2  # two passes per request, spread over two workers
    assert 1 / passes_per_worker < 0.2e-3
    assert set(LADDER_STAGES) == {("single", "baseline"), ("single", "sidecar")}
