"""The compiled engine's random streams: every (generator, distribution) the lowered program draws from, refilled
batch by batch in the SimPy engine's order (sim/engine/streams.py), and restarted where another replication's generators of
the same names start, so that one lowered system serves every replication (sim/fast/fast_setup.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from meshsim.distributions import Distribution
from meshsim.sim.engine.streams import BATCH, Sampler, Streams, clamped_batch, stream_states


@dataclass
class StreamTable:
    """Every random stream the program draws from: a refill per stream (a batch of the stream's next values).

    A stream is a (generator, distribution) pair; ``rebind`` restarts every generator where another replication's
    generator of the same name starts, so that one lowered system serves every replication."""

    names: dict[int, str]  # id of a generator -> its stream's name (Streams.names)
    refills: list[Callable[[], np.ndarray]] = field(default_factory=list)
    index: dict[int, int] = field(default_factory=dict)
    kept: list[Sampler] = field(default_factory=list)  # alive while indexed by id()
    generators: list[np.random.Generator] = field(default_factory=list)  # one per distinct generator (slot)
    slots: dict[int, int] = field(default_factory=dict)  # id of a generator the system built -> its slot
    slot_names: list[str] = field(default_factory=list)
    sources: list[tuple[int, Distribution | None]] = field(default_factory=list)  # per stream: slot, distribution
    # draws the system made while it was built (a balancer's first replica), replayed on a new generator
    replays: list[tuple[int, Callable[[np.random.Generator], int]]] = field(default_factory=list)

    def sampler(self, sampler: Sampler | None) -> int:
        if sampler is None:
            return -1
        key = id(sampler)
        if key not in self.index:
            self.kept.append(sampler)
            self.index[key] = self._add(self._slot(sampler.rng), sampler.dist)  # the sampler's own dist and rng
        return self.index[key]

    def uniforms(self, rng: np.random.Generator) -> int:
        """Uniform(0, 1) draws from a generator the SimPy engine draws integers from (binding, balancers)."""
        return self._add(self._slot(rng), None)

    def replay(self, rng: np.random.Generator, draws: Callable[[np.random.Generator], int]) -> int:
        """Record draws made from ``rng`` while the system was built; returns the replay's index."""
        self.replays.append((self._slot(rng), draws))
        return len(self.replays) - 1

    def rebind(self, streams: Streams) -> list[int]:
        """Every stream restarted where ``streams``' generator of the same name starts (a replication of its own),
        after the build-time draws are replayed on it; returns the replays' results. The generators are kept and
        their states set (stream_states computes them together), so the refills stay bound to them."""
        for generator, state in zip(self.generators, stream_states(streams.seed, streams.replication,
                                                                   self.slot_names)):
            generator.bit_generator.state = state
        return [draws(self.generators[slot]) for slot, draws in self.replays]

    def redraw(self, stream: int, dist: Distribution) -> None:
        """Stream ``stream`` draws from ``dist`` from now on, from the same generator (a probe's other rate)."""
        slot = self.sources[stream][0]
        self.sources[stream] = (slot, dist)
        self.refills[stream] = _refill(self.generators[slot], dist)

    def _slot(self, rng: np.random.Generator) -> int:
        key = id(rng)
        if key not in self.slots:
            self.slots[key] = len(self.generators)
            self.generators.append(rng)
            self.slot_names.append(self.names[key])
        return self.slots[key]

    def _add(self, slot: int, dist: Distribution | None) -> int:
        self.sources.append((slot, dist))
        self.refills.append(_refill(self.generators[slot], dist))
        return len(self.refills) - 1


def _refill(rng: np.random.Generator, dist: Distribution | None) -> Callable[[], np.ndarray]:
    """A batch of the stream's next values: the Sampler's (negative draws clamped to 0), or rng.random's."""
    if dist is None:
        return lambda: rng.random(BATCH)
    return lambda: clamped_batch(dist, rng)
