"""What one client did in one phase (the unit the store keeps), and how pauses across threads are found."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..histogram import Histogram

NS = 1_000_000_000
GAP_NS = NS  # a pause between two completions of a thread this long or longer is kept (stall detection)
MAX_GAPS = 256  # per thread and phase: memory stays constant however often a target pauses


def quiet_spans(tracks: list[tuple[int, int, list[tuple[int, int]]]], floor_ns: int = GAP_NS) -> list[tuple[int, int]]:
    """(start, length) of the spans, at least ``floor_ns`` long, in which none of ``tracks`` made progress.

    A track is (first, last, gaps): a thread or client that works from ``first`` to its last completion
    ``last``, and its own pauses (start, length) between completions (the first from ``first``). A span
    counts while at least one track is working and every working track is in a pause: a track that has not
    started or has finished neither makes nor blocks a stall."""
    events: list[tuple[int, int, int]] = []  # (time, working change, pausing change)
    for first, last, gaps in tracks:
        if last <= first:
            continue
        events += [(first, 1, 0), (last, -1, 0)]
        for start, length in gaps:
            events += [(start, 0, 1), (min(start + length, last), 0, -1)]
    events.sort()
    spans: list[tuple[int, int]] = []
    working = pausing = 0
    opened = None
    for i, (t, dw, dp) in enumerate(events):
        working += dw
        pausing += dp
        if i + 1 < len(events) and events[i + 1][0] == t:
            continue  # apply every change at this instant before judging what follows it
        quiet = working > 0 and pausing >= working
        if quiet and opened is None:
            opened = t
        elif not quiet and opened is not None:
            if t - opened >= floor_ns:
                spans.append((opened, t - opened))
            opened = None
    return spans



@dataclass
class PhaseRecord:
    """One client's account of one phase: the unit stored in the ``records`` table."""

    rank: int
    host: str
    phase: str
    iteration: int = 0
    bytes: int = 0
    ops: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    start_ns: int = 0
    end_ns: int = 0
    barrier_ns: int = 0
    cpu_user: float = 0.0
    cpu_sys: float = 0.0
    hist: Histogram = field(default_factory=Histogram)
    tl_bytes: list[int] = field(default_factory=list)
    tl_ops: list[int] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def step(self) -> tuple[str, int]:
        return self.phase, self.iteration

    @property
    def seconds(self) -> float:
        return (self.end_ns - self.start_ns) / NS

    @property
    def cpu_seconds(self) -> float:
        return self.cpu_user + self.cpu_sys

    def to_wire(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in ("rank", "host", "phase", "iteration", "bytes", "ops", "errors", "start_ns", "end_ns",
                                             "barrier_ns", "cpu_user", "cpu_sys", "tl_bytes", "tl_ops", "extra")}
        d["hist"] = self.hist.to_dict()
        return d

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> PhaseRecord:
        d = dict(d)
        d["hist"] = Histogram.from_dict(d["hist"])
        return cls(**d)
