"""How a calibration cluster's runs drove fortio (``cluster.load``), and the prediction that says when it differs.

At many connections fortio's warm-up and -jitter decide which Envoy worker each connection lands on and how
bursts form: the shipped ``istio-1.2`` predicts its pipeline's server-sidecar runs at c=64 at p50 4.5 ms with
fortio 1.3.1's one-after-another warm-up and 3.0 ms with today's all-at-once warm-up (2026-11-29). A fortio load takes the runs'
driving for what its flags leave unsaid and says so; flags that drive it otherwise stand, and the prediction names
the difference and the flags that reproduce the runs.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from meshsim.calibrate.fit.run_load import load_block, runs_load_block
from meshsim.calibrate.measure.dataset import load_runs
from meshsim.catalog import load_mesh
from meshsim.cluster_facts import parse_load_facts
from meshsim.errors import ModelError
from meshsim.workload import FortioLoad, OpenLoad
from meshsim.yamlio import Section

ROOT = Path(__file__).resolve().parents[1]
WHERE = "m.yaml: cluster.load"


def _facts(**block):
    return parse_load_facts(Section(block, WHERE))


def test_a_version_gives_its_warm_up_and_a_warm_up_stands_alone() -> None:
    old = _facts(version="1.3.1", jitter=False)
    assert (old.warmup, old.jitter, old.uniform, old.version) == ("sequential", False, False, "1.3.1")
    assert _facts(version="1.68.2").warmup == "parallel"
    assert _facts(warmup="sequential", jitter=True).warmup == "sequential"


@pytest.mark.parametrize("block, key", [
    ({"jitter": True}, "version"),
    ({"version": "1.3.1", "jitter": "yes"}, "jitter"),
    ({"version": "1.3.1", "generator": "wrk2"}, "generator"),
    ({"version": "one"}, "version"),
    ({"version": "1.3.1", "warmup": "parallel"}, "warmup"),  # 1.3.1 cannot warm up in parallel
    ({"version": "1.3.1", "rate": 3}, "rate"),
])
def test_a_bad_block_is_one_line_naming_its_key(block: dict, key: str) -> None:
    with pytest.raises(ModelError) as err:
        _facts(**block)
    assert key in str(err.value) and "\n" not in str(err.value)


def test_only_a_fortio_load_driven_otherwise_is_named_with_the_flags_that_match() -> None:
    facts = _facts(version="1.3.1", jitter=False, uniform=False)
    assert facts.unlike(FortioLoad(1000, 64, version="1.3.1")) == ""
    assert facts.unlike(OpenLoad(1000, 64)) == ""  # another load model: a what-if, not a replay of the runs
    said = facts.unlike(FortioLoad(1000, 64, uniform=True))
    assert "one connection after another there" in said and "-uniform off there" in said
    assert "--fortio-version 1.3.1" in said and "drop --uniform" in said
    jittered = _facts(warmup="sequential", jitter=True).unlike(FortioLoad(1000, 16))
    assert "--fortio-warmup sequential" in jittered and "--jitter" in jittered


def _predict(**changes) -> dict:
    from meshsim.sim.experiments.predict import predict

    settings = dict(topology="single", mesh="istio-1.2", rps=1000, load="fortio", connections=16, scope="server",
                    features=("no-telemetry",), duration_s=1.0, warmup_s=0.0, replications=1, processes=1,
                    saturation=False, seed=3)
    return predict(**{**settings, **changes}).to_dict()


def test_a_fortio_load_takes_the_calibration_clusters_driving_where_its_flags_say_nothing() -> None:
    unsaid = _predict()
    assert "fortio 1.3.1" in unsaid["inputs"]["fortio_from"]
    assert not any("calibration cluster" in w for w in unsaid["warnings"])
    said = _predict(fortio_version="1.3.1")  # the same driving, given: the same simulation
    assert "fortio_from" not in said["inputs"] and said["latency_ms"] == unsaid["latency_ms"]
    today = _predict(fortio_version="1.68.2")  # all connections at once: Envoy 1.11's workers share them
    assert any("--fortio-version 1.3.1" in w for w in today["warnings"])
    assert today["latency_ms"]["p50"] < 0.9 * unsaid["latency_ms"]["p50"]
    jittered = _predict(jitter=True)  # one flag given, the warm-up still taken
    assert "fortio 1.3.1" in jittered["inputs"]["fortio_from"]
    assert any("drop --jitter" in w for w in jittered["warnings"])
    # the topology's own cluster: nothing of the calibration cluster applies, nothing taken or said
    mine = _predict(cluster="topology")
    assert "fortio_from" not in mine["inputs"] and not any("calibration cluster" in w for w in mine["warnings"])


def test_the_shipped_models_describe_how_their_runs_drove_fortio() -> None:
    runs = load_runs(sorted(p.parent for p in (ROOT / "measurements" / "istio-1.2.0").glob("*/manifest.yaml"))).runs
    block, why = runs_load_block(runs)
    assert block is not None, why
    fitted = parse_load_facts(Section(block, "fitted"))
    shipped = load_mesh("istio-1.2").cluster.load
    assert (fitted.warmup, fitted.jitter, fitted.uniform, fitted.version) == \
        (shipped.warmup, shipped.jitter, shipped.uniform, shipped.version) == ("sequential", False, False, "1.3.1")
    # the 1.7 rows' settings, as given to the fit
    rows = yaml.safe_load((ROOT / "models" / "meshes" / "istio-1.7.yaml").read_text())["calibration"]["row_settings"]
    facts = load_mesh("istio-1.7").cluster.load
    assert (facts.jitter, facts.uniform, facts.warmup) == (rows["jitter"], rows["uniform"], rows["fortio_warmup"])


def test_runs_that_drove_fortio_differently_write_no_block(tmp_path: Path) -> None:
    assert load_block(None, "sequential", True, False, "given") == {
        "generator": "fortio", "warmup": "sequential", "jitter": True, "uniform": False, "source": "given"}
    assert load_block(None, None, False, False, "given")["warmup"] == "parallel"  # the default fortio's
    folders = sorted(p.parent for p in (ROOT / "measurements" / "istio-1.2.0").glob("*/manifest.yaml"))
    mixed = tmp_path / "mixed"
    shutil.copytree(folders[0], mixed)
    data = yaml.safe_load((mixed / "manifest.yaml").read_text())
    assert data["load"]["jitter"] is False
    data["load"]["jitter"], data["id"] = True, "mixed"
    (mixed / "manifest.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    block, why = runs_load_block(load_runs([*folders, mixed]).runs)
    assert block is None and "2 ways" in why
