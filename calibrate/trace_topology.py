"""Traces to a topology: ``meshsim topology from-traces FILE... --out topo.yaml``.

Reads the exports (:mod:`meshsim.calibrate.measure.trace_readers`), builds the invocation trees
(:mod:`~meshsim.calibrate.measure.trace_calls`) and each service's call pattern
(:mod:`~meshsim.calibrate.measure.trace_patterns`), fits every service's own time with the project's
maximum-likelihood fit (:func:`meshsim.calibrate.fit.mle.fit_best`, chosen by AIC, refused when no family fits) and
writes a ``meshsim/topology/v1`` file whose every number names the trace files and the span counts it came from.
The file is parsed with the simulator's own loader before it is written.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence

import numpy as np
import yaml

from meshsim.calibrate.fit.acceptance import FitRefused
from meshsim.calibrate.fit.families import Family, candidates
from meshsim.calibrate.fit.mle import fit_best
from meshsim.calibrate.fit.model_file import four_digits
from meshsim.calibrate.fit.observations import from_samples
from meshsim.calibrate.measure.trace_calls import Invocation, TraceSet, trace_set
from meshsim.calibrate.measure.trace_patterns import CallPattern, call_pattern
from meshsim.calibrate.measure.trace_readers import TraceFile, read_trace_file
from meshsim.calibrate.trace_cpu import CallCpu, traces_window
from meshsim.distribution_spec import spec_with_meta
from meshsim.errors import ModelError
from meshsim.outputs import write_file
from meshsim.topology import Call, Service, callees_first, topology_from_data

MIN_FIT_SAMPLES = 30  # fewer own times than this are written as they are (an empirical distribution), not fitted
EMPIRICAL_POINTS = 200  # quantiles written when no family fits
BUSY_NOTE = 0.3  # a service whose own time, booked as CPU, keeps its core this busy at the traced rate gets a note
RESOLUTION_S = 0.5e-6  # own times of 0 (below the exporters' microsecond resolution) count as half a microsecond
ASSUMED_NETWORK = {  # used only when the traces hold too few client/server pairs to measure the hop
    "loopback": {"family": "lognormal", "median_ms": 0.015, "sigma": 0.3},
    "same_node": {"family": "lognormal", "median_ms": 0.04, "sigma": 0.3},
    "cross_node": {"family": "lognormal", "median_ms": 0.08, "sigma": 0.3},
}


class CpuSource(Protocol):
    """Where each service's CPU per call comes from (calibrate/trace_cpu.py: given, or read from Prometheus)."""

    def read(self, calls_per_s: Mapping[str, float], roots: Sequence[Invocation]
             ) -> tuple[dict[str, CallCpu], list[str]]: ...


@dataclass(frozen=True)
class DerivedTopology:
    """The written topology's data and what the traces said on the way (repairs, proxies, the entry rate)."""

    data: dict[str, Any]
    files: tuple[TraceFile, ...]
    traces: TraceSet
    patterns: tuple[CallPattern, ...]
    entry_rps: float | None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def summary(self) -> str:
        t = self.traces
        lines = [f"{len(self.files)} file(s): " + ", ".join(f"{f.path} ({f.format}, {len(f.spans)} spans)"
                                                            for f in self.files),
                 f"{len(t.roots)} traces used, entry {self.data['entry']}, {len(self.patterns)} services"]
        for p in self.patterns:
            calls = ", ".join(f"{k} x{v:.3g}" for k, v in p.calls_per_request().items()) or "no calls"
            lines.append(f"  {p.service}: {p.invocations} invocations; calls per invocation: {calls}")
        if t.proxy_spans:
            passes = ", ".join(f"{n} {side}" for side, n in sorted(t.proxy_spans.items()))
            lines.append(f"sidecar spans counted as proxy passes, not services: {passes} "
                         f"({sum(t.proxy_spans.values()) / max(len(t.roots), 1):.3g} per trace)")
        lines += [f"repaired: {r}" for r in [*(r for f in self.files for r in f.repairs), *t.repairs()]]
        lines += [f"note: {n}" for n in self.notes]
        if self.entry_rps:
            lines.append(f"entry rate seen in the traces: {self.entry_rps:.4g} rps (the topology's entry_rate: "
                         "meshsim predict --topology FILE uses it when --rps is not given)")
        return "\n".join(lines)


def _where(files: Sequence[TraceFile]) -> str:
    return "traces " + ", ".join(f.path for f in files)


