"""``record: true``: a driver that passes every call to the real one and writes one row per data operation.

:class:`RecordingDriver` wraps a client's driver for the whole cell; only the timed regions are recorded
(:meth:`start_phase` … :meth:`take`), so untimed set-up and clean-up never appear. A row is the time the
operation was issued (``perf_counter_ns``), its kind (the trace model's codes), the file (an index into the
names this client opened), offset, length, the vector read it belongs to and the stream (the handle it went
through: every ``open`` starts a stream, whole-object calls — ``put``, ``get_into``, ``FastOps`` create and
read — are an open, one transfer and a close on a stream of their own).

Rows go into columns preallocated for ``bound`` operations per client and phase; the index is taken from an
``itertools.count`` (atomic under the GIL, so ``iodepth`` threads may share the driver). Beyond the bound
nothing more is written and what was dropped is counted. Lengths are what was asked for — ``len(buf)`` of a
``pread``/``pwrite``, each range of a ``preadv`` —, as XRootD logs them too; the pre-bound ``reader``/``writer``
callables record what they returned (their callers check it against what they asked). A native engine would
bypass the driver: :meth:`native_io` says ``recording`` and the kernel takes its Python loop.
"""

from __future__ import annotations

import itertools
import threading
import time
from array import array
from typing import Any

import numpy as np

from ..traces.model import CLOSE, OPEN, READ, READV, WRITE
from .base import Driver, FastOps, Handle, NativeIO

DEFAULT_BOUND = 100_000
RECORDING = NativeIO(kind="recording")  # what native_io says while recording: the kernel runs its Python loop
ROW_DTYPE = np.dtype([("t_ns", "i8"), ("kind", "u1"), ("file", "i4"), ("offset", "i8"), ("length", "i8"),
                      ("request", "i8"), ("stream", "i4"), ("thread", "i4")])
_COLUMNS = (("t_ns", "q"), ("kind", "B"), ("file", "i"), ("offset", "q"), ("length", "q"), ("request", "q"),
            ("stream", "i"), ("thread", "i"))


def recorded_note(taken: dict[str, Any]) -> str:
    """The warning a recorded phase carries: what recording cost — or, where nothing went through the driver (a
    phase whose I/O is done by other programs, or none at all), that nothing was recorded and so nothing cost more."""
    n = len(taken["rows"])
    if n == 0 and not taken["dropped"]:
        return ("record: true: nothing was recorded in this phase: none of its I/O went through storeval's driver "
                "(the trace of this phase is empty)")
    message = (f"record: true: {n} operations recorded through the Python loop, each costing about "
               f"0.3-0.8 µs more (measured on tmpfs): a few % on a network target, much more at page-cache speed")
    if taken["dropped"]:
        message += f"; {taken['dropped']} more beyond the bound of {taken['bound']} were not recorded"
    return message


