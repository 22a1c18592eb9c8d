"""A proxy's own view of a request's latency: what its request-duration histogram records.

Envoy times a request from the moment a worker decodes its first bytes (after the worker woke and took its turn)
to the moment the response's last bytes are written back (``downstream_rq_time``; Istio's
``istio_request_duration_milliseconds`` and Linkerd's ``response_latency_ms`` are the same span). Seen from the
caller, that leaves out the hops to and from the proxy, the caller's own time and the proxy's wake-up on the
request. Each proxy keeps one histogram per view: ``inbound`` (the requests it receives for its service), ``to
SERVICE`` (the calls it sends to SERVICE) and ``balancing`` (a central load balancer's requests).

Both engines bin each view's latencies the same way (log-spaced bins, VIEW_BINS_PER_DECADE per decade from
VIEW_FLOOR_S) and keep the seconds summed in the last column; the compiled engine has its own copy of
:func:`view_bin` (sim/fast/fast_kernels.py, which may import nothing) and a test checks the two agree.
"""

from __future__ import annotations

import math

import numpy as np

INBOUND = "inbound"
BALANCING = "balancing"
VIEW_BINS_PER_DECADE = 50  # bins 4.7 % wide; interpolated inside, a percentile is good to about 1 %
VIEW_FLOOR_S = 1e-6
VIEW_DECADES = 9  # 1 us to 1000 s; shorter or longer latencies fall in the first or the last bin
VIEW_BINS = VIEW_BINS_PER_DECADE * VIEW_DECADES
VIEW_WIDTH = VIEW_BINS + 1  # the bins' counts, then the seconds summed


class ViewHistograms(dict):
    """View -> its histogram; two are equal when they hold the same views with the same counts (a dict of numpy
    arrays would compare them element by element and fail to give one answer)."""

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, dict) and self.keys() == other.keys()
                and all(np.array_equal(self[k], other[k]) for k in self))

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]


def outbound(service: str) -> str:
    """The view of the calls a proxy sends to ``service``."""
    return f"to {service}"


def view_bin(seconds: float) -> int:
    """The bin of a latency (the compiled engine's ``view_bin`` is this, line for line)."""
    if seconds <= VIEW_FLOOR_S:
        return 0
    index = int(math.floor((math.log10(seconds) - math.log10(VIEW_FLOOR_S)) * VIEW_BINS_PER_DECADE))
    return min(index, VIEW_BINS - 1)


def bin_edges(index: int) -> tuple[float, float]:
    """The latencies bin ``index`` holds, (low, high] in seconds."""
    return (VIEW_FLOOR_S * 10.0 ** (index / VIEW_BINS_PER_DECADE),
            VIEW_FLOOR_S * 10.0 ** ((index + 1) / VIEW_BINS_PER_DECADE))


def new_histogram() -> np.ndarray:
    return np.zeros(VIEW_WIDTH)


def record(histogram: np.ndarray, seconds: float) -> None:
    histogram[view_bin(seconds)] += 1.0
    histogram[VIEW_BINS] += seconds


def requests(histogram: np.ndarray) -> int:
    return int(round(float(histogram[:VIEW_BINS].sum())))


def mean(histogram: np.ndarray) -> float:
    n = histogram[:VIEW_BINS].sum()
    return float(histogram[VIEW_BINS] / n) if n > 0 else math.nan


def quantile(histogram: np.ndarray, q: float) -> float:
    """The ``q`` quantile of the binned latencies: geometric interpolation inside the bin holding its rank (the
    bins are log-spaced); nan without requests."""
    counts = histogram[:VIEW_BINS]
    total = counts.sum()
    if total <= 0:
        return math.nan
    rank = q * total
    cumulative = np.cumsum(counts)
    index = int(np.searchsorted(cumulative, rank, side="left"))
    index = min(index, VIEW_BINS - 1)
    before = cumulative[index - 1] if index > 0 else 0.0
    inside = counts[index]
    fraction = (rank - before) / inside if inside > 0 else 1.0
    low, high = bin_edges(index)
    return float(low * (high / low) ** min(max(fraction, 0.0), 1.0))
