"""``predict``: the library function behind ``meshsim predict`` and the Dash app.

Runs independent replications of a scenario (in parallel processes, seeds from one SeedSequence), until the p99's
95 % confidence half-width is within ``precision`` of p99 (or a fixed count), then finds the saturation rate: the
offered rate at which the bottleneck's utilisation reaches 1 (for Envoy, the busiest pinned worker's; for a node,
the share of its cores that everything placed on it books).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from meshsim import __version__
from meshsim.distributions import MS
from meshsim.errors import FieldError
from meshsim.mesh import MeshModel
from meshsim.progress import Progress
from meshsim.request import PredictOptions, PredictRequest, build_request
from meshsim.scenario import Scenario
from meshsim.topology import Topology
from meshsim.workload import Load, RunSettings, Workload
from meshsim.sim.experiments.run_cost import ENGINE_SPEEDS, CostEstimate, check_budget, time_left_for_another_batch
from meshsim.sim.engine.replication_result import BREAKDOWN_KEYS, Horizon, ReplicationResult
from meshsim.sim.engine_choice import EngineChoice, choose_engine, compiled_code_cached, load_compiled_engine
from meshsim.sim.experiments.replication_workers import ReplicationRunner
from meshsim.sim.experiments.saturation_search import ProbeClock, fell_behind, find_saturation, unstable as _unstable
from meshsim.sim.experiments.latency_estimates import expected_arrivals, latency_estimates, latency_interval
from meshsim.sim.experiments.stats import MIN_CONTROLLED, Estimate, latency_summary, pooled_cdf, t_interval
from meshsim.sim.experiments.proxy_latency import proxy_latency
from meshsim.sim.experiments.transient_cut import TransientCut, cut_for, start_kept
from meshsim.sim.engine.window_series import TimeSeries, combine, window_for

ENGINE = "simpy-fcfs/1"


@dataclass(frozen=True)
class Prediction:
    latency: dict[str, Estimate]  # seconds
    achieved_rps: Estimate
    cpu_cores: dict[str, float]
    utilization: dict[str, float]
    memory_mb: dict[str, float]
    bottleneck: str
    saturation_rps: float
    saturated: bool
    in_flight: float
    replications: int
    requests: int
    cdf_levels: list[float]
    cdf_seconds: list[float]
    inputs: dict[str, Any]
    warnings: tuple[str, ...] = ()
    wall_s: float = 0.0
    breakdown: dict[str, float] = field(default_factory=dict)  # mechanism -> mean seconds per request
    # component -> mean requests held by one of its proxies (the in-flight part of memory_mb; Little's law)
    proxy_in_flight: dict[str, float] = field(default_factory=dict)
    # bytes between pods per request: "request" and "response" over all calls, "entry_request" the request the
    # entry service receives (mesh headers included): the packet sizes a capture compares with and without a mesh
    wire_bytes: dict[str, float] = field(default_factory=dict)
    # component -> cores its proxies use with no traffic at all (proxy.idle_cores x instances; in cpu_cores too)
    idle_cores: dict[str, float] = field(default_factory=dict)
    timeseries: TimeSeries | None = None  # latency, rate and CPU per window (a rate profile, or --timeseries)
    transient: TransientCut | None = None  # what the latencies leave out at each replication's start
    # "COMPONENT VIEW" -> p50/p90/p99/mean of the latency that proxy itself records (sim/experiments/proxy_latency.py)
    proxy_latency: dict[str, dict[str, Estimate]] = field(default_factory=dict)
    # component -> seconds per request its jobs waited for the node's cores or the CPU quota (the kernel's run queue)
    cpu_wait: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        def ms(x: float) -> float | None:
            return None if not math.isfinite(x) else round(x / MS, 6)

        return {
            "latency_ms": {k: ms(e.value) for k, e in self.latency.items()},
            "latency_ci95_ms": {k: [ms(e.lo), ms(e.hi)] for k, e in self.latency.items()},
            "proxy_latency_ms": {view: {k: ms(e.value) for k, e in estimates.items()}
                                 for view, estimates in self.proxy_latency.items()},
            "proxy_latency_ci95_ms": {view: {k: [ms(e.lo), ms(e.hi)] for k, e in estimates.items()}
                                      for view, estimates in self.proxy_latency.items()},
            "achieved_rps": round(self.achieved_rps.value, 3),
            "achieved_rps_ci95": [round(self.achieved_rps.lo, 3), round(self.achieved_rps.hi, 3)]
            if math.isfinite(self.achieved_rps.lo) else None,
            "cpu_cores": {k: round(v, 4) for k, v in self.cpu_cores.items()},
            "utilization": {k: round(v, 4) for k, v in self.utilization.items()},
            "memory_mb": {k: round(v, 2) for k, v in self.memory_mb.items()},
            "proxy_in_flight": {k: round(v, 4) for k, v in self.proxy_in_flight.items()},
            "bottleneck": self.bottleneck,
            "saturation_rps": round(self.saturation_rps, 1) if math.isfinite(self.saturation_rps) else None,
            "saturated": self.saturated,
            "in_flight": self.in_flight,
            "replications": self.replications,
            "requests": self.requests,
            "latency_cdf_ms": {"q": self.cdf_levels, "ms": [ms(v) for v in self.cdf_seconds]},
            "time_breakdown_ms": {k: round(v / MS, 6) for k, v in self.breakdown.items()},
            "wire_bytes_per_request": {k: round(v, 2) for k, v in self.wire_bytes.items()},
            "idle_cores": {k: round(v, 6) for k, v in self.idle_cores.items()},
            "cpu_wait_ms_per_request": {k: round(v / MS, 6) for k, v in self.cpu_wait.items()},
            "timeseries": self.timeseries.to_dict() if self.timeseries is not None else None,
            "warmup": self.transient.to_dict() if self.transient is not None else None,
            "warnings": list(self.warnings),
            "wall_s": round(self.wall_s, 3),
            "inputs": self.inputs,
        }


# -- the public entry point ----------------------------------------------------------------------------------------

def predict(topology: str | Path | Topology = "chain3", mesh: str | Path | MeshModel = "istio", *,
            progress: Progress | None = None, **options: Any) -> Prediction:
    """Convenience over :func:`run_prediction`: ``options`` are the fields of :class:`PredictOptions`.

    Every front end may instead build :class:`PredictOptions` itself and call :func:`predict_options`, or build the
    typed :class:`PredictRequest` with :func:`meshsim.request.build_request` and call :func:`run_prediction`.
    """
    try:
        chosen = PredictOptions(topology=topology, mesh=mesh, **options)
    except TypeError as exc:  # a misspelt option: say which (a programming error, not a user error)
        raise TypeError(f"predict(): {exc}") from None
    return predict_options(chosen, progress)


def predict_options(options: PredictOptions, progress: Progress | None = None) -> Prediction:
    """Build the request from ``options`` (validated once) and run it."""
    return run_prediction(build_request(options), progress)


# -- replications --------------------------------------------------------------------------------------------------

def horizon_for(load: Load, settings: RunSettings) -> Horizon:
    rate = load.rps
    duration = settings.duration_s
    # A rate profile is the run: its length is the default duration, and none of it is cut as warm-up (its start is
    # part of what was asked for); the cost budget still guards a long one (check_budget names `profile`).
    profile_length = load.profile.length_s if load.profile is not None else None
    if duration is None:
        duration = profile_length if profile_length is not None else \
            max(settings.requests_per_replication / rate, 1.0) if math.isfinite(rate) and rate > 0 else 60.0
    warmup = settings.warmup_s
    if warmup is None:
        # Measured from the start: the transient is cut after the run (sim/experiments/transient_cut.py). A run that keeps its
        # start as before: a load cuts its own share (fortio none: it reports every call it made; others 10 %) and
        # a profile is the run.
        keeps_start = start_kept(load, settings) is not None
        warmup = load.default_warmup_share * duration if keeps_start and profile_length is None else 0.0
    if warmup >= duration:
        raise FieldError("warmup_s", f"{warmup:g} s must be shorter than the run ({duration:g} s, duration_s)")
    return Horizon(duration, warmup, settings.drain_s, window_for(load, settings.timeseries_s, duration - warmup))


def check_request(request: PredictRequest) -> tuple[Horizon, CostEstimate]:
    """Everything :func:`run_prediction` refuses before it simulates (settings, warm-up, cost budget, a run that
    measures nothing), as FieldErrors naming the option: sweeps, capacity searches and factorial designs call it
    for their points before any worker starts."""
    settings = request.settings
    settings.validate()
    horizon = horizon_for(request.workload.load, settings)
    return horizon, check_budget(request.scenario, request.workload, settings, horizon, settings.max_events)


def run_prediction(request: PredictRequest, progress: Progress | None = None) -> Prediction:
    """Run replications of the request until its precision target (or fixed count), then summarise."""
    scenario, workload, settings = request.scenario, request.workload, request.settings
    started = time.perf_counter()
    horizon, cost = check_request(request)
    choice = choose_engine(settings.engine, scenario, workload, series=bool(horizon.series_s))
    if progress and choice.fallback:
        progress(choice.fallback)
    if choice.name == "fast" and not compiled_code_cached():
        load_compiled_engine(progress)
        started = time.perf_counter()  # the one-off compile is not the prediction's time: --time-limit starts now
    processes = settings.processes or _default_processes(choice, cost.events, settings.replications is None)
    plan = cost.plan(ENGINE_SPEEDS[choice.name], choice.name, processes, settings)
    if progress and plan:
        progress(plan)
    target = settings.replications
    first = target if target is not None else max(settings.min_replications, processes)
    runner = ReplicationRunner((scenario, workload, horizon, settings.seed, choice.name), min(processes, first))
    def cut_of(results: list[ReplicationResult]) -> TransientCut:
        return cut_for(workload.load, settings, horizon.warmup, results)

    try:
        results, limited = _replications(runner, settings, (first, processes), started, progress,
                                         expected_arrivals(workload.load, horizon), cut_of)
    except BaseException:
        runner.close(interrupted=True)  # an interrupt must not wait for the replications running in the workers
        raise
    runner.close()
    # how much slower than the cost model the replications ran (a busy or slow machine): the search's probes too
    model_s = replace(cost, replications=len(results)).seconds(ENGINE_SPEEDS[choice.name], processes)
    pace = max(1.0, (time.perf_counter() - started) / model_s) if model_s > 0 else 1.0
    prediction = _summarise(request, horizon, results, started, progress, choice, cut_of(results), pace)
    return replace(prediction, warnings=prediction.warnings + (limited,)) if limited else prediction


def _replications(runner: ReplicationRunner, settings: RunSettings, counts: tuple[int, int], started: float,
                  progress: Progress | None, expected: float | None,
                  cut_of: Callable[[list[ReplicationResult]], TransientCut]) -> tuple[list[ReplicationResult], str]:
    """Batches of replications (``counts``: the first batch's and the processes') until the p99's precision (or
    the fixed count, or a limit); returns them and the warning when the time limit stopped them. The batches and the
    rule are the same whether the workers run ahead or not: the results are too. The p99s are those of the latencies
    ``cut_of`` the replications so far keeps (a transient cut from them jointly moves with each batch)."""
    target = settings.replications
    results: list[ReplicationResult] = []
    p99s: list[float] = []  # each replication's p99 after the cut, in order
    (batch, processes), batch_started, cut_before = counts, started, -1
    while True:
        after = settings.max_replications - len(results) - batch
        ahead = min(processes, after) if target is None and settings.precision is not None and after > 0 else 0
        done = runner.batch(len(results), batch, ahead)
        results.extend(done)
        cut = cut_of(results)
        if cut.requests != cut_before:  # a new cut: every p99 again (most batches leave it where it was)
            p99s, cut_before = [], cut.requests
        p99s.extend(latency_summary(cut.kept(r))["p99"] for r in results[len(p99s):])
        now = time.perf_counter()
        p99 = latency_interval("p99", p99s, [cut.kept(r) for r in results], results, expected, cut.steady_state)
        rel = p99.half_width / p99.value if p99.value > 0 and math.isfinite(p99.half_width) else float("nan")
        if progress:
            progress(f"{len(results)} replications, " + (f"p99 {p99.value / MS:.3f} ms +- {rel * 100:.1f} %"
                     if math.isfinite(p99.value) else "no request completed in the window yet"))
        if target is not None or settings.precision is None:
            return results, ""
        if (math.isfinite(rel) and rel <= settings.precision) or len(results) >= settings.max_replications:
            return results, ""
        if _unstable(results):
            return results, ""  # percentiles of an overloaded open system grow with run length: more runs do not help
        # a batch lasts from the end of the one before (the workers run it while the rule looks at that one)
        if not time_left_for_another_batch(now - started, now - batch_started, settings.time_limit_s):
            return results, (f"time limit {settings.time_limit_s:g} s reached after {len(results)} replications: "
                             f"p99 known to +-{rel * 100:.1f} % (target {settings.precision * 100:g} %)")
        batch, batch_started = max(1, min(processes, settings.max_replications - len(results))), now


def uses_compiled_engine(requests: Iterable[PredictRequest]) -> bool:
    """Whether any of ``requests`` runs on the compiled engine. Sweeps and capacity searches ask before they fork
    workers: the parent loads the engine once (:func:`load_compiled_engine`) and the workers inherit it, instead of
    each compiling it at once on its first run (a fresh install's first sweep spent its first 100 s so, silently,
    every worker compiling the same code)."""
    for request in requests:
        settings = request.settings
        series = bool(horizon_for(request.workload.load, settings).series_s)
        if choose_engine(settings.engine, request.scenario, request.workload, series=series).name == "fast":
            return True
    return False


def _default_processes(choice: EngineChoice, events: float, until_precise: bool) -> int:
    """The compiled engine runs a replication in tens of milliseconds: for a short run forking workers costs more
    than it saves, so it runs in this process. A long one (above ~1 s of one core, or above ~0.2 s when the p99's
    precision decides the count: near saturation that takes tens of replications) forks the workers after the
    compiled code is loaded, so that they inherit it."""
    cores = min(os.cpu_count() or 1, 8)
    if choice.name != "fast":
        return cores
    if cores == 1 or events < (0.2 if until_precise else 1.0) * ENGINE_SPEEDS["fast"].visits_per_s:
        return 1
    load_compiled_engine()
    return cores


NODE_PREFIX = "node:"  # a node's cores among the components' utilisations (Prediction.utilization, the bottleneck)


def node_utilizations(results: list[ReplicationResult]) -> dict[str, float]:
    """Each declared node's mean utilisation over the replications, keyed ``node:NAME``."""
    names = sorted({n for r in results for n in r.node_utilization})
    return {NODE_PREFIX + n: float(np.mean([r.node_utilization[n] for r in results if n in r.node_utilization]))
            for n in names}