class RecordingDriver:
    """The client's driver with every data call recorded; everything else is the wrapped driver's own."""

    def __init__(self, inner: Driver, bound: int = DEFAULT_BOUND) -> None:
        self.inner, self.bound = inner, int(bound)
        self._cols = [array(code, bytes(array(code).itemsize * self.bound)) for _, code in _COLUMNS]
        self._next = itertools.count()
        self._streams = itertools.count()
        self._requests = itertools.count()
        self._files: dict[str, int] = {}
        # id(handle) -> (file, stream): drivers' handles use __slots__, so the mapping cannot live on them
        self._handles: dict[int, tuple[int, int]] = {}
        self._threads: dict[int, int] = {}  # threading.get_ident() -> 0, 1, … in the order threads first record
        self._thread_ids = itertools.count()
        self._on = False
        self._clock = time.perf_counter_ns

    def __getattr__(self, name: str) -> Any:  # caps, stat, mkdir, remove, native, layout, … of the real driver
        return getattr(self.inner, name)

    # -- the recording ------------------------------------------------------------------------------------
    def start_phase(self) -> None:
        """Record from now on (the phase's timed region begins)."""
        self._next = itertools.count()
        self._streams = itertools.count()
        self._requests = itertools.count()
        self._files = {}
        self._handles = {}  # a handle still open from before is a stream of this phase on first use
        self._threads, self._thread_ids = {}, itertools.count()
        self._on = True

    def take(self) -> dict[str, Any]:
        """Stop recording; the phase's rows (a ROW_DTYPE array), the file names and how many were dropped."""
        self._on = False
        total = next(self._next)
        n = min(total, self.bound)
        rows = np.empty(n, ROW_DTYPE)
        for (name, _), col in zip(_COLUMNS, self._cols):
            rows[name] = np.frombuffer(col, dtype=col.typecode, count=n)
        files = [name for name, _ in sorted(self._files.items(), key=lambda kv: kv[1])]
        return {"rows": rows, "files": files, "dropped": total - n, "bound": self.bound}

    def _row(self, kind: int, file: int, offset: int, length: int, stream: int, request: int = -1,
             t: int | None = None) -> None:
        i = next(self._next)
        if i >= self.bound:
            return
        t_ns, kinds, files, offsets, lengths, requests, streams, threads = self._cols
        t_ns[i] = self._clock() if t is None else t
        threads[i] = self._thread()
        kinds[i] = kind
        files[i] = file
        offsets[i] = offset
        lengths[i] = length
        requests[i] = request
        streams[i] = stream

    def _thread(self) -> int:
        ident = threading.get_ident()
        n = self._threads.get(ident)
        return self._threads.setdefault(ident, next(self._thread_ids)) if n is None else n

    def _file(self, path: str) -> int:
        index = self._files.get(path)
        if index is None:
            index = self._files.setdefault(path, len(self._files))
        return index

    # -- data calls -----------------------------------------------------------------------------------------
    def open(self, path: str, mode: str, *, direct: bool = False) -> Handle:
        t = self._clock()
        h = self.inner.open(path, mode, direct=direct)
        if self._on:
            stream = next(self._streams)
            self._handles[id(h)] = (self._file(path), stream)
            self._row(OPEN, self._handles[id(h)][0], 0, 0, stream, t=t)
        return h

    def close(self, h: Handle) -> None:
        t = self._clock()
        self.inner.close(h)
        where = self._handles.pop(id(h), None)
        if self._on and where is not None:
            self._row(CLOSE, where[0], 0, 0, where[1], t=t)

    def _where(self, h: Handle) -> tuple[int, int]:
        where = self._handles.get(id(h))
        if where is None:  # opened before the phase began: a stream of its own, its file by path
            where = self._handles[id(h)] = (self._file(h.path), next(self._streams))
        return where

    def pread(self, h: Handle, buf: Any, offset: int) -> int:
        if self._on:
            f, s = self._where(h)
            self._row(READ, f, offset, len(buf), s)
        return self.inner.pread(h, buf, offset)

    def pwrite(self, h: Handle, buf: Any, offset: int) -> int:
        if self._on:
            f, s = self._where(h)
            self._row(WRITE, f, offset, len(buf), s)
        return self.inner.pwrite(h, buf, offset)

    def preadv(self, h: Handle, ranges: Any, coalesce: int | None = None) -> list:
        if self._on:
            f, s = self._where(h)
            t, request = self._clock(), next(self._requests)
            for offset, length in ranges:
                self._row(READV, f, offset, length, s, request, t)
        return self.inner.preadv(h, ranges) if coalesce is None else self.inner.preadv(h, ranges, coalesce=coalesce)

    def reader(self, h: Handle, into_buffer: bool = True) -> Any:
        inner = self.inner.reader(h, into_buffer)
        return self._bound(inner, READ, h)

    def writer(self, h: Handle) -> Any:
        return self._bound(self.inner.writer(h), WRITE, h)

    def _bound(self, call: Any, kind: int, h: Handle) -> Any:
        """A reader/writer callable that records what it moved while a phase is recorded (it may be bound
        before the phase begins, and live on into the next)."""
        clock, where, bound, cols, key, thread = self._clock, self._where, self.bound, self._cols, id(h), self._thread
        t_ns, kinds, files, offsets, lengths, requests, streams, threads = cols

        def recorded(bufs: Any, offset: int) -> int:  # the hot path: the row written inline
            if not self._on:
                return call(bufs, offset)
            t = clock()
            n = call(bufs, offset)
            i = next(self._next)
            if i < bound:
                f, s = self._handles.get(key) or where(h)
                t_ns[i] = t
                kinds[i] = kind
                files[i] = f
                offsets[i] = offset
                lengths[i] = n
                requests[i] = -1
                streams[i] = s
                threads[i] = thread()
            return n
        return recorded

    def put(self, path: str, data: Any) -> None:
        t = self._clock()
        self.inner.put(path, data)
        if self._on:
            self._whole(WRITE, path, len(data), t)

    def get_into(self, path: str, buf: Any) -> int:
        t = self._clock()
        n = self.inner.get_into(path, buf)
        if self._on:
            self._whole(READ, path, n, t)
        return n

    def _whole(self, kind: int, path: Any, n: int, t: int) -> None:
        f, s = self._file(str(path)), next(self._streams)
        self._row(OPEN, f, 0, 0, s, -1, t)
        self._row(kind, f, 0, n, s, -1, t)
        self._row(CLOSE, f, 0, 0, s, -1, t)

    def fast_ops(self) -> FastOps:
        ops = self.inner.fast_ops()
        whole, clock = self._whole, self._clock

        def create(path: Any, data: Any) -> Any:
            t = clock()
            out = ops.create(path, data)
            if self._on:
                whole(WRITE, path, len(data), t)
            return out

        def read(path: Any, buf: Any) -> int:
            t = clock()
            n = ops.read(path, buf)
            if self._on:
                whole(READ, path, n, t)
            return n
        return FastOps(mkdir=ops.mkdir, rmdir=ops.rmdir, stat=ops.stat, listdir=ops.listdir, create=create,
                       read=read, remove=ops.remove)

    def native_io(self, h: Handle | None = None) -> NativeIO:
        return RECORDING

__all__ = ["DEFAULT_BOUND", "RECORDING", "ROW_DTYPE", "RecordingDriver"]
