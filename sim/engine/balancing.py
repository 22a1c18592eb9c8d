"""Load-balancing policies choosing a replica: round robin, random, least request (P2C), peak EWMA (P2C)."""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np


class Balancer(ABC):
    """Chooses one of ``n`` replicas; ``done`` reports a finished request and its latency."""

    def __init__(self, n: int, rng: np.random.Generator) -> None:
        self.n = n
        self.rng = rng
        self.active = [0] * n

    @abstractmethod
    def choose(self) -> int: ...

    def start(self) -> int:
        i = 0 if self.n == 1 else self.choose()
        self.active[i] += 1
        return i

    def done(self, i: int, latency: float) -> None:
        self.active[i] -= 1

    def _two(self) -> tuple[int, int]:
        a, b = self.rng.choice(self.n, size=2, replace=False)
        return int(a), int(b)


class RoundRobin(Balancer):
    def __init__(self, n: int, rng: np.random.Generator) -> None:
        super().__init__(n, rng)
        self._next = int(rng.integers(n)) if n > 1 else 0  # each balancer starts at a random replica

    def choose(self) -> int:
        i = self._next
        self._next = (i + 1) % self.n
        return i


class Random(Balancer):
    """kube-proxy's iptables mode picks an endpoint uniformly at random."""

    def choose(self) -> int:
        return int(self.rng.integers(self.n))


class LeastRequest(Balancer):
    """Envoy LEAST_REQUEST: two random replicas, the one with fewer active requests."""

    def choose(self) -> int:
        a, b = self._two()
        return a if self.active[a] <= self.active[b] else b


class PeakEwma(Balancer):
    """Linkerd's balancer: two random replicas, lower EWMA latency x (active + 1)."""

    DECAY = 0.1

    def __init__(self, n: int, rng: np.random.Generator) -> None:
        super().__init__(n, rng)
        self.ewma = [0.0] * n

    def choose(self) -> int:
        a, b = self._two()
        cost_a = self.ewma[a] * (self.active[a] + 1)
        cost_b = self.ewma[b] * (self.active[b] + 1)
        return a if cost_a <= cost_b else b

    def done(self, i: int, latency: float) -> None:
        super().done(i, latency)
        self.ewma[i] = max(latency, self.ewma[i] + self.DECAY * (latency - self.ewma[i]))


POLICIES: dict[str, type[Balancer]] = {
    "round_robin": RoundRobin,
    "random": Random,
    "least_request": LeastRequest,
    "ewma": PeakEwma,
}