def _summarise(request: PredictRequest, horizon: Horizon, results: list[ReplicationResult], started: float,
               progress: Progress | None, choice: EngineChoice, cut: TransientCut,
               pace: float = 1.0) -> Prediction:
    scenario, workload, settings = request.scenario, request.workload, request.settings
    latency = latency_estimates(results, cut, expected_arrivals(workload.load, horizon))
    achieved = t_interval([r.achieved_rps for r in results]).at_least(0.0)
    components = sorted({c for r in results for c in r.usage})
    cpu = {c: float(np.mean([r.usage[c].cpu_seconds / r.busy_window for r in results if c in r.usage]))
           for c in components}
    util = {c: float(np.mean([r.usage[c].hottest for r in results if c in r.usage])) for c in components}
    util.update(node_utilizations(results))
    memory = {c: float(np.mean([r.usage[c].memory_mb for r in results if c in r.usage]))
              for c in components if any(r.usage[c].memory_mb > 0 for r in results if c in r.usage)}
    held = {c: float(np.mean([r.usage[c].in_flight / max(r.usage[c].instances, 1) for r in results if c in r.usage]))
            for c in memory}
    bottleneck = max(util, key=util.__getitem__) if util else ""
    levels, cdf = pooled_cdf([cut.kept(r) for r in results])
    in_flight = float(np.mean([r.in_flight for r in results]))
    warnings: list[str] = [cut.warning()] if cut.warning() else []
    load = workload.load
    unlike = scenario.cluster_load.unlike(load) if scenario.cluster_load is not None else ""
    if unlike:
        warnings.append(unlike)
    behind = bool(results) and fell_behind(results)  # an open load's answers falling behind what it sends
    saturated = _unstable(results) or (bool(util) and util[bottleneck] >= 0.99) or behind
    shortfall = load.shortfall(achieved.value)
    if shortfall:
        warnings.append(shortfall)
    if behind and util and util[bottleneck] < 0.99:
        growth = float(np.mean([r.backlog_growth for r in results]))
        warnings.append(f"saturated: the answers fall behind the requests sent ({growth:.0f} more sent than "
                        f"answered over a replication's second half), with {bottleneck} the busiest at "
                        f"{util[bottleneck] * 100:.0f} %; with an open load the percentiles grow with the run length")
    elif saturated:
        warnings.append(f"saturated: {bottleneck} is at {util[bottleneck] * 100:.0f} % utilisation; with an open "
                        "load the percentiles grow with the run length")
    saturation = float("nan")
    if settings.saturation_search:
        if progress:
            progress("searching the saturation rate")
        deadline = started + settings.time_limit_s if settings.time_limit_s else math.inf
        clock = ProbeClock(deadline, ENGINE_SPEEDS[choice.name], settings.max_events, pace)
        saturation = find_saturation(scenario, workload, replace(settings, engine=choice.name), results, util,
                                     clock=clock)
        if "budget" in clock.stopped:
            warnings.append(f"the saturation search stopped: {clock.stopped}; its estimate ({saturation:.0f} rps) "
                            "may be off by more than 3 %")
        elif clock.stopped or time.perf_counter() > deadline:
            reason = f" ({clock.stopped})" if clock.stopped else ""
            warnings.append(f"time limit {settings.time_limit_s:g} s reached during the saturation search{reason}: "
                            f"its estimate ({saturation:.0f} rps) may be off by more than 3 %")
    if not results or latency["p99"].value != latency["p99"].value:
        warnings.append("no request completed inside the measurement window")
    if saturated and load.is_open and math.isfinite(saturation) and saturation < load.rps:
        # Past saturation the completions inside a finite window fall with the backlog (bookinfo: 31, 19, 8 rps at
        # 200, 300, 400 offered): what the system can do is its capacity, whatever is offered.
        warnings.append(f"saturated: offered {load.rps:g} rps is above the capacity of {saturation:.0f} rps; "
                        f"achieved rps reports the capacity (the window completed {achieved.value:.0f} rps)")
        achieved = Estimate(saturation, float("nan"), float("nan"))
    inputs = _inputs(scenario, workload, settings, horizon, len(results), choice)
    breakdown = {k: float(np.mean([r.breakdown.get(k, 0.0) for r in results])) for k in BREAKDOWN_KEYS} \
        if results else {}
    wire = {k: float(np.mean([r.wire_bytes.get(k, 0.0) for r in results])) for k in results[0].wire_bytes} \
        if results else {}
    idle = {c: float(np.mean([r.usage[c].idle_cores for r in results if c in r.usage])) for c in components
            if any(r.usage[c].idle_cores > 0 for r in results if c in r.usage)}
    series = combine([r.series for r in results if r.series is not None], load, horizon.series_s) \
        if horizon.series_s and results else None
    return Prediction(latency, achieved, cpu, util, memory, bottleneck, saturation, saturated, in_flight,
                      len(results), int(sum(r.completed for r in results)), levels, cdf, inputs, tuple(warnings),
                      time.perf_counter() - started, breakdown, held, wire, idle, series, cut,
                      proxy_latency(results), _cpu_waits(results, components))


