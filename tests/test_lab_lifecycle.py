"""Lab lifecycle with real processes: the CLI's up/probe/down through the detached supervisor, nothing left behind,
CPU pinning and CPU limits, and the supervisor's own stop logic."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from meshsim.errors import MeshsimError, RunFailed

from conftest import require_component  # tests/conftest.py: fails under CI=true, skips otherwise

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def binaries() -> None:
    require_component("fortio")
    require_component("envoy")


def meshsim_lab(*argv: str) -> int:
    """Run `meshsim lab ...` through lab_command.register exactly as the top-level CLI wires it."""
    from meshsim.cli.lab_command import register

    parser = argparse.ArgumentParser(prog="meshsim")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["lab", *argv])
    return args.handler(args)


def _state(lab_dir: Path) -> dict:
    return json.loads((lab_dir / "state.json").read_text())


def test_cli_up_probe_down_leaves_no_process(binaries, tmp_path, capsys):
    from meshsim.calibrate.measure.lab.supervisor import pid_alive

    lab_dir, out = tmp_path / "lab", tmp_path / "runs"
    try:
        assert meshsim_lab("up", "--topology", "chain3", "--mode", "sidecar", "--state-dir", str(lab_dir)) == 0
        state = _state(lab_dir)
        pids = [p["pid"] for p in state["processes"]] + [state["daemon_pid"]]
        assert len(state["processes"]) == 7 and all(pid_alive(pid) for pid in pids)
        # The processes outlive the `up` call: a later command probes them.
        assert meshsim_lab("probe", "--rps", "100", "--duration", "1", "--state-dir", str(lab_dir),
                           "--out", str(out), "--json") == 0
        summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert summary["status"] == "ok" and Path(summary["folder"]).parent == out
        with pytest.raises(MeshsimError, match="already up"):
            meshsim_lab("up", "--state-dir", str(lab_dir))
    finally:
        assert meshsim_lab("down", "--state-dir", str(lab_dir)) == 0
    assert not any(pid_alive(pid) for pid in pids)
    assert not (lab_dir / "state.json").exists()
    with pytest.raises(MeshsimError, match="no lab"):
        meshsim_lab("probe", "--state-dir", str(lab_dir))


def _scrape(port: int) -> dict[tuple[str, str], float]:
    """The exporter's series now: (metric, container) -> value, summed over the processes of one component."""
    import re
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out: dict[tuple[str, str], float] = {}
    for name, container, value in re.findall(r'^(\w+)\{container="([^"]*)",pod="[^"]*"\} (\S+)$', text, re.M):
        out[(name, container)] = out.get((name, container), 0.0) + float(value)
    return out


def test_lab_up_serves_the_processes_cpu_and_memory_to_prometheus_and_down_stops_it(binaries, tmp_path, capsys):
    """`lab up` starts the process exporter as one more supervised process on a port recorded in state.json, writes
    a Prometheus configuration naming every Envoy and the exporter, and `lab down` stops it with the rest."""
    import yaml

    from meshsim.calibrate.measure.lab.supervisor import pid_alive

    lab_dir = tmp_path / "lab"
    try:
        assert meshsim_lab("up", "--topology", "single", "--mode", "sidecar", "--state-dir", str(lab_dir)) == 0
        printed = capsys.readouterr().out
        state = _state(lab_dir)
        exporter, port = state["exporter"], state["exporter_port"]
        pids = [p["pid"] for p in state["processes"]] + [exporter["pid"], state["daemon_pid"]]
        assert f"--config.file {lab_dir}/prometheus.yml" in printed and str(port) in printed
        series = _scrape(port)
        components = {p["name"] for p in state["processes"]}  # single: no replicas, names are components
        assert components == {"client/sidecar", "server/sidecar", "server/app"}
        for component in components:
            assert series[("container_cpu_usage_seconds_total", component)] > 0
            assert series[("container_memory_working_set_bytes", component)] > 1e6
        assert not any(container == "exporter" for _metric, container in series)  # it watches the lab, not itself
        config = yaml.safe_load((lab_dir / "prometheus.yml").read_text())
        jobs = {job["job_name"]: job for job in config["scrape_configs"]}
        assert jobs["lab-processes"]["static_configs"] == [{"targets": [f"127.0.0.1:{port}"]}]
        assert jobs["envoy"]["metrics_path"] == "/stats/prometheus"
        envoys = {c["labels"]["workload"]: c["targets"] for c in jobs["envoy"]["static_configs"]}
        assert envoys == {p["name"].split("/")[0]: [f"127.0.0.1:{p['admin_port']}"] for p in state["processes"]
                          if p["admin_port"]}
        assert set(envoys) == {"client", "server"}
    finally:
        assert meshsim_lab("down", "--state-dir", str(lab_dir)) == 0
    assert not any(pid_alive(pid) for pid in pids)
    with pytest.raises(OSError):
        _scrape(port)


