import math
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from storeval.histogram import NBUCKETS, Histogram


def exact_percentile(values, q):
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


latencies = st.lists(st.integers(min_value=0, max_value=10**12), min_size=1, max_size=400)


@settings(max_examples=200, deadline=None)
@given(latencies, st.sampled_from([0, 1, 10, 50, 90, 99, 99.9, 100]))
def test_percentile_within_one_percent(values, q):
    h = Histogram()
    h.record_many(np.array(values))
    got = h.percentile(q)
    want = exact_percentile(values, q)
    assert abs(got - want) <= 0.01 * want + 0.5


@settings(max_examples=100, deadline=None)
@given(latencies, latencies)
def test_merge_equals_recording_everything(a, b):
    ha, hb, hall = Histogram(), Histogram(), Histogram()
    ha.record_many(np.array(a))
    hb.record_many(np.array(b))
    hall.record_many(np.array(a + b))
    merged = Histogram().merge(ha).merge(hb)
    assert np.array_equal(merged.counts, hall.counts)
    assert (merged.total, merged.sum, merged.min, merged.max) == (hall.total, hall.sum, hall.min, hall.max)


def test_percentiles_are_ordered_and_bounded():
    h = Histogram()
    rng = np.random.default_rng(1)
    h.record_many(rng.lognormal(10, 2, 100_000).astype(np.int64))
    p50, p90, p99, p100 = h.percentiles([50, 90, 99, 100])
    assert h.min <= p50 <= p90 <= p99 <= p100 <= h.max


def test_memory_is_constant():
    h = Histogram()
    size_before = h.counts.nbytes
    for _ in range(20):
        h.record_many(np.random.default_rng(2).integers(0, 10**11, 50_000))
    assert h.counts.nbytes == size_before == NBUCKETS * 8
    assert sys.getsizeof(h.counts) < 64 * 1024


def test_sparse_roundtrip_keeps_everything():
    h = Histogram()
    h.record_many(np.array([5, 300, 300, 70_000, 9_000_000_000]))
    back = Histogram.from_dict(h.to_dict())
    assert np.array_equal(back.counts, h.counts)
    assert (back.total, back.sum, back.min, back.max) == (5, h.sum, 5, 9_000_000_000)
    assert back.percentiles([50, 100]) == h.percentiles([50, 100])


def test_empty_histogram():
    assert Histogram().percentile(50) is None
