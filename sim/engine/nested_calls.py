"""A request's calls as one SimPy process: a call is a generator that yields the events it waits for and the
generators of the calls it makes, and ``nested`` runs them all on one explicit stack."""

from __future__ import annotations

from types import GeneratorType
from typing import Generator, Union

import simpy

Process = Generator[simpy.Event, object, None]
# A call or handler step: it yields SimPy events to wait for, and the generator of a call it makes (run by nested())
Nested = Generator[Union[simpy.Event, "Nested"], object, None]


def nested(top: Nested) -> Process:
    """Run ``top`` and the calls it makes as one SimPy process: a generator it yields is run to its end before ``top``
    resumes, as ``yield from`` would, with the same events in the same order -- but on an explicit stack, so that a
    call graph 1,000 services deep is not 2,000 generator frames deep (past Python's recursion limit)."""
    stack = [top]
    value: object = None
    error: BaseException | None = None
    while stack:
        gen = stack[-1]
        try:
            item = gen.send(value) if error is None else gen.throw(error)
        except StopIteration as done:
            stack.pop()
            value, error = done.value, None
            continue
        except BaseException as raised:  # noqa: BLE001 - not handled there: on to its caller, as through yield from
            stack.pop()
            if not stack:
                raise
            value, error = None, raised
            continue
        value = error = None
        if item.__class__ is GeneratorType:  # a call: run to its end before its caller goes on
            stack.append(item)
            continue
        try:
            value = yield item
        except BaseException as thrown:  # noqa: BLE001 - an event's failure goes to the generator waiting on it
            error = thrown
