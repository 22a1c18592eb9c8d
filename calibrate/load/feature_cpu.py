"""What a feature costs beyond its latency: a sidecar's CPU after the response, and the span collector's CPU.

A feature's latency increment per pass is fitted from end-to-end latencies, and the simulator books the held part
of it as CPU. Tracing does most of its work where no latency shows it: Envoy finishes and serialises a span after
the response has left, batches spans and posts them to a collector, which parses them on the same host in the
lab. In the lab's Envoy runs with tracing each sidecar burned about three times the CPU per request of a plain one
at the same rate while the latency rose by a few per cent, and the collector burned about as much as one sidecar's
plain cost: a model that books only the latency increment carries a traced chain at almost twice the rate the lab
carries it.

Both come from the runs' CPU clocks, compared run by run with the plain runs of the same setup (same path, rate,
connections and payload), so that the wake-up cost of a low rate is in both and cancels:
- ``features.F.post_response``: each sidecar's CPU per request beyond the plain runs' and beyond what the feature's
  held increment already books (two passes per request), as work after the side's last pass. Only its mean is
  identified by CPU readings, so it is a constant. Where the runs counted their workers' sleeps and these differ
  (a loaded rung beside the one-connection runs), ``feature_wake`` first takes out the feature's CPU per wake.
- ``features.F.collector``: the collector's CPU per request over the spans each request makes (one per sidecar it
  passes), on the node the lab runs every process on. Only the lab's own span counter (``collector``) is read: a
  cluster's collector and the lab's Jaeger (``jaeger``, many threads) run as other processes do.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

import numpy as np

from meshsim.mesh import pass_side

from meshsim.calibrate.fit.decomposition import Decomposition
from meshsim.calibrate.load.feature_wake import PASSES, WakePoint, WakeSplit, split, thinned
from meshsim.calibrate.measure.dataset import Run

# a sidecar's cpu_seconds key -> the side its passes are on
SIDECAR_SIDES = {"server/sidecar": "inbound", "client/sidecar": "outbound"}
COLLECTOR_KEY = "collector"
PATH = "both-sidecars"
SPANS_PER_REQUEST = 2  # both sidecars report one span each per request on the single topology's path
COLLECTOR_WORKERS = 1  # the lab's collector is one Python process: its interpreter lock serves one post at a time
LAB_NODE = "host"  # meshsim.topology.Topology.on_one_host puts every lab process on this node
RATE_MATCH = 0.02  # runs whose achieved rates differ by less than this share are at the same rate
POST_FLOOR_S = 1e-6  # below a microsecond per request is rounding, not work


@dataclass(frozen=True)
class MatchedCpu:
    """CPU per request of one process in a feature's runs and, run by run, in the plain runs of the same setup."""

    key: str
    with_feature_s: list[float]
    plain_s: list[float]
    runs: list[str]
    sleeps: list[float | None] = field(default_factory=list)  # the feature runs' sleeps per request (None: not counted)

    @property
    def extra_s(self) -> float:
        return float(np.mean(self.with_feature_s) - np.mean(self.plain_s))


def _setup(run: Run) -> tuple[int, int]:
    return run.manifest.setup.payload_bytes, run.manifest.load.connections


def _plain_twins(run: Run, plain: Sequence[Run]) -> list[Run]:
    """The plain runs of ``run``'s setup at its rate."""
    rate = run.result.actual_rps
    return [p for p in plain if _setup(p) == _setup(run)
            and abs(p.result.actual_rps - rate) <= RATE_MATCH * max(rate, 1.0)]


def feature_runs(feature: str, runs: Sequence[Run]) -> list[Run]:
    """The runs with ``feature`` alone on the both-sidecars path."""
    return [r for r in runs if r.manifest.setup.path == PATH and r.features == frozenset({feature})]


