"""Small, explicit statistics: mean, standard error, spread across repetitions or clients."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Summary:
    """mean ± stderr and min/median/max of a sample; stddev is the sample standard deviation."""

    n: int
    mean: float
    stderr: float | None
    stddev: float | None
    min: float
    median: float
    max: float

    def as_dict(self) -> dict:
        return asdict(self)


def summarize(values: Sequence[float]) -> Summary | None:
    vals = [float(v) for v in values if v is not None and not math.isnan(v)]
    if not vals:
        return None
    n = len(vals)
    mean = statistics.fmean(vals)
    sd = statistics.stdev(vals) if n > 1 else None
    return Summary(n=n, mean=mean, stderr=sd / math.sqrt(n) if sd is not None else None, stddev=sd,
                   min=min(vals), median=statistics.median(vals), max=max(vals))


def mean_stderr(values: Sequence[float]) -> tuple[float | None, float | None]:
    s = summarize(values)
    return (s.mean, s.stderr) if s else (None, None)


@dataclass(frozen=True)
class Difference:
    """B − A of two means by Welch's t-test: the two-sided p-value and the confidence interval of B − A."""

    diff: float
    p: float
    low: float
    high: float
    df: float | None


def welch(a: Summary, b: Summary, confidence: float) -> Difference | None:
    """Welch's unequal-variances t-test of mean B − mean A, from each side's n, mean and sample stddev.

    None when either side has fewer than two values (there is no spread to test against). Two samples
    without any spread differ for certain when their means differ, and not at all when they are equal."""
    from scipy import stats as sps

    if a.n < 2 or b.n < 2 or a.stddev is None or b.stddev is None:
        return None
    diff = b.mean - a.mean
    va, vb = a.stddev ** 2 / a.n, b.stddev ** 2 / b.n
    se = math.sqrt(va + vb)
    if se == 0:
        return Difference(diff, 0.0 if diff else 1.0, diff, diff, None)
    df = (va + vb) ** 2 / (va ** 2 / (a.n - 1) + vb ** 2 / (b.n - 1))
    p = float(2 * sps.t.sf(abs(diff) / se, df))
    half = float(sps.t.ppf((1 + confidence) / 2, df)) * se
    return Difference(diff, p, diff - half, diff + half, df)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values: rejecting where adjusted p < α keeps the chance of calling any of
    the tested differences real, when none is, below α (family-wise), without Bonferroni's loss of power."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    out = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out
