"""A fitted mesh model's cluster block, the wake-up's Weibull hazard, and features fixed into the passes.

- ``cluster:`` (meshsim/cluster_facts.py) replaces the topology's cross-node hop and every service's wake-up in a
  prediction with that model (``--cluster mesh``, the default); ``--cluster topology`` keeps the topology's, and
  the prediction's inputs say which was used.
- ``wakeup.shape``: ``P(cold | idle g) = 1 - exp(-(g / tau) ** shape)``; shape 1 is the old constant hazard, and both
  engines draw the same cold wakes for any shape.
- A ``fixed`` feature is part of the fitted passes: turning it off is refused with the flag named.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from meshsim.catalog import load_mesh, load_topology
from meshsim.cli import main
from meshsim.errors import FieldError, ModelError
from meshsim.request import PredictOptions, build_request
from meshsim.wakeup import WakeUp

from engine_pairs import engine_disagreements

PASS = {"family": "lognormal", "median_ms": 0.1, "sigma": 0.3}


def _mesh(tmp: Path, cluster: dict | None = None, features: dict | None = None) -> Path:
    model = {"schema": "meshsim/mesh/v1", "name": "clustered", "version": "test",
             "proxy": {"kind": "envoy", "workers": 2, "source": "test",
                       "passes": {k: PASS for k in ("inbound_request", "inbound_response", "outbound_request",
                                                    "outbound_response")}},
             **({"cluster": cluster} if cluster else {}), **({"features": features} if features else {})}
    path = tmp / "clustered.yaml"
    path.write_text(yaml.safe_dump(model))
    return path


CLUSTER = {"cross_node": {"family": "lognormal", "median_ms": 0.5, "sigma": 0.2},
           "wakeup": {"delay_ms": 0.3, "tau_ms": 5.0, "shape": 3.0}, "source": "test cluster"}


def test_the_cluster_block_replaces_the_topologys_hop_and_wakeups(tmp_path: Path) -> None:
    mesh = _mesh(tmp_path, CLUSTER)
    with_cluster = build_request(PredictOptions(topology="chain3", mesh=mesh, rps=100)).scenario
    as_written = build_request(PredictOptions(topology="chain3", mesh=mesh, rps=100, cluster="topology")).scenario
    shipped = load_topology("chain3")
    assert as_written.topology.network.cross_node == shipped.network.cross_node and not as_written.cluster_source
    assert with_cluster.topology.network.cross_node.mean == pytest.approx(0.5e-3 * math.exp(0.02))
    assert {s.wakeup for s in with_cluster.topology.services.values()} == {WakeUp(0.3e-3, 5e-3, shape=3.0)}
    assert "test cluster" in with_cluster.cluster_source
    with pytest.raises(FieldError, match="cluster"):
        build_request(PredictOptions(topology="chain3", mesh=mesh, rps=100, cluster="nowhere"))


def test_predict_says_whose_cluster_it_used(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    mesh = _mesh(tmp_path, CLUSTER)
    args = ["predict", "--topology", "single", "--mesh-model", str(mesh), "--rps", "200", "--duration", "1",
            "--replications", "2", "--processes", "1", "--json"]
    assert main(args) == 0
    inputs = json.loads(capsys.readouterr().out)["inputs"]
    assert "test cluster" in inputs["cluster"]
    assert main([*args, "--cluster", "topology"]) == 0
    assert json.loads(capsys.readouterr().out)["inputs"]["cluster"] == "the topology's"


def test_a_weibull_hazard_sharpens_the_cold_threshold() -> None:
    flat, sharp = WakeUp(0.1e-3, 10e-3), WakeUp(0.1e-3, 10e-3, shape=4.0)
    assert flat.probability(10e-3) == pytest.approx(sharp.probability(10e-3)) == pytest.approx(1 - math.exp(-1))
    assert sharp.probability(2e-3) < flat.probability(2e-3) / 50  # short gaps almost never cold
    assert sharp.probability(20e-3) > flat.probability(20e-3)  # long gaps nearly always
    assert flat.to_spec().get("shape") is None and sharp.to_spec()["shape"] == 4.0


def test_both_engines_draw_the_same_cold_wakes_with_a_shape(tmp_path: Path) -> None:
    request = build_request(PredictOptions(topology="single", mesh=_mesh(tmp_path, CLUSTER), rps=300, load="fortio",
                                           connections=4, duration_s=2.0))
    assert not engine_disagreements(request, seed=9, count=4, cpu=True)


@pytest.mark.parametrize("shape", [0, -1, 25, "x"])
def test_an_impossible_shape_is_refused_with_its_key(tmp_path: Path, shape: object) -> None:
    cluster = {**CLUSTER, "wakeup": {**CLUSTER["wakeup"], "shape": shape}}
    with pytest.raises(ModelError, match="shape"):
        load_mesh(str(_mesh(tmp_path, cluster)))


def test_a_fixed_feature_cannot_be_turned_off(tmp_path: Path) -> None:
    fixed = {"mtls": {"default": True, "fixed": True, "per_pass": {"family": "deterministic", "value_ms": 0.0}}}
    mesh = _mesh(tmp_path, features=fixed)
    assert build_request(PredictOptions(topology="single", mesh=mesh, rps=100)).scenario.features == ("mtls",)
    with pytest.raises(FieldError, match="no-mtls") as info:
        build_request(PredictOptions(topology="single", mesh=mesh, rps=100, features=("no-mtls",)))
    assert info.value.field == "features"
    with pytest.raises(ModelError, match="fixed"):
        load_mesh(str(_mesh(tmp_path, features={"mtls": {**fixed["mtls"], "default": False}})))
