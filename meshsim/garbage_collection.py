"""A garbage-collected app's collections: CPU paid in lumps every so many requests, not evenly on each.

An app written in Go (the lab's fortio apps, the Istio pipeline's fortio client and server) allocates per request,
and its runtime starts a collection each time the heap grows to its goal: with the same allocation per request, a
collection every ``every_requests`` requests, whose mark phase burns ``cpu_ms`` on a thread of the app (Go's
dedicated mark worker takes one of its Ps) and on the node's cores. The app's CPU per request as measured (its
process CPU clock over its requests) includes the collections; a topology that declares them books their share as
lumps and the rest per request. The mean CPU is the same; the lumps are not: a request that meets a collection
waits behind it, and with several apps on a chain the meetings make the slow spells a request's tail is made of
(measurements/lab-garbage-collection-2026-11-29: without collections, GOGC=off, a lab chain of fortio apps ran
its p99 at 800 rps from 5.9-6.1 ms to 3.6-5.4 ms).

Part of the topology schema (a service's ``garbage_collection`` block).
"""

from __future__ import annotations

from dataclasses import dataclass

from meshsim.yamlio import Section

MS = 1e-3
MAX_EVERY = 1e9  # requests per collection: beyond this the app never collects within a run
MAX_CPU_MS = 1e4  # a collection burning 10 s of CPU is a unit error (seconds given as ms)


@dataclass(frozen=True)
class GarbageCollection:
    """A collection every ``every_requests`` requests the app serves, burning ``cpu`` seconds of one of its threads
    on the node's cores (none of a request's path: it delays the requests that need that thread or those cores)."""

    every_requests: float
    cpu: float
    source: str = ""

    @property
    def cpu_per_request(self) -> float:
        """The collections' CPU spread over the requests (seconds): what a per-request CPU reading includes."""
        return self.cpu / self.every_requests


def parse_garbage_collection(s: Section | None) -> GarbageCollection | None:
    if s is None:
        return None
    s.reject_unknown(("every_requests", "cpu_ms", "source", "note"))
    every = s.number("every_requests", minimum=1.0, maximum=MAX_EVERY)  # requests per collection
    cpu_ms = s.number("cpu_ms", maximum=MAX_CPU_MS)  # per collection
    return GarbageCollection(every, cpu_ms * MS, str(s.data.get("source", "")))
