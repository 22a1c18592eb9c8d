"""Distribution specs: the YAML form of a distribution (milliseconds) parsed into a Distribution, and back."""

from __future__ import annotations

import math
from typing import Any, Literal, Mapping, Sequence, overload

from meshsim.distributions import (MS, Deterministic, Distribution, Empirical, Exponential, Gamma, LogNormal,
                                   Mixture, ParetoStall, Shifted, Sum, Uniform, Weibull)
from meshsim.errors import ModelError
from meshsim.limits import STALL_MAX_ALPHA, STALL_MAX_PROBABILITY, STALL_MIN_ALPHA
from meshsim.yamlio import Section

_META_KEYS = ("source", "fit", "note")

# Upper bounds, so that every sample and every mean the engine computes stays a finite float:
# - no single step of a request takes longer than an hour (a model in milliseconds describes requests, and a
#   simulated hour per step already makes any run meaningless);
# - lognormal sigma <= 5: p99.9 is then e^15 (3 million) times the median and exp(mu + sigma z) cannot overflow;
#   fitted proxies have sigma < 2 (models/meshes). sigma 1000 overflowed sampling to inf;
# - cv <= 100 (a lognormal of sigma 3, a gamma of shape 1e-4); Weibull shape >= 0.1 (its mean is then 10! = 3.6 million times the scale).
MAX_MS = 3_600_000.0
BOUNDS = {"sigma": 5.0, "cv": 100.0}
MIN_WEIBULL_SHAPE = 0.1


def _number(spec: Mapping[str, Any], key: str, where: str, *, positive: bool = True, allow_zero: bool = False) -> float:
    if key not in spec:
        raise ModelError(f"{where}: missing key '{key}'")
    value = spec[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ModelError(f"{where}.{key}: expected a finite number, got {value!r}")
    if positive and (value < 0 or (value == 0 and not allow_zero)):
        bound = ">= 0" if allow_zero else "> 0"
        raise ModelError(f"{where}.{key}: must be {bound}, got {value}")
    bound = MAX_MS if key.endswith("_ms") else BOUNDS.get(key)
    if bound is not None and value > bound:
        raise ModelError(f"{where}.{key}: must be <= {bound:g}, got {value:g}")
    return float(value)


def _mean_cv(spec: Mapping[str, Any], where: str) -> tuple[float, float]:
    return _number(spec, "mean_ms", where) * MS, _number(spec, "cv", where)


def _lognormal(spec: Mapping[str, Any], where: str) -> Distribution:
    if "mean_ms" in spec:
        mean, cv = _mean_cv(spec, where)
        sigma2 = math.log1p(cv**2)
        return LogNormal(math.log(mean) - sigma2 / 2, math.sqrt(sigma2))
    return LogNormal(math.log(_number(spec, "median_ms", where) * MS), _number(spec, "sigma", where))


def _gamma(spec: Mapping[str, Any], where: str) -> Distribution:
    if "mean_ms" in spec:
        mean, cv = _mean_cv(spec, where)
        shape = 1 / cv**2
        return Gamma(shape, mean / shape)
    return Gamma(_number(spec, "shape", where), _number(spec, "scale_ms", where) * MS)


def _weibull_shape(spec: Mapping[str, Any], where: str) -> float:
    shape = _number(spec, "shape", where)
    if shape < MIN_WEIBULL_SHAPE:
        raise ModelError(f"{where}.shape: must be >= {MIN_WEIBULL_SHAPE} for a Weibull, got {shape:g}")
    return shape


def _uniform(spec: Mapping[str, Any], where: str) -> Distribution:
    low = _number(spec, "low_ms", where, allow_zero=True) * MS
    high = _number(spec, "high_ms", where) * MS
    if high <= low:
        raise ModelError(f"{where}.high_ms: must exceed low_ms ({high / MS} <= {low / MS})")
    return Uniform(low, high)


def _mixture(spec: Mapping[str, Any], where: str) -> Distribution:
    comps = spec.get("components")
    if not isinstance(comps, list) or len(comps) < 2:
        raise ModelError(f"{where}.components: expected a list of at least two components")
    weights, parts = [], []
    for i, comp in enumerate(comps):
        here = f"{where}.components[{i}]"
        if not isinstance(comp, Mapping):
            raise ModelError(f"{here}: expected a mapping")
        weights.append(_number(comp, "weight", here))
        parts.append(parse_distribution({k: v for k, v in comp.items() if k != "weight"}, here))
    total = sum(weights)
    if abs(total - 1.0) > 1e-6:
        raise ModelError(f"{where}.components: weights must sum to 1, got {total:.6g}")
    return Mixture(tuple(weights), tuple(parts))


def _empirical(spec: Mapping[str, Any], where: str) -> Distribution:
    values = spec.get("values_ms")
    if not isinstance(values, list) or not values:
        raise ModelError(f"{where}.values_ms: expected a non-empty list of milliseconds")
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= MAX_MS for v in values):
        raise ModelError(f"{where}.values_ms: every value must be a number in [0, {MAX_MS:g}]")
    return Empirical(tuple(float(v) * MS for v in values))


