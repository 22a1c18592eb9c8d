"""Service-time distributions that know their mean and variance.

In YAML every time is in milliseconds (keys end in ``_ms``); in memory everything is in seconds. Each family is a
small frozen class with ``mean``, ``variance``, ``sample(rng, n)``, ``cdf(x)`` and ``to_spec()`` (the YAML form),
so a fitted distribution can be written back to a model file unchanged; ``meshsim.distribution_spec`` parses it.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np


def _scipy_stats() -> Any:
    """scipy.stats, imported on first use: it takes seconds to import and ``meshsim --help`` needs none of it."""
    from scipy import stats

    return stats


MS = 1e-3


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
        return _scipy_stats().expon.cdf(x, scale=self.mean_s)

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
        return _scipy_stats().lognorm.cdf(x, self.sigma, scale=math.exp(self.mu))

    def quantile(self, q: float) -> float:
        # closed form: the bisection starts from the mean, which overflows for the huge sigmas a fitter may try
        return float(_scipy_stats().lognorm.ppf(q, self.sigma, scale=math.exp(self.mu)))

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
        return _scipy_stats().gamma.cdf(x, self.shape, scale=self.scale)

    def _spec(self) -> dict[str, Any]:
        return {"family": "gamma", "shape": self.shape, "scale_ms": self.scale / MS}


@dataclass(frozen=True)
class Weibull(Distribution):
    shape: float
    scale: float

    @property
    def mean(self) -> float:
        return self.scale * math.gamma(1 + 1 / self.shape)

    @property
    def variance(self) -> float:
        g1, g2 = math.gamma(1 + 1 / self.shape), math.gamma(1 + 2 / self.shape)
        return self.scale**2 * (g2 - g1**2)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self.scale * rng.weibull(self.shape, n)

    def cdf(self, x: np.ndarray | float) -> np.ndarray:
        with np.errstate(over="ignore"):  # a power overflowing far in the tail, where the CDF is 1
            return _scipy_stats().weibull_min.cdf(x, self.shape, scale=self.scale)

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
        return _scipy_stats().uniform.cdf(x, self.low, self.high - self.low)

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


@dataclass(frozen=True)
class ParetoStall(Distribution):
    """A body time plus, with probability ``p``, a stall of Pareto type II (Lomax) length: ``S = scale x ((1 - U) ^
    (-1 / alpha) - 1)``, ``P(S > s) = (1 + s / scale) ^ -alpha``.

    Why this shape for a network hop: the body is the path every packet takes (wire, stack, the receiver's
    wake-up); now and then the packet or its receiver is held up on top of that - the receiving thread is not
    scheduled (run-queue waits, a timer tick, softirq work deferred to ksoftirqd), or a segment is retransmitted.
    Such stalls add to the normal path instead of replacing it, and their lengths spread over decades with a
    power-law tail (the Istio 1.2.0 baseline's survival falls ~2.5x per doubling between 2 and 8 ms). The Lomax
    starts at zero, so short stalls blend into the body. ``alpha > 2`` keeps the variance finite (checked where
    specs are parsed: meshsim.limits), which the engine's confidence intervals and the cost estimate rely on.
    """

    body: Distribution
    p: float
    scale: float
    alpha: float

    def __post_init__(self) -> None:
        # specs are checked with messages naming their keys (meshsim.distribution_spec); this guards direct use
        if not (0.0 <= self.p <= 1.0 and self.scale > 0.0 and self.alpha > 2.0):
            raise ValueError(f"ParetoStall needs 0 <= p <= 1, scale > 0 and alpha > 2 (finite variance), got "
                             f"p={self.p}, scale={self.scale}, alpha={self.alpha}")

    @property
    def stall_mean(self) -> float:
        return self.scale / (self.alpha - 1)

    @property
    def stall_second_moment(self) -> float:
        return 2 * self.scale**2 / ((self.alpha - 1) * (self.alpha - 2))

    @property
    def mean(self) -> float:
        return self.body.mean + self.p * self.stall_mean

    @property
    def variance(self) -> float:
        stall = self.p * self.stall_second_moment - (self.p * self.stall_mean) ** 2
        return self.body.variance + stall

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        out = self.body.sample(rng, n)
        stalled = rng.random(n) < self.p
        k = int(stalled.sum())
        if k:
            out[stalled] += self.scale * rng.pareto(self.alpha, k)  # numpy's pareto is the Lomax (Pareto II)
        return out

    def stall_cdf(self, s: np.ndarray | float) -> np.ndarray:
        s = np.maximum(np.asarray(s, dtype=float), 0.0)
        return -np.expm1(-self.alpha * np.log1p(s / self.scale))

    def cdf(self, x: np.ndarray | float) -> np.ndarray:
        # P(B + S <= x) = E_S[F_B(x - S)], averaged over 2048 stall quantiles (midpoint rule in U): the error is
        # below p / 2048 in probability, far under what reports and tests read off it.
        m = 2048
        u = (np.arange(m) + 0.5) / m
        stalls = self.scale * np.expm1(-np.log1p(-u) / self.alpha)
        xs = np.atleast_1d(np.asarray(x, dtype=float))
        out = np.empty(xs.shape)
        flat, res = xs.ravel(), out.reshape(-1)
        for i in range(0, flat.size, 256):
            chunk = flat[i:i + 256]
            stalled = np.mean(self.body.cdf(chunk[:, None] - stalls[None, :]), axis=1)
            res[i:i + 256] = (1 - self.p) * self.body.cdf(chunk) + self.p * stalled
        return out if np.ndim(x) else out[0]

    def _spec(self) -> dict[str, Any]:
        return {"family": "pareto_stall", "body": self.body.to_spec(), "probability": self.p,
                "scale_ms": self.scale / MS, "alpha": self.alpha}
