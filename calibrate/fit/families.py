"""Candidate service-time families on an unconstrained parameter vector, for the optimiser.

Each family maps a real vector ``theta`` to a distribution (CDF and log-density in seconds) and back to a
:class:`meshsim.distributions.Distribution`. Shifts are bounded by ``max_shift`` (the fastest observed request can
not be faster than the shift) through a logistic transform; scales and shapes through logs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from scipy import special

from meshsim.distributions import Distribution, Gamma, LogNormal, Mixture, Shifted, Weibull

BASE_FAMILIES = ("lognormal", "gamma", "weibull")


def _expit(z: float) -> float:
    return float(special.expit(z))


def _logit(p: float) -> float:
    p = min(max(p, 1e-6), 1 - 1e-6)
    return math.log(p / (1 - p))


def _base_cdf(family: str, a: float, b: float, x: np.ndarray) -> np.ndarray:
    """CDF of the unshifted family with natural parameters (a, b) at x >= 0 (x < 0 gives 0)."""
    xp = np.maximum(x, 0.0)
    if family == "lognormal":  # a = mu, b = sigma
        with np.errstate(divide="ignore"):
            return np.where(x > 0, special.ndtr((np.log(np.where(xp > 0, xp, 1.0)) - a) / b), 0.0)
    if family == "gamma":  # a = shape, b = scale
        return special.gammainc(a, xp / b)
    if family == "weibull":  # a = shape, b = scale
        with np.errstate(over="ignore"):  # (x / b) ** a overflows to inf far in the tail, where the CDF is 1
            return -np.expm1(-((xp / b) ** a))
    raise ValueError(family)


def _base_logpdf(family: str, a: float, b: float, x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        xp = np.where(x > 0, x, np.nan)
        if family == "lognormal":
            z = (np.log(xp) - a) / b
            out = -0.5 * z * z - np.log(xp * b * math.sqrt(2 * math.pi))
        elif family == "gamma":
            out = (a - 1) * np.log(xp) - xp / b - special.gammaln(a) - a * math.log(b)
        else:
            out = math.log(a / b) + (a - 1) * np.log(xp / b) - (xp / b) ** a
    return np.where(np.isnan(out), -np.inf, out)


def _natural(family: str, t1: float, t2: float) -> tuple[float, float]:
    if family == "lognormal":
        return t1, math.exp(min(t2, 5.0))
    return math.exp(min(t1, 12.0)), math.exp(min(t2, 5.0))


def _make_base(family: str, a: float, b: float) -> Distribution:
    if family == "lognormal":
        return LogNormal(a, b)
    if family == "gamma":
        return Gamma(a, b)
    return Weibull(a, b)


@dataclass(frozen=True)
class Family:
    """A candidate: base family, shifted or not, optionally a two-component mixture (body + lognormal tail)."""

    base: str
    shifted: bool = True
    mixture: bool = False

    @property
    def name(self) -> str:
        name = ("shifted " if self.shifted else "") + self.base
        return f"mixture({name} + lognormal tail)" if self.mixture else name

    @property
    def k(self) -> int:
        return 2 + int(self.shifted) + (4 if self.mixture else 0)

    def _parts(self, theta: np.ndarray, max_shift: float) -> tuple:
        a, b = _natural(self.base, theta[0], theta[1])
        shift = max_shift * _expit(theta[2]) if self.shifted else 0.0
        if not self.mixture:
            return a, b, shift, 0.0, 0.0, 0.0, 0.0
        i = 3 if self.shifted else 2
        w = _expit(theta[i]) * 0.5  # the tail is the minority component
        # sigma floor: a bucket-censored tail would otherwise collapse to a spike inside one bucket
        mu_t, sig_t = theta[i + 1], 0.05 + math.exp(min(theta[i + 2], 3.0))
        shift_t = max_shift * _expit(theta[i + 3])
        return a, b, shift, w, mu_t, sig_t, shift_t

    def cdf(self, theta: np.ndarray, x: np.ndarray, max_shift: float) -> np.ndarray:
        a, b, s, w, mu_t, sig_t, s_t = self._parts(theta, max_shift)
        body = _base_cdf(self.base, a, b, x - s)
        if not self.mixture:
            return body
        return (1 - w) * body + w * _base_cdf("lognormal", mu_t, sig_t, x - s_t)

    def logpdf(self, theta: np.ndarray, x: np.ndarray, max_shift: float) -> np.ndarray:
        a, b, s, w, mu_t, sig_t, s_t = self._parts(theta, max_shift)
        body = _base_logpdf(self.base, a, b, x - s)
        if not self.mixture:
            return body
        tail = _base_logpdf("lognormal", mu_t, sig_t, x - s_t)
        return np.logaddexp(math.log1p(-w) + body, math.log(w) + tail)

    def distribution(self, theta: np.ndarray, max_shift: float) -> Distribution:
        a, b, s, w, mu_t, sig_t, s_t = self._parts(theta, max_shift)
        body = _make_base(self.base, a, b)
        body = Shifted(body, s) if s > 0 else body
        if not self.mixture:
            return body
        tail: Distribution = LogNormal(mu_t, sig_t)
        tail = Shifted(tail, s_t) if s_t > 0 else tail
        return Mixture((1 - w, w), (body, tail))

    def starts(self, q: Callable[[float], float], lo: float, max_shift: float) -> list[np.ndarray]:
        """Starting vectors from quantiles ``q`` of the data (seconds); several shifts for robustness."""
        out = []
        shift_fracs = (0.05, 0.3, 0.8, 0.95) if self.shifted else (0.0,)
        for frac in shift_fracs:
            s = frac * max(min(lo, max_shift), 0.0)
            m50 = max(q(0.5) - s, 1e-7)
            m90 = max(q(0.9) - s, m50 * 1.05)
            sigma = max((math.log(m90) - math.log(m50)) / 1.2816, 0.05)
            if self.base == "lognormal":
                t = [math.log(m50), math.log(sigma)]
            elif self.base == "gamma":
                shape = 1.0 / max(math.expm1(sigma**2), 1e-3)
                mean = m50 * math.exp(sigma**2 / 2)
                t = [math.log(shape), math.log(mean / shape)]
            else:
                k = min(max(1.2 / sigma, 0.3), 50.0)
                t = [math.log(k), math.log(m50 / math.log(2) ** (1 / k))]
            if self.shifted:
                t.append(_logit(s / max_shift) if max_shift > 0 else 0.0)
            if self.mixture:
                tail_at = max(q(0.995), q(0.9) * 1.5)
                t += [_logit(0.02 / 0.5), math.log(tail_at), math.log(0.35), _logit(0.5)]
            out.append(np.array(t, dtype=float))
        return out


class Shortlist(tuple[Family, ...]):
    """Families tried first, for speed (the lab calibration's three); a component none of them fits acceptably is
    tried with every other candidate before it is refused (a plain list of families is the user's choice: kept)."""

    @property
    def rest(self) -> tuple[Family, ...]:
        return tuple(f for f in candidates() if f not in self)


def widened(families: Sequence[Family]) -> tuple[Family, ...]:
    """The families to try when none of ``families`` fits: the rest of a Shortlist's candidates, else none."""
    return families.rest if isinstance(families, Shortlist) else ()


def candidates(mixtures: bool = True) -> list[Family]:
    """All families tried by default: 3 bases x (plain, shifted), plus a shifted-body mixture per base."""
    fams = [Family(b, shifted) for b in BASE_FAMILIES for shifted in (False, True)]
    if mixtures:
        fams += [Family(b, True, True) for b in BASE_FAMILIES]
    return fams
