"""Mergeable log-linear latency histogram.

Values (nanoseconds) below 256 get a bucket each; above, every power of two is
split into 128 linear sub-buckets, so a bucket is never wider than 1/128 of its
lower bound and the bucket midpoint is within 0.4 % of any value in it. The
bucket count is fixed (5,760 int64 counters, 46 KiB), so memory per client is
constant however long a phase runs, and histograms of clients and repetitions
merge by adding counters — unlike lists of samples, which grow and do not merge.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

_LINEAR = 256  # values below this are exact
_SUB_BITS = 7  # 128 sub-buckets per power of two above _LINEAR
_SUB = 1 << _SUB_BITS
_MAX_SHIFT = 43  # covers values up to 2**51 ns (26 days)
NBUCKETS = _LINEAR + _MAX_SHIFT * _SUB


def bucket_index(values: np.ndarray) -> np.ndarray:
    """Bucket index of each (non-negative, integer) value."""
    v = np.asarray(values, dtype=np.int64)
    v = np.clip(v, 0, None)
    _, exp = np.frexp(v.astype(np.float64))
    shift = np.clip(exp.astype(np.int64) - (_SUB_BITS + 1), 0, _MAX_SHIFT)
    idx = _LINEAR + (shift - 1) * _SUB + (v >> shift) - _SUB
    idx = np.where(v < _LINEAR, v, idx)
    return np.clip(idx, 0, NBUCKETS - 1)


def _bucket_bounds() -> tuple[np.ndarray, np.ndarray]:
    idx = np.arange(NBUCKETS, dtype=np.int64)
    lower = idx.astype(np.float64)
    width = np.ones(NBUCKETS)
    hi = idx >= _LINEAR
    shift = (idx[hi] - _LINEAR) // _SUB + 1
    mant = (idx[hi] - _LINEAR) % _SUB + _SUB
    lower[hi] = (mant << shift).astype(np.float64)
    width[hi] = (1 << shift).astype(np.float64)
    return lower, width


_LOWER, _WIDTH = _bucket_bounds()
_MID = _LOWER + (_WIDTH - 1) / 2


class Histogram:
    """Counts of latencies in log-linear buckets, with exact count, sum, min and max."""

    __slots__ = ("counts", "total", "sum", "min", "max")

    def __init__(self) -> None:
        self.counts = np.zeros(NBUCKETS, dtype=np.int64)
        self.total = 0
        self.sum = 0
        self.min: int | None = None
        self.max: int | None = None

    def record(self, value: int) -> None:
        """Add one value (slow path; hot loops batch through :meth:`record_many`)."""
        self.record_many(np.array([value], dtype=np.int64))

    def record_many(self, values: np.ndarray) -> None:
        """Add a batch of values in one vectorised pass."""
        if len(values) == 0:
            return
        values = np.asarray(values, dtype=np.int64)
        self.counts += np.bincount(bucket_index(values), minlength=NBUCKETS)
        self.total += int(len(values))
        self.sum += int(values.sum())
        lo, hi = int(values.min()), int(values.max())
        self.min = lo if self.min is None else min(self.min, lo)
        self.max = hi if self.max is None else max(self.max, hi)

    def merge(self, other: Histogram) -> Histogram:
        """Add ``other`` into this histogram and return self."""
        self.counts += other.counts
        self.total += other.total
        self.sum += other.sum
        for attr, pick in (("min", min), ("max", max)):
            mine, theirs = getattr(self, attr), getattr(other, attr)
            setattr(self, attr, theirs if mine is None else mine if theirs is None else pick(mine, theirs))
        return self

    @classmethod
    def merged(cls, hists: Iterable[Histogram]) -> Histogram:
        out = cls()
        for h in hists:
            out.merge(h)
        return out

    def percentile(self, q: float) -> float | None:
        """Value at percentile ``q`` (0–100, nearest rank), within 0.4 %; None when empty."""
        return self.percentiles([q])[0]

    def percentiles(self, qs: Sequence[float]) -> list[float | None]:
        if self.total == 0:
            return [None for _ in qs]
        cum = np.cumsum(self.counts)
        out: list[float | None] = []
        for q in qs:
            rank = max(1, int(np.ceil(q / 100.0 * self.total)))
            b = int(np.searchsorted(cum, rank))
            value = float(_MID[b])
            out.append(min(max(value, float(self.min)), float(self.max)))
        return out

    @property
    def mean(self) -> float | None:
        return self.sum / self.total if self.total else None

    def to_sparse(self) -> tuple[list[int], list[int]]:
        """Non-empty buckets as (indices, counts), for storage."""
        nz = np.flatnonzero(self.counts)
        return nz.tolist(), self.counts[nz].tolist()

    @classmethod
    def from_sparse(cls, indices: Sequence[int], counts: Sequence[int], *, total_sum: int = 0,
                    vmin: int | None = None, vmax: int | None = None) -> Histogram:
        h = cls()
        if len(indices):
            h.counts[np.asarray(indices, dtype=np.int64)] = np.asarray(counts, dtype=np.int64)
        h.total = int(h.counts.sum())
        h.sum = int(total_sum)
        h.min, h.max = vmin, vmax
        if h.total and (vmin is None or vmax is None):
            nz = np.flatnonzero(h.counts)
            h.min = int(_LOWER[nz[0]]) if vmin is None else vmin
            h.max = int(_LOWER[nz[-1]] + _WIDTH[nz[-1]] - 1) if vmax is None else vmax
        return h

    def to_dict(self) -> dict:
        idx, cnt = self.to_sparse()
        return {"index": idx, "count": cnt, "sum": self.sum, "min": self.min, "max": self.max}

    @classmethod
    def from_dict(cls, d: dict) -> Histogram:
        return cls.from_sparse(d["index"], d["count"], total_sum=d.get("sum", 0), vmin=d.get("min"), vmax=d.get("max"))
