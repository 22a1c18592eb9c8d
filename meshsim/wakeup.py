"""Load-dependent service time: the cost a worker pays to wake up after being idle."""

from __future__ import annotations

import math
from dataclasses import dataclass

from meshsim.distributions import MS
from meshsim.yamlio import Section


@dataclass(frozen=True)
class WakeUp:
    """A worker idle for ``g`` seconds adds ``max_cost * (1 - exp(-g / tau))`` before serving.

    Idle threads sleep in epoll; waking them costs a scheduler wake-up, C-state exit and cold caches. At low rates
    every request finds the worker asleep and pays the full cost; at high rates the gaps shrink and so does the
    cost -- which is why a proxy hop measured at 200 qps looks slower than at 1000 qps. The extra time delays the
    request but is not counted as CPU (the thread is not running while it wakes).
    """

    max_cost: float
    tau: float

    def cost(self, idle: float) -> float:
        if idle <= 0.0:
            return 0.0
        return self.max_cost * (1.0 - math.exp(-idle / self.tau))

    def to_spec(self) -> dict[str, float]:
        return {"max_ms": self.max_cost / MS, "tau_ms": self.tau / MS}


def parse_wakeup(section: Section | None) -> WakeUp | None:
    if section is None:
        return None
    section.reject_unknown(("max_ms", "tau_ms", "source", "fit", "note"))
    return WakeUp(section.number("max_ms") * MS, section.number("tau_ms", strictly_positive=True) * MS)
