"""The trace model: what a recorded application did, as plain numpy data every parser produces and ``replay``
reads.

A trace is a list of files and a list of streams (one connection, file handle, fio job or storeval client),
each stream a structured array of operations (:data:`OP_DTYPE`) in time order. Nothing here is a Python object
per operation: a trace of millions of operations is a few arrays, so every replay client can parse it in its
``prepare``. A vector read is one row per element; the rows of one request are consecutive in their stream
and share a request id (unique in the whole trace), so the request structure survives without nesting.

:class:`TraceBuilder` is how parsers build a trace: columns grow in ``array.array`` (no per-row objects), file
names are interned to indices, and :meth:`TraceBuilder.build` sorts each stream by time (stably: the elements
of one vector read stay together), puts the first operation at t = 0 and sizes the files from the operations
that touch them unless the format stated a size.

Beyond the shared design: ``Trace.resolution`` is None for a trace without times (fio v2 without waits),
``Trace.timed``, ``Trace.header`` (what the format says of itself), ``Trace.operations()`` and ``Trace.counts()``.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError

MAX_SPAN = 1e7  # seconds from a trace's first operation to its last that a replay schedules (115 days)

KINDS = ("open", "close", "read", "write", "readv")  # index = the kind code in OP_DTYPE
OPEN, CLOSE, READ, WRITE, READV = range(5)
KIND_CODES = {name: code for code, name in enumerate(KINDS)}
DATA_KINDS = (READ, WRITE, READV)

OP_DTYPE = np.dtype([("t", "f8"),  # seconds since the trace's first operation (any stream)
                     ("kind", "u1"),  # KINDS index
                     ("file", "i4"),  # index into Trace.files (-1: unknown file)
                     ("offset", "i8"), ("length", "i8"),  # bytes; 0/0 for open and close
                     ("request", "i8")])  # readv: the rows of ONE vector read are consecutive and share an id >= 0


@dataclass(frozen=True)
class TraceFile:
    """A file the trace names. ``size`` is what the format states (``size_known``) or else the end of the
    furthest operation on it (max offset + length), which is what a replay must lay out at least."""

    name: str
    size: int
    size_known: bool


@dataclass
class Stream:
    """One connection / file handle / fio job / storeval client: its operations in time order."""

    name: str
    ops: np.ndarray  # OP_DTYPE


@dataclass
class Trace:
    """A parsed trace. ``resolution`` is the timestamps' resolution in seconds (XRootD logs 1.0, fio v3 1e-6,
    storeval 1e-9), or None when the format has no times (fio iolog v2: every t is 0, replay it closed-loop).
    ``notes`` say what the parser could not know and assumed; a replay repeats them in its report."""

    format: str  # "xrootd", "fio", "csv", "jsonl", "storeval"
    source: str  # the path it was read from
    files: list[TraceFile]
    streams: list[Stream]
    resolution: float | None
    notes: tuple[str, ...] = ()
    header: dict = field(default_factory=dict)  # what the format says of itself (storeval: run, cell, phase …)

    @property
    def timed(self) -> bool:
        return self.resolution is not None

    def _column(self, kind: int, name: str) -> np.ndarray:
        parts = [s.ops[name][s.ops["kind"] == kind] for s in self.streams]
        return np.concatenate(parts) if parts else np.zeros(0, OP_DTYPE[name])

    def bytes(self, kind: int) -> int:
        """Bytes of every operation of ``kind`` (a readv: the sum of its elements)."""
        return int(self._column(kind, "length").sum())

    def elements(self, kind: int) -> int:
        """Rows of ``kind``: operations, or for readv the elements of all vector reads."""
        return sum(int(np.count_nonzero(s.ops["kind"] == kind)) for s in self.streams)

    def requests(self, kind: int) -> int:
        """Requests of ``kind``: the distinct request ids for readv, the rows for every other kind."""
        if kind != READV:
            return self.elements(kind)
        return int(np.unique(self._column(READV, "request")).size)

    def operations(self) -> int:
        """Rows in all streams."""
        return sum(len(s.ops) for s in self.streams)

    def duration(self) -> float:
        """Seconds from the first operation to the last (any stream)."""
        ends = [float(s.ops["t"][-1]) for s in self.streams if len(s.ops)]
        return max(ends, default=0.0)

    def counts(self) -> dict[str, dict[str, int]]:
        """Per kind name: ``ops`` (rows), ``requests`` and ``bytes`` — what a replay must reproduce."""
        return {KINDS[k]: {"ops": self.elements(k), "requests": self.requests(k), "bytes": self.bytes(k)}
                for k in range(len(KINDS))}


class TraceBuilder:
    """Collects operations stream by stream while a parser reads its input, then builds the :class:`Trace`."""

    def __init__(self, format: str, source: str, resolution: float | None):
        self.format, self.source, self.resolution = format, source, resolution
        self.notes: list[str] = []
        self.header: dict = {}
        self._files: dict[str, int] = {}
        self._stated: dict[int, int] = {}
        self._streams: dict[str, int] = {}
        self._cols: list[tuple[array, array, array, array, array, array]] = []
        self._requests = 0

    def file(self, name: str, size: int | None = None) -> int:
        """The index of file ``name`` (added on first sight); ``size`` when the format states it."""
        index = self._files.get(name)
        if index is None:
            index = self._files[name] = len(self._files)
        if size is not None:
            self._stated[index] = max(int(size), self._stated.get(index, 0))
        return index

    def stream(self, name: str) -> int:
        index = self._streams.get(name)
        if index is None:
            index = self._streams[name] = len(self._cols)
            self._cols.append((array("d"), array("B"), array("i"), array("q"), array("q"), array("q")))
        return index

    def new_request(self) -> int:
        """A request id for the elements of one vector read (unique in the trace)."""
        self._requests += 1
        return self._requests - 1

    def add(self, stream: int, t: float, kind: int, file: int, offset: int = 0, length: int = 0,
            request: int = -1) -> None:
        ts, ks, fs, os_, ls, rs = self._cols[stream]
        ts.append(t)
        ks.append(kind)
        fs.append(file)
        os_.append(offset)
        ls.append(length)
        rs.append(request)

    def drop_last(self, stream: int, kind: int, file: int) -> bool:
        """Take back the last row of ``stream`` if it is a ``kind`` on ``file`` (an open the server refused)."""
        cols = self._cols[stream]
        if not len(cols[0]) or cols[1][-1] != kind or cols[2][-1] != file:
            return False
        for col in cols:
            col.pop()
        return True

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def __len__(self) -> int:
        return sum(len(c[0]) for c in self._cols)

    def build(self) -> Trace:
        arrays = []
        for cols in self._cols:
            ops = np.empty(len(cols[0]), OP_DTYPE)
            for name, col in zip(OP_DTYPE.names, cols):
                ops[name] = np.frombuffer(col, dtype=col.typecode) if len(col) else 0
            arrays.append(ops[np.argsort(ops["t"], kind="stable")])
        starts = [a["t"][0] for a in arrays if len(a)]
        t0 = min(starts, default=0.0)
        for a in arrays:
            a["t"] -= t0
        span = max((float(a["t"][-1]) for a in arrays if len(a)), default=0.0)
        if span > MAX_SPAN:
            raise InputError(f"trace {self.source}: its operations span {span:.3g} s, more than the {MAX_SPAN:.0e} s "
                             "(115 days) a replay schedules; give a trace of one run (are its times in seconds?)")
        extent = np.zeros(len(self._files), np.int64)
        used = np.zeros(len(self._files), bool)
        for a in arrays:
            data = a[(a["file"] >= 0) & (a["kind"] >= READ)]
            np.maximum.at(extent, data["file"], data["offset"] + data["length"])
            used[a["file"][a["file"] >= 0]] = True
        # files no operation names (an open the server refused) are left out; indices are renumbered
        renumber = np.full(len(self._files) + 1, -1, np.int32)  # [-1] stays -1
        renumber[:-1][used] = np.arange(int(used.sum()), dtype=np.int32)
        for a in arrays:
            a["file"] = renumber[a["file"]]
        files = [TraceFile(name, self._stated.get(i, int(extent[i])), i in self._stated)
                 for name, i in self._files.items() if used[i]]
        streams = [Stream(name, arrays[i]) for name, i in self._streams.items()]
        return Trace(self.format, self.source, files, streams, self.resolution, tuple(self.notes), self.header)


__all__ = ["CLOSE", "DATA_KINDS", "KINDS", "KIND_CODES", "OPEN", "OP_DTYPE", "READ", "READV", "WRITE", "Stream",
           "Trace", "TraceBuilder", "TraceFile"]