def _cpu_waits(results: list[ReplicationResult], components: list[str]) -> dict[str, float]:
    """Per component: seconds per request started in the window that its jobs waited for cores or a quota."""
    return {c: max(0.0, float(np.mean([r.usage[c].cpu_waited / max(r.started, 1) for r in results if c in r.usage])))
            for c in components}


def _inputs(scenario: Scenario, workload: Workload, settings: RunSettings, horizon: Horizon,
            replications: int, choice: EngineChoice = EngineChoice("simpy")) -> dict[str, Any]:
    load = workload.load
    load_dict = load.described()
    topo, mesh = scenario.topology, scenario.mesh
    expected = expected_arrivals(load, horizon)
    return {
        "meshsim_version": __version__,
        "engine": choice.label,
        **({"engine_fallback": choice.fallback} if choice.fallback else {}),
        "topology": {"name": topo.name, "file": topo.origin, "content_hash": topo.content_hash},
        "mesh": {"name": mesh.name, "file": mesh.origin, "content_hash": mesh.content_hash,
                 "proxy_workers": mesh.proxy.workers if mesh.proxy else None,
                 "proxy_cpu_limit": mesh.proxy.cpu_limit if mesh.proxy else None},
        "features": list(scenario.features),
        "lb": scenario.lb,
        "scope": scenario.scope,
        "cluster": scenario.cluster_source or "the topology's",
        "load": load_dict,
        **({"rps_from": workload.rate_source} if workload.rate_source else {}),
        **({"fortio_from": workload.driving_source} if workload.driving_source else {}),
        "keepalive": workload.keepalive,
        "tls": workload.tls,
        "duration_s": horizon.duration,
        "warmup_s": horizon.warmup,
        "timeseries_s": horizon.series_s,
        "replications": replications,
        "min_replications": settings.min_replications,
        "precision": settings.precision,
        "seed": settings.seed,
        # how the latencies' intervals were made: a control variate once there are enough replications
        "control_variate": None if expected is None else (
            f"requests started in the window (expected {expected:.6g}, Poisson), from {MIN_CONTROLLED} replications"),
    }

