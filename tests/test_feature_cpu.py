"""A feature's CPU beyond its latency: work after the response and a span collector sharing the host's cores.

Both engines against the utilisation law on one core (a closed loop firing as fast as it can gets one request per
CPU it needs), the model file's collector node, and the fit of both from run folders whose CPU readings are set to
known values (calibrate/load/feature_cpu.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from meshsim.calibrate.load.feature_cpu import apply_feature_cpu, matched_cpu
from meshsim.calibrate.measure.dataset import load_runs
from meshsim.distributions import Deterministic
from meshsim.errors import ModelError
from meshsim.mesh import Collector, Feature, MeshModel, ProxyModel, mesh_from_data
from meshsim.scenario import Scenario
from meshsim.sim.engine.replication_result import Horizon
from meshsim.sim.engine.simpy_replication import run_replication
from meshsim.sim.fast.fast_engine import run_fast_replication
from meshsim.workload import FortioLoad, Workload
from simkit import ZERO, station_topology

MS = 1e-3
ENGINES = {"simpy": run_replication, "fast": run_fast_replication}
KINDS = ("inbound_request", "inbound_response", "outbound_request", "outbound_response")
PASS_MS, POST_MS, SPAN_MS = 0.1, 0.15, 0.2
HORIZON = Horizon(6.0, 1.0)
LADDER = Path(__file__).resolve().parent.parent / "measurements" / "lab-ladder-2026-11-26" / "calibrate-lab"


def _mesh(collector_node: str | None) -> MeshModel:
    proxy = ProxyModel("test", dict.fromkeys(KINDS, Deterministic(PASS_MS * MS)), workers=2)
    tracing = Feature("tracing", post_response=Deterministic(POST_MS * MS),
                      collector=Collector(1, Deterministic(SPAN_MS * MS), collector_node))
    return MeshModel("traced", proxy, {"tracing": tracing}, None)


def _run(engine: str, collector_node: str | None, connections: int = 4):
    """Both sidecars and the app (no work of its own) on one single-core host; ``connections`` as fast as they
    can: the core is the bottleneck."""
    topology = station_topology(ZERO, servers=1).on_one_host(1)
    scenario = Scenario(topology, _mesh(collector_node), features=("tracing",), scope="both")
    return ENGINES[engine](scenario, Workload(FortioLoad(50_000, connections=connections)), HORIZON, 3, 0)


@pytest.mark.parametrize("connections", (4, 64))
@pytest.mark.parametrize("engine", ENGINES)
def test_a_collector_on_the_host_shares_its_core(engine: str, connections: int) -> None:
    """Per request the core runs 4 passes (0.4 ms), each sidecar's post-response work (0.3 ms) and, on the host,
    the collector's two spans (0.4 ms): 1 / 1.1 ms = 909 requests/s; with the collector elsewhere 1 / 0.7 ms.
    With 64 connections the core's book holds more intervals than it keeps (PRUNE_AT): a span booked ahead, at its
    pass's departure, must not make it forget intervals still to come (the compiled engine once did, and carried
    16 % more than its cores could)."""
    on_host = _run(engine, "host", connections)
    elsewhere = _run(engine, None, connections)
    per_request = 4 * PASS_MS + 2 * POST_MS
    assert elsewhere.achieved_rps == pytest.approx(1 / (per_request * MS), rel=0.02)
    assert on_host.achieved_rps == pytest.approx(1 / ((per_request + 2 * SPAN_MS) * MS), rel=0.02)
    spans = on_host.usage["collector"].cpu_seconds / (on_host.achieved_rps * (HORIZON.duration - HORIZON.warmup))
    assert spans == pytest.approx(2 * SPAN_MS * MS, rel=0.02)


def _feature_model(collector: object) -> dict:
    pass_spec = {"family": "deterministic", "value_ms": 0.1}
    return {"schema": "meshsim/mesh/v1", "name": "m", "proxy": {"passes": dict.fromkeys(KINDS, pass_spec)},
            "features": {"tracing": {"collector": collector}}}


def test_the_model_file_reads_the_collectors_node() -> None:
    service = {"family": "deterministic", "value_ms": 0.05}
    mesh = mesh_from_data(_feature_model({"workers": 1, "node": "host", "service": service}), "m.yaml")
    assert mesh.features["tracing"].collector == Collector(1, Deterministic(0.05 * MS), "host")
    with pytest.raises(ModelError, match=r"m.yaml: features.tracing.collector.node: expected a node name"):
        mesh_from_data(_feature_model({"workers": 1, "node": 3, "service": service}), "m.yaml")


# -- the fit, from run folders with known CPU readings -------------------------------------------------------------

def _set_cpu(run: Path, per_request_ms: dict[str, float]) -> None:
    """Rewrite the manifest's CPU seconds so that each process burns ``per_request_ms`` per completed request."""
    manifest = yaml.safe_load((run / "manifest.yaml").read_text())
    result = load_runs([run]).runs[0]
    requests = result.result.actual_rps * (manifest["load"]["duration_s"] or result.result.duration_s)
    manifest["cpu_seconds"] = {key: ms * 1e-3 * requests for key, ms in per_request_ms.items()}
    (run / "manifest.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))


def _known_runs(tmp_path: Path) -> list[Path]:
    """The shipped lab's plain and traced one-connection runs at 200 and 500 rps, with known CPU: plain sidecars
    0.10 ms per request, traced ones 0.25 ms, the collector 0.12 ms (two spans)."""
    folders = []
    for rate in (200, 500):
        for mode, cpu in (("sidecar", {"server/sidecar": 0.10, "client/sidecar": 0.10}),
                          ("tracing", {"server/sidecar": 0.25, "client/sidecar": 0.25, "collector": 0.12})):
            src = next(LADDER.glob(f"lab-single-{mode}-q{rate}-c1-b1024-*"))
            dst = tmp_path / src.name
            shutil.copytree(src, dst)
            _set_cpu(dst, cpu)
            folders.append(dst)
    return folders


def test_the_fit_finds_the_post_response_work_and_the_collectors_cost(tmp_path: Path) -> None:
    """Each sidecar burns 0.15 ms more per request with tracing; half of each pass holds its worker and the fitted
    increment is 0.02 ms per pass, so 2 x 0.5 x 0.02 = 0.02 ms is already booked and 0.13 ms follows the response.
    The collector's 0.12 ms per request is 0.06 ms per span."""
    runs = load_runs(_known_runs(tmp_path)).runs
    matched = matched_cpu("tracing", runs)
    assert sorted(matched) == ["client/sidecar", "collector", "server/sidecar"]
    assert matched["server/sidecar"].extra_s == pytest.approx(0.15 * MS, rel=1e-3)
    features: dict = {"tracing": {"per_pass": {}}}
    notes: list[str] = []
    apply_feature_cpu(features, {"cpu_fraction": 0.5}, {"tracing": {"inbound": 0.02 * MS, "outbound": 0.02 * MS}},
                      runs, notes)
    block = features["tracing"]
    assert block["post_response"]["value_ms"] == pytest.approx(0.13, rel=1e-3)
    assert block["collector"]["service"]["value_ms"] == pytest.approx(0.06, rel=1e-3)
    assert block["collector"]["node"] == "host"
    assert "runs lab-single-tracing-q200" in block["post_response"]["source"]


def test_a_feature_that_burns_only_its_increment_gets_no_post_work(tmp_path: Path) -> None:
    runs = load_runs(_known_runs(tmp_path)).runs
    features: dict = {"tracing": {"per_pass": {}}}
    notes: list[str] = []
    apply_feature_cpu(features, {"cpu_fraction": 1.0}, {"tracing": {"inbound": 0.075 * MS, "outbound": 0.075 * MS}},
                      runs, notes)
    assert "post_response" not in features["tracing"]
    assert any("no CPU beyond its held increment" in n for n in notes)


def test_a_clusters_collector_is_not_put_on_the_labs_host(tmp_path: Path) -> None:
    """Runs measured on a cluster: its collector runs on nodes of its own, so no collector block (the sidecars'
    work after the response is still fitted)."""
    folders = _known_runs(tmp_path)
    for folder in folders:
        manifest = yaml.safe_load((folder / "manifest.yaml").read_text())
        manifest["source"] = "kube"
        (folder / "manifest.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    features: dict = {"tracing": {"per_pass": {}}}
    apply_feature_cpu(features, {"cpu_fraction": 0.5}, {"tracing": {"inbound": 0.02 * MS, "outbound": 0.02 * MS}},
                      load_runs(folders).runs, [])
    assert "collector" not in features["tracing"] and "post_response" in features["tracing"]
