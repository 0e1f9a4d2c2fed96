"""The null driver: every operation succeeds at once and moves no data.

Like IOR's DUMMY backend and fio's null engine it measures storeval's own cost
per operation (the ceiling of what the tool can report) and lets the engine be
tested without storage. The ``misbehave`` option makes one client (or every
client) fail, hang, die or pause after a number of operations, which is how the
engine's failure handling and stall detection are tested.
"""

from __future__ import annotations

import os
import time
from typing import Literal

from ..fields import Duration
from .base import Capabilities, Driver, DriverOptions, Handle, IOFunc, StatResult


class Misbehave(DriverOptions):
    client: int | Literal["all"] = 0  # which client misbehaves ("all": every client, each on its own count)
    after_ops: int = 0
    action: Literal["raise", "hang", "exit", "pause"] = "raise"
    seconds: Duration = 3.0  # how long ``pause`` stops (once, like a server that freezes and comes back)


class NullOptions(DriverOptions):
    misbehave: Misbehave | None = None


class NullDriver(Driver):
    scheme = "null"
    Options = NullOptions
    caps = Capabilities(random_write=True, direct_io=True, vector_read=True, directories=True,
                        append_only=False, fsync=True, shared_write=True)
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
            if fault.action == "pause":
                self._fault = None
                time.sleep(fault.seconds)
                return
            while True:  # hang
                time.sleep(3600)

    def open(self, path: str, mode: str, *, direct: bool = False) -> Handle:
        return Handle(path, mode, direct)

    def pread(self, h, buf, offset: int) -> int:
        self._tick()
        return len(buf)

    def pwrite(self, h, buf, offset: int) -> int:
        self._tick()
        return len(buf)

    def close(self, h) -> None:
        pass

    def reader(self, h, into_buffer: bool = True) -> IOFunc:
        if self._fault is None:
            return lambda bufs, offset: len(bufs[0])
        return lambda bufs, offset: self.pread(h, bufs[0], offset)

    def writer(self, h) -> IOFunc:
        return self.reader(h)

    def put(self, path: str, data) -> None:
        self._tick()

    def get_into(self, path: str, buf) -> int:
        self._tick()
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
