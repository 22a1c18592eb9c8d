"""Large generated graphs (tests/large_graphs.py, the scale benchmark's graphs): memory grows with the graph, not with
the requests simulated. The predictions run in processes of their own (their VmHWM is their peak), a few seconds
each; tests/bench_large_graphs.py runs the 1000-service figures."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from large_graphs import busiest_service, layered_graph, write_layered_graph
from meshsim.topology import load_topology_text
from test_graph_limits import measured

RPS = 2000.0


def _peak_mb(topology: str, duration: float) -> tuple[float, int]:
    options = {"topology": topology, "rps": RPS, "duration_s": duration, "replications": 2, "processes": 1,
               "engine": "fast", "scope": "server", "saturation": False}
    result, peak_mb, _ = measured("options", json.dumps(options))
    return peak_mb, result["requests"]


def test_memory_grows_with_the_graph_not_with_the_requests(tmp_path: Path) -> None:
    """Four times the requests on the same graph: the peak moves by less than a quarter of what the graph itself
    takes above a one-service prediction (both measured here). Memory kept per request (a latency record, a
    finished token) would add about three times the short run's requests' share."""
    graph = str(write_layered_graph(tmp_path, 120, 3, RPS, seed=2))
    base_mb, _ = _peak_mb("single", 0.25)
    short_mb, short_requests = _peak_mb(graph, 0.25)
    long_mb, long_requests = _peak_mb(graph, 1.0)
    assert long_requests > 3 * short_requests
    graph_mb = short_mb - base_mb
    assert graph_mb > 0, (base_mb, short_mb)
    assert long_mb - short_mb < 0.25 * graph_mb, (base_mb, short_mb, long_mb)


def test_the_generator_is_seeded_layered_and_sized_for_its_rate() -> None:
    document = layered_graph(200, 4, 5000.0, seed=3)
    assert document == layered_graph(200, 4, 5000.0, seed=3)
    assert document != layered_graph(200, 4, 5000.0, seed=4)
    topology = load_topology_text(yaml.safe_dump(document), "layered200.yaml")
    assert len(topology.services) == 200 and 3 <= topology.call_depth() <= 5  # the entry and up to 4 tiers
    assert any(step.get("choose") for s in document["services"].values() for step in s["handler"])
    assert any(step.get("parallel") for s in document["services"].values() for step in s["handler"])
    busiest = busiest_service(document)
    assert document["services"][busiest]["replicas"] > 1
    saturated = layered_graph(200, 4, 5000.0, seed=3, saturate=busiest)
    assert saturated["services"][busiest]["replicas"] == 1
