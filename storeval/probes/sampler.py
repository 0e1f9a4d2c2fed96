"""The side process that samples system counters while a cell runs: every ``interval`` seconds, faster at first.

A cell's first seconds are sampled every 0.1 s, the interval doubling every 20 samples up to ``interval``
(``intervals``): sub-second phases show as curves rather than one dot, at a bounded cost.

It runs beside the clients, never inside them, so sampling costs them nothing; its samples (cumulative
counters with ``perf_counter_ns`` timestamps, the clock the clients' records use, and the name of the host
that took them) become the ``samples`` table and the report's timelines. Under MPI every host's leader runs
one for its own host (engine/mpi.py): an emulated node's samples are its own namespace's interfaces.

Each sample is sent as soon as it is taken, through a pipe the coordinator drains while it watches the
clients (:class:`Sampler`), so stopping costs one last sample and never a long wait: the coordinator
waits for the end of the stream *or* the side process's death, and a short grace at most. The side
process follows the coordinator itself (a pidfd), not its parent (the fork server, which outlives a
killed coordinator as long as any of its children runs), so it never outlives the run.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import time
from typing import Any

from .cgroup import read_server_groups
from .counters import flatten, snapshot
from .links import link_counters
from .server import read_server_processes

END = None  # the last message of the stream
FAST_INTERVAL = 0.1  # seconds between the first samples of a cell: a sub-second phase gets several
FAST_SAMPLES = 20  # samples taken at each interval before it doubles, up to the study's probe_interval


def intervals(interval: float):
    """The adaptive schedule: FAST_SAMPLES samples FAST_INTERVAL apart, then FAST_SAMPLES at twice that, and so
    on up to ``interval`` — a cell's short first phases are seen at 0.1 s, a long cell costs at most
    FAST_SAMPLES × log2(interval / FAST_INTERVAL) samples more than sampling every ``interval``."""
    step = min(interval, FAST_INTERVAL)
    while True:
        for _ in range(FAST_SAMPLES if step < interval else 1):
            yield step
        step = min(interval, step * 2)


def sampler_main(pids: dict[str, int], interval: float, conn: Any, coordinator: int,
                 links: dict[str, Any] | None = None, servers: tuple[int, ...] = ()) -> None:
    """Sample until the coordinator says stop (any message on ``conn``, or its end of it closing) or ends."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's to handle
    from ..core.process import set_process_name

    set_process_name("storeval-probe")
    host = socket.gethostname()  # this process's UTS namespace: an emulated node's own name
    try:
        watch = os.pidfd_open(coordinator)
    except OSError:  # already gone (or no pidfds): nobody will read the samples
        return

    def take() -> None:
        t = time.perf_counter_ns()
        snap = snapshot(pids)
        if servers:  # the target's server processes on this host: their CPU, I/O wait and I/O (probes/server.py)
            snap["server"] = read_server_processes(list(servers))
            groups = read_server_groups(list(servers))
            if groups:
                snap["server_group"] = groups
        if links:  # the emulated hosts and links (probes/links.py)
            snap["link"] = link_counters(links)
        conn.send([(t, probe, device, metric, value, host) for probe, device, metric, value in flatten(snap)])

    try:
        take()
        for wait in intervals(interval):
            ready, _, _ = select.select([conn, watch], [], [], wait)
            if watch in ready:  # the coordinator ended: nobody will read the samples
                return
            if ready:
                break
            take()
        take()
        conn.send(END)
    except (BrokenPipeError, EOFError, OSError):  # the coordinator stopped listening
        pass
    finally:
        conn.close()


class Sampler:
    """The coordinator's handle on one cell's probe side process (every engine's: it samples this host)."""

    def __init__(self, ctx: Any, pids: dict[str, int], interval: float, links: dict[str, Any] | None = None,
                 servers: tuple[int, ...] = ()) -> None:
        self.rows: list[tuple[int, str, str, str, float, str]] = []  # (t_ns, probe, device, metric, value, host)
        # one duplex pipe: samples come back on it, and a word on it (or its closing) says stop. Not an
        # Event: setting one waits for every process waiting on it to wake, a killed one never does.
        self.conn, theirs = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=sampler_main,
                                args=(pids, interval, theirs, os.getpid(), links, tuple(servers)),
                                name="storeval-sampler", daemon=True)
        try:
            self.proc.start()
        finally:
            theirs.close()
        self.ended = False

    @property
    def pid(self) -> int | None:
        return self.proc.pid

    def wait_first(self, patience: float) -> None:
        """Wait (at most ``patience`` seconds) for the first sample: a cell started after it is sampled from
        its beginning, even when the side process was slow to start."""
        try:
            if not self.rows and not self.ended and self.conn.poll(patience):
                self._receive()
        except (EOFError, OSError):
            self.ended = True

    def drain(self) -> None:
        """Take whatever samples arrived (called while the clients run: the side process never blocks long)."""
        try:
            while not self.ended and self.conn.poll():
                self._receive()
        except (EOFError, OSError):
            self.ended = True

    def _receive(self) -> None:
        batch = self.conn.recv()
        if batch is END:
            self.ended = True
        else:
            self.rows.extend(batch)

    def stop(self, grace: float) -> list[tuple[int, str, str, str, float, str]]:
        """Ask for the last sample and end the side process; wait for it at most ``grace`` seconds (never for
        a process that is gone). Returns every sample received."""
        from multiprocessing.connection import wait

        try:
            self.conn.send("stop")
        except OSError:  # it is gone
            pass
        deadline = time.monotonic() + grace
        try:
            while not self.ended:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                ready = wait([self.conn, self.proc.sentinel], timeout=left)
                if self.conn in ready:
                    self._receive()
                elif ready:  # it ended without the end of the stream: what it sent is all there is
                    self.drain()
                    break
        except (EOFError, OSError):
            pass
        self.proc.join(timeout=max(0.0, min(1.0, deadline - time.monotonic())))
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=1)
        self.conn.close()
        return self.rows


def start_sampler(ctx: Any, pids: dict[str, int], interval: float, links: dict[str, Any] | None = None,
                  servers: tuple[int, ...] = ()) -> Sampler | None:
    """The probe side process of a cell, or None when sampling is off; ``servers``: the target's server
    processes on this host, sampled beside it."""
    if not interval or interval <= 0:
        return None
    return Sampler(ctx, pids, interval, links, servers)
