"""Spans to service invocations: who called whom, when, for how long, and what the app itself spent.

An *invocation* is one service handling one request: a root span, a server (or consumer) span, or a span whose
service differs from its parent's. Client and internal spans of the same service belong to the invocation above
them. A call's interval is the caller's client span when there is one (it includes the network), else the callee's
server span. Sidecar spans (Envoy, Linkerd) are proxy passes, not services: they are spliced out of the tree and
counted; an inbound sidecar span with no app span of its service below it stands in for that app (an uninstrumented
app behind a tracing sidecar), and its invocations say so.

Broken traces are repaired by dropping the whole trace (a trace missing a span has wrong call counts) and counting
why: orphan spans (parent missing), several roots, loops in the parent links, duplicate span ids, spans ending
before they start. A call outlasting its caller (clock skew between hosts) is clipped to the caller and counted.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping

from meshsim.calibrate.measure.trace_spans import Span

INVOCATION_KINDS = ("server", "consumer")
# Calls overlapping by less than this are sequential: exporters keep microseconds, and a float holding seconds since
# the epoch resolves only a quarter of one.
OVERLAP_TOLERANCE_S = 1e-6


@dataclass(frozen=True)
class CallSite:
    """One call an invocation made: the callee's invocation and the interval the caller saw."""

    callee: "Invocation"
    start: float
    end: float


@dataclass(frozen=True)
class Invocation:
    service: str
    file: str
    start: float
    end: float
    calls: tuple[CallSite, ...] = ()
    request_bytes: int | None = None
    response_bytes: int | None = None
    via_sidecar: bool = False  # a sidecar's inbound span standing in for an app without spans of its own

    def own_time(self) -> float:
        """The span minus the union of its calls' intervals (each clipped to the span)."""
        covered, reach = 0.0, self.start
        for lo, hi in sorted((max(c.start, self.start), min(c.end, self.end)) for c in self.calls):
            lo = max(lo, reach)
            if hi > lo:
                covered += hi - lo
                reach = hi
        return max(self.end - self.start - covered, 0.0)

    def stages(self) -> tuple[tuple[str, ...], ...]:
        """The calls in the order made: overlapping calls form one parallel stage (callee names sorted)."""
        out: list[list[str]] = []
        reach = float("-inf")
        for call in sorted(self.calls, key=lambda c: (c.start, c.end)):
            if out and call.start < reach - OVERLAP_TOLERANCE_S:
                out[-1].append(call.callee.service)
            else:
                out.append([call.callee.service])
            reach = max(reach, call.end) if len(out[-1]) > 1 else call.end
        return tuple(tuple(sorted(stage)) for stage in out)


@dataclass(frozen=True)
class TraceSet:
    """The usable traces of some files, and the count of everything repaired on the way."""

    roots: tuple[Invocation, ...]  # one per kept trace
    spans: int  # spans read
    dropped: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # reason -> (spans, traces)
    clipped_calls: int = 0  # calls outlasting their caller (clock skew), clipped
    proxy_spans: Mapping[str, int] = field(default_factory=dict)  # inbound / outbound sidecar spans
    network_gaps: tuple[float, ...] = ()  # (client span - server span) / 2 for every call with both halves
    repeated: int = 0  # spans read twice (the same span in two files), counted once

    def invocations(self) -> Iterable[Invocation]:
        stack = list(self.roots)
        while stack:
            inv = stack.pop()
            yield inv
            stack.extend(c.callee for c in inv.calls)

    def repairs(self) -> list[str]:
        out = [f"{spans} spans dropped with their {traces} traces: {why}" for why, (spans, traces)
               in self.dropped.items()]
        if self.repeated:
            out.append(f"{self.repeated} spans appearing twice (the same trace in two exports) counted once")
        if self.clipped_calls:
            out.append(f"{self.clipped_calls} calls outlasting their caller (clock skew) clipped to the caller")
        return out


def _broken(spans: list[Span]) -> str:
    """Why a trace cannot be used as it is ('' when it can)."""
    ids = Counter(s.span_id for s in spans)
    if "" in ids:
        return "spans without an id"
    if any(n > 1 for n in ids.values()):
        return "duplicate span ids"
    if any(s.end < s.start for s in spans):
        return "spans ending before they start"
    if any(s.parent_id and s.parent_id not in ids for s in spans):
        return "orphan spans (parent missing)"
    roots = [s for s in spans if not s.parent_id]
    if len(roots) > 1:
        return "several root spans"
    return "" if roots and _reached(roots[0], spans) == len(spans) else "loops in the parent links"


def _reached(root: Span, spans: list[Span]) -> int:
    kids: dict[str, list[Span]] = defaultdict(list)
    for s in spans:
        kids[s.parent_id].append(s)
    count, stack = 0, [root]
    while stack and count <= len(spans):  # a span that is its own parent would otherwise loop
        count += 1
        stack.extend(kids.get(stack.pop().span_id, ()))
    return count


def _stands_in(span: Span, children: list[Span]) -> bool:
    return span.kind == "server" and not any(not c.sidecar and c.service == span.fronts for c in children)


