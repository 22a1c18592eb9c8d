"""Fitting a heavy-tailed network hop to measured percentiles: ``known parts + k hops`` must reproduce p50..p99.95.

A baseline run (no sidecar) is the client, the app and ``k`` one-way network hops (k = 2: request and response).
Everything but the hops comes from the model (``known``: samples of a simulated baseline whose hops are zero); the
hop is a :class:`meshsim.distributions.ParetoStall` (lognormal body + a Lomax stall with probability p), and its five
parameters are chosen by least squares on log-quantiles: the FFT convolution of the known parts with k hops must
reproduce the measured percentiles, including the upper ones (p99, p99.5, p99.9, p99.95) that a likelihood over all
requests would trade for a better body. Several runs (one per rate) may share the hop; their residuals add.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from scipy import special

from meshsim.calibrate.fit.mle import finite_or_worst, maximise
from meshsim.distributions import LogNormal, ParetoStall
from meshsim.distribution_spec import BOUNDS
from meshsim.limits import STALL_MAX_ALPHA, STALL_MAX_PROBABILITY, STALL_MIN_ALPHA

# fortio's own percentiles (50, 75, 90, 99, 99.9) plus the points between and above them that shape the tail; a
# run uses those with at least MIN_BEYOND requests above them (p99.99 needs 100 000 requests)
PROBS = (0.5, 0.75, 0.9, 0.95, 0.98, 0.99, 0.995, 0.997, 0.998, 0.999, 0.9995, 0.9998, 0.9999)
MIN_BEYOND = 10
# The smallest standard error a log-percentile is given: the model's own error (grid of ~1 us, simulated known parts)
# is about 1 %, so the body's percentiles, known to 0.1 % from 240 000 requests, must not outweigh the tail's.
SE_FLOOR = 0.01
GRID_POINTS = 1 << 13


@dataclass(frozen=True)
class QuantileTarget:
    """A measured run: its percentiles ``values_s`` at ``probs`` and samples of the known parts of its path."""

    label: str
    probs: tuple[float, ...]
    values_s: tuple[float, ...]
    known: np.ndarray
    hops: int = 2
    se_log: tuple[float, ...] | None = None  # standard error of each log-percentile (None: equal weights)

    def weights(self) -> np.ndarray:
        if self.se_log is None:
            return np.ones(len(self.probs))
        return 1.0 / np.maximum(np.asarray(self.se_log), SE_FLOOR)


@dataclass(frozen=True)
class HopFit:
    distribution: ParetoStall
    theta: np.ndarray
    rms_log_residual: float
    targets: tuple[QuantileTarget, ...]
    model_s: tuple[tuple[float, ...], ...]  # per target: the fitted model's quantiles at its probs

    def summary(self) -> dict[str, object]:
        """Measured vs fitted percentiles per run (ms), for a model file's ``fit:`` block."""
        rows = {}
        for t, model in zip(self.targets, self.model_s):
            rows[t.label] = {f"p{100 * p:g}": [round(v * 1e3, 4), round(m * 1e3, 4)]
                             for p, v, m in zip(t.probs, t.values_s, model)}
        return {"method": "least squares on log-quantiles of known parts (simulated, hops at zero) convolved with "
                          "k hops (FFT)", "rms_log_residual": round(self.rms_log_residual, 4),
                "measured_vs_fitted_ms": rows}


class _Model:
    """Known parts of each target on a common grid; evaluates the model quantiles of a parameter vector."""

    def __init__(self, targets: Sequence[QuantileTarget]) -> None:
        top = 3.0 * max(max(t.values_s) for t in targets)
        self.dt = top / GRID_POINTS
        self.n = GRID_POINTS
        self.size = 2 * self.n
        edges = np.arange(self.n + 1) * self.dt
        self.edges = edges
        self.known = [np.fft.rfft(np.histogram(t.known, bins=edges)[0] / t.known.size, self.size) for t in targets]
        self.targets = tuple(targets)

    def hop(self, theta: np.ndarray) -> ParetoStall:
        mu, sigma = theta[0], math.exp(min(theta[1], 1.5))
        # floors keep every candidate a valid ParetoStall (p > 0, scale > 0, alpha > 2) however far the optimiser goes
        p = max(STALL_MAX_PROBABILITY * float(special.expit(theta[2])), 1e-9)
        scale = max(math.exp(min(theta[3], 0.0)), 1e-12)
        alpha = min(STALL_MIN_ALPHA + max(math.exp(min(theta[4], 4.0)), 1e-6), STALL_MAX_ALPHA)
        return ParetoStall(LogNormal(mu, sigma), p, scale, alpha)

    def hop_spectrum(self, hop: ParetoStall) -> np.ndarray:
        with np.errstate(divide="ignore"):
            body = np.diff(special.ndtr((np.log(self.edges) - hop.body.mu) / hop.body.sigma))
        stall = np.diff(hop.stall_cdf(self.edges)) * hop.p
        stall[0] += 1 - hop.p  # no stall: a point mass at zero
        return np.fft.rfft(body, self.size) * np.fft.rfft(stall, self.size)

    def quantiles(self, theta: np.ndarray) -> list[np.ndarray]:
        spectrum = self.hop_spectrum(self.hop(theta))
        out = []
        for target, known in zip(self.targets, self.known):
            mass = np.maximum(np.fft.irfft(known * spectrum ** target.hops, self.size)[:self.n], 0.0)
            cum = np.cumsum(mass)  # not normalised: mass beyond the grid (far tail) is simply not reached
            # entry j of a sum of (1 + 2 hops x 2 parts) bin-centred terms sits at (j + terms / 2) dt, less half a
            # bin per hop: its "no stall" point mass is at zero, not at the first bin's centre
            upper = (np.arange(self.n) + 0.5 + (1 + 2 * target.hops) / 2 - target.hops / 2) * self.dt
            out.append(np.interp(np.asarray(target.probs), cum, upper))
        return out

    def residuals(self, theta: np.ndarray) -> np.ndarray:
        return np.concatenate([(np.log(q) - np.log(np.asarray(t.values_s))) * t.weights()
                               for q, t in zip(self.quantiles(theta), self.targets)])


