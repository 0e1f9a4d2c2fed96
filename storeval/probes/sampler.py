"""The side process that samples system counters every ``interval`` seconds while a cell runs.

It runs beside the clients, never inside them, so sampling costs them nothing; its samples (cumulative
counters with ``perf_counter_ns`` timestamps, the clock the clients' records use) become the ``samples``
table and the report's timelines.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from .counters import flatten, snapshot


def sampler_main(pids: dict[str, int], interval: float, stop: Any, out: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's to handle
    from ..engine.records import set_process_name

    set_process_name("storeval-probe")
    rows: list[tuple[int, str, str, str, float]] = []

    def take() -> None:
        t = time.perf_counter_ns()
        rows.extend((t, probe, device, metric, value) for probe, device, metric, value in flatten(snapshot(pids)))

    parent = os.getppid()
    take()
    while not stop.wait(interval):
        if os.getppid() != parent:  # orphaned: the coordinator was killed; nobody will ever read the samples
            return
        take()
    take()
    out.put(rows)
    out.close()
    out.join_thread()
