"""A topology's network hop fitted from baseline runs, so that the simulated baseline reproduces p50..p99.9.

A baseline run (no sidecar, one connection) is the load generator, the app, the kernel's work and two one-way hops
of one class: ``cross_node`` when the topology puts the client and the entry service on different nodes (Istio's
pipeline), ``loopback`` when they share one (the lab, whose every process runs on one host). Everything but the
hops is the topology's own (client CPU per call, kernel CPU, app compute, wake-ups): the engine simulates the run's
fortio workload with that hop class at zero, and the hop is what must be added twice to those simulated latencies
to reproduce the measured percentiles (:mod:`meshsim.calibrate.fit.stall_fit`). Runs at several rates share one
hop; their known parts are simulated at each run's rate.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np

from meshsim.calibrate.fit.observations import from_result
from meshsim.calibrate.fit.stall_fit import HopFit, QuantileTarget, fit_stall_hop, log_quantile_se, usable_probs
from meshsim.calibrate.measure.dataset import Run
from meshsim.catalog import load_topology
from meshsim.distribution_spec import parse_distribution, spec_with_meta
from meshsim.distributions import Deterministic, Distribution
from meshsim.errors import MeshsimError, ModelError
from meshsim.fortio_warmup import checked_version
from meshsim.progress import Progress
from meshsim.request import PredictOptions, build_request
from meshsim.topology import Topology

HOPS_PER_REQUEST = 2  # request and response, client <-> entry service
MIN_REQUESTS = 1000  # p99.9 needs a run of at least a thousand requests
# A hop that misses the percentiles by more than 10 % on average is not written: the rest of the topology (client,
# app, kernel, wake-ups) does not describe the runs, and the hop would only carry that mismatch
MAX_RMS_LOG_RESIDUAL = 0.10


def hop_key(topology: Topology) -> str:
    """The network block's key of the client <-> entry hop (the engine's choice: same node -> loopback)."""
    same = topology.client.node == topology.node_of(topology.entry)
    return "loopback" if same else "cross_node"


def with_hop(topology: Topology, key: str, hop: Distribution) -> Topology:
    return replace(topology, network=replace(topology.network, **{key: hop}))


def run_topology(run: Run, topology: Topology | None = None) -> Topology:
    """The topology a baseline run is simulated on: the manifest's (or ``topology``), on one host for a lab run."""
    topo = topology if topology is not None else load_topology(run.manifest.setup.topology)
    cores = run.manifest.where.get("cpus") if run.manifest.source == "lab" else None
    return topo.on_one_host(float(cores)) if isinstance(cores, (int, float)) and cores > 0 else topo


def simulate_baseline(topology: Topology, run: Run, requests: int, seed: int) -> np.ndarray:
    """Latencies (s) of the run's fortio workload on ``topology`` without sidecars, about ``requests`` of them."""
    from meshsim.sim.engine_choice import run_on_chosen_engine
    from meshsim.sim.experiments.predict import horizon_for

    load = run.manifest.load
    rps = float(run.rps or 0.0)
    options = PredictOptions(
        topology=topology, mesh="none", scope="none", rps=rps, load="fortio",
        connections=run.result.num_threads or load.connections, uniform=bool(load.uniform), jitter=bool(load.jitter),
        nocatchup=bool(load.nocatchup), fortio_version=checked_version(run.result.version),
        fortio_warmup=run.result.warmup, payload_bytes=run.manifest.setup.payload_bytes,
        duration_s=max(requests / rps, 1.0), warmup_s=0.0, replications=1, precision=None, seed=seed, processes=1,
        saturation=False)
    request = build_request(options)
    horizon = horizon_for(request.workload.load, request.settings)
    return run_on_chosen_engine(request.scenario, request.workload, horizon, seed, 0).latencies


