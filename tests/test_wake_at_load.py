"""CPU per request that falls with load: a station's ``resume_cpu`` is paid per request when its worker idles between
requests and once per batch when work waits for it (both engines), on an app and on a span collector; and the lab
validation's forwarding apps split into work per request and CPU per wake from the chain's baseline at two loads
(calibrate/validation/forwarding_wake.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from meshsim.calibrate.load.collector_wake import add_collector_wakeup, wakes_per_span
from meshsim.calibrate.load.feature_cpu import matched_cpu
from meshsim.calibrate.lab_plan import LADDER_CONNECTIONS, LADDER_RATES, LADDER_STAGES, PLAN_STAGES, LabPlan
from meshsim.calibrate.measure.dataset import load_runs
from meshsim.calibrate.measure.lab.spec import parse_topology
from meshsim.calibrate.validation.forwarding_wake import WakeSplit, wakes_per_request
from meshsim.calibrate.validation.forwarding_cpu import forwarding_cpu_ms
from meshsim.calibrate.validation.replay import ReplaySettings, replay_options, topology_for
from meshsim.distributions import Deterministic
from meshsim.mesh import Collector, Feature, MeshModel, ProxyModel
from meshsim.scenario import Scenario
from meshsim.sim.engine.replication_result import Horizon
from meshsim.sim.engine.simpy_replication import run_replication
from meshsim.sim.fast.fast_engine import run_fast_replication
from meshsim.topology import Client, Compute, Service, Topology
from meshsim.wakeup import WakeUp
from meshsim.workload import FortioLoad, Workload
from simkit import NO_MESH, NO_NETWORK, ZERO, station_topology

MS = 1e-3
ENGINES = {"simpy": run_replication, "fast": run_fast_replication}
WORK_MS, RESUME_MS = 0.1, 0.05
RESUME_ONLY = WakeUp(delay=0.0, tau=1 * MS, cpu=0.0, resume_cpu=RESUME_MS * MS)
HORIZON = Horizon(3.0, 0.5)
SITTING = Path(__file__).resolve().parent.parent / "measurements" / "lab-cpu-at-load-2026-11-27" / "sitting-0359"


def _app(load: FortioLoad, engine: str):
    svc = Service("q", handler=(Compute(Deterministic(WORK_MS * MS)),), cores=1, request_bytes=0, response_bytes=0,
                  wakeup=RESUME_ONLY)
    topology = Topology("woken", "q", {"q": svc}, NO_NETWORK, Client(request_bytes=0))
    return ENGINES[engine](Scenario(topology, NO_MESH), Workload(load), HORIZON, 1, 0)


@pytest.mark.parametrize("engine", ENGINES)
def test_an_apps_resume_cpu_is_paid_per_request_at_a_low_rate_and_per_batch_when_saturated(engine: str) -> None:
    """100 requests/s on one connection leave the worker idle 9.85 ms between requests: every request pays the
    0.05 ms resume on top of its 0.1 ms. Four connections as fast as they can keep the worker busy: after its first
    wake no request finds it idle, so it carries 1 / 0.1 ms = 10 000 requests/s at 0.1 ms each."""
    low = _app(FortioLoad(100, connections=1), engine).usage["q/app"]
    assert low.cpu_seconds / low.jobs == pytest.approx((WORK_MS + RESUME_MS) * MS, rel=1e-9)
    saturated = _app(FortioLoad(1_000_000, connections=4), engine)
    usage = saturated.usage["q/app"]
    assert usage.cpu_seconds / usage.jobs == pytest.approx(WORK_MS * MS, abs=RESUME_MS * MS / usage.jobs * 1.001)
    assert saturated.achieved_rps == pytest.approx(1 / (WORK_MS * MS), rel=0.01)


SPAN_MS, SPAN_RESUME_MS, PASS_MS = 0.02, 0.01, 0.1
KINDS = ("inbound_request", "inbound_response", "outbound_request", "outbound_response")


def _traced(load: FortioLoad, engine: str, horizon: Horizon = HORIZON):
    """Both sidecars (0.1 ms passes) and a collector of its own (0.02 ms per span + 0.01 ms per wake)."""
    proxy = ProxyModel("test", dict.fromkeys(KINDS, Deterministic(PASS_MS * MS)), workers=2)
    collector = Collector(1, Deterministic(SPAN_MS * MS), None,
                          WakeUp(delay=0.0, tau=1 * MS, resume_cpu=SPAN_RESUME_MS * MS))
    mesh = MeshModel("traced", proxy, {"tracing": Feature("tracing", collector=collector)}, None)
    scenario = Scenario(station_topology(ZERO, servers=1), mesh, features=("tracing",), scope="both")
    return ENGINES[engine](scenario, Workload(load), horizon, 3, 0).usage["collector"]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_collectors_wakeup_is_paid_per_span_when_spans_come_one_at_a_time(engine: str) -> None:
    """One connection at 100 requests/s: a request's two spans leave 0.1 ms apart (the client sidecar's last pass),
    after the first one's 0.03 ms: each wakes the collector. With the collector's 0.02 ms + 0.01 ms per span at a
    rate the sidecars can carry no more of (many connections), spans from both sidecars' workers queue behind
    one another and fewer of them wake it."""
    low = _traced(FortioLoad(100, connections=1), engine)
    assert low.cpu_seconds / low.jobs == pytest.approx((SPAN_MS + SPAN_RESUME_MS) * MS, rel=1e-9)
    high = _traced(FortioLoad(1_000_000, connections=16), engine, Horizon(0.4, 0.1))
    assert SPAN_MS * MS <= high.cpu_seconds / high.jobs < (SPAN_MS + 0.9 * SPAN_RESUME_MS) * MS


# -- the lab validation's forwarding apps -------------------------------------------------------------------------

MODEL = {"name": "m", "calibration": {"baseline": {"family": "deterministic", "value_ms": 0.05}}}


def _baselines(tmp_path: Path, cpu_ms: dict[int, float]) -> list:
    """The sitting's chain3 baseline runs (one connection at 200 rps, 16 at 4000), each forwarding app burning the
    given CPU per request by connections."""
    folders = []
    for src in sorted((SITTING / "chain-baseline").iterdir())[::2]:
        dst = tmp_path / src.name
        shutil.copytree(src, dst)
        manifest = yaml.safe_load((dst / "manifest.yaml").read_text())
        run = load_runs([dst]).runs[0]
        requests = run.result.actual_rps * manifest["load"]["duration_s"]
        per_request = cpu_ms[manifest["load"]["connections"]]
        manifest["cpu_seconds"].update({k: per_request * MS * requests for k in ("s1/app", "s2/app")})
        (dst / "manifest.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
        folders.append(dst)
    return load_runs(folders).runs


def test_the_forwarding_apps_split_reproduces_both_baseline_runs_cpu(tmp_path: Path) -> None:
    """0.24 ms per request with one connection, 0.15 ms with 16 (both within the one-connection run's 0.31 ms
    hop): the split's replays of each run book that run's CPU per request (the wakes are the model's own), and a
    run without the loaded one keeps one constant."""
    runs = _baselines(tmp_path, {1: 0.24, 16: 0.15})
    low, loaded = sorted(runs, key=lambda r: r.manifest.load.connections)
    graph = parse_topology("chain3")
    settings = ReplaySettings(sim_duration_s=2.0)
    topology, ids, notes = topology_for(MODEL, loaded, runs, None, settings)
    assert ids == (low.id, loaded.id)
    wakeup = topology.services["s1"].wakeup
    assert wakeup is not None and wakeup.resume_cpu > 0
    work = sum(s.time.mean for s in topology.services["s1"].handler if isinstance(s, Compute)) / MS
    for run, cpu in ((low, 0.24), (loaded, 0.15)):
        options = replay_options(MODEL, run, topology, True, [], settings)
        wakes = wakes_per_request(options.with_changes(mesh=NO_MESH), ["s1/app", "s2/app"])
        assert work + wakeup.resume_cpu / MS * wakes == pytest.approx(cpu, rel=0.05)
    alone, ids, notes = topology_for(MODEL, loaded, [low], None, settings)
    assert ids == (low.id,) and alone.services["s1"].wakeup is None
    assert any("no loaded baseline chain3 run" in n for n in notes)
    assert forwarding_cpu_ms(low, graph) == pytest.approx(0.24, rel=1e-6)


def test_a_split_within_a_shorter_hop_keeps_its_proportions() -> None:
    split = WakeSplit(0.2, 0.1, "s", ("a", "b")).scaled(0.5, "why")
    assert (split.work_ms, split.resume_ms, split.source_runs) == (0.1, 0.05, ("a", "b"))


def test_the_standard_plan_measures_each_feature_on_the_ladders_lowest_rung_twice_in_turn() -> None:
    """The feature rungs give a feature's CPU with its workers sleeping less than once per pass (and the collector's
    with spans queueing), each twice with the other feature between (the fit averages their draws); a feature not
    among the stages, or no ladder, has none."""
    plan = LabPlan()
    rung = (min(LADDER_RATES), LADDER_CONNECTIONS)
    assert [(stage, (p.rps, p.connections)) for stage, p in plan.feature_rungs] == \
        [(("single", "tracing"), rung), (("single", "mtls"), rung)] * 2
    assert "+ 4 feature rungs" in plan.headline()
    assert LabPlan(stages=LADDER_STAGES).feature_rungs == []
    assert LabPlan(load_ladder=False).feature_rungs == []
    without_tracing = [s for s in PLAN_STAGES if s != ("single", "tracing")]
    assert [stage for stage, _ in LabPlan(stages=tuple(without_tracing)).feature_rungs] == [("single", "mtls")] * 2
    assert plan.total_runs == LabPlan(stages=tuple(without_tracing)).total_runs + len(plan.probes) + 2


# -- the fit of the collector's wake-up ----------------------------------------------------------------------------

TRACING = SITTING.parent.parent / "lab-tracing-2026-11-27"


def _with_collector_cpu(src: Path, tmp_path: Path, per_request_ms: float) -> Path:
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    manifest = yaml.safe_load((dst / "manifest.yaml").read_text())
    run = load_runs([dst]).runs[0]
    manifest["cpu_seconds"]["collector"] = per_request_ms * MS * run.result.actual_rps * manifest["load"]["duration_s"]
    (dst / "manifest.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    return dst


def test_the_fit_splits_the_collectors_cpu_into_work_and_a_wakeup(tmp_path: Path) -> None:
    """0.09 ms per span one at a time (one connection, 500 rps), 0.055 ms on the traced rung (16 connections, 1 500
    rps): the fitted work + resume x the model's own share of waking spans gives back each run's CPU per span."""
    low = _with_collector_cpu(next((TRACING / "calibrate-lab").glob("lab-single-tracing-q500-c1-b1024-*")),
                              tmp_path, 0.18)
    loaded = _with_collector_cpu(next((SITTING / "traced-rung").glob("lab-single-tracing-*")), tmp_path, 0.11)
    runs = load_runs([low, loaded]).runs
    model = yaml.safe_load((TRACING / "envoy-lab.yaml").read_text())
    notes: list[str] = []
    add_collector_wakeup(model, runs, notes)
    block = model["features"]["tracing"]["collector"]
    work, resume = block["service"]["value_ms"], block["wakeup"]["resume_cpu_ms"]
    assert 0 < work < 0.055 and resume > 0, notes
    for run, per_span in zip(sorted(runs, key=lambda r: r.manifest.load.connections), (0.09, 0.055)):
        assert work + resume * wakes_per_span(model, run, tmp_path / "replay") == pytest.approx(per_span, rel=0.05)
    alone = yaml.safe_load((TRACING / "envoy-lab.yaml").read_text())
    add_collector_wakeup(alone, runs[:1], notes)
    assert "wakeup" not in alone["features"]["tracing"]["collector"] and "one constant" in notes[-1]


def test_a_traced_run_with_more_plain_twins_weighs_no_more_in_the_sidecars_extra_cpu(tmp_path: Path) -> None:
    """Tracing adds 0.15 ms at 200 rps (two plain twins at 0.10) and 0.05 ms at 500 rps (one twin at 0.20): 0.10 ms
    per request on average. Pooling the twins would give 0.25 - 0.133 = 0.117 ms."""
    ladder = SITTING.parent.parent / "lab-ladder-2026-11-26" / "calibrate-lab"
    cpu = {"sidecar-q200": 0.10, "tracing-q200": 0.25, "sidecar-q500": 0.20, "tracing-q500": 0.25}
    folders = [next((TRACING / "calibrate-lab").glob("lab-single-sidecar-q200-c1-b1024-*"))]
    folders += [next(ladder.glob(f"lab-single-{name}-c1-b1024-*")) for name in cpu]
    copies = []
    for src in folders:
        dst = tmp_path / src.name
        shutil.copytree(src, dst)
        manifest = yaml.safe_load((dst / "manifest.yaml").read_text())
        run = load_runs([dst]).runs[0]
        requests = run.result.actual_rps * manifest["load"]["duration_s"]
        ms = next(v for k, v in cpu.items() if f"-{k}-" in src.name)
        manifest["cpu_seconds"] = {"server/sidecar": ms * MS * requests, "client/sidecar": ms * MS * requests}
        (dst / "manifest.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
        copies.append(dst)
    matched = matched_cpu("tracing", load_runs(copies).runs)
    assert matched["server/sidecar"].extra_s == pytest.approx(0.10 * MS, rel=1e-3)
