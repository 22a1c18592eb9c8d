"""A service's call pattern across its invocations, as topology handler steps (``call``, ``parallel``, ``choose``).

Each invocation makes its calls in stages (overlapping calls: one parallel stage). The handler follows the most
common *shape* (number of stages and calls per stage); where invocations of that shape call different services at
one single-call stage, the stage becomes a ``choose`` weighted by how often each was called (Bookinfo's reviews
v1/v2/v3). Invocations of other shapes are counted and reported, never silently folded in; the calls per request of
every edge are counted over all invocations.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Sequence

from meshsim.calibrate.measure.trace_calls import Invocation

Stages = tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class CallPattern:
    """What a service's handler calls, and how well one pattern describes its invocations."""

    service: str
    steps: tuple[dict[str, Any], ...]  # handler steps without computes, each with a `source`
    invocations: int
    matching: int  # invocations of the modelled shape
    stage_deviations: int  # of those, invocations whose parallel stage called other services than the modelled one
    edges: tuple[tuple[str, int], ...]  # (callee, calls counted over all invocations)

    def calls_per_request(self) -> dict[str, float]:
        return {callee: n / self.invocations for callee, n in self.edges}

    def deviations(self) -> list[str]:
        out = []
        if self.matching < self.invocations:
            out.append(f"{self.service}: {self.invocations - self.matching} of {self.invocations} invocations follow "
                       "another call pattern than the modelled one")
        if self.stage_deviations:
            out.append(f"{self.service}: {self.stage_deviations} invocations called other services in a parallel "
                       "stage than the modelled ones")
        return out


def _shape(stages: Stages) -> tuple[int, ...]:
    return tuple(len(stage) for stage in stages)


def _step(position: Sequence[tuple[str, ...]], where: str) -> tuple[dict[str, Any], int]:
    """The step for one stage position over the matching invocations, and how many of them it does not describe."""
    seen = Counter(position)
    n = len(position)
    (modal, count), = seen.most_common(1)
    if len(seen) == 1:
        key: dict[str, Any] = {"call": modal[0]} if len(modal) == 1 else {"parallel": list(modal)}
        return {**key, "source": f"{where}: in all {n}"}, 0
    if len(modal) == 1:
        weights = {stage[0]: c for stage, c in sorted(seen.items())}
        shares = ", ".join(f"{k} {c}" for k, c in weights.items())
        return {"choose": weights, "source": f"{where}: weights are the invocations calling each ({shares} of {n})"}, 0
    return {"parallel": list(modal), "source": f"{where}: in {count} of {n} (the others called other services)"}, \
        n - count


def call_pattern(service: str, invocations: Sequence[Invocation], where: str) -> CallPattern:
    """The handler steps of ``service`` from its invocations; ``where`` names the traces they came from."""
    stages = [inv.stages() for inv in invocations]
    shapes = Counter(_shape(s) for s in stages)
    modal_shape, matching = shapes.most_common(1)[0]
    chosen = [s for s in stages if _shape(s) == modal_shape]
    steps, deviations = [], 0
    for i in range(len(modal_shape)):
        step, off = _step([s[i] for s in chosen], f"{where}: stage {i + 1} of {matching} {service} invocations")
        steps.append(step)
        deviations += off
    edges = Counter(c.callee.service for inv in invocations for c in inv.calls)
    return CallPattern(service, tuple(steps), len(invocations), matching, deviations, tuple(sorted(edges.items())))