def _sum(spec: Mapping[str, Any], where: str) -> Distribution:
    parts = spec.get("parts")
    if not isinstance(parts, list) or not parts:
        raise ModelError(f"{where}.parts: expected a non-empty list of distributions")
    return Sum(tuple(parse_distribution(p, f"{where}.parts[{i}]") for i, p in enumerate(parts)))


_STALL_KEYS = ("family", "body", "probability", "scale_ms", "alpha", "shift_ms", *_META_KEYS)


def _pareto_stall(spec: Mapping[str, Any], where: str) -> Distribution:
    """A body plus, with ``probability``, a Lomax stall (scale_ms, alpha): alpha in (2, 50] keeps the variance finite,
    and the whole hop's cv stays within the bound of every other family."""
    unknown = sorted(str(k) for k in spec if k not in _STALL_KEYS)
    if unknown:
        raise ModelError(f"{where}.{unknown[0]}: unknown key (known: {', '.join(_STALL_KEYS[1:5])})")
    if not isinstance(spec.get("body"), Mapping):
        raise ModelError(f"{where}.body: expected the distribution of an unstalled hop (a mapping with 'family')")
    body = parse_distribution(spec["body"], f"{where}.body")
    p = _number(spec, "probability", where)
    if p > STALL_MAX_PROBABILITY:
        raise ModelError(f"{where}.probability: must be <= {STALL_MAX_PROBABILITY:g} (a stall is the exception), "
                         f"got {p:g}")
    alpha = _number(spec, "alpha", where)
    if not STALL_MIN_ALPHA < alpha <= STALL_MAX_ALPHA:
        raise ModelError(f"{where}.alpha: must be in ({STALL_MIN_ALPHA:g}, {STALL_MAX_ALPHA:g}] (alpha <= 2: the "
                         f"stall's variance is infinite), got {alpha:g}")
    dist = ParetoStall(body, p, _number(spec, "scale_ms", where) * MS, alpha)
    if not math.isfinite(dist.variance) or dist.cv > BOUNDS["cv"]:
        raise ModelError(f"{where}: cv {dist.cv:.4g} exceeds {BOUNDS['cv']:g} (alpha {alpha:g} too close to 2 for "
                         f"probability {p:g})")
    return dist


_FAMILIES = {
    "deterministic": lambda s, w: Deterministic(_number(s, "value_ms", w, allow_zero=True) * MS),
    "exponential": lambda s, w: Exponential(_number(s, "mean_ms", w) * MS),
    "lognormal": _lognormal,
    "gamma": _gamma,
    "weibull": lambda s, w: Weibull(_weibull_shape(s, w), _number(s, "scale_ms", w) * MS),
    "uniform": _uniform,
    "mixture": _mixture,
    "empirical": _empirical,
    "sum": _sum,
    "pareto_stall": _pareto_stall,
}
FAMILIES = tuple(_FAMILIES)


def parse_distribution(spec: Any, where: str) -> Distribution:
    """Parse a YAML distribution spec (milliseconds); errors name ``where`` and the key."""
    if isinstance(spec, bool):
        raise ModelError(f"{where}: expected a distribution mapping or milliseconds, got {spec!r}")
    if isinstance(spec, (int, float)):
        if not 0 <= spec <= MAX_MS:
            raise ModelError(f"{where}: a duration must be in [0, {MAX_MS:g}] ms, got {spec}")
        return Deterministic(float(spec) * MS)
    if not isinstance(spec, Mapping):
        raise ModelError(f"{where}: expected a distribution mapping, got {type(spec).__name__}")
    family = spec.get("family")
    if not isinstance(family, str) or family not in _FAMILIES:
        raise ModelError(f"{where}.family: unknown family {family!r} (known: {', '.join(FAMILIES)})")
    dist = _FAMILIES[family](spec, where)
    if "shift_ms" in spec:
        shift = _number(spec, "shift_ms", where, allow_zero=True) * MS
        if shift > 0:
            dist = Shifted(dist, shift)
    return dist


@overload
def distribution_at(section: Section, name: str, required: Literal[True] = True) -> Distribution: ...


@overload
def distribution_at(section: Section, name: str, required: bool) -> Distribution | None: ...


def distribution_at(section: Section, name: str, required: bool = True) -> Distribution | None:
    """The distribution under key ``name`` of a YAML section; a missing key is an error naming it when
    ``required``, else None."""
    if not section.has(name):
        if required:
            raise ModelError(f"{section.key(name)}: missing")
        return None
    return parse_distribution(section.data[name], section.key(name))


def spec_with_meta(dist: Distribution, **meta: Any) -> dict[str, Any]:
    """``dist.to_spec()`` plus metadata keys (source, fit) that parsing ignores."""
    spec = dist.to_spec()
    spec.update({k: v for k, v in meta.items() if k in _META_KEYS and v is not None})
    return spec


def total(parts: Sequence[Distribution | None]) -> Distribution | None:
    """Sum of the given parts (None entries skipped); a single part is returned as is."""
    present = tuple(p for p in parts if p is not None)
    if not present:
        return None
    return present[0] if len(present) == 1 else Sum(present)
