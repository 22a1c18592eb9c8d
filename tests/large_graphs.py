"""Seeded call graphs in the shape of public microservice traces (for the scale benchmark and its tests).

Alibaba's and Meta's published traces show layered graphs: a few entry services, wide middle tiers, requests that
touch tens to hundreds of services through weighted choices (which version, which shard) and fan-outs. The
generator builds such a graph: an entry service and ``layers`` tiers below it; every service but the last tier's
does its own work, calls one of a few next-tier services picked by weight, and with some probability also fans out
to two next-tier services at once. Replicas are sized from each service's expected rate (its visits per request
times the entry rate) so that no app or sidecar runs past ``UTILISATION``; ``saturate`` names a service to leave
with one replica, far past its capacity (the saturated variant).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import yaml

NETWORK = {"loopback": 0.01, "same_node": 0.05, "cross_node": 0.2, "bandwidth_gbps": 10}
UTILISATION = 0.5  # the busiest app replica's or sidecar's share of its core at the sized rate
PROXY_MS = 0.25  # an allowance for a sidecar's CPU per request passing it (both directions), for sizing only
CHOICES, FAN_OUT_SHARE = 3, 0.35  # next-tier services a choice picks from; services that also fan out


def _handler(rng: np.random.Generator, below: list[str]) -> tuple[list[dict], dict[str, float]]:
    """A service's steps and the expected visits each callee gets per visit of the service."""
    compute_ms = round(float(rng.uniform(0.02, 0.1)), 4)
    steps: list[dict] = [{"compute": compute_ms}]
    visits: dict[str, float] = {}
    if not below:
        return steps, visits
    picked = [str(s) for s in rng.choice(below, size=min(CHOICES, len(below)), replace=False)]
    weights = [round(float(w), 3) + 0.001 for w in rng.uniform(0.1, 1.0, size=len(picked))]
    steps.append({"choose": dict(zip(picked, weights))})
    for name, w in zip(picked, weights):
        visits[name] = visits.get(name, 0.0) + w / sum(weights)
    if len(below) >= 2 and rng.random() < FAN_OUT_SHARE:
        pair = [str(s) for s in rng.choice(below, size=2, replace=False)]
        steps.append({"parallel": pair})
        for name in pair:
            visits[name] = visits.get(name, 0.0) + 1.0
    steps.append({"compute": round(compute_ms / 2, 4)})
    return steps, visits


def layered_graph(services: int, layers: int, rps: float, seed: int, saturate: str | None = None) -> dict:
    """A topology document (``meshsim/topology/v1``) of ``services`` services: ``s0`` and ``layers`` tiers."""
    rng = np.random.default_rng(seed)
    tiers = [["s0"]] + [list(t) for t in np.array_split([f"s{i}" for i in range(1, services)], layers)]
    handlers, rate = {}, {"s0": rps}
    for depth, tier in enumerate(tiers):
        below = [str(s) for s in tiers[depth + 1]] if depth + 1 < len(tiers) else []
        for name in map(str, tier):
            handlers[name], visits = _handler(rng, below)
            for callee, per_visit in visits.items():
                rate[callee] = rate.get(callee, 0.0) + rate.get(name, 0.0) * per_visit
    out = {}
    for name, handler in handlers.items():
        busy_s = sum(step.get("compute", 0.0) for step in handler) * 1e-3 + PROXY_MS * 1e-3
        replicas = max(1, math.ceil(rate.get(name, 0.0) * busy_s / UTILISATION))
        out[name] = {"replicas": 1 if name == saturate else min(replicas, 64), "handler": handler}
    visits = sum(rate.values()) / rps
    return {"schema": "meshsim/topology/v1", "name": f"layered{services}",
            "description": f"a generated layered graph: {visits:.1f} service visits per request on average",
            "entry": "s0", "services": out,
            "network": NETWORK, "source": f"tests/large_graphs.py layered_graph({services}, {layers}, {rps:g}, "
                                          f"seed={seed}, saturate={saturate})"}


def busiest_service(document: dict) -> str:
    """The service below the entry with the most replicas (the one whose saturation the benchmark forces: its queue
    grows behind the entry, as a slow dependency's does)."""
    below = [name for name in document["services"] if name != document["entry"]]
    return max(below, key=lambda name: document["services"][name]["replicas"])


def write_layered_graph(folder: Path, services: int, layers: int, rps: float, seed: int,
                        saturate: bool = False) -> Path:
    document = layered_graph(services, layers, rps, seed)
    if saturate:
        document = layered_graph(services, layers, rps, seed, busiest_service(document))
    path = folder / f"{document['name']}{'-saturated' if saturate else ''}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path