def _fitted_spec(samples: np.ndarray, what: str, component: str, families: Sequence[Family]) -> tuple[dict[str, Any], str]:
    """The samples (seconds) as a fitted distribution spec; when no family fits, their quantiles, said in a note."""
    if len(samples) < MIN_FIT_SAMPLES:
        return {"family": "empirical", "values_ms": four_digits([v * 1e3 for v in samples]),
                "source": f"{what}; fewer than {MIN_FIT_SAMPLES}: written as measured, not fitted"}, ""
    low, high = np.quantile(samples, (0.05, 0.95))
    if high <= low * 1.01:  # a constant (a fixed hop): no family has a spread that small, nor needs one
        return {"family": "deterministic", "value_ms": four_digits(np.median(samples) * 1e3),
                "source": f"{what}; 90 % of them within 1 %: written as their median"}, ""
    try:
        best, _ = fit_best(from_samples(samples, component), families, component=component)
    except FitRefused as exc:
        values = np.quantile(samples, (np.arange(EMPIRICAL_POINTS) + 0.5) / EMPIRICAL_POINTS)
        return {"family": "empirical", "values_ms": four_digits([v * 1e3 for v in values]),
                "source": f"{what}; no family fits, written as {EMPIRICAL_POINTS} quantiles"}, \
            f"{component}: no family fits ({exc.message.partition('(')[2].rstrip(')').split(';')[0]}...): " \
            f"written as {EMPIRICAL_POINTS} quantiles"
    source = f"{what}; maximum likelihood, best of {len(families)} families by AIC"
    return four_digits(spec_with_meta(best.distribution, source=source, fit=best.summary())), ""


def _own_time_spec(service: str, invocations: Sequence[Invocation], where: str,
                   families: Sequence[Family]) -> tuple[dict[str, Any], list[str]]:
    own = np.array([inv.own_time() for inv in invocations])
    zeros = int(np.sum(own <= 0))
    what = f"own time (span minus its calls) of {len(own)} {service} spans, {where}"
    spec, note = _fitted_spec(np.maximum(own, RESOLUTION_S), what, service, families)
    notes = [f"{service}: {zeros} own times of 0 counted as {RESOLUTION_S * 1e6:g} us"] if zeros else []
    return spec, notes + ([note] if note else [])


def _split_own_time(service: str, invocations: Sequence[Invocation], where: str, families: Sequence[Family],
                    cpu: CallCpu) -> tuple[list[dict[str, Any]], list[str]]:
    """A service whose CPU per call is known: that CPU held on a core, the rest of its own time a delay."""
    own = np.array([inv.own_time() for inv in invocations])
    wait = np.maximum(own - cpu.seconds, RESOLUTION_S)
    what = (f"own time (span minus its calls) of {len(own)} {service} spans less its CPU per call "
            f"({cpu.seconds * 1e3:.4g} ms), {where}")
    delay, note = _fitted_spec(wait, what, f"{service} waiting", families)
    notes = [note] if note else []
    median = float(np.median(own))
    if cpu.seconds > median:
        notes.append(f"{service}: CPU per call {cpu.seconds * 1e3:.4g} ms is above its median own time "
                     f"{median * 1e3:.4g} ms in the traces (a CPU window that does not match the traces, or work off "
                     "the traced path): its waiting is 0 for most calls")
    compute = {"family": "deterministic", "value_ms": four_digits(cpu.seconds * 1e3), "source": cpu.source}
    return [{"compute": compute}, {"delay": delay}], notes


def _busy_note(service: str, invocations: Sequence[Invocation], calls_per_s: float) -> list[str]:
    """Own time booked as CPU: a note when that keeps the service's one core busy at the traced rate."""
    busy = calls_per_s * float(np.mean([inv.own_time() for inv in invocations]))
    if busy < BUSY_NOTE:
        return []
    return [f"{service}: its own time is booked as CPU on 1 core, {100 * busy:.0f} % busy at the traced rate; if "
            "it waits (I/O, locks, calls no span shows), give its CPU per call (--cpu-ms or --cpu-from-prometheus)"]


