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
