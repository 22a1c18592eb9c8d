"""How long a pass holds its proxy worker: its CPU, at most a ceiling, not a share of the whole pass.

A proxy's ``cpu_fraction`` says how much of a pass's mean time is CPU (measured CPU per pass / mean pass time); the
rest is time the worker is free (the kernel's network path, scheduling, the peer). What varies from pass to pass is
mostly that waiting: the code a pass runs is nearly the same each time. So a pass holds its worker for its time up to
a ceiling h and no longer, with h chosen so that the mean holds what was measured,

    E[min(W, h)] = cpu_fraction x E[W],

rather than for ``cpu_fraction`` of every pass, which would make a pass from the far tail of the fitted distribution
(a scheduling stall of tens of milliseconds) burn that much CPU, and under a CPU quota throttle the proxy for
seconds. A ``cpu_fraction`` of 1 holds the whole pass (h = infinity). A feature riding on the pass (Mixer's filter)
may hold its own share of its time (``Feature.sides``): the side's fraction is then the mean-weighted mix of the
pass's and the features' (``mixed_fraction``), and one ceiling serves the whole pass.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Sequence

import numpy as np

from meshsim.distributions import Distribution

CEILING_DRAWS = 1 << 15  # draws per pass kind: E[min(W, h)] is bounded by h, so its sample error is small
CEILING_SEED = 20261128  # a fixed stream of its own: the ceiling is a property of the model, not of a replication


@lru_cache(maxsize=256)
def hold_ceiling(passes: tuple[Distribution, ...], fraction: float) -> float:
    """The ceiling h of a side's passes (one draw of each kind per request: equal weights) whose mean held time
    min(W, h) is ``fraction`` of their mean time; infinity when the whole pass holds."""
    if fraction >= 1.0:
        return math.inf
    if not fraction > 0.0:
        raise ValueError(f"a held fraction must be in (0, 1], got {fraction}")
    rng = np.random.default_rng(CEILING_SEED)
    draws = np.sort(np.concatenate([d.sample(rng, CEILING_DRAWS) for d in passes]))
    target = fraction * float(np.mean([d.mean for d in passes]))  # the exact mean: the tail's share included
    # mean(min(W, h)) over the sorted draws, for h at each draw: (sum of the draws below + h x those at or above) / n
    n = draws.size
    below = np.concatenate([[0.0], np.cumsum(draws)[:-1]])
    at_draw = (below + draws * (n - np.arange(n))) / n
    k = int(np.searchsorted(at_draw, target))
    if k >= n:  # the draws' mean falls short of the exact one (a heavy tail): the whole pass holds
        return math.inf
    # between the (k-1)-th and k-th draw the mean grows linearly: (below_k + h x (n - k)) / n
    return float((target * n - below[k]) / (n - k))


def mixed_fraction(parts: Sequence[tuple[Distribution, float]]) -> float:
    """The held fraction of a pass made of ``parts`` (each a distribution of time and the fraction of it that holds
    the worker): the held mean over the whole mean. A single fraction comes back unchanged."""
    fractions = {f for _, f in parts}
    if len(fractions) == 1:
        return fractions.pop()
    whole = sum(d.mean for d, _ in parts)
    return min(1.0, sum(d.mean * f for d, f in parts) / whole) if whole > 0 else max(fractions)
