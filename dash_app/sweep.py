"""Rate sweeps over the simulator, cached and computed coarse-then-fine within a time budget.

This is the app's only road into the library: every prediction goes through :class:`Sweeper`, which calls
``meshsim.sim.experiments.predict.predict_options`` with short interactive run settings, caches each point under the full set of inputs
that determined it, and hands work out in an order that puts something useful on screen first: each mesh's lowest
rate (its utilisation bounds an automatic range), a coarse curve, the CDF point (which also carries the model's
saturation search), the pinned baseline's point for the comparison, then the fine curve. :meth:`Sweeper.advance`
stops before a point that would overrun its budget, so a request holds the server for about the budget (at worst
one point more); the page calls again while points are missing.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from meshsim.errors import MeshsimError
from meshsim.request import PredictOptions

from .what_if import MeshFeatures, WhatIf

Predictor = Callable[[PredictOptions], Any]  # meshsim.sim.experiments.predict.predict_options, or a wrapper of it
TopologyParser = Callable[[str, str], Any]  # meshsim.topology.load_topology_text(text, where)
AUTO_RANGE_FACTOR = 1.1  # an automatic range ends just past the first saturation among the meshes


@dataclass(frozen=True)
class PointSettings:
    """Run settings for interactive points: the CLI's precision (replications until the p99's 95 % CI is within
    5 %, at the compiled engine's speed: sim/fast/fast_engine.py), bounded per point in cost and wall time. A fixed
    ``replications`` count runs exactly that many instead."""

    replications: int | None = None
    precision: float = 0.05
    requests_per_replication: int = 5000
    min_duration_s: float = 0.5
    max_duration_s: float = 20.0
    coarse_points: int = 5
    fine_points: int = 13  # (fine - 1) is a multiple of (coarse - 1): the fine grid contains the coarse one
    # One point's cost bound, so no request holds the server for long: a point estimated above max_events station
    # visits is refused before simulating (sim/experiments/run_cost.py; the compiled engine books ~1e6 visits/s on a shared 2-core
    # machine, so 5e6 is ~5 s: chain20 with istio at 5000 requests x 4 replications is 2e6), and no replication
    # starts after time_limit_s.
    max_events: float = 5e6
    time_limit_s: float = 3.0

    def __post_init__(self) -> None:
        if self.coarse_points < 2 or (self.fine_points - 1) % (self.coarse_points - 1):
            raise ValueError("fine_points - 1 must be a multiple of coarse_points - 1 (nested grids)")

    def duration_s(self, rate: float) -> float:
        return min(self.max_duration_s, max(self.min_duration_s, self.requests_per_replication / rate))


@dataclass(frozen=True)
class SweepView:
    """What the figures need: predictions computed so far for one scenario (and the pinned baseline)."""

    curves: Mapping[str, list[tuple[float, dict]]]  # mesh -> [(offered rate, prediction dict)] by rate
    cdf: Mapping[str, dict | None]  # mesh -> prediction at the CDF rate
    baseline_cdf: Mapping[str, dict | None]  # baseline mesh -> prediction at the current CDF rate
    errors: tuple[str, ...] = ()
    done: int = 0
    total: int = 0

    @property
    def complete(self) -> bool:
        return self.done >= self.total


def nice_rate(rate: float) -> float:
    """Round to 3 significant digits: nearby ranges share cached points and the table reads cleanly."""
    if rate <= 0:
        return rate
    digits = 2 - int(math.floor(math.log10(rate)))
    return float(round(rate, digits))


def grid(lo: float, hi: float, points: int) -> list[float]:
    step = (hi - lo) / (points - 1)
    return [nice_rate(lo + i * step) for i in range(points)]


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) and value > 0 else None


def _saturation_estimate(point: "dict | _Failure") -> float | None:
    """The model's saturation rate if the point has it, else the utilisation law: rate / busiest utilisation."""
    if not isinstance(point, dict):
        return None
    found = _finite(point.get("saturation_rps"))
    if found is not None:
        return found
    busiest = _finite(max((point.get("utilization") or {}).values(), default=0.0))
    achieved = _finite(point.get("achieved_rps"))
    return achieved / busiest if busiest and achieved else None


@dataclass
class _Failure:
    message: str