def _starts(targets: Sequence[QuantileTarget]) -> list[np.ndarray]:
    main = max(targets, key=lambda t: t.known.size)
    probs = np.asarray(main.probs)
    q50 = float(np.interp(0.5, probs, main.values_s))
    gap = max((q50 - float(np.median(main.known))) / main.hops, 2e-6)
    tail = max((max(main.values_s) - q50) / main.hops, 4 * gap)
    out = []
    for p in (0.003, 0.02):
        for alpha in (3.0,):
            out.append(np.array([math.log(gap), math.log(0.25), math.log(p / (STALL_MAX_PROBABILITY - p)),
                                 math.log(tail / 3), math.log(alpha - STALL_MIN_ALPHA)]))
    return out


def fit_stall_hop(targets: Sequence[QuantileTarget], max_evals: int = 1500) -> HopFit:
    """The ParetoStall hop whose k-fold convolution with each target's known parts reproduces its percentiles."""
    if not targets:
        raise ValueError("fit_stall_hop: no target runs")
    model = _Model(targets)

    def sse(theta: np.ndarray) -> float:
        # a stall whose tail lies beyond the grid costs the percentiles nothing as alpha falls to 2, but its variance
        # grows without bound: only hops a model file may hold (cv <= BOUNDS["cv"]) are candidates
        if model.hop(theta).cv > BOUNDS["cv"]:
            return math.inf
        r = model.residuals(theta)
        return float(r @ r)

    theta = maximise(finite_or_worst(sse), _starts(targets), max_evals)
    resid = model.residuals(theta)
    quantiles = model.quantiles(theta)
    log_err = np.concatenate([np.log(q) - np.log(np.asarray(t.values_s)) for q, t in zip(quantiles, targets)])
    return HopFit(model.hop(theta), theta, math.sqrt(float(log_err @ log_err) / log_err.size), tuple(targets),
                  tuple(tuple(float(v) for v in q) for q in quantiles))


def usable_probs(n: int, probs: Sequence[float] = PROBS) -> tuple[float, ...]:
    """The percentiles of ``probs`` that a run of ``n`` requests resolves (MIN_BEYOND requests above each)."""
    return tuple(p for p in probs if n * (1 - p) >= MIN_BEYOND)


def log_quantile_se(quantile: Callable[[float], float], n: int, probs: Sequence[float]) -> tuple[float, ...]:
    """Standard error of each log-percentile from the binomial count below it: the percentiles at p -+ one standard
    deviation of the empirical fraction, sqrt(p (1 - p) / n), bracket it (distribution-free, order statistics)."""
    out = []
    for p in probs:
        d = math.sqrt(p * (1 - p) / n)
        lo, hi = quantile(max(p - d, 0.0)), quantile(min(p + d, 1.0))
        out.append(max(math.log(max(hi, 1e-12)) - math.log(max(lo, 1e-12)), 0.0) / 2)
    return tuple(out)


def target_from_samples(label: str, samples: np.ndarray, known: np.ndarray, hops: int = 2) -> QuantileTarget:
    """A target whose percentiles are read from raw samples (synthetic tests, access logs)."""
    probs = usable_probs(samples.size)
    values = tuple(float(v) for v in np.quantile(samples, probs))
    se = log_quantile_se(lambda p: float(np.quantile(samples, p)), samples.size, probs)
    return QuantileTarget(label, probs, values, known, hops, se)
