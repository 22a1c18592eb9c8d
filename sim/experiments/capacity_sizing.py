"""``find_size``: what size meets an SLO at a target rate (``meshsim capacity --target-rps R --size KIND``).

**Replicas** grow where the load is limited, not everywhere: from the topology's own replica counts, the service
that the prediction at the target rate reports as its bottleneck (its app or its sidecar, the busiest instance)
grows to the fewest replicas at which the SLO is met or another service becomes the bottleneck (doubling, then
bisection); that repeats while the SLO is missed. A last pass takes a replica back from each grown service while the
SLO still holds, so one replica less on any grown service misses it. A bottleneck that replicas cannot relieve (the
client's sidecar, a central proxy load balancer, a collector) is refused with its name.

**Proxy CPU and proxy workers** are one number for every proxy: the smallest that meets the SLO, by doubling until
met, then bisection between the last miss and the first hit.

Every size is judged by the mean of the replications' percentiles at the target rate, with the same seeds at every
size (common random numbers), then the capacity at the size found is :func:`find_capacity`'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from meshsim.capacity_slo import SizingQuestion, Slo
from meshsim.catalog import load_mesh, load_topology
from meshsim.errors import FieldError
from meshsim.progress import Progress
from meshsim.request import PredictOptions, build_request
from meshsim.sim.experiments.capacity_search import Capacity, CapacityInterrupted, check_counts, find_capacity
from meshsim.sim.engine_choice import load_compiled_engine
from meshsim.sim.experiments.predict import (NODE_PREFIX, check_request, predict_options,
                                 uses_compiled_engine)

Replicas = dict[str, int]


@dataclass(frozen=True)
class Trial:
    """One size judged at the target rate."""

    label: str  # e.g. "replicas s1=3 s2=1" or "proxy-cpu 0.5"
    met: bool
    bottleneck: str


@dataclass
class Trials:
    """The sizes judged so far (what an interrupt reports), each simulated once."""

    options: PredictOptions
    slo: Slo
    question: SizingQuestion
    replications: int
    progress: Progress | None = None
    seen: dict[str, Trial] = field(default_factory=dict)

    def judge(self, label: str, sized: PredictOptions) -> Trial:
        if label not in self.seen:
            prediction = predict_options(sized.with_changes(rps=self.question.target_rps, precision=None,
                                                            replications=self.replications, saturation=False))
            met = not prediction.saturated and self.slo.met({k: e.value for k, e in prediction.latency.items()})
            self.seen[label] = Trial(label, met, prediction.bottleneck)
            if self.progress:
                verdict = "meets" if met else "misses"
                self.progress(f"{label}: {verdict} the SLO at {self.question.target_rps:g} rps (bottleneck "
                              f"{prediction.bottleneck})")
        return self.seen[label]

    def summary(self) -> list[str]:
        met = [t.label for t in self.seen.values() if t.met]
        missed = [t.label for t in self.seen.values() if not t.met]
        return [f"interrupted after {len(self.seen)} sizes judged at {self.question.target_rps:g} rps",
                f"missed the SLO: {', '.join(missed) or '-'}", f"met the SLO: {', '.join(met) or '-'}"]


def with_replicas(options: PredictOptions, replicas: Mapping[str, int]) -> PredictOptions:
    """The options with these services at these replica counts (the others as the topology has them)."""
    topology = load_topology(options.topology)
    unknown = sorted(set(replicas) - set(topology.services))
    if unknown:
        raise FieldError("replicas", f"no service {unknown[0]!r} in topology {topology.name!r}")
    services = {n: replace(s, replicas=int(replicas.get(n, s.replicas))) for n, s in topology.services.items()}
    tag = ",".join(f"{n}={services[n].replicas}" for n in sorted(services))
    return options.with_changes(topology=replace(topology, services=services,
                                                 content_hash=f"{topology.content_hash}+replicas[{tag}]"))


def with_proxy_size(options: PredictOptions, kind: str, value: float) -> PredictOptions:
    """The options with every proxy at ``value`` cores (proxy-cpu) or worker threads (proxy-workers)."""
    mesh = load_mesh(options.mesh)
    if mesh.proxy is None:
        raise FieldError("size", f"{kind} needs a mesh with proxies (mesh {mesh.name!r} has none)")
    if kind == "proxy-cpu":
        return options.with_changes(proxy_cpu_limit=float(value))
    return options.with_changes(proxy_workers=int(value))


def replicas_label(replicas: Mapping[str, int]) -> str:
    return "replicas " + " ".join(f"{n}={k}" for n, k in replicas.items())


def service_of(component: str, services: Mapping[str, Any]) -> str | None:
    """The service whose replicas carry ``component`` (``svc/app``, ``svc/sidecar``), else None."""
    name, sep, part = component.partition("/")
    return name if sep and part in ("app", "sidecar") and name in services else None


def size_replicas(trials: Trials) -> Replicas:
    """The fewest replicas of the limiting services that meet the SLO at the target rate (module docstring)."""
    start: Replicas = {n: s.replicas for n, s in load_topology(trials.options.topology).services.items()}
    counts = dict(start)

    def judge(replicas: Replicas) -> Trial:
        return trials.judge(replicas_label(replicas), with_replicas(trials.options, replicas))

    trial = judge(counts)
    while not trial.met:
        service = service_of(trial.bottleneck, counts)
        if service is None and trial.bottleneck.startswith(NODE_PREFIX):
            raise FieldError("target_rps", f"{trials.question.target_rps:g} rps misses the SLO and its bottleneck "
                                           f"is {trial.bottleneck}, the cores everything placed there shares: "
                                           "replicas placed on the same node do not relieve it (give the node more "
                                           "cores, or spread the services over more nodes: `nodes:` in the "
                                           "topology)")
        if service is None:
            raise FieldError("target_rps", f"{trials.question.target_rps:g} rps misses the SLO and its bottleneck "
                                           f"{trial.bottleneck} is not a service's app or sidecar: more replicas "
                                           "do not relieve it")
        counts, trial = _grow(judge, counts, service, trials.question)
    for service in [n for n in counts if counts[n] > start[n]]:  # one replica less on a grown service must miss
        while counts[service] > start[service] and judge({**counts, service: counts[service] - 1}).met:
            counts = {**counts, service: counts[service] - 1}
    return counts


def _grow(judge: Callable[[Replicas], Trial], counts: Replicas, service: str,
          question: SizingQuestion) -> tuple[Replicas, Trial]:
    """``service`` at the fewest replicas above its count where the SLO is met or the bottleneck moves elsewhere."""
    def done(trial: Trial) -> bool:
        return trial.met or service_of(trial.bottleneck, counts) != service

    low, step = counts[service], 1  # low: known not done
    if low >= question.maximum:
        raise FieldError("target_rps", f"{question.target_rps:g} rps misses the SLO with {low} replicas of {service},"
                                       f" already at the search's maximum ({question.maximum:g})")
    while True:
        high = min(counts[service] + step, int(question.maximum))
        trial = judge({**counts, service: high})
        if done(trial):
            break
        if high >= question.maximum:
            raise FieldError("target_rps", f"{question.target_rps:g} rps misses the SLO even with {high} replicas "
                                           f"of {service} (the search's maximum)")
        low, step = high, 2 * step
    while high - low > 1:
        mid = (low + high) // 2
        found = judge({**counts, service: mid})
        if done(found):
            high, trial = mid, found
        else:
            low = mid
    return {**counts, service: high}, trial


def size_proxy(trials: Trials) -> float:
    """The smallest proxy CPU limit (in steps of ``cpu_step`` cores) or worker count that meets the SLO."""
    question = trials.question
    step = question.cpu_step if question.kind == "proxy-cpu" else 1.0
    low, high = 0.0, (0.25 if question.kind == "proxy-cpu" else 1.0)  # low: known to miss (0: nothing)

    def met(value: float) -> bool:
        return trials.judge(f"{question.kind} {value:g}", with_proxy_size(trials.options, question.kind, value)).met

    while not met(high):
        if high >= question.maximum:
            raise FieldError("target_rps", f"{question.target_rps:g} rps misses the SLO even with {question.kind} "
                                           f"{high:g} (the search's maximum): the bottleneck is elsewhere")
        low, high = high, min(2 * high, question.maximum)
    while high - low > step * 1.0001:
        mid = low + step * max(1, math.floor((high - low) / step / 2))
        if met(mid):
            high = mid
        else:
            low = mid
    return high


def find_size(options: PredictOptions, slo: Slo, question: SizingQuestion, replications: int = 3,
              processes: int = 1, progress: Progress | None = None) -> Capacity:
    """The smallest size meeting ``slo`` at ``question.target_rps``, and the capacity at that size.

    An interrupt raises :class:`CapacityInterrupted` with the sizes judged so far."""
    check_counts(replications, processes)
    if question.kind != "replicas":
        with_proxy_size(options, question.kind, 1)  # refuse a size the mesh has no place for before simulating
    at_target = build_request(options.with_changes(rps=question.target_rps, precision=None,
                                                   replications=replications, saturation=False))
    try:
        check_request(at_target)  # the target rate's own cost, refused before any size is judged
    except FieldError as exc:
        raise FieldError("target_rps" if exc.field == "rps" else exc.field, exc.problem) from None
    if uses_compiled_engine([at_target]):
        load_compiled_engine(progress)  # said and done once, before the first size is judged
    trials = Trials(options, slo, question, replications, progress)
    try:
        if question.kind == "replicas":
            replicas = size_replicas(trials)
            start = load_topology(options.topology).services
            sized = with_replicas(options, replicas)
            size: dict[str, Any] = {"kind": "replicas", "replicas": replicas,
                                    "grown": [n for n, k in replicas.items() if k > start[n].replicas]}
        else:
            value = size_proxy(trials)
            sized, size = with_proxy_size(options, question.kind, value), {"kind": question.kind,
                                                                              "value": round(value, 4)}
    except KeyboardInterrupt:
        raise CapacityInterrupted(trials.summary()) from None
    size["target_rps"] = question.target_rps
    if progress:
        progress(f"{_label(size)} meets the SLO at {question.target_rps:g} rps; its capacity:")
    try:
        capacity = find_capacity(sized, slo, replications, processes, progress)
    except CapacityInterrupted as exc:
        raise CapacityInterrupted([f"sized: {_label(size)} meets the SLO at {question.target_rps:g} rps",
                                   *exc.done]) from None
    return replace(capacity, size=size)


def _label(size: Mapping[str, Any]) -> str:
    return replicas_label(size["replicas"]) if size["kind"] == "replicas" else f"{size['kind']} {size['value']:g}"
