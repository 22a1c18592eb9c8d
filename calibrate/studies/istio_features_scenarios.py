"""Zanin 2023's experiment as meshsim scenarios: the conditions, the simulated replications, the 10 rps fit.

The thesis (seed 000) measured a three-service Go chain behind Istio on one Minikube VM in three setups (default,
observability = Jaeger + Prometheus, mTLS) x two rates (10, 100 rps) x two payloads (120 B, 98 kB), 5 tests of
5 minutes per combination, and printed the mean response time of each combination (Tabela 3). A condition here is
one of those twelve; a replication is one independent simulated test (its own seed), like one of the thesis's
five. The shipped ``minikube-chain3`` topology and ``istio-minikube`` mesh model hold the scenario; the numbers
they hold that were fitted come from :func:`fit_lowest_rate`, which reads only the 10 rps cells.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from meshsim.catalog import load_mesh, load_topology
from meshsim.distribution_spec import parse_distribution
from meshsim.distributions import MS
from meshsim.mesh import MeshModel
from meshsim.parent_death import Parent, die_with_parent
from meshsim.request import PredictOptions
from meshsim.topology import Topology

from meshsim.calibrate.measure.tables import load_table
from meshsim.calibrate.studies.study_catalog import StudySettings

TOPOLOGY = "minikube-chain3"
MESH = "istio-minikube"
SETUPS = ("default", "observability", "mtls")
FEATURES = {"default": (), "observability": ("observability",), "mtls": ("mtls",)}
RATES = (10.0, 100.0)
FIT_RPS = 10.0  # the lowest-rate column: the only one the protocol lets us fit
PAYLOADS = (120, 98000)
# Each of the three services returns its share concatenated to the answer of the next (seed 000 section 3.2): the
# large answer is "300.000 caracteres", three shares of 100 000 B (97.7 KiB, the "98 kbytes" level); the small one
# fits "em 120 bytes", three shares of 40 B.
SHARE_BYTES = {120: 40, 98000: 100_000}
CHAIN = ("s3", "s2", "s1")  # leaf first: s3 answers one share, s2 two, s1 three
PROXY_PASSES = 10  # s1 in+out, s2 in+out, s3 in: 5 sidecar listeners, each passed by the request and the response
LOAD_CONNECTIONS = 8  # the thesis does not name its load generator; see istio_features_study's notes
THESIS_TESTS = 5  # "5 testes para cada combinação"
THESIS_DURATION_S = 300.0  # "durante 5 minutos"


@dataclass(frozen=True)
class Condition:
    setup: str
    rps: float
    payload_bytes: int

    def describe(self) -> dict[str, Any]:
        return {"istio_setup": self.setup, "rps": self.rps, "payload_bytes": self.payload_bytes}


def conditions() -> list[Condition]:
    return [Condition(s, r, p) for s in SETUPS for r in RATES for p in PAYLOADS]


def published_means() -> dict[Condition, float]:
    """Tabela 3 (measurements/published/thesis000_response_time.csv, statistic mean) by condition."""
    table = load_table("thesis000_response_time")
    return {Condition(r["istio_setup"], float(r["rate_rps"]), int(r["payload_bytes"])): float(r["response_time_ms"])
            for r in table.where(statistic="mean")}


def topology_for(payload_bytes: int, base: Topology | None = None) -> Topology:
    """The shipped topology with the answers of ``payload_bytes``'s level: s3 one share, s2 two, s1 three."""
    topo = base if base is not None else load_topology(TOPOLOGY)
    share = SHARE_BYTES[payload_bytes]
    services = dict(topo.services)
    for k, name in enumerate(CHAIN, start=1):
        services[name] = replace(services[name], response_bytes=k * share)
    return replace(topo, services=services)


def options_for(cond: Condition, settings: StudySettings, topology: Topology | None = None,
                mesh: MeshModel | str = MESH) -> PredictOptions:
    """One simulated test of ``cond``: open Poisson arrivals at the condition's rate for the thesis's 5 minutes
    (short settings: 20 s)."""
    return PredictOptions(topology=topology_for(cond.payload_bytes, topology), mesh=mesh, rps=cond.rps,
                          features=FEATURES[cond.setup], load="open", connections=LOAD_CONNECTIONS,
                          duration_s=20.0 if settings.short else THESIS_DURATION_S, saturation=False)


def replication_count(settings: StudySettings) -> int:
    return 2 if settings.short else THESIS_TESTS


def replication_jobs(options: PredictOptions, index: int, settings: StudySettings) -> list[PredictOptions]:
    """The condition's independent tests: one replication each, seeds from (study seed, condition, test)."""
    jobs = []
    for rep in range(replication_count(settings)):
        seed = int(np.random.SeedSequence([settings.seed, index, rep]).generate_state(1)[0])
        jobs.append(options.with_changes(seed=seed, replications=1, precision=None, processes=1,
                                         time_limit_s=settings.time_limit_s))
    return jobs


