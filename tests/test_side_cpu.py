"""A sidecar's two sides with their own CPU: the inbound half's held fraction, the outbound half's post-response
work (``proxy.sides`` in a mesh model), on both engines: the model file, an exact timeline on deterministic passes,
and the utilisation law under a CPU quota."""

from __future__ import annotations

import pytest

from meshsim.distributions import Deterministic
from meshsim.errors import ModelError
from meshsim.mesh import MeshModel, ProxyModel, SideCpu, mesh_from_data
from meshsim.scenario import Scenario
from meshsim.sim.engine.replication_result import Horizon
from meshsim.sim.engine.simpy_replication import run_replication
from meshsim.sim.fast.fast_engine import run_fast_replication
from meshsim.workload import FortioLoad, Workload
from simkit import ZERO, station_topology

MS = 1e-3
ENGINES = {"simpy": run_replication, "fast": run_fast_replication}


def _passes(inbound: float, outbound: float) -> dict[str, Deterministic]:
    return {"inbound_request": Deterministic(inbound), "inbound_response": Deterministic(inbound),
            "outbound_request": Deterministic(outbound), "outbound_response": Deterministic(outbound)}


def sided_mesh(cpu_limit: float | None = None, shared_post: float | None = None) -> MeshModel:
    """Inbound passes of 0.4 ms of which half hold the worker; outbound passes of 0.1 ms, all CPU, and 0.3 ms of
    work after the response on the outbound side only."""
    proxy = ProxyModel("test", _passes(0.4 * MS, 0.1 * MS), workers=1, cpu_limit=cpu_limit,
                       post_response=Deterministic(shared_post) if shared_post else None,
                       sides={"inbound": SideCpu(cpu_fraction=0.5),
                              "outbound": SideCpu(post_response=Deterministic(0.3 * MS))})
    return MeshModel("sided", proxy, {}, None)


def _scenario(mesh: MeshModel) -> Scenario:
    return Scenario(station_topology(ZERO, servers=8), mesh, scope="both")


def _cpu_per_request(result, component: str) -> float:
    usage = result.usage[component]
    return usage.cpu_seconds / (usage.jobs / 2)  # a sidecar books two passes per request


@pytest.mark.parametrize("engine", ENGINES)
def test_each_side_burns_its_own_cpu_and_the_latency_is_the_passes(engine: str) -> None:
    """One request at a time (nothing queues): latency = the four passes (1.0 ms); the server's sidecar holds its
    worker for half its 0.8 ms of passes (0.4 ms), the caller's for its 0.2 ms of passes and 0.3 ms after them."""
    result = ENGINES[engine](_scenario(sided_mesh()), Workload(FortioLoad(50, connections=1)), Horizon(2.0, 0.2),
                             1, 0)
    assert result.latencies.size > 50
    assert result.latencies.min() == pytest.approx(1.0 * MS, rel=1e-9)
    assert result.latencies.max() == pytest.approx(1.0 * MS, rel=1e-9)
    assert _cpu_per_request(result, "q/sidecar") == pytest.approx(0.4 * MS, rel=1e-9)
    assert _cpu_per_request(result, "client/sidecar") == pytest.approx(0.5 * MS, rel=1e-9)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_side_without_its_own_post_work_takes_the_proxys(engine: str) -> None:
    """The proxy's post_response (0.05 ms) goes to the inbound side, which has none of its own; the outbound side
    keeps its own 0.3 ms instead."""
    result = ENGINES[engine](_scenario(sided_mesh(shared_post=0.05 * MS)), Workload(FortioLoad(50, connections=1)),
                             Horizon(2.0, 0.2), 1, 0)
    assert _cpu_per_request(result, "q/sidecar") == pytest.approx(0.45 * MS, rel=1e-9)
    assert _cpu_per_request(result, "client/sidecar") == pytest.approx(0.5 * MS, rel=1e-9)