def target_of(run: Run, known: np.ndarray) -> QuantileTarget:
    """The run's measured percentiles (raw access-log samples when present, else fortio's buckets) and their
    standard errors, with samples of the known parts of its path."""
    obs = from_result(run.result, label=run.id)
    probs = usable_probs(obs.n)
    values = tuple(obs.quantile(p) for p in probs)
    return QuantileTarget(run.id, probs, values, known, HOPS_PER_REQUEST, log_quantile_se(obs.quantile, obs.n, probs))


@dataclass(frozen=True)
class NetworkHopFit:
    topology: str
    key: str
    fit: HopFit
    runs: tuple[str, ...]

    def spec(self) -> dict[str, Any]:
        """The hop as a model-file distribution with its source and the measured vs fitted percentiles."""
        source = (f"fitted by meshsim fit from baseline runs {', '.join(self.runs)}: the {self.key} hop of topology "
                  f"{self.topology!r} such that its simulated baseline (client, kernel and app from the topology, "
                  f"{HOPS_PER_REQUEST} hops per request) reproduces the runs' p50..p99.9")
        return spec_with_meta(self.fit.distribution, source=source, fit=self.fit.summary())


def baseline_runs_for_hop(runs: Sequence[Run]) -> list[Run]:
    """The runs that identify the hop: baselines without features, one connection, a rate, a thousand requests."""
    return [r for r in runs if r.manifest.setup.path == "baseline" and not r.features and r.rps
            and r.manifest.load.connections == 1 and r.result.count >= MIN_REQUESTS]


def fit_network_hop(runs: Sequence[Run], topology: Topology | None = None, requests: int = 30_000, seed: int = 1,
                    progress: Progress | None = None) -> NetworkHopFit:
    """Fit the client <-> entry hop of the runs' topology (all runs must name the same one) from their baselines."""
    report_progress = progress or (lambda _m: None)
    chosen = baseline_runs_for_hop(runs)
    if not chosen:
        raise MeshsimError(f"no baseline run with one connection, a rate and at least {MIN_REQUESTS} requests")
    names = sorted({r.manifest.setup.topology for r in chosen})
    if len(names) > 1 and topology is None:
        raise MeshsimError(f"baseline runs of several topologies ({', '.join(names)}): one hop fit per topology")
    targets, key, name = [], "", ""
    for run in chosen:
        topo = run_topology(run, topology)
        key, name = hop_key(topo), topo.name
        report_progress(f"simulating {run.id} with the {key} hop at zero (the known parts of its latency)")
        known = simulate_baseline(with_hop(topo, key, Deterministic(0.0)), run, requests, seed)
        target = target_of(run, known)
        if float(np.median(known)) >= target.values_s[0]:
            raise MeshsimError(f"the {key} hop of topology {name!r} is not identified by {run.id}: the topology's "
                               f"other parts alone (client, kernel, app) take {np.median(known) * 1e3:.3f} ms at "
                               f"p50, the run {target.values_s[0] * 1e3:.3f} ms: the topology does not describe it")
        targets.append(target)
    report_progress(f"fitting the {key} hop of {name} to p50..p{100 * max(max(t.probs) for t in targets):g} of "
        f"{len(targets)} baseline runs")
    fitted = fit_stall_hop(targets)
    if fitted.rms_log_residual > MAX_RMS_LOG_RESIDUAL:
        raise MeshsimError(f"the {key} hop of topology {name!r} misses the runs' percentiles by "
                           f"{100 * fitted.rms_log_residual:.0f} % (rms of log errors): the topology's other parts "
                           "do not describe these runs")
    out = NetworkHopFit(name, key, fitted, tuple(r.id for r in chosen))
    try:  # what is written must load: the spec's bounds (cv <= 100, ...) hold for the fitted hop too
        parse_distribution(out.spec(), f"calibration.network_hop ({key} of {name})")
    except ModelError as exc:
        raise MeshsimError(f"the fitted hop is outside the model's bounds: {exc}") from None
    return out
