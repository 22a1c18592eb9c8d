"""Seeded random streams: one numpy Generator per named stream, never a global RNG.

Streams are keyed by (seed, replication, stream name), so two what-if variants that share a component draw the
same numbers for it (common random numbers): a difference between them is the change, not noise.
"""

from __future__ import annotations

import zlib
from itertools import chain
from typing import Callable

import numpy as np

from meshsim.distributions import Distribution

BATCH = 2048


def stream_rng(seed: int, replication: int, name: str) -> np.random.Generator:
    key = zlib.crc32(name.encode())
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(entropy=seed, spawn_key=(replication, key))))


def clamped_batch(dist: Distribution, rng: np.random.Generator) -> np.ndarray:
    """A stream's next BATCH values, negative draws clamped to 0: both engines draw through this, so that they see
    the same values."""
    values = dist.sample(rng, BATCH)
    return np.where(values > 0.0, values, 0.0)


class Sampler:
    """Draws from a distribution in numpy batches and hands out one float at a time (fast in a SimPy loop).

    Negative draws are clamped to 0 in the batch. ``draw`` is the bare C-level iterator step (no Python frame per
    value): hot paths bind it once; calling the sampler does the same through one Python call.
    """

    __slots__ = ("_dist", "_rng", "draw")

    def __init__(self, dist: Distribution, rng: np.random.Generator) -> None:
        self._dist = dist
        self._rng = rng
        # chain of batches, each drawn when the previous one is used up: the order of draws is the batches' order
        self.draw: Callable[[], float] = chain.from_iterable(iter(self._batch, None)).__next__

    def _batch(self) -> list[float]:
        return clamped_batch(self._dist, self._rng).tolist()

    def __call__(self) -> float:
        return self.draw()


class Streams:
    """Factory of named samplers and generators for one replication."""

    def __init__(self, seed: int, replication: int) -> None:
        self.seed = seed
        self.replication = replication
        # id of every generator made -> its stream's name: the compiled engine makes the same streams again for
        # another replication without rebuilding the system (sim/fast_streams.py's StreamTable.rebind)
        self.names: dict[int, str] = {}

    def rng(self, name: str) -> np.random.Generator:
        generator = stream_rng(self.seed, self.replication, name)
        self.names[id(generator)] = name
        return generator

    def sampler(self, name: str, dist: Distribution) -> Sampler:
        return Sampler(dist, self.rng(name))

    def uniforms(self, name: str) -> Sampler:
        from meshsim.distributions import Uniform

        return Sampler(Uniform(0.0, 1.0), self.rng(name))