@pytest.mark.parametrize("engine", ENGINES)
def test_under_a_cpu_quota_the_busier_side_caps_the_throughput(engine: str) -> None:
    """Utilisation law: both sidecars get 0.1 core; the caller's side needs 0.5 ms per request, the server's 0.4 ms,
    so four connections firing as fast as they can get 0.1 / 0.5 ms = 200 requests/s, whatever the latencies."""
    load = Workload(FortioLoad(5000, connections=4))
    result = ENGINES[engine](_scenario(sided_mesh(cpu_limit=0.1)), load, Horizon(10.0, 1.0), 2, 0)
    assert result.achieved_rps == pytest.approx(200.0, rel=0.03)
    assert result.usage["client/sidecar"].hottest == pytest.approx(1.0, abs=0.03)
    assert result.usage["q/sidecar"].hottest == pytest.approx(0.8, abs=0.03)


def _model(proxy_sides: object = None, lb_sides: object = None) -> dict:
    pass_spec = {"family": "deterministic", "value_ms": 0.1}
    kinds = ("inbound_request", "inbound_response", "outbound_request", "outbound_response")
    data: dict = {"schema": "meshsim/mesh/v1", "name": "m",
                  "proxy": {"passes": dict.fromkeys(kinds, pass_spec), "sides": proxy_sides}}
    if lb_sides is not None:
        data["load_balancer"] = {"passes": {"request": pass_spec, "response": pass_spec}, "sides": lb_sides}
    return data


def test_the_model_file_reads_each_sides_cpu() -> None:
    mesh = mesh_from_data(_model({"inbound": {"cpu_fraction": 0.6, "source": "measured"},
                                  "outbound": {"post_response": {"family": "deterministic", "value_ms": 0.2}}}),
                          "m.yaml")
    assert mesh.proxy is not None
    assert mesh.proxy.side_fraction("inbound") == 0.6
    assert mesh.proxy.side_fraction("outbound") == 1.0
    assert mesh.proxy.sides["inbound"].post_response is None
    assert mesh.proxy.sides["outbound"].post_response.mean == pytest.approx(0.2 * MS)


@pytest.mark.parametrize("data, message", [
    (_model({"sideways": {"cpu_fraction": 0.5}}), "m.yaml: proxy.sides.sideways: unknown key"),
    (_model({"inbound": {"cpu_fraction": 1.5}}), "m.yaml: proxy.sides.inbound.cpu_fraction: a fraction in (0, 1]"),
    (_model({"inbound": {"cpu_fraction": 0}}), "m.yaml: proxy.sides.inbound.cpu_fraction"),
    (_model({"outbound": {"post_response": {"family": "normal"}}}), "m.yaml: proxy.sides.outbound.post_response"),
    (_model({"inbound": [0.5]}), "m.yaml: proxy.sides.inbound: expected a mapping"),
    (_model(lb_sides={"inbound": {"cpu_fraction": 0.5}}), "m.yaml: load_balancer.sides: only a sidecar"),
])
def test_a_wrong_side_names_its_key(data: dict, message: str) -> None:
    with pytest.raises(ModelError) as err:
        mesh_from_data(data, "m.yaml")
    assert str(err.value).startswith(message), str(err.value)
    assert "\n" not in str(err.value)


def _write_side_runs(root, rng) -> tuple:
    """Both-sidecars and server-sidecar runs at two rates whose latency does not change with the rate; the server's
    sidecar burns 0.6 of its passes beside a client sidecar (0.9 alone), the client's its passes plus 0.15 ms."""
    import math

    from meshsim.calibrate.measure.fortio_histogram import result_json
    from meshsim.distributions import Gamma, LogNormal, Shifted
    from meshsim.run_folder import LoadSettings, RunManifest, Setup, write_run

    n = 20000
    base, inbound = Shifted(LogNormal(math.log(0.12e-3), 0.3), 0.16e-3), Shifted(Gamma(3.0, 0.03e-3), 0.04e-3)
    outbound = Shifted(Gamma(4.0, 0.01e-3), 0.03e-3)
    parts = {"baseline": [base], "server-sidecar": [base, inbound, inbound],
             "both-sidecars": [base, inbound, inbound, outbound, outbound]}
    cpu_per_request = {"server-sidecar": {"server/sidecar": 0.9 * 2 * inbound.mean},
                       "both-sidecars": {"server/sidecar": 0.6 * 2 * inbound.mean,
                                         "client/sidecar": 2 * outbound.mean + 0.15 * MS}}
    for rps in (300.0, 1000.0):
        for path, dists in parts.items():
            samples = sum(d.sample(rng, n) for d in dists)
            rid = f"{path}-{rps:g}"
            duration = n / rps
            cpu = {k: (0.002 + rps * v) * duration for k, v in cpu_per_request.get(path, {}).items()}
            manifest = RunManifest(
                id=rid, source="lab", provenance="synthetic: test_side_cpu.py", when="2026-11-25T00:00:00Z",
                where={}, setup=Setup(mesh="envoy", path=path, proxy_workers=2),
                load=LoadSettings(rps=rps, connections=1, duration_s=duration), cpu_seconds=cpu)
            write_run(root / rid, manifest, result_json(samples, 1e-5, requested_rps=rps, actual_rps=rps, labels=rid))
    return inbound, outbound


