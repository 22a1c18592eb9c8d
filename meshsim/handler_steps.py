"""A service's handler steps: app work on a core, waits that hold none, calls, fork/join and weighted choices.

Part of the topology schema (``meshsim/topology/v1``, a service's ``handler``); :mod:`meshsim.topology` reads
them with :func:`parse_step` and re-exports the types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from meshsim.distributions import Distribution
from meshsim.distribution_spec import parse_distribution
from meshsim.errors import ModelError
from meshsim.yamlio import Section


@dataclass(frozen=True)
class Compute:
    """App work on one core of the replica (request-side before calls, response-side after)."""

    time: Distribution


@dataclass(frozen=True)
class Delay:
    """Time the app waits without holding a core: the kernel, the scheduler, I/O (a measured hop's part that its CPU
    clock does not count)."""

    time: Distribution


@dataclass(frozen=True)
class Call:
    """Call one downstream service and wait for its response."""

    service: str


@dataclass(frozen=True)
class Parallel:
    """Call several services at once and wait for all (fork/join)."""

    services: tuple[str, ...]


@dataclass(frozen=True)
class Choose:
    """Call one of several services (versions) picked by weight."""

    services: tuple[str, ...]
    weights: tuple[float, ...]


Step = Union[Compute, Delay, Call, Parallel, Choose]


def parse_step(raw: Any, where: str) -> Step:
    s = Section(raw, where)
    kinds = [k for k in ("compute", "delay", "call", "parallel", "choose") if k in s.data]
    if len(kinds) != 1:
        raise ModelError(f"{where}: a step has exactly one of compute, delay, call, parallel, choose "
                         f"(got {list(s.data)})")
    kind = kinds[0]
    s.reject_unknown((kind, "source", "note"))
    if kind == "compute":
        return Compute(parse_distribution(s.data["compute"], s.key("compute")))
    if kind == "delay":
        return Delay(parse_distribution(s.data["delay"], s.key("delay")))
    if kind == "call":
        return Call(s.string("call"))
    if kind == "parallel":
        names = s.data["parallel"]
        if not isinstance(names, list) or len(names) < 2 or not all(isinstance(n, str) for n in names):
            raise ModelError(f"{s.key('parallel')}: expected a list of at least two service names")
        return Parallel(tuple(names))
    options = Section(s.data["choose"], s.key("choose"))
    if len(options.data) < 1:
        raise ModelError(f"{s.key('choose')}: expected service: weight pairs")
    weights = tuple(options.number(str(n), strictly_positive=True) for n in options.data)
    total = sum(weights)
    return Choose(tuple(str(n) for n in options.data), tuple(w / total for w in weights))