def matched_cpu(feature: str, runs: Sequence[Run]) -> dict[str, MatchedCpu]:
    """Per process key: the feature's runs' CPU per request beside their plain twins' (both-sidecars path). The
    collector's only from one-connection runs: with more connections its spans queue and a wake serves several
    (``collector_wake`` splits that off)."""
    plain = [r for r in runs if r.manifest.setup.path == PATH and not r.features]
    pairs: dict[str, tuple[list[float], list[float], list[str], list[float | None]]] = \
        defaultdict(lambda: ([], [], [], []))
    for run in feature_runs(feature, runs):
        twins = _plain_twins(run, plain)
        for key in (*SIDECAR_SIDES, COLLECTOR_KEY):
            own = run.cpu_per_request(key)
            base = [c for c in (t.cpu_per_request(key) for t in twins) if c is not None]
            if own is None or (key != COLLECTOR_KEY and not base) or \
                    (key == COLLECTOR_KEY and run.manifest.load.connections != 1):
                continue
            with_f, plain_s, ids, sleeps = pairs[key]
            with_f.append(own)
            sleeps.append(run.sleeps_per_request(key))
            # one plain reading per feature run (its twins' mean), so that a run with more twins weighs no more
            plain_s.append(float(np.mean(base)) if key != COLLECTOR_KEY else 0.0)
            ids.append(run.id)
    return {key: MatchedCpu(key, *lists) for key, lists in pairs.items()}


def feature_increments(decomp: Decomposition) -> dict[str, dict[str, float]]:
    """Each fitted feature's mean latency increment per pass (seconds) on each sidecar side."""
    out: dict[str, dict[str, float]] = {}
    for name, comp in decomp.components.items():
        parts = name.split(".")
        if len(parts) == 3 and parts[0] == "feature":
            mean = float(comp.best.distribution.mean)
            sides = ("inbound", "outbound") if parts[2] == "pass" else (parts[2],)
            out.setdefault(parts[1], {}).update({side: mean for side in sides})
    return out


def _held(proxy: Mapping[str, Any], side: str) -> float:
    own = (proxy.get("sides") or {}).get(side) or {}
    return float(own.get("cpu_fraction", proxy.get("cpu_fraction", 1.0)))


def split_extra_cpu(feature: str, matched: Mapping[str, MatchedCpu], increment: Mapping[str, float],
                  proxy: Mapping[str, Any]) -> tuple[WakeSplit, str] | None:
    """The feature's work after each side's last pass and its CPU per wake (seconds per request and sidecar,
    ``feature_wake``), and where they came from."""
    points, said, counted = [], [], True
    for key, side in SIDECAR_SIDES.items():
        m = matched.get(key)
        if m is None:
            continue
        held, step = _held(proxy, side), increment.get(side, 0.0)
        for own, plain, sleeps in zip(m.with_feature_s, m.plain_s, m.sleeps or [None] * len(m.runs)):
            counted = counted and sleeps is not None
            points.append(WakePoint(own - plain, sleeps if sleeps is not None else 0.0, held, step))
        said.append(f"{key}: {np.mean(m.with_feature_s) * 1e3:.4g} ms CPU per request with {feature} against "
                    f"{np.mean(m.plain_s) * 1e3:.4g} ms plain, of which its held increment books "
                    f"{PASSES * held * step * 1e3:.4g} ms")
    if not points:
        return None
    if not counted:  # a run without its sleeps cannot place its point: no spread, the split is not identified
        points = [replace(p, sleeps=0.0) for p in points]
    found = split(points)
    runs = sorted({r for key in SIDECAR_SIDES if key in matched for r in matched[key].runs})
    return found, f"{'; '.join(said)} (runs {', '.join(runs)} and their plain twins at the same rate)"


def collector(matched: Mapping[str, MatchedCpu]) -> tuple[float, str] | None:
    """The collector's CPU per span and where it came from."""
    m = matched.get(COLLECTOR_KEY)
    if m is None:
        return None
    per_span = float(np.mean(m.with_feature_s)) / SPANS_PER_REQUEST
    return per_span, (f"the collector's CPU per request {np.mean(m.with_feature_s) * 1e3:.4g} ms over "
                      f"{SPANS_PER_REQUEST} spans per request (runs {', '.join(sorted(m.runs))})")


def _lab_only(m: MatchedCpu, runs: Sequence[Run]) -> bool:
    """Whether the collector's readings are the lab's span counter's (one Python process on the lab's one host): a
    cluster's collector runs on nodes of its own, which the model's node would misplace."""
    return {r.manifest.source for r in runs if r.id in m.runs} == {"lab"}


