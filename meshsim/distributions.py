"""Service-time distributions that know their mean and variance.

In YAML every time is in milliseconds (keys end in ``_ms``); in memory everything is in seconds. Each family is a
small frozen class with ``mean``, ``variance``, ``sample(rng, n)``, ``cdf(x)`` and ``to_spec()`` (the YAML form),
so a fitted distribution can be written back to a model file unchanged.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import special, stats

from meshsim.errors import ModelError

MS = 1e-3
_META_KEYS = ("source", "fit", "note")


class Distribution(ABC):
    """A non-negative random duration in seconds."""

    @property
    @abstractmethod
    def mean(self) -> float: ...

    @property
    @abstractmethod
    def variance(self) -> float: ...

    @abstractmethod
    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray: ...

    @abstractmethod
    def cdf(self, x: np.ndarray | float) -> np.ndarray: ...

    @abstractmethod
    def _spec(self) -> dict[str, Any]: ...

    @property
    def cv(self) -> float:
        return math.sqrt(self.variance) / self.mean if self.mean > 0 else 0.0

    def to_spec(self) -> dict[str, Any]:
        """The YAML mapping (milliseconds) that parses back to this distribution."""
        return self._spec()

    def quantile(self, q: float) -> float:
        """Numerical inverse of the CDF (bisection; fine for reports and tests)."""
        lo, hi = 0.0, max(self.mean, 1e-9)
        while float(self.cdf(hi)) < q:
            hi *= 2.0
        for _ in range(80):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if float(self.cdf(mid)) < q else (lo, mid)
        return 0.5 * (lo + hi)


@dataclass(frozen=True)
class Deterministic(Distribution):
    value: float

    @property
    def mean(self) -> float:
        return self.value

    @property
    def variance(self) -> float:
        return 0.0

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, self.value)

    def cdf(self, x: np.ndarray | float) -> np.ndarray:
        return np.where(np.asarray(x) >= self.value, 1.0, 0.0)

    def _spec(self) -> dict[str, Any]:
        return {"family": "deterministic", "value_ms": self.value / MS}


@dataclass(frozen=True)
class Exponential(Distribution):
    mean_s: float

    @property
    def mean(self) -> float:
        return self.mean_s

    @property
    def variance(self) -> float:
        return self.mean_s**2

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.exponential(self.mean_s, n)

    def cdf(self, x: np.ndarray | float) -> np.ndarray:
        return stats.expon.cdf(x, scale=self.mean_s)

    def _spec(self) -> dict[str, Any]:
        return {"family": "exponential", "mean_ms": self.mean_s / MS}


@dataclass(frozen=True)
class LogNormal(Distribution):
    """exp(N(mu, sigma^2)) seconds; ``median = exp(mu)``."""

    mu: float
    sigma: float

    @property
    def mean(self) -> float:
        return math.exp(self.mu + self.sigma**2 / 2)

    @property
    def variance(self) -> float:
        return (math.exp(self.sigma**2) - 1) * math.exp(2 * self.mu + self.sigma**2)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.lognormal(self.mu, self.sigma, n)

    def cdf(self, x: np.ndarray | float) -> np.ndarray:
        return stats.lognorm.cdf(x, self.sigma, scale=math.exp(self.mu))

    def _spec(self) -> dict[str, Any]:
        return {"family": "lognormal", "median_ms": math.exp(self.mu) / MS, "sigma": self.sigma}


@dataclass(frozen=True)
class Gamma(Distribution):
    shape: float
    scale: float

    @property
    def mean(self) -> float:
        return self.shape * self.scale

    @property
    def variance(self) -> float:
        return self.shape * self.scale**2

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.gamma(self.shape, self.scale, n)

    def cdf(self, x: np.ndarray | float) -> np.ndarray:
        return stats.gamma.cdf(x, self.shape, scale=self.scale)

    def _spec(self) -> dict[str, Any]:
        return {"family": "gamma", "shape": self.shape, "scale_ms": self.scale / MS}


@dataclass(frozen=True)
class Weibull(Distribution):
    shape: float
    scale: float

    @property
    def mean(self) -> float:
        return self.scale * special.gamma(1 + 1 / self.shape)

    @property
    def variance(self) -> float:
        g1, g2 = special.gamma(1 + 1 / self.shape), special.gamma(1 + 2 / self.shape)
        return self.scale**2 * (g2 - g1**2)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self.scale * rng.weibull(self.shape, n)

    def cdf(self, x: np.ndarray | float) -> np.ndarray:
        return stats.weibull_min.cdf(x, self.shape, scale=self.scale)

    def _spec(self) -> dict[str, Any]:
        return {"family": "weibull", "shape": self.shape, "scale_ms": self.scale / MS}


@dataclass(frozen=True)
class Uniform(Distribution):
    low: float
    high: float

    @property
    def mean(self) -> float:
        return 0.5 * (self.low + self.high)

    @property
    def variance(self) -> float:
        return (self.high - self.low) ** 2 / 12

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.uniform(self.low, self.high, n)

    def cdf(self, x: np.ndarray | float) -> np.ndarray:
        return stats.uniform.cdf(x, self.low, self.high - self.low)

    def _spec(self) -> dict[str, Any]:
        return {"family": "uniform", "low_ms": self.low / MS, "high_ms": self.high / MS}


@dataclass(frozen=True)
class Shifted(Distribution):
    """A constant minimum (wire time, fixed code path) plus a random part."""

    base: Distribution
    shift: float

    @property
    def mean(self) -> float:
        return self.base.mean + self.shift

    @property
    def variance(self) -> float:
        return self.base.variance

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self.base.sample(rng, n) + self.shift

    def cdf(self, x: np.ndarray | float) -> np.ndarray:
        return self.base.cdf(np.asarray(x) - self.shift)

    def _spec(self) -> dict[str, Any]:
        return {**self.base.to_spec(), "shift_ms": self.shift / MS}


@dataclass(frozen=True)
class Mixture(Distribution):
    """With probability ``weights[i]`` a draw from ``components[i]`` (long tails: a slow path taken sometimes)."""

    weights: tuple[float, ...]
    components: tuple[Distribution, ...]

    @property
    def mean(self) -> float:
        return sum(w * c.mean for w, c in zip(self.weights, self.components))

    @property
    def variance(self) -> float:
        second = sum(w * (c.variance + c.mean**2) for w, c in zip(self.weights, self.components))
        return second - self.mean**2

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        which = rng.choice(len(self.weights), size=n, p=np.asarray(self.weights))
        out = np.empty(n)
        for i, comp in enumerate(self.components):
            mask = which == i
            out[mask] = comp.sample(rng, int(mask.sum()))
        return out

    def cdf(self, x: np.ndarray | float) -> np.ndarray:
        return sum(w * c.cdf(x) for w, c in zip(self.weights, self.components))

    def _spec(self) -> dict[str, Any]:
        comps = [{"weight": w, **c.to_spec()} for w, c in zip(self.weights, self.components)]
        return {"family": "mixture", "components": comps}


@dataclass(frozen=True)
class Empirical(Distribution):
    """Resampled measured values (seconds)."""

    values: tuple[float, ...]

    @property
    def mean(self) -> float:
        return float(np.mean(self.values))

    @property
    def variance(self) -> float:
        return float(np.var(self.values))

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.choice(np.asarray(self.values), size=n, replace=True)

    def cdf(self, x: np.ndarray | float) -> np.ndarray:
        ordered = np.sort(self.values)
        return np.searchsorted(ordered, np.asarray(x), side="right") / len(ordered)

    def _spec(self) -> dict[str, Any]:
        return {"family": "empirical", "values_ms": [v / MS for v in self.values]}


@dataclass(frozen=True)
class Sum(Distribution):
    """Independent parts added: a base pass plus feature add-ons (mTLS, tracing)."""

    parts: tuple[Distribution, ...]

    @property
    def mean(self) -> float:
        return sum(p.mean for p in self.parts)

    @property
    def variance(self) -> float:
        return sum(p.variance for p in self.parts)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return sum((p.sample(rng, n) for p in self.parts), np.zeros(n))

    def cdf(self, x: np.ndarray | float) -> np.ndarray:
        # Monte Carlo CDF with a fixed seed: used only for reports of composed passes.
        draws = np.sort(self.sample(np.random.default_rng(0), 20000))
        return np.searchsorted(draws, np.asarray(x), side="right") / draws.size

    def _spec(self) -> dict[str, Any]:
        return {"family": "sum", "parts": [p.to_spec() for p in self.parts]}


# ---------------------------------------------------------------------------------------------------------------
# Parsing from YAML specs


def _number(spec: Mapping[str, Any], key: str, where: str, *, positive: bool = True, allow_zero: bool = False) -> float:
    if key not in spec:
        raise ModelError(f"{where}: missing key '{key}'")
    value = spec[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ModelError(f"{where}.{key}: expected a number, got {value!r}")
    if positive and (value < 0 or (value == 0 and not allow_zero)):
        bound = ">= 0" if allow_zero else "> 0"
        raise ModelError(f"{where}.{key}: must be {bound}, got {value}")
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
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 for v in values):
        raise ModelError(f"{where}.values_ms: every value must be a number >= 0")
    return Empirical(tuple(float(v) * MS for v in values))


def _sum(spec: Mapping[str, Any], where: str) -> Distribution:
    parts = spec.get("parts")
    if not isinstance(parts, list) or not parts:
        raise ModelError(f"{where}.parts: expected a non-empty list of distributions")
    return Sum(tuple(parse_distribution(p, f"{where}.parts[{i}]") for i, p in enumerate(parts)))


_FAMILIES = {
    "deterministic": lambda s, w: Deterministic(_number(s, "value_ms", w, allow_zero=True) * MS),
    "exponential": lambda s, w: Exponential(_number(s, "mean_ms", w) * MS),
    "lognormal": _lognormal,
    "gamma": _gamma,
    "weibull": lambda s, w: Weibull(_number(s, "shape", w), _number(s, "scale_ms", w) * MS),
    "uniform": _uniform,
    "mixture": _mixture,
    "empirical": _empirical,
    "sum": _sum,
}
FAMILIES = tuple(_FAMILIES)


def parse_distribution(spec: Any, where: str) -> Distribution:
    """Parse a YAML distribution spec (milliseconds); errors name ``where`` and the key."""
    if isinstance(spec, bool):
        raise ModelError(f"{where}: expected a distribution mapping or milliseconds, got {spec!r}")
    if isinstance(spec, (int, float)):
        if spec < 0 or not math.isfinite(spec):
            raise ModelError(f"{where}: a duration must be >= 0 ms, got {spec}")
        return Deterministic(float(spec) * MS)
    if not isinstance(spec, Mapping):
        raise ModelError(f"{where}: expected a distribution mapping, got {type(spec).__name__}")
    family = spec.get("family")
    if family not in _FAMILIES:
        raise ModelError(f"{where}.family: unknown family {family!r} (known: {', '.join(FAMILIES)})")
    dist = _FAMILIES[family](spec, where)
    if "shift_ms" in spec:
        shift = _number(spec, "shift_ms", where, allow_zero=True) * MS
        if shift > 0:
            dist = Shifted(dist, shift)
    return dist


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
