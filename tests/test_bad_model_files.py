"""Hostile but fair model files (issue 14): topologies and mesh models with numbers that are not finite, impossible
or absurd, YAML nested or aliased without bound, chains too long; fixed examples, then generated ones. Each loads
within every documented bound or gives one clean line naming the file and key."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import given, strategies as st

from meshsim.catalog import load_topology
from meshsim.errors import MeshsimError, ModelError
from meshsim.topology import load_topology_text, topology_from_data

from refusals import FAST, HOSTILE_NUMBERS, ROOT, cli_refuses, load_mesh_text, one_clean_line, refused

CHAIN3 = (ROOT / "models/topologies/chain3.yaml").read_text()
ISTIO = (ROOT / "models/meshes/istio.yaml").read_text()

TOPOLOGY_CASES = [
    ("median_ms: 0.015, sigma: 0.3", "median_ms: 0.015, sigma: 1000", "network.loopback.sigma: must be <= 5"),
    ("bandwidth_gbps: 10", "bandwidth_gbps: .nan", "network.bandwidth_gbps: expected a finite number"),
    ("bandwidth_gbps: 10", "bandwidth_gbps: .inf", "network.bandwidth_gbps: expected a finite number"),
    ("delay_ms: 0.15, tau_ms: 30, source: \"as models", "delay_ms: 0.15, tau_ms: .nan, source: \"as models",
     "s1.wakeup.tau_ms: expected a finite number"),
    ("    node: node-s1\n    cores: 2", "    node: node-s1\n    cores: 1000000000", "services.s1.cores: must be <= 1024"),
    ("    node: node-s1\n    cores: 2", "    node: node-s1\n    replicas: 1000000\n    cores: 2",
     "services.s1.replicas: must be <= 1000"),
    ("    node: node-s1\n    cores: 2", "    node: node-s1\n    cores: .nan", "services.s1.cores: expected an integer"),
    ("      - call: s2", "      - choose: {s2: .nan}", "choose.s2: expected a finite number"),
    ("  s3:\n", "  s2:\n", "invalid YAML (duplicate key 's2')"),
    ("client-node: {cores: 4,", "client-node: {cores: .nan,", "nodes.client-node.cores: expected a finite number"),
    ("entry: s1", "entry: s1\nentry_rate: {rps: -5, source: traces}", "entry_rate.rps: must be > 0"),
    ("entry: s1", "entry: s1\nentry_rate: {rps: .inf, source: traces}", "entry_rate.rps: expected a finite number"),
    ("entry: s1", "entry: s1\nentry_rate: {rps: 50}", "entry_rate.source: missing"),
    ("entry: s1", "entry: s1\nentry_rate: 50", "entry_rate: expected a mapping"),
]


@pytest.mark.parametrize(("old", "new", "needle"), TOPOLOGY_CASES)
def test_topology_numbers_are_finite_and_bounded(old: str, new: str, needle: str) -> None:
    assert old in CHAIN3
    refused(load_topology_text, CHAIN3.replace(old, new, 1), needle)


MESH_CASES = [
    ("workers: 2", "workers: 100000000", "proxy.workers: must be <= 1024"),
    ("cpu_limit: null", "cpu_limit: .nan", "proxy.cpu_limit: expected a finite number"),
    ("cpu_limit: null", "cpu_limit: 1.0e-9", "proxy.cpu_limit: must be >= 0.001"),
    ("dispatch: pinned", "dispatch: pinned\n  cpu_fraction: .nan", "proxy.cpu_fraction: expected a finite number"),
    ("per_kb_ms: 0.001", "per_kb_ms: .inf", "proxy.per_kb_ms: expected a finite number"),
    ("workers: 2", "workers: 2\n  cpu_limit: 1", "line 21: invalid YAML (duplicate key 'cpu_limit')"),
    ("per_connection_mb: 0.062, per_in_flight_mb: 0.0, source: \"MB", "per_connection_mb: .nan, source: \"MB",
     "proxy.memory.per_connection_mb: expected a finite number"),
    ("per_in_flight_mb: 0.0, source: \"MB", "per_in_flight_mb: 1.0e+300, source: \"MB",
     "proxy.memory.per_in_flight_mb: must be <= 1.04858e+06"),
    ("    memory_mb: 0.83", "    memory_mb: -0.83", "features.mtls.memory_mb: must be >= 0"),
    ("    memory_mb: 0.83", "    memory_mb: 0.83\n    sides: {inbound: {cpu_fraction: 1.5}}",
     "features.mtls.sides.inbound.cpu_fraction: a fraction in (0, 1], got 1.5"),
    ("    memory_mb: 0.83", "    memory_mb: 0.83\n    sides: {inbound: {}}",
     "features.mtls.sides.inbound.cpu_fraction: missing"),
    ("    memory_mb: 0.83", "    memory_mb: 0.83\n    sides: {sideways: {cpu_fraction: 0.5}}",
     "features.mtls.sides.sideways: unknown key"),
]


@pytest.mark.parametrize(("old", "new", "needle"), MESH_CASES)
def test_mesh_numbers_are_finite_and_bounded(old: str, new: str, needle: str) -> None:
    assert old in ISTIO
    refused(load_mesh_text, ISTIO.replace(old, new, 1), needle)


def test_deep_yaml_nesting_is_one_error_not_recursion() -> None:
    # libyaml's C parser (used where PyYAML has it) refuses flow nesting past its own limit while scanning, before
    # any event reaches our check; PyYAML's Python parser leaves it to ours: one line either way
    deepest = ("nested deeper than 64 levels", "exceeded maximum nesting depth")
    for text in ("[" * 20_000 + "]" * 20_000, "a: {" * 5_000 + "}" * 5_000):
        message = refused(load_mesh_text, text, "invalid YAML")
        assert any(reason in message for reason in deepest), message
    refused(load_topology_text, "[" * 65 + "]" * 65, "nested deeper than 64 levels")
    shallow = refused(load_topology_text, "[" * 64 + "]" * 64, "topology")
    assert "nested" not in shallow  # 64 levels parse; the topology check refuses the list
    refused(load_mesh_text, "".join(" " * i + "k:\n" for i in range(1_000)), "nested deeper than 64 levels")
    refused(load_mesh_text, "x" * (17 * 2**20), "bytes is larger than the 16777216 bytes a model file may be")


def chain_data(n: int) -> dict:
    """Parsed YAML of an n-service chain (built as data: parsing 3,000 services of YAML takes seconds)."""
    services = {f"s{i}": {"handler": [{"compute": 0.01}] + ([{"call": f"s{i + 1}"}] if i < n else [])}
                for i in range(1, n + 1)}
    return {"name": f"c{n}", "entry": "s1", "services": services,
            "network": {"loopback": 0.01, "same_node": 0.02, "cross_node": 0.1, "bandwidth_gbps": 10}}


def test_long_chains_load_without_recursion_and_huge_ones_are_refused() -> None:
    assert len(topology_from_data(chain_data(1000), "c.yaml").services) == 1000  # the graph check is iterative
    refused(lambda d: topology_from_data(d, "c.yaml"), chain_data(3000), "c.yaml: services: 3000 services, at most 1000")
    with pytest.raises(MeshsimError, match="chain100000: a chain has 1 to 1000 services"):
        load_topology("chain100000")


NAMES = st.sampled_from(["a", "b", "c", "d"])


def step():
    return st.one_of(
        st.fixed_dictionaries({"compute": st.one_of(HOSTILE_NUMBERS, st.fixed_dictionaries(
            {"family": st.sampled_from(["lognormal", "gamma", "weibull", "exponential", "uniform", "nope"]),
             "mean_ms": HOSTILE_NUMBERS, "cv": HOSTILE_NUMBERS, "median_ms": HOSTILE_NUMBERS, "sigma": HOSTILE_NUMBERS,
             "shape": HOSTILE_NUMBERS, "scale_ms": HOSTILE_NUMBERS, "low_ms": HOSTILE_NUMBERS,
             "high_ms": HOSTILE_NUMBERS}))}),
        st.fixed_dictionaries({"call": NAMES}),
        st.fixed_dictionaries({"parallel": st.lists(NAMES, max_size=3)}),
        st.fixed_dictionaries({"choose": st.dictionaries(NAMES, HOSTILE_NUMBERS, max_size=3)}))


def topology_data():
    service = st.fixed_dictionaries({"handler": st.lists(step(), max_size=3)},
                                    optional={"replicas": HOSTILE_NUMBERS, "cores": HOSTILE_NUMBERS,
                                              "request_bytes": HOSTILE_NUMBERS, "response_bytes": HOSTILE_NUMBERS})
    network = st.fixed_dictionaries({"loopback": HOSTILE_NUMBERS, "same_node": HOSTILE_NUMBERS,
                                     "cross_node": HOSTILE_NUMBERS, "bandwidth_gbps": HOSTILE_NUMBERS})
    return st.fixed_dictionaries({"name": st.just("gen"), "entry": NAMES,
                                  "services": st.dictionaries(NAMES, service, max_size=4), "network": network},
                                 optional={"nodes": st.dictionaries(NAMES, st.fixed_dictionaries(
                                     {"cores": HOSTILE_NUMBERS}), max_size=2)})


def dump(data) -> str:
    return yaml.safe_dump(data, allow_unicode=True)


@FAST
@given(topology_data())
def test_generated_topologies_load_or_give_one_line(data) -> None:
    try:
        topo = load_topology_text(dump(data))
    except MeshsimError as exc:
        one_clean_line(exc)
        return
    for service in topo.services.values():  # what loads is within every documented bound
        assert 1 <= service.replicas <= 1000 and 1 <= service.cores <= 1024
    assert 0 < topo.network.bandwidth_bps < math.inf


def leaf_paths(node, prefix=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from leaf_paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from leaf_paths(v, (*prefix, i))
    else:
        yield prefix


ISTIO_DATA = yaml.safe_load(ISTIO)
ISTIO_LEAVES = sorted(leaf_paths(ISTIO_DATA), key=str)


def replaced(data, path, value):
    data = json.loads(json.dumps(data))
    node = data
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return data


@FAST
@given(st.lists(st.tuples(st.sampled_from(ISTIO_LEAVES), HOSTILE_NUMBERS), min_size=1, max_size=3))
def test_generated_mesh_models_load_or_give_one_line(edits) -> None:
    data = ISTIO_DATA
    for path, value in edits:
        data = replaced(data, path, value)
    try:
        mesh = load_mesh_text(dump(data))
    except MeshsimError as exc:
        one_clean_line(exc)
        return
    assert mesh.proxy is None or 1 <= mesh.proxy.workers <= 1024


@FAST
@given(st.lists(st.one_of(st.just("[]"), st.just("{a: "), st.just("- "), st.just("k: v\n"), st.just("k: v\nk: w\n"),
                          st.just("!!python/object:os.system x"), st.text(max_size=10)), max_size=30))
def test_generated_yaml_text(pieces: list[str]) -> None:
    try:
        load_mesh_text("".join(pieces))
    except MeshsimError as exc:
        one_clean_line(exc)


@pytest.mark.parametrize("text", [
    "a: &a [*a]\n",  # a list holding itself
    "x0: &x0 [a, a, a, a, a, a, a, a, a, a]\n" + "".join(
        f"x{i}: &x{i} [" + ", ".join([f"*x{i - 1}"] * 10) + "]\n" for i in range(1, 8)),  # 10^8 values in 1 KB
])
def test_yaml_aliases_that_expand_without_bound_are_refused_in_one_line(text):
    from meshsim.yamlio import parse_yaml_text

    started = time.monotonic()
    with pytest.raises(ModelError, match=r"^bomb\.yaml: line 1: invalid YAML \(aliases expand to more than"):
        parse_yaml_text(text, "bomb.yaml")
    assert time.monotonic() - started < 10  # hang guard (refused after a bounded count, not a timer)


def test_yaml_is_parsed_by_libyaml_with_the_strict_checks_on_top() -> None:
    """Run folders' manifests and model files go through libyaml's C parser (six times as fast as PyYAML's Python
    one); the duplicate-key, depth and alias checks above are the constructor's and the loader's, on either parser."""
    from meshsim.yamlio import StrictSafeLoader, parse_yaml_text

    if not yaml.__with_libyaml__:
        assert os.environ.get("CI") != "true", "PyYAML without libyaml: install the wheel (it bundles libyaml)"
        pytest.skip("PyYAML built without libyaml: the Python parser serves")
    assert issubclass(StrictSafeLoader, yaml.cyaml.CParser)
    assert parse_yaml_text("a: {b: [1, 2.5, x]}\nc: null\n", "ok.yaml") == {"a": {"b": [1, 2.5, "x"]}, "c": None}


@pytest.fixture()
def odd_files(tmp_path: Path) -> dict[str, str]:
    """A folder, a device, a pipe and a symlink loop, each where a model file is expected."""
    (tmp_path / "loop-a").symlink_to(tmp_path / "loop-b")
    (tmp_path / "loop-b").symlink_to(tmp_path / "loop-a")
    os.mkfifo(tmp_path / "pipe.yaml")
    return {"folder": str(tmp_path), "device": "/dev/zero", "pipe": str(tmp_path / "pipe.yaml"),
            "loop": str(tmp_path / "loop-a")}


@pytest.mark.parametrize(("kind", "problem"), [("folder", "is a directory, not a file"),
                                               ("device", "is not a regular file (a device, a pipe or a socket)"),
                                               ("pipe", "is not a regular file"), ("loop", "is a symlink loop")])
@pytest.mark.parametrize("flag", ["--topology", "--mesh-model"])
def test_a_model_file_that_is_no_file_is_named_for_what_it_is(capsys, odd_files, flag: str, kind: str,
                                                               problem: str) -> None:
    cli_refuses(capsys, ["predict", "--rps", "100", flag, odd_files[kind]],
                f"{flag}: file {odd_files[kind]} {problem}")


def test_validate_names_a_model_that_is_a_folder(capsys, tmp_path: Path) -> None:
    cli_refuses(capsys, ["validate", str(ROOT / "measurements/istio-1.2.0"), "--model", str(tmp_path)],
                f"--model: file {tmp_path} is a directory, not a file")
