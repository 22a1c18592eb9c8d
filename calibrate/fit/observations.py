"""What a fit sees of a run: either raw per-request samples or fortio's histogram as interval-censored counts.

fortio lists only non-empty buckets, so the listed buckets need not touch: the gaps are cells with zero counts,
which add nothing to a multinomial log-likelihood. The first listed bucket starts at the run's minimum and the last
ends at its maximum (fortio's convention), so the likelihood treats them as open below and above.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from meshsim.calibrate.measure.fortio_result import FortioResult


@dataclass(frozen=True)
class Observation:
    """Latencies of one run, in seconds: ``samples`` (raw) or ``lo``/``hi``/``counts`` (binned)."""

    label: str
    lo: np.ndarray
    hi: np.ndarray
    counts: np.ndarray
    samples: np.ndarray | None = None

    @property
    def n(self) -> int:
        return int(self.samples.size if self.samples is not None else self.counts.sum())

    @property
    def raw(self) -> bool:
        return self.samples is not None

    @property
    def min(self) -> float:
        return float(self.samples.min() if self.raw else self.lo[0])

    @property
    def max(self) -> float:
        return float(self.samples.max() if self.raw else self.hi[-1])

    def binned(self, cells: int = 400) -> "Observation":
        """Same data as counts (raw samples binned finely), for likelihoods computed on a grid."""
        if not self.raw:
            return self
        x = np.sort(self.samples)
        # equal-probability cells merged at 1-us resolution: far finer than fortio's buckets, no shape lost.
        q = np.unique(np.round(np.quantile(x, np.linspace(0, 1, cells + 1)), 6))
        edges = np.unique(np.concatenate([[x[0]], q[1:-1], [x[-1] + 1e-9]]))
        counts, _ = np.histogram(x, bins=edges)
        keep = counts > 0
        return Observation(self.label, edges[:-1][keep], edges[1:][keep], counts[keep].astype(float))

    def quantile(self, q: float) -> float:
        """Percentile as fortio reports it: linear interpolation inside the bucket (or of the raw samples)."""
        if self.raw:
            return float(np.quantile(self.samples, q))
        cum = np.cumsum(self.counts) / self.counts.sum()
        i = int(np.searchsorted(cum, q, side="left"))
        i = min(i, len(cum) - 1)
        below = cum[i - 1] if i > 0 else 0.0
        frac = (q - below) / (cum[i] - below) if cum[i] > below else 1.0
        return float(self.lo[i] + frac * (self.hi[i] - self.lo[i]))

    def ecdf_at_edges(self) -> tuple[np.ndarray, np.ndarray]:
        """Empirical CDF at the upper edge of every listed bucket."""
        return self.hi, np.cumsum(self.counts) / self.counts.sum()

    @property
    def mean(self) -> float:
        if self.raw:
            return float(self.samples.mean())
        return float(np.sum(0.5 * (self.lo + self.hi) * self.counts) / self.counts.sum())

    @property
    def std(self) -> float:
        """Standard deviation (bucket midpoints when binned)."""
        if self.raw:
            return float(self.samples.std())
        mid = 0.5 * (self.lo + self.hi)
        return float(np.sqrt(np.sum((mid - self.mean) ** 2 * self.counts) / self.counts.sum()))

    @property
    def mean_se(self) -> float:
        """Standard error of the mean (requests treated as independent)."""
        return self.std / np.sqrt(max(self.n, 1))


def from_result(result: FortioResult, label: str = "", prefer_raw: bool = True) -> Observation:
    """Observation of a fortio result; raw access-log samples win over buckets when present."""
    lo = np.array([b.start for b in result.buckets])
    hi = np.array([b.end for b in result.buckets])
    counts = np.array([b.count for b in result.buckets], dtype=float)
    samples = result.samples if (prefer_raw and result.samples is not None) else None
    return Observation(label or result.labels, lo, hi, counts, samples)


def from_samples(samples: np.ndarray, label: str) -> Observation:
    x = np.asarray(samples, dtype=float)
    return Observation(label, np.array([x.min()]), np.array([x.max()]), np.array([float(x.size)]), x)


def from_buckets(lo: np.ndarray, hi: np.ndarray, counts: np.ndarray, label: str) -> Observation:
    return Observation(label, np.asarray(lo, float), np.asarray(hi, float), np.asarray(counts, float))
