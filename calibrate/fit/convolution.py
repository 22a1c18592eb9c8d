"""Distributions on a uniform time grid and their sums by FFT convolution.

A grid pmf holds the mass of the bins [j dt, (j+1) dt). A sum of m such variables is the convolution of their pmfs;
each bin's mass is treated as sitting at the bin centre, so after m terms entry k sits at (k + m/2) dt and is spread
over one dt around it. Mass beyond the grid end is dropped, which only lowers the CDF past the last data edge,
where the likelihood's last cell is open anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from meshsim.calibrate.fit.observations import Observation

MAX_POINTS = 1 << 13


@dataclass(frozen=True)
class Grid:
    dt: float
    n: int

    @property
    def edges(self) -> np.ndarray:
        return np.arange(self.n + 1) * self.dt

    @classmethod
    def covering(cls, observations: list[Observation], dt: float | None = None) -> "Grid":
        """A grid reaching past every observation's maximum, fine enough for its narrowest bucket."""
        top = max(o.max for o in observations) * 1.05
        if dt is None:
            # first/last buckets are cut at the run's min/max by fortio: not real bucket widths
            widths = [np.min((o.hi - o.lo)[1:-1]) for o in observations if not o.raw and o.lo.size > 2]
            narrow = min([w for w in widths if w > 0] or [1e-5])
            dt = min(max(narrow / 8.0, 1e-6), 5e-6)
        dt = max(dt, top / MAX_POINTS)
        return cls(dt, int(np.ceil(top / dt)))


@dataclass(frozen=True)
class GridPmf:
    """A pmf on a grid; ``terms`` counts how many bin-centred variables were summed (sets the positions)."""

    grid: Grid
    mass: np.ndarray
    terms: int = 1

    def cdf(self, x: np.ndarray) -> np.ndarray:
        edges = (np.arange(self.mass.size + 1) + self.terms / 2 - 0.5) * self.grid.dt
        cum = np.concatenate([[0.0], np.cumsum(self.mass)])
        return np.interp(x, edges, cum, left=0.0, right=cum[-1])

    def quantile(self, q: float) -> float:
        cum = np.cumsum(self.mass) / max(self.mass.sum(), 1e-300)
        k = int(np.searchsorted(cum, q))
        return (k + self.terms / 2) * self.grid.dt

    def delayed(self, seconds: float) -> "GridPmf":
        """The same variable plus a constant (rounded to the grid)."""
        k = int(round(seconds / self.grid.dt))
        if k <= 0:
            return self
        return GridPmf(self.grid, np.concatenate([np.zeros(k), self.mass[:-k]]), self.terms)

    def plus(self, other: "GridPmf") -> "GridPmf":
        n = self.mass.size
        size = _fft_size(n)
        out = np.fft.irfft(self.spectrum(size) * other.spectrum(size), size)[:n]
        return GridPmf(self.grid, np.maximum(out, 0.0), self.terms + other.terms)

    def spectrum(self, size: int) -> np.ndarray:
        """rfft of the mass zero-padded to ``size``, kept with the pmf: the known parts of a deconvolution are
        convolved with a new candidate at every likelihood evaluation, and power() reuses its operand."""
        cache = self.__dict__.setdefault("_spectra", {})  # frozen dataclass: a private memo, not a field
        if size not in cache:
            cache[size] = np.fft.rfft(self.mass, size)
        return cache[size]


def _fft_size(n: int) -> int:
    return 1 << int(np.ceil(np.log2(2 * n)))


def convolve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Linear convolution truncated to len(a) (FFT; padding to 2n avoids wrap-around)."""
    n = a.size
    size = _fft_size(n)
    out = np.fft.irfft(np.fft.rfft(a, size) * np.fft.rfft(b, size), size)[:n]
    return np.maximum(out, 0.0)


def from_cdf(grid: Grid, cdf: Callable[[np.ndarray], np.ndarray]) -> GridPmf:
    return GridPmf(grid, np.maximum(np.diff(cdf(grid.edges)), 0.0))


def from_observation(grid: Grid, obs: Observation) -> GridPmf:
    """Empirical pmf: raw samples binned, or fortio buckets spread uniformly over their width."""
    if obs.raw:
        counts, _ = np.histogram(obs.samples, bins=grid.edges)
        return GridPmf(grid, counts / obs.samples.size)
    knots = np.column_stack([obs.lo, obs.hi]).ravel()
    cum = np.cumsum(obs.counts) / obs.counts.sum()
    values = np.column_stack([np.concatenate([[0.0], cum[:-1]]), cum]).ravel()
    return GridPmf(grid, np.maximum(np.diff(np.interp(grid.edges, knots, values, left=0.0, right=1.0)), 0.0))


def power(pmf: GridPmf, k: int) -> GridPmf:
    """Sum of k independent copies."""
    out = pmf
    for _ in range(k - 1):
        out = out.plus(pmf)
    return out