def test_a_supervisor_crash_takes_its_processes_along_and_down_clears_the_lab(binaries, tmp_path):
    from meshsim.calibrate.measure.lab.commands import lab_down, lab_up
    from meshsim.calibrate.measure.lab.spec import LabSpec
    from meshsim.calibrate.measure.lab.supervisor import pid_alive

    lab_dir = tmp_path / "lab"
    state = lab_up(LabSpec(topology="chain3", mode="server-sidecar"), lab_dir)
    pids = [p.pid for p in state.processes]
    os.kill(state.daemon_pid, signal.SIGKILL)  # the supervisor dies without cleaning up
    deadline = time.monotonic() + 10
    while any(pid_alive(pid) for pid in [state.daemon_pid, *pids]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(pid_alive(pid) for pid in pids)  # each ends with its parent (meshsim.parent_death)
    stopped = lab_down(lab_dir)
    assert set(pids) <= set(stopped)
    assert not (lab_dir / "state.json").exists()


def test_up_failure_is_reported_and_cleaned_up(binaries, tmp_path):
    from meshsim.calibrate.measure.lab.commands import lab_up
    from meshsim.calibrate.measure.lab.spec import LabSpec

    lab_dir = tmp_path / "lab"
    lab_dir.mkdir()
    (lab_dir / "data").write_text("a file where fortio's data folder should be")  # makes planning fail
    with pytest.raises(RunFailed) as info:
        lab_up(LabSpec(topology="single", mode="baseline"), lab_dir, timeout_s=20)
    assert "\n" not in str(info.value)
    assert _state(lab_dir)["status"] == "failed"


def test_lab_run_cli_json(binaries, tmp_path, capsys):
    assert meshsim_lab("run", "--topology", "single", "--mode", "sidecar", "--rps", "100,200", "--duration", "1",
                       "--out", str(tmp_path / "runs"), "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["runs"]) == 2
    for run in data["runs"]:
        assert Path(run["folder"]).is_dir() and run["p50_ms"] <= run["p90_ms"] <= run["p99_ms"]


def test_cpus_pins_every_proxy(binaries, tmp_path):
    from meshsim.calibrate.measure.lab.running import Lab
    from meshsim.calibrate.measure.lab.spec import LabSpec

    with Lab(LabSpec(topology="chain3", mode="sidecar", cpus="0", workers=1), tmp_path / "lab") as state:
        for proc in state.processes:
            affinity = os.sched_getaffinity(proc.pid)
            if proc.kind == "sidecar":
                assert affinity == {0}, proc.name
                assert proc.command[:3] == ["taskset", "-c", "0"] and "--concurrency" in proc.command
            else:  # apps keep the affinity they inherit from the lab
                assert affinity == os.sched_getaffinity(0), proc.name


def test_cpu_limit_is_applied_or_clearly_unavailable(binaries, tmp_path):
    from meshsim.calibrate.measure.lab.cpulimit import find_cpu_limiter
    from meshsim.calibrate.measure.lab.running import Lab
    from meshsim.calibrate.measure.lab.spec import LabSpec

    try:
        find_cpu_limiter("probe-only")
    except RunFailed as exc:
        assert "unavailable" in str(exc)
        with pytest.raises(RunFailed, match="unavailable"):
            Lab(LabSpec(topology="single", mode="sidecar", cpu_limit=0.5), tmp_path / "lab").up()
        return
    from meshsim.calibrate.measure.lab.probe import ProbeSettings, probe

    lab = Lab(LabSpec(topology="single", mode="sidecar", cpu_limit=0.1), tmp_path / "lab")
    with lab as state:
        # As fast as possible for a second: the proxies want far more than 0.1 core and get throttled.
        result = probe(state, ProbeSettings(rps=0, connections=4, duration_s=1.0), tmp_path / "runs")
        groups = []
        for proc in state.processes:
            if proc.kind != "sidecar":
                assert proc.cgroup is None
                continue
            group = Path(proc.cgroup)
            groups.append(group)
            assert str(proc.pid) in (group / "cgroup.procs").read_text().split()
            if (group / "cpu.max").exists():
                assert (group / "cpu.max").read_text().split() == ["10000", "100000"]
            else:
                assert (group / "cpu.cfs_quota_us").read_text().strip() == "10000"
            throttled = dict(line.split() for line in (group / "cpu.stat").read_text().splitlines())
            assert int(throttled["nr_throttled"]) > 0, (proc.name, throttled)
            # Unlimited, each sidecar burns ~0.35 s of CPU in this second here; the quota holds it near 0.1 s.
            assert result.manifest.cpu_seconds[proc.name] < 0.1 * (1.0 + 1.0), result.manifest.cpu_seconds
        assert len(groups) == 2
        assert result.manifest.setup.proxy_cpu_limit == 0.1 and "cgroup v" in result.manifest.notes
    assert not any(g.exists() for g in groups)  # removed at down


def test_supervisor_kills_a_child_that_ignores_sigterm(tmp_path):
    from meshsim.calibrate.measure.lab.supervisor import Supervisor, pid_alive

    supervisor = Supervisor(tmp_path / "logs")
    stubborn = supervisor.start("stubborn", [sys.executable, "-c",
                                             "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                                             "print('ready', flush=True); time.sleep(60)"])
    polite = supervisor.start("polite", [sys.executable, "-c", "import time; time.sleep(60)"])
    deadline = time.monotonic() + 5
    while "ready" not in stubborn.log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    started = time.monotonic()
    assert supervisor.stop_all(grace_s=1.0) == []
    assert time.monotonic() - started < 15  # SIGKILL after the 1 s grace, not a 60 s sleep
    assert not pid_alive(stubborn.pid) and not pid_alive(polite.pid)
    assert stubborn.popen.returncode == -signal.SIGKILL and polite.popen.returncode == -signal.SIGTERM