@pytest.mark.slow
def test_the_fit_gives_each_side_the_cpu_measured_beside_the_other(tmp_path) -> None:
    """Truth: with both sidecars, the inbound side holds its worker for 0.6 of its passes and the outbound side
    works 0.15 ms after its passes. The fit recovers both from CPU seconds at two rates, prefers the both-sidecars
    runs over the server-sidecar ones for the inbound side, and leaves the bursts' held-fraction fit alone."""
    import numpy as np

    from meshsim.calibrate.fit.families import Family
    from meshsim.calibrate.fit_runs import fit_runs
    from meshsim.catalog import load_mesh

    inbound, outbound = _write_side_runs(tmp_path / "runs", np.random.default_rng(3))
    summary = fit_runs([tmp_path / "runs"], "sided", tmp_path / "m.yaml", families=[Family("gamma", True)])
    proxy = load_mesh(str(tmp_path / "m.yaml")).proxy
    assert proxy is not None and set(proxy.sides) == {"inbound", "outbound"}, summary.notes
    assert proxy.sides["inbound"].cpu_fraction == pytest.approx(0.6, rel=0.1)
    assert proxy.sides["inbound"].post_response is None
    assert proxy.sides["outbound"].cpu_fraction == 1.0
    post = proxy.sides["outbound"].post_response
    assert post is not None and post.mean == pytest.approx(0.15 * MS, abs=0.02 * MS)
    # what the simulator books per request on each side is the CPU measured per side
    booked_in = proxy.side_fraction("inbound") * 2 * proxy.passes["inbound_request"].mean
    booked_out = 2 * proxy.passes["outbound_request"].mean + post.mean
    assert booked_in == pytest.approx(0.6 * 2 * inbound.mean, rel=0.05)
    assert booked_out == pytest.approx(2 * outbound.mean + 0.15 * MS, rel=0.05)
    assert any(n.startswith("proxy.sides:") for n in summary.notes), summary.notes


def test_a_model_with_measured_sides_keeps_them_over_the_bursts(tmp_path) -> None:
    import numpy as np

    from meshsim.calibrate.fit_beyond_passes import add_held_fraction
    from meshsim.calibrate.measure.dataset import load_runs
    from meshsim.calibrate.measure.fortio_histogram import result_json
    from meshsim.run_folder import LoadSettings, RunManifest, Setup, write_run

    manifest = RunManifest(id="burst", source="lab", provenance="synthetic: test_side_cpu.py",
                           when="2026-11-25T00:00:00Z", where={}, setup=Setup(mesh="envoy", path="both-sidecars"),
                           load=LoadSettings(rps=200.0, connections=4, duration_s=5.0))
    samples = np.random.default_rng(1).uniform(1e-3, 2e-3, 1000)
    folder = write_run(tmp_path / "burst", manifest, result_json(samples, 1e-5, requested_rps=200, actual_rps=200,
                                                                 connections=4))
    model = {"proxy": {"cpu_fraction": 0.9, "sides": {"inbound": {"cpu_fraction": 0.6}}}}
    notes: list[str] = []
    add_held_fraction(model, load_runs([folder]).runs, notes, lambda _m: None)
    assert model["proxy"] == {"cpu_fraction": 0.9, "sides": {"inbound": {"cpu_fraction": 0.6}}}
    assert notes and "1 burst runs not used" in notes[0], notes
