"""Seeded random streams: one numpy Generator per named stream, never a global RNG.

Streams are keyed by (seed, replication, stream name), so two what-if variants that share a component draw the
same numbers for it (common random numbers): a difference between them is the change, not noise.
"""

from __future__ import annotations

import zlib

import numpy as np

from meshsim.distributions import Distribution

BATCH = 2048


def stream_rng(seed: int, replication: int, name: str) -> np.random.Generator:
    key = zlib.crc32(name.encode())
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(entropy=seed, spawn_key=(replication, key))))


class Sampler:
    """Draws from a distribution in numpy batches and hands out one float at a time (fast in a SimPy loop)."""

    __slots__ = ("_dist", "_rng", "_buf", "_i")

    def __init__(self, dist: Distribution, rng: np.random.Generator) -> None:
        self._dist = dist
        self._rng = rng
        self._buf: list[float] = []
        self._i = 0

    def __call__(self) -> float:
        if self._i >= len(self._buf):
            self._buf = self._dist.sample(self._rng, BATCH).tolist()
            self._i = 0
        value = self._buf[self._i]
        self._i += 1
        return value if value > 0.0 else 0.0


class Streams:
    """Factory of named samplers and generators for one replication."""

    def __init__(self, seed: int, replication: int) -> None:
        self.seed = seed
        self.replication = replication

    def rng(self, name: str) -> np.random.Generator:
        return stream_rng(self.seed, self.replication, name)

    def sampler(self, name: str, dist: Distribution) -> Sampler:
        return Sampler(dist, self.rng(name))

    def uniforms(self, name: str) -> Sampler:
        from meshsim.distributions import Uniform

        return Sampler(Uniform(0.0, 1.0), self.rng(name))
