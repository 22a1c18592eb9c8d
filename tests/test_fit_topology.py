"""A cluster's runs are fitted on the topology predictions use.

The Istio 1.2 runs name the pipeline's topology (``single``: the fortio client and server on different nodes). The
fit replays their bursts there, with the cluster's fitted cross-node hop and wake-up (``calibration.replay_topology``),
so a burst queues on the client's and the app's cores in the fit as in a prediction, and the wake-up is not counted
twice. These tests check that the fit's topology is the one ``meshsim predict`` builds with the model, that
``meshsim validate`` replays on it, that a model without it keeps its one-station calibration baseline, and that the
wake-up's objective lets a burst's unexplained tail alone while refusing a tail the wake-up invents.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from meshsim.calibrate.fit.model_file import read_model
from meshsim.calibrate.fit.sim_check import BASELINE_SERVERS, fit_topology
from meshsim.calibrate.load.baseline_wake import wake_objective
from meshsim.calibrate.measure.dataset import load_runs
from meshsim.calibrate.measure.tables import measurements_dir
from meshsim.calibrate.validation.replay import topology_for
from meshsim.catalog import load_mesh, load_topology
from meshsim.distribution_spec import BOUNDS, parse_distribution
from meshsim.request import PredictOptions, build_scenario_of
from meshsim.scenario import build_scenario

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "models" / "meshes" / "istio-1.2.yaml"
RUNS = measurements_dir() / "istio-1.2.0"


def test_the_shipped_istio_1_2_model_was_fitted_on_the_pipelines_topology() -> None:
    data = read_model(MODEL)
    assert data["calibration"]["replay_topology"] == "single"
    assert "different nodes" in data["calibration"]["replay_topology_source"]
    assert "replayed on topology 'single'" in data["cluster"]["wakeup"]["source"]
    assert "cross_node" in data["cluster"] and data["calibration"]["network_hop"]["topology"] == "single"


def test_the_fits_topology_is_the_one_predict_builds_with_the_model() -> None:
    fitted = fit_topology(read_model(MODEL))
    predicted = build_scenario_of(PredictOptions(topology="single", mesh="istio-1.2")).topology
    # both as the scenario runs them (the passes hold the app-sidecar loopback hops: the scenario zeroes them)
    assert build_scenario(fitted, load_mesh("istio-1.2")).topology == predicted
    cluster = load_mesh("istio-1.2").cluster
    assert cluster is not None and cluster.wakeup is not None
    assert {s.wakeup for s in fitted.services.values()} == {cluster.wakeup}
    assert fitted.network.cross_node == cluster.cross_node != load_topology("single").network.cross_node


def test_validate_replays_a_burst_run_on_that_topology() -> None:
    runs = load_runs([RUNS / "istio-1.2.0-c16-qps1000-server-sidecar-nomixer"]).runs
    topology, derived_from, _notes = topology_for(read_model(MODEL), runs[0], runs, None)
    assert topology == fit_topology(read_model(MODEL)) and derived_from == ()


def test_without_a_fitted_wake_up_the_topologys_assumed_one_is_not_used() -> None:
    data = copy.deepcopy(read_model(MODEL))
    del data["cluster"]["wakeup"]
    assert load_topology("single").services["server"].wakeup is not None
    assert all(s.wakeup is None for s in fit_topology(data).services.values())


def test_a_model_without_a_replay_topology_keeps_its_one_station_baseline() -> None:
    data = copy.deepcopy(read_model(MODEL))
    del data["calibration"]["replay_topology"]
    topology = fit_topology(data)
    assert list(topology.services) == ["server"]
    assert topology.services["server"].cores == BASELINE_SERVERS
    assert topology.network.cross_node.mean == 0.0


def test_the_wake_up_is_not_asked_for_a_tail_it_cannot_make_but_may_not_invent_one() -> None:
    measured = [(1.0, 1.2, 1.4, 3.0)]
    assert wake_objective(measured, [(1.0, 1.2, 1.4, 1.5)]) == 0.0  # p99 below measured: left to other mechanisms
    assert wake_objective(measured, [(1.0, 1.2, 1.4, 4.5)]) == pytest.approx(0.25)  # above: 50 % too high
    assert wake_objective(measured, [(1.1, 1.2, 1.4, 3.0)]) == pytest.approx(0.01)  # the body: both ways


def test_a_stall_hop_fit_stays_within_what_a_model_file_may_hold() -> None:
    """The Istio 1.2 c=1 baseline on `single` without a wake-up: the percentiles alone pull the stall's alpha to 2
    (stalls beyond the fit's grid cost nothing, their variance grows without bound: cv 608 before the bound); the
    fitted hop must be one a model file accepts (fit_network_hop parses what it returns)."""
    from meshsim.calibrate.fit.network_hop_fit import fit_network_hop

    data = copy.deepcopy(read_model(MODEL))
    del data["cluster"]["wakeup"]
    runs = load_runs([RUNS / "istio-1.2.0-c1-qps1000-baseline"]).runs
    fitted = fit_network_hop(runs, topology=fit_topology(data))
    assert fitted.fit.distribution.cv <= BOUNDS["cv"]
    parse_distribution(fitted.spec(), "hop")  # loads, no ModelError
    assert fitted.fit.rms_log_residual < 0.10


@pytest.mark.parametrize("run_id, scope, features", [
    ("istio-1.2.0-c16-qps1000-baseline", "none", ()),
    ("istio-1.2.0-c16-qps1000-server-sidecar-nomixer", "server", ("no-telemetry",)),
    ("istio-1.2.0-c16-qps1000-both-sidecars-nomixer", "both", ("no-telemetry",)),
    ("istio-1.2.0-c16-qps1000-server-sidecar-mixer", "server", ()),
    ("istio-1.2.0-c16-qps1000-both-sidecars-mixer", "both", ())])
def test_predict_on_the_pipelines_topology_gives_back_the_burst_runs_fitted_on_it(run_id: str, scope: str,
                                                                                  features: tuple[str, ...]) -> None:
    """What the fit matched on its topology, ``meshsim predict --topology single`` gives back: the p50 of the c=16
    runs the wake-up and the held fractions (the sides', Mixer's own) were fitted to, within the fits' steps (a
    wake-up fitted on a one-station baseline and predicted on ``single`` had put these 7-21 % high: the burst's
    queueing counted twice)."""
    from meshsim.calibrate.fit.observations import from_result
    from meshsim.sim.experiments.predict import predict

    run = load_runs([RUNS / run_id]).runs[0]
    pred = predict(topology="single", mesh="istio-1.2", rps=1000, load="fortio", connections=16, scope=scope,
                   features=features, fortio_version="1.3.1", duration_s=20.0, warmup_s=0.0, replications=2,
                   processes=1, seed=5, saturation=False).to_dict()
    assert pred["latency_ms"]["p50"] == pytest.approx(from_result(run.result).quantile(0.5) * 1e3, rel=0.05)
