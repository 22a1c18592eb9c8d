"""`meshsim predict` end to end: every shipped topology x mesh, the JSON contract, and each user error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from meshsim.catalog import list_meshes, list_topologies, load_mesh, load_topology
from meshsim.cli import main

# Models made for one published study (calibrate/studies/) run with `none` and their own study's meshes; the general
# topologies run with every general mesh. Every shipped topology and mesh is in the matrix (checked below).
STUDY_MODELS = {
    "emojivoto-study": ("istio-1.11", "linkerd-2.11", "traefik-mesh-1.4"),
    "minikube-chain3": ("istio-minikube",),
    "grpc-lb-study": ("traefik-grpc-lb",),
    "curl-paths": (),
    "course-bookinfo-eks": ("istio",),
    "course-bookinfo-minikube": ("istio",),
    "course-simple-eks": ("istio",),
}
STUDY_MESHES = {m for meshes in STUDY_MODELS.values() for m in meshes} - {"istio"}
TOPOLOGIES = [t for t in list_topologies() if t != "chainN" and t not in STUDY_MODELS] + ["chain5"]
MESHES = [m for m in list_meshes() if m not in STUDY_MESHES]
MATRIX = [(t, m) for t in TOPOLOGIES for m in MESHES] + [(t, m) for t, meshes in STUDY_MODELS.items()
                                                          for m in ("none", *meshes)]
QUICK = ["--duration", "0.4", "--replications", "2", "--processes", "1"]
LATENCY_KEYS = {"p50", "p90", "p99", "p999", "max", "mean"}


def run_json(capsys, *args: str) -> dict:
    assert main(["predict", *args, *QUICK, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_matrix_covers_every_shipped_topology_and_mesh():
    assert {t for t, _ in MATRIX} | {"chainN"} == set(list_topologies()) | {"chain5"}
    assert {m for _, m in MATRIX} == set(list_meshes())


@pytest.mark.parametrize("topology, mesh", MATRIX)
def test_predict_every_topology_and_mesh(capsys, topology, mesh):
    rate = "20" if "bookinfo" in topology else "400"  # Bookinfo (and the course's) saturates near 50 rps
    out = run_json(capsys, "--topology", topology, "--mesh", mesh, "--rps", rate)
    assert set(out["latency_ms"]) == LATENCY_KEYS
    assert set(out["latency_ci95_ms"]) == LATENCY_KEYS
    assert all(len(v) == 2 for v in out["latency_ci95_ms"].values())
    lat = out["latency_ms"]
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["p999"] <= lat["max"]
    assert out["achieved_rps"] == pytest.approx(float(rate), rel=0.35)
    # every component's utilisation, and every declared node's (its cores, shared by what is placed there)
    nodes = {f"node:{n}" for n in load_topology(topology).node_cores}
    assert out["cpu_cores"] and set(out["utilization"]) == set(out["cpu_cores"]) | nodes
    assert all(0 <= u for u in out["utilization"].values()) and all(out["utilization"][n] <= 1 for n in nodes)
    assert out["bottleneck"] in out["utilization"]
    assert out["saturation_rps"] > float(rate)
    inputs = out["inputs"]
    assert inputs["seed"] == 1 and inputs["mesh"]["content_hash"].startswith("sha256:")
    assert inputs["topology"]["content_hash"]
    model = load_mesh(mesh)
    if model.proxy is not None and model.proxy.memory.base_mb > 0:
        assert out["memory_mb"] and all(v >= model.proxy.memory.base_mb for v in out["memory_mb"].values())


def test_mesh_adds_latency_and_cpu(capsys):
    base = run_json(capsys, "--topology", "chain3", "--mesh", "none", "--rps", "500")
    istio = run_json(capsys, "--topology", "chain3", "--mesh", "istio", "--rps", "500")
    assert istio["latency_ms"]["p50"] > base["latency_ms"]["p50"] + 0.3
    assert "s2/sidecar" in istio["cpu_cores"] and "s2/sidecar" not in base["cpu_cores"]


def test_features_and_proxy_lb_change_the_path(capsys):
    plain = run_json(capsys, "--topology", "lb3", "--mesh", "none", "--rps", "600", "--lb", "client")
    proxied = run_json(capsys, "--topology", "lb3", "--mesh", "none", "--rps", "600", "--lb", "proxy")
    assert "lb:server" in proxied["cpu_cores"] and "lb:server" not in plain["cpu_cores"]
    assert proxied["latency_ms"]["p50"] > plain["latency_ms"]["p50"]
    traced = run_json(capsys, "--topology", "single", "--mesh", "istio", "--rps", "300", "--features", "tracing")
    assert "collector" in traced["cpu_cores"] and "tracing" in traced["inputs"]["features"]


def test_same_seed_same_answer_and_common_random_numbers(capsys):
    a = run_json(capsys, "--topology", "single", "--mesh", "istio", "--rps", "300", "--seed", "5")
    b = run_json(capsys, "--topology", "single", "--mesh", "istio", "--rps", "300", "--seed", "5")
    assert a["latency_ms"] == b["latency_ms"]


def test_min_replications_sets_the_precision_rules_first_look(capsys):
    """A loose precision is met by the first batch; --min-replications makes that batch, and the first look,
    larger (the reported interval is then narrower), and the JSON says what was asked."""
    args = ["predict", "--topology", "single", "--mesh", "none", "--rps", "300", "--duration", "0.4",
            "--precision", "0.5", "--processes", "1", "--json"]
    runs = {}
    for first in (None, 9):
        assert main([*args, *(["--min-replications", str(first)] if first else [])]) == 0
        runs[first] = json.loads(capsys.readouterr().out)
    assert runs[None]["replications"] == 4 and runs[None]["inputs"]["min_replications"] == 4
    assert runs[9]["replications"] == 9 and runs[9]["inputs"]["min_replications"] == 9


def test_topology_file_and_mesh_model_file(capsys, tmp_path):
    from importlib import resources

    src = Path(str(resources.files("meshsim.models").joinpath("topologies/single.yaml")))
    topo = tmp_path / "mine.yaml"
    topo.write_text(src.read_text().replace("name: single", "name: mine"))
    mesh_src = Path(str(resources.files("meshsim.models").joinpath("meshes/linkerd.yaml")))
    mesh = tmp_path / "mesh.yaml"
    mesh.write_text(mesh_src.read_text())
    out = run_json(capsys, "--topology", str(topo), "--mesh-model", str(mesh), "--rps", "100")
    assert out["inputs"]["topology"]["name"] == "mine" and out["inputs"]["mesh"]["name"] == "linkerd"


def test_table_output_names_bottleneck_and_saturation(capsys):
    assert main(["predict", "--topology", "chain3", "--rps", "800", *QUICK]) == 0
    text = capsys.readouterr().out
    for word in ("p99.9", "bottleneck", "saturation rps", "s1/sidecar", "memory MB"):
        assert word in text


@pytest.mark.parametrize("load, extra", [("open", ["--rps", "200"]), ("fortio", ["--rps", "200"]),
                                         ("sequential", []), ("wrk2", ["--rps", "200"])])
def test_table_header_names_the_load_as_the_flag_does(capsys, load, extra):
    """`--load open` prints load=open (the JSON keeps the load's model class: inputs.load.model)."""
    assert main(["predict", "--topology", "single", "--load", load, *extra, *QUICK]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert head.split(" load=")[1].split()[0] == load, head


def test_a_fitted_clusters_fortio_driving_is_taken_said_and_undone_by_a_flag(capsys):
    """istio-1.7's pipeline ran fortio with -jitter and a one-after-another warm-up: a fortio load takes both unless
    a flag says otherwise (--no-jitter, --fortio-version), and the table and the JSON say what was taken."""
    common = ["--topology", "single", "--mesh", "istio-1.7", "--load", "fortio", "--rps", "1000",
              "--connections", "32", *QUICK]
    assert main(["predict", *common]) == 0
    taken = [line for line in capsys.readouterr().out.splitlines() if line.startswith("fortio driven as")]
    assert len(taken) == 1 and "-jitter" in taken[0] and "one connection after another" in taken[0]
    assert main(["predict", *common, "--no-jitter", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["inputs"]["load"]["jitter"] is False and "-jitter" not in out["inputs"]["fortio_from"]
    assert any("--jitter to predict those runs" in w for w in out["warnings"])
    assert main(["predict", *common, "--jitter", "--fortio-warmup", "sequential", "--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["inputs"]["load"]["jitter"] is True and "fortio_from" not in said["inputs"]
    assert main(["predict", "--topology", "single", "--rps", "10", "--no-jitter"]) == 2  # said of another load
    assert "--jitter: applies to the fortio load only" in capsys.readouterr().err


CYCLE = """schema: meshsim/topology/v1
name: loop
entry: a
network: {loopback: 0.01, same_node: 0.05, cross_node: 0.1, bandwidth_gbps: 10}
services:
  a: {handler: [{call: b}]}
  b: {handler: [{call: a}]}
"""


@pytest.mark.parametrize("args, needle", [
    (["--topology", "nosuch", "--rps", "10"], "unknown topology 'nosuch' (known: bookinfo, chain3"),
    (["--mesh", "nosuch", "--rps", "10"], "unknown mesh 'nosuch' (known: "),
    (["--rps", "-5"], "--rps: must be > 0"),
    (["--rps", "0"], "--rps: must be > 0"),
    (["--features", "quantum", "--rps", "10"], "has no feature 'quantum'"),
    (["--topology", "missing.yaml", "--rps", "10"], "missing.yaml does not exist"),
    (["--rps", "10", "--min-replications", "1"], "--min-replications: must be >= 2, got 1"),
    (["--rps", "10", "--min-replications", "161"], "--min-replications: must be from 2 (an interval needs two) to 160"),
])
def test_bad_input_one_line_error(capsys, args, needle):
    assert main(["predict", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("text, needle", [
    (CYCLE, "cycle: a -> b -> a"),
    (CYCLE.replace("{call: a}", "{call: ghost}"), "calls unknown service 'ghost'"),
    ("name: x\nservices: [\n", "line 3"),
    (CYCLE.replace("{call: b}", "{compute: {family: lognormal, median_ms: -1, sigma: 0.5}}"), "median_ms: must be > 0"),
    (CYCLE.replace("{call: b}", "{compute: {family: gamma, mean_ms: 1, cv: 0}}"), "cv: must be > 0"),
])
def test_bad_topology_files(capsys, tmp_path, text, needle):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    assert main(["predict", "--topology", str(f), "--rps", "10"]) == 2
    err = capsys.readouterr().err
    assert needle in err and str(f) in err and "Traceback" not in err


def test_bad_mesh_model_distribution(capsys, tmp_path):
    f = tmp_path / "m.yaml"
    f.write_text("schema: meshsim/mesh/v1\nname: m\nproxy:\n  passes:\n    inbound_request: {family: weibull, "
                 "shape: -2, scale_ms: 1}\n")
    assert main(["predict", "--mesh-model", str(f), "--rps", "10"]) == 2
    err = capsys.readouterr().err
    assert "proxy.passes.inbound_request.shape: must be > 0" in err


def test_console_script_runs_as_a_user_would():
    proc = subprocess.run([sys.executable, "-m", "meshsim", "predict", "--topology", "single", "--rps", "100",
                           *QUICK], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "saturation rps" in proc.stdout


def test_https_without_keepalive_costs_two_round_trips(capsys):
    """The seed blog: HTTPS through the edge adds ~400 ms (two extra ~204 ms round trips of a TLS 1.2 handshake)."""
    common = ["--topology", "edge", "--mesh", "none", "--load", "sequential", "--think", "100", "--no-keepalive",
              "--duration", "60", "--replications", "3", "--processes", "1"]
    assert main(["predict", *common, "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(["predict", *common, "--tls", "--json"]) == 0
    https = json.loads(capsys.readouterr().out)
    assert 380 < plain["latency_ms"]["p50"] < 440  # blog test 1-4: ~410 ms median
    assert 360 < https["latency_ms"]["p50"] - plain["latency_ms"]["p50"] < 460  # blog test 5: +400 ms