def run_means(jobs: list[PredictOptions], processes: int | None) -> list[float]:
    """Each job's mean latency (ms), in parallel processes (fork, as meshsim factorial does); ``processes`` None:
    the machine's cores, up to 8 (``meshsim study run --processes``' default)."""
    if processes is None:
        processes = min(8, os.cpu_count() or 1)
    if processes <= 1 or len(jobs) <= 1:
        return [_mean_ms(job) for job in jobs]
    with ProcessPoolExecutor(max_workers=processes, mp_context=multiprocessing.get_context("fork"),
                             initializer=die_with_parent, initargs=(Parent.here(),)) as pool:
        return list(pool.map(_mean_ms, jobs))


def _mean_ms(job: PredictOptions) -> float:
    from meshsim.sim.experiments.factorial_replications import metric_of
    from meshsim.sim.experiments.predict import predict_options

    return metric_of(predict_options(job), "mean_ms")


# -- the fit of the 10 rps column -----------------------------------------------------------------------------------

def _lognormal(mean_ms: float, cv: float, where: str) -> Any:
    return parse_distribution({"family": "lognormal", "mean_ms": max(mean_ms, 1e-6), "cv": cv}, where)


def with_client_rtt(topo: Topology, rtt_ms: float, ms_per_mb: float) -> Topology:
    """The topology with the client's round trip (mean ms) and the transfer time per MB of answer (ms)."""
    bandwidth = 8e6 / (ms_per_mb * MS) if ms_per_mb > 0 else 1e15
    network = replace(topo.network, client_rtt=_lognormal(rtt_ms, 0.2, "client_rtt"), bandwidth_bps=bandwidth)
    return replace(topo, network=network)


def with_feature_cost(mesh: MeshModel, feature: str, per_pass_ms: float, per_kb_ms: float) -> MeshModel:
    f = mesh.features[feature]
    dist = _lognormal(per_pass_ms, 0.6, f"{feature}.per_pass")
    per_pass = {kind: dist for kind in ("inbound_request", "inbound_response", "outbound_request",
                                        "outbound_response")}
    features = {**mesh.features, feature: replace(f, per_pass=per_pass, per_kb=max(per_kb_ms, 0.0) * MS)}
    return replace(mesh, features=features)


def solve_affine(measure: Callable[[float], float], target: float, lo: float, hi: float) -> float:
    """x with measure(x) = target for a measure affine in x (mean latency at 10 rps: no queueing to bend it)."""
    m_lo, m_hi = measure(lo), measure(hi)
    return lo + (target - m_lo) * (hi - lo) / (m_hi - m_lo)


def fit_lowest_rate(settings: StudySettings) -> dict[str, float]:
    """The fitted numbers of the shipped models, from the six 10 rps cells of Tabela 3 and nothing else.

    default 120 B -> the client's round trip (the load-generator VM to the Minikube VM and back: every fixed cost
    the parts of the model do not carry); default 98 kB -> the transfer time per MB of answer; observability and
    mtls 120 B -> their in-path time per proxy pass; their 98 kB cells -> their extra time per KB through a proxy
    (>= 0). Common random numbers (one seed) make each solve exact up to the cell's own noise."""
    pub = published_means()
    fixed = replace(settings, short=False)
    topo, mesh = load_topology(TOPOLOGY), load_mesh(MESH)
    mesh = with_feature_cost(with_feature_cost(mesh, "observability", 0.0, 0.0), "mtls", 0.0, 0.0)

    def mean(cond: Condition, t: Topology, m: MeshModel) -> float:
        return float(np.mean(run_means(replication_jobs(options_for(cond, fixed, t, m), 0, fixed),
                                       settings.processes)))

    def cell(setup: str, payload: int) -> Condition:
        return Condition(setup, FIT_RPS, payload)

    rtt, per_mb = 10.0, 0.0
    for _ in range(2):  # the two are coupled only through the 120 B answers' transfer: two rounds settle them
        rtt = solve_affine(lambda x: mean(cell("default", 120), with_client_rtt(topo, x, per_mb), mesh),
                     pub[cell("default", 120)], rtt * 0.5, rtt)
        per_mb = solve_affine(lambda x: mean(cell("default", 98000), with_client_rtt(topo, rtt, x), mesh),
                        pub[cell("default", 98000)], 0.0, 10.0)
    fitted = {"client_rtt_ms": rtt, "transfer_ms_per_mb": per_mb}
    topo = with_client_rtt(topo, rtt, per_mb)
    for feature in ("observability", "mtls"):
        per_pass = solve_affine(lambda x: mean(cell(feature, 120), topo, with_feature_cost(mesh, feature, x, 0.0)),
                          pub[cell(feature, 120)], 0.0, 0.2)
        per_kb = solve_affine(lambda x: mean(cell(feature, 98000), topo, with_feature_cost(mesh, feature, per_pass, x)),
                        pub[cell(feature, 98000)], 0.0, 0.01)
        fitted[f"{feature}_per_pass_ms"], fitted[f"{feature}_per_kb_ms"] = per_pass, per_kb
    return fitted