def apply_feature_cpu(features: dict[str, Any], proxy: Mapping[str, Any] | None,
                      increments: Mapping[str, Mapping[str, float]], runs: Sequence[Run], notes: list[str]) -> None:
    """Add ``post_response`` and ``collector`` to each fitted feature whose runs show the CPU (see the module).
    ``increments``: per feature, its mean latency increment per pass on each side (``feature_increments``)."""
    if proxy is None:
        return
    for name, block in features.items():
        matched = matched_cpu(name, runs)
        found = split_extra_cpu(name, matched, increments.get(name, {}), proxy)
        if found is not None:
            _post_work(name, block, found, notes)
            _per_wake(name, block, found, increments.get(name, {}), notes)
        span = collector(matched)
        if span is not None and span[0] > 0 and _lab_only(matched[COLLECTOR_KEY], runs):
            block["collector"] = {
                "workers": COLLECTOR_WORKERS, "node": LAB_NODE,
                "service": {"family": "deterministic", "value_ms": round(span[0] * 1e3, 4),
                            "source": f"CPU per span: {span[1]} (only its mean is identified by CPU readings)"},
                "source": (f"the lab's span collector: one Python process ({COLLECTOR_WORKERS} worker: one "
                           f"interpreter lock) on the lab's one host ({LAB_NODE})")}
            notes.append(f"{name}: collector {span[0] * 1e3:.4g} ms CPU per span")


def _post_work(name: str, block: dict[str, Any], found: tuple[WakeSplit, str], notes: list[str]) -> None:
    """Write the feature's work after each side's last pass, when there is any."""
    wake, where = found
    if wake.post_s > POST_FLOOR_S:
        block["post_response"] = {"family": "deterministic", "value_ms": round(wake.post_s * 1e3, 4),
                                  "source": f"CPU per request and sidecar beyond the plain runs' and the held "
                                            f"increment's, after each side's last pass: {where}"}
        notes.append(f"{name}: {wake.post_s * 1e3:.4g} ms of work after the response per request and sidecar")
    else:
        notes.append(f"{name}: no CPU beyond its held increment and its wakes ({wake.post_s * 1e3:.4g} ms per "
                     "request and sidecar): no post_response")


def _per_wake(name: str, block: dict[str, Any], found: tuple[WakeSplit, str], increment: Mapping[str, float],
              notes: list[str]) -> None:
    """Write the feature's CPU per wake and keep of its latency increment per pass only the pass's own part."""
    wake, where = found
    if not wake.identified:
        notes.append(f"{name}: CPU per wake not identified (no run of it with a different count of sleeps per "
                     "request: its loaded rung): all its CPU per pass")
        return
    if wake.resume_cpu_s <= POST_FLOOR_S:
        notes.append(f"{name}: no CPU per wake (its extra CPU per request does not fall with the workers' sleeps)")
        return
    block["resume_cpu_ms"] = round(wake.resume_cpu_s * 1e3, 5)
    per_pass = block.get("per_pass")
    kept = "of it kept per pass: the rest is the CPU of the wake before the pass (resume_cpu_ms)"
    if isinstance(per_pass, dict) and "family" in per_pass:
        share = wake.per_pass_share(float(np.mean(list(increment.values()))) if increment else 0.0)
        block["per_pass"] = {**thinned(per_pass, share),
                             "source": f"{per_pass.get('source', 'fitted')}; {share:.3g} {kept}"}
    elif isinstance(per_pass, dict):  # one spec per pass kind: each side keeps its own share
        for kind, spec in per_pass.items():
            share = wake.per_pass_share(increment.get(pass_side(kind), 0.0))
            per_pass[kind] = {**thinned(spec, share), "source": f"{spec.get('source', 'fitted')}; {share:.3g} {kept}"}
    block["source"] = (f"{block.get('source', 'fitted')}; CPU per wake {wake.resume_cpu_s * 1e3:.4g} ms from its "
                       f"extra CPU per request against its workers' sleeps per request (calibrate/load/"
                       f"feature_wake.py): {where}")
    notes.append(f"{name}: {wake.resume_cpu_s * 1e3:.4g} ms CPU per wake of its worker, taken from its latency "
                 "increment per pass")
