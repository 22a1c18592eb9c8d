"""The compiled engine against the SimPy engine on generated combinations of every option at once.

tests/test_fast_engine.py runs every shipped topology x mesh x load at the defaults and a few mechanisms one at a
time; mechanisms also meet each other (a server-only mesh behind a central balancer under wrk2 without keep-alive, a
CPU-limited one-worker proxy with mTLS and a 98 kB payload, ...). Such combinations are drawn here over the
shipped models and the options `meshsim predict` takes, and both engines must agree on the percentiles, the
utilisation, the achieved rps and every component's CPU within their 95 % intervals. Each combination comes from a
generator seeded with its number, so that CI runs the same ones every time (a statistical check must not fail by
the draw of its examples).
"""

from __future__ import annotations

import random

import pytest

from meshsim.catalog import list_meshes, list_topologies, load_mesh
from meshsim.request import PredictOptions, build_request
from engine_pairs import engine_disagreements

REPLICATIONS = 4
SEED = 11
COMBINATIONS = 16
TOPOLOGIES = sorted(t for t in list_topologies() if t != "chainN") + ["chain5"]


def combination(number: int) -> PredictOptions:
    """A valid `meshsim predict` request drawn from its own seeded generator: a shipped topology and mesh, a load,
    and any of the options off their defaults (features on or off as the mesh has them, a central balancer where
    the mesh has one)."""
    rng = random.Random(number)
    mesh_name = rng.choice(list_meshes())
    mesh = load_mesh(mesh_name)
    load = rng.choice(["open", "fortio", "wrk2", "sequential"])
    connections = rng.choice([1, 4, 16, 64])
    options: dict = dict(topology=rng.choice(TOPOLOGIES), mesh=mesh_name, load=load, connections=connections,
                         duration_s=2.0)
    if load != "sequential":
        options["rps"] = rng.choice([200.0, 800.0, 2000.0])
    switchable = sorted(name for name, f in mesh.features.items() if not f.fixed)  # a fixed one cannot go off
    features = rng.sample(switchable, rng.randint(0, min(2, len(switchable))))
    options["features"] = tuple(f"no-{name}" if mesh.features[name].default else name for name in features)
    if mesh.load_balancer is not None and rng.random() < 0.3:
        options["lb"] = "proxy"
    if mesh.proxy is not None:
        options["scope"] = rng.choice(["both", "both", "server"])
        options["proxy_workers"] = rng.choice([None, None, 1, 4])
        options["proxy_cpu_limit"] = rng.choice([None, None, 0.2, 1.0])
    options["keepalive"] = rng.random() < 0.7
    options["tls"] = rng.random() < 0.3
    options["payload_bytes"] = rng.choice([None, None, 0, 98_000])
    if load == "fortio":
        options.update(uniform=rng.random() < 0.3, jitter=rng.random() < 0.3, nocatchup=rng.random() < 0.3)
    if load == "wrk2":
        options["threads"] = rng.randint(1, min(2, connections))
    return PredictOptions(**options)


@pytest.mark.slow
@pytest.mark.parametrize("number", range(COMBINATIONS))
def test_engines_agree_on_generated_combinations_of_options(number: int) -> None:
    options = combination(number)
    problems = engine_disagreements(build_request(options), SEED, REPLICATIONS, cpu=True)
    assert not problems, f"{options}: " + "; ".join(problems)
