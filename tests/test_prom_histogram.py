"""Percentiles from Prometheus buckets: hand-computed ``histogram_quantile`` cases (promql/quantile.go's rules), and
generated histograms on which every answer lies in the bucket it names and grows with q."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, strategies as st

from meshsim.calibrate.measure.prometheus.prom_histogram import Bucket, bucket_cdf, bucket_quantile, parse_le

INF = math.inf
# cumulative: 10 requests <= 1 ms, 30 <= 2 ms, 40 <= 5 ms, none above
H = [Bucket(1, 10), Bucket(2, 30), Bucket(5, 40), Bucket(INF, 40)]


@pytest.mark.parametrize("q, value, lower, upper", [
    (0.5, 1.5, 1, 2),     # rank 20 in (1, 2]: 10 below it, 20 inside -> 1 + 1 * (20 - 10) / 20
    (0.25, 1.0, 0, 1),    # rank 10: the first bucket, which starts at 0 -> 0 + 1 * 10 / 10
    (0.1, 0.4, 0, 1),     # rank 4 -> 4 / 10
    (0.9, 3.8, 2, 5),     # rank 36 in (2, 5]: 30 below, 10 inside -> 2 + 3 * 6 / 10
    (1.0, 5.0, 2, 5),     # rank 40: the first bucket holding all 40 is (2, 5], at its top
])
def test_histogram_quantile_by_hand(q, value, lower, upper):
    got = bucket_quantile(q, H)
    assert got.value == pytest.approx(value)
    assert (got.lower, got.upper) == (lower, upper)
    assert got.width == upper - lower


def test_a_rank_in_the_inf_bucket_answers_the_highest_finite_bound():
    got = bucket_quantile(0.9, [Bucket(1, 10), Bucket(INF, 20)])  # rank 18: past every finite bound
    assert (got.value, got.lower, got.upper) == (1, 1, INF)


def test_order_equal_bounds_and_non_monotonic_counts_as_prometheus_treats_them():
    shuffled = [Bucket(INF, 40), Bucket(5, 40), Bucket(1, 10), Bucket(2, 30)]
    assert bucket_quantile(0.5, shuffled).value == pytest.approx(1.5)
    # two series with the same le (summed by le in the query, or not): their counts add
    split = [Bucket(1, 5), Bucket(1, 5), Bucket(2, 30), Bucket(5, 40), Bucket(INF, 40)]
    assert bucket_quantile(0.5, split).value == pytest.approx(1.5)
    # a bound scraped before it caught up (8 < 10 below it) counts as 10: rank 10 lands at the top of (0, 1]
    assert bucket_quantile(0.5, [Bucket(1, 10), Bucket(2, 8), Bucket(INF, 20)]).value == pytest.approx(1.0)
    # increase() extrapolates: fractional counts interpolate the same way
    assert bucket_quantile(0.5, [Bucket(1, 2.5), Bucket(2, 7.5), Bucket(INF, 7.5)]).value == pytest.approx(1.25)


@pytest.mark.parametrize("buckets", [
    [Bucket(1, 10), Bucket(2, 20)],           # no +Inf bucket
    [Bucket(INF, 20)],                        # fewer than two buckets
    [Bucket(1, 0), Bucket(INF, 0)],           # nothing observed
])
def test_where_prometheus_answers_nan(buckets):
    assert math.isnan(bucket_quantile(0.5, buckets).value)


def test_q_outside_zero_to_one():
    assert bucket_quantile(-0.1, H).value == -INF
    assert bucket_quantile(1.1, H).value == INF
    assert math.isnan(bucket_quantile(math.nan, H).value)


def test_le_labels_and_cdf():
    assert parse_le("+Inf") == INF and parse_le("0.25") == 0.25
    with pytest.raises(ValueError):
        parse_le("NaN")
    assert bucket_cdf(H) == ([1, 2, 5], [0.25, 0.75, 1.0])


@st.composite
def histograms(draw):
    bounds = sorted(set(draw(st.lists(st.floats(0.01, 1e4), min_size=1, max_size=12))))
    counts = draw(st.lists(st.integers(0, 1000), min_size=len(bounds) + 1, max_size=len(bounds) + 1))
    cumulative = [sum(counts[: i + 1]) for i in range(len(counts))]
    if cumulative[-1] == 0:
        cumulative[-1] = 1
    return [Bucket(b, c) for b, c in zip([*bounds, INF], cumulative)]


@given(histograms(), st.floats(0.001, 1.0), st.floats(0.001, 1.0))
def test_every_answer_lies_in_its_bucket_and_grows_with_q(buckets, q1, q2):
    a, b = sorted((q1, q2))
    low, high = bucket_quantile(a, buckets), bucket_quantile(b, buckets)
    total = buckets[-1].count
    below = {x.upper: x.count for x in buckets} | {0.0: 0}
    for q, got in ((a, low), (b, high)):
        assert got.lower <= got.value <= got.upper
        # the bucket named is the one holding the rank: fewer than q of the observations at or below its lower
        # bound, at least q at or below its upper bound
        assert below[got.lower] < q * total <= below[got.upper]
    assert low.value <= high.value
