"""Load-balancing policies choosing a replica: round robin, random, least request (P2C), peak EWMA (P2C), and
kube-proxy's pick per connection."""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from meshsim.mesh import KUBE_PROXY, MeshModel


class Balancer(ABC):
    """Chooses one of ``n`` replicas for a call on the load generator's connection ``conn``; ``done`` reports a
    finished request and its latency. ``initial`` is the state drawn at construction (the compiled engine starts
    from it)."""

    def __init__(self, n: int, rng: np.random.Generator) -> None:
        self.n = n
        self.rng = rng
        self.active = [0] * n
        self.initial = 0

    @abstractmethod
    def choose(self, conn: int) -> int: ...

    def start(self, conn: int) -> int:
        i = 0 if self.n == 1 else self.choose(conn)
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
        self._next = self.initial = int(rng.integers(n)) if n > 1 else 0  # each starts at a random replica

    def choose(self, conn: int) -> int:
        i = self._next
        self._next = (i + 1) % self.n
        return i


class Random(Balancer):
    """kube-proxy's iptables mode picks an endpoint uniformly at random."""

    def choose(self, conn: int) -> int:
        return int(self.rng.integers(self.n))


class LeastRequest(Balancer):
    """Envoy LEAST_REQUEST: two random replicas, the one with fewer active requests."""

    def choose(self, conn: int) -> int:
        a, b = self._two()
        return a if self.active[a] <= self.active[b] else b


class PeakEwma(Balancer):
    """Linkerd's balancer: two random replicas, lower EWMA latency x (active + 1)."""

    DECAY = 0.1

    def __init__(self, n: int, rng: np.random.Generator) -> None:
        super().__init__(n, rng)
        self.ewma = [0.0] * n

    def choose(self, conn: int) -> int:
        a, b = self._two()
        cost_a = self.ewma[a] * (self.active[a] + 1)
        cost_b = self.ewma[b] * (self.active[b] + 1)
        return a if cost_a <= cost_b else b

    def done(self, i: int, latency: float) -> None:
        super().done(i, latency)
        self.ewma[i] = max(latency, self.ewma[i] + self.DECAY * (latency - self.ewma[i]))


class PerConnection(Balancer):
    """kube-proxy in iptables mode: a keep-alive connection is pinned to the endpoint picked at random when it opened,
    so every request on it goes to that replica (with few connections the replicas' shares are uneven, as on a
    cluster). The pick is a hash of the connection's number and a seed drawn once: no state per connection, and the
    compiled engine computes the same (sim/fast/fast_kernels.py pinned_replica)."""

    def __init__(self, n: int, rng: np.random.Generator) -> None:
        super().__init__(n, rng)
        self.initial = int(rng.integers(HASH_PRIME)) if n > 1 else 0

    def choose(self, conn: int) -> int:
        return pinned_replica(self.initial, conn, self.n)


HASH_PRIME = 2147483647  # 2^31 - 1: every product below stays under 2^63 (exact in int64 and in the compiled engine)


def pinned_replica(seed: int, conn: int, n: int) -> int:
    """Replica of ``n`` a connection is pinned to: multiplications modulo a prime mixed by shifts (a hash that
    spreads consecutive connections as independent uniform picks would)."""
    h = seed ^ (conn * 2654435761 % HASH_PRIME)
    h = h * 48271 % HASH_PRIME
    h ^= h >> 15
    h = h * 48271 % HASH_PRIME
    h ^= h >> 13
    h = h * 48271 % HASH_PRIME
    return h * n // HASH_PRIME


POLICIES: dict[str, type[Balancer]] = {
    "round_robin": RoundRobin,
    "random": Random,
    "least_request": LeastRequest,
    "ewma": PeakEwma,
    "per_connection": PerConnection,
}


def caller_policy(mesh: MeshModel, caller_has_proxy: bool, load_generator_keepalive: bool) -> str:
    """How a caller's calls pick a replica. A caller with a proxy balances per request in it (the mesh's
    ``client_lb_policy``); without one, mesh ``none`` says what the client library does, and a caller outside a mesh
    (the load generator without a client sidecar, everyone in the baseline) goes through kube-proxy: the load
    generator's keep-alive connections each stay on the replica picked when they opened
    (``load_generator_keepalive``), an app's pool of connections is used by whichever request is ready (a pick per
    request)."""
    policy = mesh.client_lb_policy if caller_has_proxy or mesh.proxy is None else KUBE_PROXY
    if policy != KUBE_PROXY:
        return policy
    return "per_connection" if load_generator_keepalive else "random"