class _TraceTree:
    """One trace's spans with sidecars spliced out; builds its invocation tree bottom-up."""

    def __init__(self, spans: list[Span]) -> None:
        kids: dict[str, list[Span]] = defaultdict(list)
        for s in spans:
            kids[s.parent_id].append(s)
        self.kids: dict[str, list[Span]] = {}
        self.proxy: Counter[str] = Counter()
        self.root = self._app_root(kids[""][0], kids)
        self.gaps: list[float] = []
        self.clipped = 0
        self.built: dict[str, Invocation] = {}
        self._splice(kids)

    def _app_root(self, root: Span, kids: Mapping[str, list[Span]]) -> Span:
        """The root, or the app span below a root sidecar span (the edge proxy that started the trace)."""
        while root.sidecar:
            self.proxy["inbound" if root.kind == "server" else "outbound"] += 1
            below = kids.get(root.span_id, [])
            if _stands_in(root, below) or len(below) != 1:
                return replace(root, service=root.fronts)
            root = below[0]
        return root

    def _splice(self, kids: Mapping[str, list[Span]]) -> None:
        """Each kept span's children, sidecar spans replaced by theirs (or by themselves, standing in for an app)."""
        stack = [self.root]
        while stack:  # _broken made sure every span hangs below the root: no loops
            span = stack.pop()
            children, queue = [], list(kids.get(span.span_id, ()))
            while queue:
                child = queue.pop()
                if child.sidecar:
                    self.proxy["inbound" if child.kind == "server" else "outbound"] += 1
                    if _stands_in(child, kids.get(child.span_id, [])):
                        child = replace(child, service=child.fronts)
                    else:
                        queue.extend(kids.get(child.span_id, ()))
                        continue
                children.append(child)
            self.kids[span.span_id] = children
            stack.extend(children)

    def _is_invocation(self, span: Span, parent: Span | None) -> bool:
        return parent is None or span.kind in INVOCATION_KINDS or span.service != parent.service or span.sidecar

    def invocation(self) -> Invocation:
        """The root's invocation with all the calls below it (iterative: deep call chains exceed Python's stack)."""
        order: list[tuple[Span, Span | None]] = []
        stack: list[tuple[Span, Span | None]] = [(self.root, None)]
        while stack:
            span, parent = stack.pop()
            order.append((span, parent))
            stack.extend((c, span) for c in self.kids.get(span.span_id, ()))
        for span, parent in reversed(order):  # children before parents
            if self._is_invocation(span, parent):
                self.built[span.span_id] = self._build(span)
        return self.built[self.root.span_id]

    def _calls_of(self, span: Span) -> list[tuple[Span, Span | None]]:
        """(callee invocation span, the caller's client span above it or None) for every call ``span`` made."""
        out, stack = [], [(c, span) for c in self.kids.get(span.span_id, ())]
        while stack:
            child, parent = stack.pop()
            if self._is_invocation(child, parent):
                client = parent if parent is not span and parent.kind == "client" else None
                out.append((child, client))
            else:
                stack.extend((c, child) for c in self.kids.get(child.span_id, ()))
        return out

    def _build(self, span: Span) -> Invocation:
        calls = []
        for callee_span, client in self._calls_of(span):
            callee = self.built[callee_span.span_id]
            outer = client or callee_span
            if client is not None and client.duration >= callee_span.duration:
                self.gaps.append((client.duration - callee_span.duration) / 2)
            if outer.start < span.start or outer.end > span.end:
                self.clipped += 1
            calls.append(CallSite(callee, max(outer.start, span.start), min(outer.end, span.end)))
        return Invocation(span.service, span.file, span.start, span.end, tuple(calls), span.request_bytes,
                          span.response_bytes, span.sidecar)


def trace_set(spans: Iterable[Span]) -> TraceSet:
    """Group spans by trace, drop (and count) broken traces, build each kept trace's invocation tree."""
    by_trace: dict[str, list[Span]] = defaultdict(list)
    total, seen, repeated = 0, set(), 0
    for span in spans:
        total += 1
        key = (span.trace_id, span.span_id, span.service, round(span.start * 1e6), round(span.end * 1e6))
        if key in seen:  # one trace in two exports (a rotated file, an export made twice)
            repeated += 1
            continue
        seen.add(key)
        by_trace[span.trace_id].append(span)
    roots: list[Invocation] = []
    dropped_spans: Counter[str] = Counter()
    dropped_traces: Counter[str] = Counter()
    proxy: Counter[str] = Counter()
    gaps: list[float] = []
    clipped = 0
    for trace_spans in by_trace.values():
        why = _broken(trace_spans)
        if why:
            dropped_spans[why] += len(trace_spans)
            dropped_traces[why] += 1
            continue
        tree = _TraceTree(trace_spans)
        roots.append(tree.invocation())
        proxy.update(tree.proxy)
        gaps += tree.gaps
        clipped += tree.clipped
    return TraceSet(tuple(roots), total, {w: (dropped_spans[w], dropped_traces[w]) for w in dropped_traces},
                    clipped, dict(proxy), tuple(gaps), repeated)