@dataclass
class Sweeper:
    """Cached, budgeted access to ``predict`` for the app (one instance per app, made by ``create_app``)."""

    predictor: Predictor
    parse_topology: TopologyParser
    settings: PointSettings = field(default_factory=PointSettings)
    features: MeshFeatures = field(default_factory=lambda: MeshFeatures({}, {}))
    max_points: int = 2048
    _cache: "OrderedDict[tuple, dict | _Failure]" = field(default_factory=OrderedDict, init=False, repr=False)
    _topologies: "OrderedDict[str, Any]" = field(default_factory=OrderedDict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _point_s: float = field(default=0.3, init=False, repr=False)  # running estimate of one point's wall time
    _latest: "OrderedDict[str, object]" = field(default_factory=OrderedDict, init=False, repr=False)

    # -- the cache -------------------------------------------------------------------------------------------
    def _key(self, scenario: WhatIf, mesh: str, rate: float) -> tuple:
        return (scenario.model_key(), mesh, rate, self._searches_saturation(scenario, rate), self.settings)

    @staticmethod
    def _searches_saturation(scenario: WhatIf, rate: float) -> bool:
        """Only the CDF point of a curve asks the model for the saturation rate (the search is costly)."""
        return rate == nice_rate(scenario.cdf_rate)

    def cached(self, scenario: WhatIf, mesh: str, rate: float) -> dict | _Failure | None:
        key = self._key(scenario, mesh, rate)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
            return hit

    def _store(self, key: tuple, value: dict | _Failure) -> None:
        with self._lock:
            self._cache[key] = value
            self._cache.move_to_end(key)
            while len(self._cache) > self.max_points:
                self._cache.popitem(last=False)

    def topology(self, scenario: WhatIf) -> Any:
        """The ``topology`` argument for predict: a built-in name, or the parsed upload (ModelError if bad)."""
        if scenario.topology_text is None:
            return scenario.topology
        key = scenario.topology_key
        with self._lock:
            if key in self._topologies:
                return self._topologies[key]
        parsed = self.parse_topology(scenario.topology_text, scenario.topology)
        with self._lock:
            self._topologies[key] = parsed
            while len(self._topologies) > 16:
                self._topologies.popitem(last=False)
        return parsed

    def point(self, scenario: WhatIf, mesh: str, rate: float) -> dict | _Failure:
        """One prediction (cached). A user error from the model is cached too, as a failure with its message."""
        key = self._key(scenario, mesh, rate)
        hit = self.cached(scenario, mesh, rate)
        if hit is not None:
            return hit
        try:
            options = PredictOptions(
                topology=self.topology(scenario), mesh=mesh, rps=rate, lb=scenario.lb,
                features=self.features.request(mesh, scenario.features, scenario.features_off),
                load=scenario.load, connections=scenario.connections, payload_bytes=scenario.payload_bytes,
                proxy_workers=scenario.proxy_workers, proxy_cpu_limit=scenario.proxy_cpu_limit,
                duration_s=self.settings.duration_s(rate), replications=self.settings.replications,
                seed=scenario.seed, precision=None if self.settings.replications else self.settings.precision,
                max_events=self.settings.max_events, time_limit_s=self.settings.time_limit_s,
                processes=1,  # no process pool forked from a threaded web server
                saturation=self._searches_saturation(scenario, rate),  # the search costs more than the point
            )
            prediction = self.predictor(options)
            value: dict | _Failure = prediction.to_dict() if hasattr(prediction, "to_dict") else dict(prediction)
        except MeshsimError as exc:
            hint = (f" (the app's limit per point; `meshsim predict --max-events` runs longer ones)"
                    if "(max_events)" in str(exc) else "")
            value = _Failure(f"{mesh} at {rate:g} rps: {exc}{hint}")
        self._store(key, value)
        return value

    # -- the work plan ---------------------------------------------------------------------------------------
    def rates(self, scenario: WhatIf, mesh: str, points: int | None = None) -> list[float] | None:
        """The curve's rates; None while an automatic range still waits for the first points.

        An automatic range is shared by all meshes and ends just past the first saturation among them, so the
        curves compare over the same rates (meshes that saturate later say so in the utilisation panel).
        """
        del mesh  # one range for every mesh of the scenario
        lo = nice_rate(scenario.rate_min)
        hi = scenario.rate_max
        if hi is None:
            firsts = [self.cached(scenario, m, lo) for m in scenario.meshes]
            if any(first is None for first in firsts):
                return None
            estimates = [e for e in map(_saturation_estimate, firsts) if e is not None]  # type: ignore[arg-type]
            hi = max(AUTO_RANGE_FACTOR * min(estimates, default=10 * lo), 2 * lo)
        return grid(lo, nice_rate(hi), points or self.settings.fine_points)

    def plan(self, scenario: WhatIf, baseline: WhatIf | None) -> list[tuple[WhatIf, str, float]]:
        """Every point the current view needs, most useful first (may grow once the first points are known)."""
        tasks: list[tuple[WhatIf, str, float]] = []
        lo = nice_rate(scenario.rate_min)
        tasks += [(scenario, mesh, lo) for mesh in scenario.meshes]
        n_coarse, n_fine = self.settings.coarse_points, self.settings.fine_points
        coarse = {m: self.rates(scenario, m, n_coarse) or [] for m in scenario.meshes}
        for i in range(n_coarse):
            tasks += [(scenario, m, coarse[m][i]) for m in scenario.meshes if i < len(coarse[m])]
        tasks += [(scenario, mesh, nice_rate(scenario.cdf_rate)) for mesh in scenario.meshes]
        if baseline is not None:
            at = baseline.with_cdf_rate(scenario.cdf_rate)
            tasks += [(at, mesh, nice_rate(scenario.cdf_rate)) for mesh in baseline.meshes]
        fine = {m: self.rates(scenario, m, n_fine) or [] for m in scenario.meshes}
        for i in range(n_fine):
            tasks += [(scenario, m, fine[m][i]) for m in scenario.meshes if i < len(fine[m])]
        unique = list(dict.fromkeys((s, m, r) for s, m, r in tasks))
        waiting = sum(1 for m in scenario.meshes if fine[m] == [])
        # Placeholders for the points an automatic range will add, so progress does not jump backwards.
        return unique + [(scenario, "", -1.0)] * (waiting * (n_fine - 1))

    def advance(self, scenario: WhatIf, baseline: WhatIf | None, budget_s: float,
                client: str | None = None) -> SweepView:
        """Compute missing points, most useful first, while the next one should fit in the budget (at least one).

        ``client`` identifies one open page: a newer request from the same page stops an older one after its
        current point, so a page whose controls changed does not keep the server busy with the old scenario.
        """
        started = time.monotonic()
        stamp = object()
        if client is not None:
            with self._lock:
                self._latest[client] = stamp
                self._latest.move_to_end(client)
                while len(self._latest) > 256:
                    self._latest.popitem(last=False)
        while True:
            pending = [t for t in self.plan(scenario, baseline) if t[2] > 0 and self.cached(*t) is None]
            if not pending:
                break
            before = time.monotonic()
            self.point(*pending[0])
            now = time.monotonic()
            with self._lock:
                self._point_s = 0.7 * self._point_s + 0.3 * (now - before)
                expected = self._point_s
                superseded = client is not None and self._latest.get(client) is not stamp
            if superseded or now + expected > started + budget_s:
                break
        return self.view(scenario, baseline)

    def view(self, scenario: WhatIf, baseline: WhatIf | None) -> SweepView:
        """What is cached for the scenario, without computing anything."""
        tasks = self.plan(scenario, baseline)
        done = sum(1 for t in tasks if t[2] > 0 and self.cached(*t) is not None)
        errors: list[str] = []

        def ok(value: dict | _Failure | None) -> dict | None:
            if isinstance(value, _Failure):
                if value.message not in errors:
                    errors.append(value.message)
                return None
            return value

        curves: dict[str, list[tuple[float, dict]]] = {}
        for mesh in scenario.meshes:
            extra = [nice_rate(scenario.rate_min), nice_rate(scenario.cdf_rate)]
            rates = sorted(set((self.rates(scenario, mesh) or []) + extra))
            points = [(r, ok(self.cached(scenario, mesh, r))) for r in rates]
            curves[mesh] = [(r, p) for r, p in points if p is not None]
        cdf_rate = nice_rate(scenario.cdf_rate)
        cdf = {m: ok(self.cached(scenario, m, cdf_rate)) for m in scenario.meshes}
        at = baseline.with_cdf_rate(scenario.cdf_rate) if baseline else None
        base = {m: ok(self.cached(at, m, cdf_rate)) for m in at.meshes} if at else {}
        return SweepView(curves=curves, cdf=cdf, baseline_cdf=base, errors=tuple(errors), done=done, total=len(tasks))
