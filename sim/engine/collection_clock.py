"""When an app's next garbage collection falls due (meshsim/garbage_collection.py): a count of its requests."""

from __future__ import annotations

from meshsim.garbage_collection import GarbageCollection
from meshsim.sim.engine.streams import Sampler

UNDRAWN = -1.0  # the count before the first request draws the phase


class CollectionClock:
    """Counts an app replica's requests and says when a collection is due. The first request draws the phase (how
    far into its first cycle the run starts, uniform) from ``phase``, so that the apps of a chain do not collect in
    step; drawn then, not when the system is built, so that each replication draws its own."""

    def __init__(self, collection: GarbageCollection, phase: Sampler) -> None:
        self.every = collection.every_requests
        self.cpu = collection.cpu
        self.phase = phase
        self.count = UNDRAWN

    def request(self) -> float:
        """One more request: the CPU of the collection it sets off (seconds), or 0."""
        if self.count == UNDRAWN:
            self.count = self.phase.draw() * self.every
        self.count += 1.0
        if self.count < self.every:
            return 0.0
        self.count -= self.every
        return self.cpu
