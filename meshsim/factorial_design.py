"""A 2^k r factorial design over meshsim's prediction options (Jain, ch. 17-18): k two-level factors, r replications.

A factor is written ``KEY=LOW,HIGH`` for an option (``rps=10,100``, ``payload=120,98000``, ``lb=client,proxy``,
``scope=none,both`` for mesh vs none, ``mesh=linkerd,istio``), ``tls`` or ``keepalive`` alone for off/on, or a
mesh feature's name alone (``mtls``, ``telemetry``) for off (``no-NAME``) / on. Each cell of the design is a
:class:`~meshsim.request.PredictOptions`: the base options with every factor at the cell's level.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from itertools import product
from typing import Any, Callable

from meshsim.catalog import load_mesh
from meshsim.errors import FieldError
from meshsim.request import PredictOptions, build_request

METRICS = ("mean_ms", "p50_ms", "p99_ms", "cpu")  # cpu: cores of every component together
MAX_FACTORS = 6  # 64 cells: beyond that a fractional design is the tool, not this one
FEATURES = "features"


# KEY -> (PredictOptions field, how to read a level)
OPTION_FACTORS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "rps": ("rps", float), "payload": ("payload_bytes", int), "connections": ("connections", int),
    "threads": ("threads", int), "lb": ("lb", str), "scope": ("scope", str), "mesh": ("mesh", str),
    "load": ("load", str), "proxy-workers": ("proxy_workers", int), "proxy-cpu-limit": ("proxy_cpu_limit", float),
}
SWITCH_FACTORS = {"tls": "tls", "keepalive": "keepalive"}  # off (low) / on (high)
_DEFAULTS = {f.name: f.default for f in fields(PredictOptions)}


@dataclass(frozen=True)
class Factor:
    """One factor: the option ``field`` it sets (``features`` for a mesh feature) at its ``low`` / ``high`` level."""

    name: str
    field: str
    low: Any
    high: Any

    def level(self, sign: int) -> Any:
        return self.high if sign > 0 else self.low

    def describe(self, sign: int) -> str:
        value = self.level(sign)
        if self.field == FEATURES or isinstance(value, bool):
            return "on" if sign > 0 else "off"
        return f"{value:g}" if isinstance(value, float) else str(value)


def parse_factor(text: str) -> Factor:
    """``KEY=LOW,HIGH``, ``tls``/``keepalive``, or a feature name (FieldError on ``factors`` otherwise)."""
    text = text.strip()
    key, eq, values = text.partition("=")
    key = key.strip().replace("_", "-")
    if not eq:
        if key in SWITCH_FACTORS:
            return Factor(key, SWITCH_FACTORS[key], False, True)
        if key in OPTION_FACTORS:
            raise FieldError("factors", f"{key} needs two levels: {key}=LOW,HIGH")
        if not key or key.startswith("no-") or not key.replace("-", "").isalnum():
            raise FieldError("factors", f"expected KEY=LOW,HIGH or a mesh feature name, got {text!r}")
        return Factor(key, FEATURES, f"no-{key}", key)
    if key not in OPTION_FACTORS:
        known = ", ".join(sorted(OPTION_FACTORS))
        raise FieldError("factors", f"unknown factor {key!r} in {text!r} (known: {known}; tls, keepalive or a "
                                    "feature name alone)")
    field, read = OPTION_FACTORS[key]
    levels = [v.strip() for v in values.split(",")]
    if len(levels) != 2 or not all(levels):
        raise FieldError("factors", f"{key} needs exactly two levels, LOW,HIGH, got {values!r}")
    try:
        low, high = (read(v) for v in levels)
    except ValueError:
        raise FieldError("factors", f"{key} levels must be {'numbers' if read is not str else 'names'}, "
                                    f"got {values!r}") from None
    if low == high:
        raise FieldError("factors", f"{key}: the two levels are the same ({levels[0]})")
    return Factor(key, field, low, high)


@dataclass(frozen=True)
class FactorialDesign:
    factors: tuple[Factor, ...]
    replications: int = 3
    metric: str = "mean_ms"
    confidence: float = 0.95

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.factors)

    def cells(self) -> list[tuple[int, ...]]:
        """Every combination of levels, -1/+1, the first factor changing slowest."""
        return list(product((-1, 1), repeat=len(self.factors)))

    def label(self, cell: tuple[int, ...]) -> str:
        return ", ".join(f"{f.name}={f.describe(s)}" for f, s in zip(self.factors, cell))

    def validate(self, base: PredictOptions, check: Callable[[PredictOptions], Any] = build_request) -> None:
        """The design's own values, factors that clash with each other or with a fixed option, then every cell
        through ``check`` (the request builder; the engine adds its cost check): an error of a cell names the cell
        and goes to ``factors``, an error of a fixed option keeps its field."""
        if not 1 <= len(self.factors) <= MAX_FACTORS:
            raise FieldError("factors", f"name 1 to {MAX_FACTORS} factors, got {len(self.factors)}")
        if isinstance(self.replications, bool) or not isinstance(self.replications, int) or \
                not 2 <= self.replications <= 1000:
            raise FieldError("replications", f"must be a whole number from 2 to 1000 (the error term has "
                                             f"2^k (r - 1) degrees of freedom), got {self.replications!r}")
        if self.metric not in METRICS:
            raise FieldError("metric", f"unknown metric {self.metric!r} (known: {', '.join(METRICS)})")
        if not 0 < self.confidence < 1:
            raise FieldError("confidence", f"a fraction in (0, 1), got {self.confidence}")
        self._check_clashes(base)
        self._check_features_act(base)
        for cell in self.cells():
            options = self.options_for(base, cell)
            try:
                check(options)
            except FieldError as exc:
                if exc.field in {f.field for f in self.factors}:
                    raise FieldError("factors", f"cell {self.label(cell)}: {exc.field}: {exc.problem}") from None
                raise

    def _check_clashes(self, base: PredictOptions) -> None:
        seen: dict[str, str] = {}
        for f in self.factors:
            key = f"{FEATURES}:{f.name}" if f.field == FEATURES else f.field
            if key in seen:
                raise FieldError("factors", f"{f.name} and {seen[key]} both set {f.field}: name each factor once")
            seen[key] = f.name
            if f.field == FEATURES:
                fixed = [x for x in base.features if x.strip() in (f.name, f"no-{f.name}")]
                if fixed:
                    raise FieldError("factors", f"{f.name} is a factor, so it cannot also be fixed in features "
                                                f"({', '.join(fixed)})")
            elif getattr(base, f.field) != _DEFAULTS[f.field]:
                raise FieldError("factors", f"{f.name} is a factor, so it cannot also be fixed as {f.field} = "
                                            f"{getattr(base, f.field)!r}")

    def _check_features_act(self, base: PredictOptions) -> None:
        """A feature factor needs a proxy in some cell: with none anywhere (``--scope none``, a mesh without
        proxies) its effect is 0 by construction and the analysis would share out noise as its variation."""
        features = [f.name for f in self.factors if f.field == FEATURES]
        if features and not any(_has_proxies(self.options_for(base, cell)) for cell in self.cells()):
            raise FieldError("factors", f"{', '.join(features)}: no cell of the design has a proxy for it to act "
                                        "on (scope none, or a mesh without proxies): its effect would be 0 by "
                                        "construction")

    def options_for(self, base: PredictOptions, cell: tuple[int, ...]) -> PredictOptions:
        """The base options with every factor at the cell's level. In a cell without proxies (scope none, or a
        mesh without a proxy) a feature factor has nothing to turn on: it is left out there."""
        changes = {f.field: f.level(s) for f, s in zip(self.factors, cell) if f.field != FEATURES}
        options = base.with_changes(**changes)
        wanted = tuple(f.level(s) for f, s in zip(self.factors, cell) if f.field == FEATURES)
        if wanted and not _has_proxies(options):
            wanted = ()
        return options.with_changes(features=tuple(base.features) + wanted) if wanted else options


def _has_proxies(options: PredictOptions) -> bool:
    if options.scope == "none":
        return False
    try:
        return load_mesh(options.mesh).proxy is not None
    except FieldError:
        return True  # an unknown mesh: let the request builder say so