def _median_bytes(values: Sequence[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return int(statistics.median(present)) if present else None


def _service_data(pattern: CallPattern, invocations: Sequence[Invocation], where: str,
                  families: Sequence[Family], cpu: CallCpu | None, calls_per_s: float
                  ) -> tuple[dict[str, Any], list[str]]:
    if cpu is None:
        compute, notes = _own_time_spec(pattern.service, invocations, where, families)
        own_steps = [{"compute": compute}]
        notes += _busy_note(pattern.service, invocations, calls_per_s)
    else:
        own_steps, notes = _split_own_time(pattern.service, invocations, where, families, cpu)
    data: dict[str, Any] = {"replicas": 1, "cores": 1}
    sizes = []
    for key in ("request_bytes", "response_bytes"):
        value = _median_bytes([getattr(inv, key) for inv in invocations])
        if value is not None:
            data[key] = value
            sizes.append(f"{key} the median of the {sum(getattr(i, key) is not None for i in invocations)} spans "
                         "carrying it")
    data["handler"] = [*own_steps, *pattern.steps]
    data["source"] = (f"{where}: {pattern.invocations} {pattern.service} invocations; "
                      + "; ".join(sizes + ["replicas and cores are not in traces: 1 each, set them from the "
                                           "deployment"]))
    return data, notes


def _network(traces: TraceSet, where: str, families: Sequence[Family]) -> tuple[dict[str, Any], list[str]]:
    gaps = np.array([g for g in traces.network_gaps if g > 0])
    network: dict[str, Any] = {k: dict(v) for k, v in ASSUMED_NETWORK.items()}
    source = "assumption: loopback and same-node hops as in the shipped topologies; bandwidth 10 Gbit/s"
    if len(gaps) < MIN_FIT_SAMPLES:
        return {**network, "bandwidth_gbps": 10, "source": source + f"; cross_node too (only {len(gaps)} "
                "client/server span pairs in the traces)"}, []
    what = f"{where}: half of (client span - server span) of {len(gaps)} calls"
    network["cross_node"], note = _fitted_spec(gaps, what, "network hop", families)
    return {**network, "bandwidth_gbps": 10, "source": source}, [note] if note else []


def _entry_rate(roots: Sequence[Invocation]) -> float | None:
    starts = sorted(r.start for r in roots)
    return (len(starts) - 1) / (starts[-1] - starts[0]) if len(starts) > 1 and starts[-1] > starts[0] else None


def _check_acyclic(patterns: Sequence[CallPattern], where: str) -> None:
    services = {p.service: Service(p.service, tuple(Call(c) for c, _ in p.edges)) for p in patterns}
    callees_first(services, where)  # a ModelError naming the cycle


def _sidecar_own_time_note(by_service: Mapping[str, Sequence[Invocation]]) -> list[str]:
    """Services known only by their inbound sidecar's spans: their own time holds that sidecar's passes too."""
    fronted = sorted(s for s, invs in by_service.items() if any(inv.via_sidecar for inv in invs))
    if not fronted:
        return []
    return [f"{len(fronted)} service(s) without spans of their own ({', '.join(fronted)}): their own time is their "
            "inbound sidecar's span, so it holds that sidecar's passes, which a prediction with a sidecar mesh adds "
            "again"]


def _calls_per_s(by_service: Mapping[str, Sequence[Invocation]], roots: Sequence[Invocation]) -> dict[str, float]:
    """Each service's calls per second over the traces' span (the first trace's start to the last one's end)."""
    first, last = traces_window(roots)
    span = last - first
    return {s: len(invs) / span if span > 0 else 0.0 for s, invs in by_service.items()}


def derive_topology(paths: Sequence[str | Path], name: str, families: Sequence[Family] | None = None,
                    cpu: CpuSource | None = None) -> DerivedTopology:
    """Read the trace files and derive the topology (nothing written); ``families``: the candidates fitted;
    ``cpu``: where each service's CPU per call comes from (without it, its own time is booked as CPU)."""
    families = tuple(families or candidates(mixtures=False))
    files = tuple(read_trace_file(p) for p in paths)
    where = _where(files)
    traces = trace_set(s for f in files for s in f.spans)
    if not traces.roots:
        why = "; ".join(traces.repairs()) or "no spans"
        raise ModelError(f"{where}: no usable trace ({why})")
    by_service: dict[str, list[Invocation]] = defaultdict(list)
    for inv in traces.invocations():
        by_service[inv.service].append(inv)
    patterns = tuple(call_pattern(s, invs, where) for s, invs in sorted(by_service.items()))
    _check_acyclic(patterns, where)
    entries = Counter(r.service for r in traces.roots)
    entry, entry_count = entries.most_common(1)[0]
    notes = [n for p in patterns for n in p.deviations()]
    if entry_count < len(traces.roots):
        notes.append(f"{len(traces.roots) - entry_count} of {len(traces.roots)} traces start at another service "
                     f"than {entry} (their services are modelled, the entry is {entry})")
    notes += _sidecar_own_time_note(by_service)
    rates = _calls_per_s(by_service, traces.roots)
    known, cpu_notes = cpu.read(rates, traces.roots) if cpu is not None else ({}, [])
    notes += cpu_notes
    services = {}
    for p in patterns:
        services[p.service], service_notes = _service_data(p, by_service[p.service], where, families,
                                                           known.get(p.service), rates[p.service])
        notes += service_notes
    network, network_notes = _network(traces, where, families)
    rate = _entry_rate([r for r in traces.roots if r.service == entry])
    # meshsim predict uses the entry rate when --rps is not given
    entry_rate = {"entry_rate": {"rps": float(f"{rate:.4g}"),
                                 "source": f"{where}: {entry_count} traces rooted at {entry}, counted between the "
                                           "first and the last one's start"}} if rate else {}
    data = {"schema": "meshsim/topology/v1", "name": name,
            "description": f"derived by meshsim topology from-traces from {len(traces.roots)} traces",
            "source": f"{where} ({traces.spans} spans, {len(traces.roots)} traces used)",
            "entry": entry, **entry_rate, "network": network, "services": services}
    topology_from_data(data, where)  # the simulator's own check, before anything is written
    return DerivedTopology(data, files, traces, patterns, rate, tuple(notes + network_notes))


def write_topology(derived: DerivedTopology, out: str | Path) -> Path:
    text = yaml.safe_dump(derived.data, sort_keys=False, allow_unicode=True, width=110)
    return write_file(Path(out), text, "out", parents=True)
