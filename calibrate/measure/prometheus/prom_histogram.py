"""Percentiles from cumulative ``le`` buckets, computed exactly as Prometheus's ``histogram_quantile`` does
(promql/quantile.go of Prometheus 3.x: equal bounds merged, counts made monotonic, linear interpolation inside the
bucket that holds the rank, the first bucket starting at 0, a rank in the +Inf bucket answered with the highest
finite bound), and with the bounds of that bucket: the resolution of the answer. A percentile interpolated inside
a bucket [1 ms, 5 ms] can be anywhere in it; a comparison is only as sharp as that bucket.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence


@dataclass(frozen=True)
class Bucket:
    upper: float  # the ``le`` bound
    count: float  # cumulative: observations <= upper (an increase over a window may be fractional)


@dataclass(frozen=True)
class BucketQuantile:
    """A percentile and the bucket it was interpolated in (``lower`` < value <= ``upper``; ``upper`` may be inf)."""

    value: float
    lower: float
    upper: float

    @property
    def width(self) -> float:
        return self.upper - self.lower


def parse_le(text: str) -> float:
    """An ``le`` label value (``0.5``, ``+Inf``) as a float; ValueError for anything else."""
    value = float(text)
    if math.isnan(value):
        raise ValueError(f"le={text!r} is not a bound")
    return value


def _prepared(buckets: Iterable[Bucket]) -> list[Bucket]:
    """Sorted by bound, equal bounds merged (their counts added, as coalesceBuckets does), counts made monotonic."""
    merged: dict[float, float] = {}
    for b in buckets:
        merged[b.upper] = merged.get(b.upper, 0.0) + b.count
    out: list[Bucket] = []
    highest = -math.inf
    for upper in sorted(merged):
        highest = max(highest, merged[upper])  # a scrape between bucket updates can leave a bound behind
        out.append(Bucket(upper, highest))
    return out


def bucket_quantile(q: float, buckets: Iterable[Bucket]) -> BucketQuantile:
    """``histogram_quantile(q, buckets)`` and its bucket; NaN (with NaN bounds) where Prometheus answers NaN."""
    nan = BucketQuantile(math.nan, math.nan, math.nan)
    if math.isnan(q):
        return nan
    if q < 0:
        return BucketQuantile(-math.inf, -math.inf, -math.inf)
    if q > 1:
        return BucketQuantile(math.inf, math.inf, math.inf)
    b = _prepared(buckets)
    if len(b) < 2 or b[-1].upper != math.inf:
        return nan
    observations = b[-1].count
    if observations == 0:
        return nan
    rank = q * observations
    index = next(i for i, bucket in enumerate(b) if bucket.count >= rank)
    if index == len(b) - 1:
        return BucketQuantile(b[-2].upper, b[-2].upper, math.inf)
    if index == 0 and b[0].upper <= 0:
        return BucketQuantile(b[0].upper, -math.inf, b[0].upper)
    start, end, count = 0.0, b[index].upper, b[index].count
    if index > 0:
        start = b[index - 1].upper
        count -= b[index - 1].count
        rank -= b[index - 1].count
    share = rank / count if count else math.nan  # Go's 0/0: an empty bucket holding rank 0 answers NaN there too
    return BucketQuantile(start + (end - start) * share, start, end)


def whole_units(found: BucketQuantile) -> BucketQuantile:
    """A percentile of a histogram whose observations are whole units, truncated (Envoy times a request in whole
    milliseconds: a 0.7 ms request is recorded as 0, a 1.3 ms one as 1): the bucket holds the recorded integers
    from the first above its lower bound (0 in the first bucket) to its upper bound, so the true value lies in
    [first, last + 1); the percentile is that interval's middle. A bucket without an integer, or an infinite one,
    is kept as found."""
    lower, upper = found.lower, found.upper
    if not (math.isfinite(lower) and math.isfinite(upper)):
        return found
    first = 0 if lower <= 0 else math.floor(lower) + 1
    last = math.floor(upper)
    if first > last:
        return found
    return BucketQuantile((first + last + 1) / 2, float(first), float(last + 1))


def bucket_cdf(buckets: Sequence[Bucket]) -> tuple[list[float], list[float]]:
    """(finite bounds, cumulative fraction at each): the measured CDF a histogram gives, for the report's plot."""
    b = _prepared(buckets)
    total = b[-1].count if b else 0.0
    if not total:
        return [], []
    finite = [x for x in b if math.isfinite(x.upper)]
    return [x.upper for x in finite], [round(x.count / total, 6) for x in finite]
