"""The null driver: every operation succeeds at once and moves no data.

Like IOR's DUMMY backend and fio's null engine it measures storeval's own cost
per operation (the ceiling of what the tool can report) and lets the engine be
tested without storage. The ``misbehave`` option makes one client (or every
client) fail, hang, die, pause or stop unasked after a number of operations, which is how the
engine's failure handling and stall detection are tested. The ``rate`` option makes
it a target of known speed: each client's transfers are paced with sleeps to at
most that many bytes per second, so a change of speed made on purpose is known
exactly, and CPU-bound work beside the test does not change it.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Literal

from ..fields import Duration, Rate
from pydantic import Field, field_validator

from ..core.stop import ClientStopped
from .base import Capabilities, Driver, DriverOptions, Handle, IOFunc, NativeIO, StatResult


class Misbehave(DriverOptions):
    client: int | Literal["all"] = Field(0, description="which client misbehaves: its rank, or all (every client, "
                                                        "each on its own count)")
    after_ops: int = Field(0, description="operations the client does well before it misbehaves")
    action: Literal["raise", "hang", "exit", "pause", "stop"] = Field(
        "raise", description="what it does: raise an error, hang, exit, pause for seconds, or stop (as if asked to, "
                             "though nothing asked)")
    seconds: Duration = Field(3.0, description="how long pause stops (once, like a server that freezes and comes "
                                               "back)")


class NullOptions(DriverOptions):
    misbehave: Misbehave | None = Field(None, description="make a client fail on purpose (storeval's own tests of "
                                                          "failure handling)")
    rate: Rate | None = Field(None, description="bytes/s per client (e.g. 200MiB/s, 1Gbit): transfers are paced "
                                                "with sleeps to this (none: as fast as possible)")

    @field_validator("rate")
    @classmethod
    def _positive(cls, v: float | None) -> float | None:
        if v is not None and v <= 0:
            raise ValueError("rate must be more than 0 bytes/s (leave it out for no limit)")
        return v


class Pace:
    """Transfers of one open file at ``rate`` bytes/s: each returns when the bytes moved since the open are
    due. Due times count from the open (the start of the timed work, so the figure is the rate itself, not
    the rate less a start-up cost); a wake-up late by the scheduler is made up by the next transfers, so a busy
    host does not lower the rate."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.start = time.perf_counter()
        self.moved = 0
        self.lock = threading.Lock()  # iodepth threads share one file's pace

    def __call__(self, n: int) -> int:
        with self.lock:
            now = time.perf_counter()
            self.moved += n
            due = self.start + self.moved / self.rate
        if due > now:
            time.sleep(due - now)
        return n


class NullHandle(Handle):
    __slots__ = ("pace",)

    def __init__(self, path: str, mode: str, direct: bool, pace: Pace | None) -> None:
        super().__init__(path, mode, direct)
        self.pace = pace


class NullDriver(Driver):
    scheme = "null"
    Options = NullOptions
    caps = Capabilities(random_write=True, direct_io=True, vector_read=True, directories=True,
                        append_only=False, fsync=True, shared_write=True, keeps_data=False)
    url_parts = frozenset({"host", "path"})  # a label (null://a, null://b): nothing is read from it

    def __init__(self, url, options=None, *, client: int = -1) -> None:
        super().__init__(url, options, client=client)
        fault = self.options.misbehave
        mine = fault is not None and (fault.client == client or (fault.client == "all" and client >= 0))
        self._fault = fault if mine else None  # the coordinator (client -1) never misbehaves
        self._ops = 0

    def _tick(self) -> None:
        self._ops += 1
        fault = self._fault
        if fault is not None and self._ops > fault.after_ops:
            if fault.action == "raise":
                raise OSError(5, f"null driver: injected failure on client {self.client}")
            if fault.action == "exit":
                os._exit(17)
            if fault.action == "stop":
                raise ClientStopped()
            if fault.action == "pause":
                self._fault = None
                time.sleep(fault.seconds)
                return
            while True:  # hang
                time.sleep(3600)

    def open(self, path: str, mode: str, *, direct: bool = False) -> Handle:
        rate = self.options.rate
        return NullHandle(path, mode, direct, Pace(rate) if rate is not None else None)

    @staticmethod
    def _moved(h, n: int) -> int:
        return h.pace(n) if h.pace is not None else n

    def pread(self, h, buf, offset: int) -> int:
        self._tick()
        return self._moved(h, len(buf))

    def pwrite(self, h, buf, offset: int) -> int:
        self._tick()
        return self._moved(h, len(buf))

    def close(self, h) -> None:
        pass

    def reader(self, h, into_buffer: bool = True) -> IOFunc:
        pace = h.pace
        if self._fault is None:
            if pace is not None:
                return lambda bufs, offset: pace(len(bufs[0]))
            return lambda bufs, offset: len(bufs[0])
        return lambda bufs, offset: self.pread(h, bufs[0], offset)

    def writer(self, h) -> IOFunc:
        return self.reader(h)

    def native_io(self, h=None) -> NativeIO | None:
        """Timing only, no system call (fio's ioengine=null); not when this client paces (``rate``) or
        misbehaves on purpose: those stay in the driver's own calls."""
        if self._fault is not None or self.options.rate is not None:
            return None
        return NativeIO("null")

    def put(self, path: str, data) -> None:
        self._tick()
        if self.options.rate is not None:
            Pace(self.options.rate)(len(data))

    def get_into(self, path: str, buf) -> int:
        self._tick()
        if self.options.rate is not None:
            Pace(self.options.rate)(len(buf))
        return len(buf)

    def stat(self, path: str) -> StatResult:
        self._tick()
        return StatResult(size=0, is_dir=False)

    def mkdir(self, path: str) -> None:
        self._tick()

    def rmdir(self, path: str) -> None:
        self._tick()

    def remove(self, path: str) -> None:
        self._tick()

    def listdir(self, path: str) -> list[str]:
        self._tick()
        return []

    def exists(self, path: str) -> bool:
        return False

    @classmethod
    def carrier(cls, url: str, options=None):
        """No bytes travel: storeval's own ceiling."""
        from .carrier import Carrier

        return Carrier(medium="none")
