"""Traces of real application I/O: one model (:mod:`.model`) and a parser per format.

``load_trace(path, format="auto")`` reads a trace file into a :class:`~.model.Trace`; ``auto`` tells the format
from the content (a gzip-compressed file is read through gzip whatever its format). Anything malformed is an
:class:`~storeval.errors.InputError` of one line naming the file, the line and the fix. The formats and what
each parser assumes are documented in ``docs/traces.md``.
"""

from __future__ import annotations

import gzip
import io
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import InputError
from .model import (CLOSE, KINDS, OP_DTYPE, OPEN, READ, READV, WRITE, Stream, Trace, TraceBuilder,  # noqa: F401
                    TraceFile)

FORMATS = ("xrootd", "fio", "csv", "jsonl", "storeval")
_PROBE_LINES = 200
_XROOTD_LINE = re.compile(r"^\d{6} \d\d:\d\d:\d\d \d+ ")
_XROOTD_PROTOCOL = re.compile(r"\bXrootd_?Protocol:")


def bad(path: str, line: int | None, problem: str, fix: str) -> InputError:
    """The one-line error of a malformed trace: ``trace PATH line N: PROBLEM; FIX``."""
    where = f"trace {path}" + (f" line {line}" if line is not None else "")
    return InputError(f"{where}: {problem}; {fix}")


@contextmanager
def open_text(path: str) -> Iterator[io.TextIOBase]:
    """The trace as text lines, gunzipped if it starts with gzip's magic bytes."""
    try:
        raw = open(path, "rb")
    except OSError as exc:
        raise bad(path, None, f"cannot be read ({exc.strerror})", "give the path of an existing trace file") \
            from None
    with raw:
        compressed = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        stream = gzip.open(raw, "rb") if compressed else raw
        text = io.TextIOWrapper(stream, encoding="utf-8", errors="replace", newline=None)
        try:
            yield text
        except (OSError, EOFError) as exc:  # a truncated gzip stream
            raise bad(path, None, f"is damaged ({exc})", "write the trace again") from None


def detect(path: str) -> str:
    """The format of the trace at ``path``, from its first lines."""
    with open_text(path) as f:
        lines = []
        for line in f:
            if line.strip():
                lines.append(line.strip())
            if len(lines) >= _PROBE_LINES:
                break
    if not lines:
        raise bad(path, None, "is empty", "give a trace with at least one operation")
    first = lines[0]
    if first.startswith("fio version"):
        return "fio"
    if first.startswith("{"):
        return "storeval" if '"storeval_trace"' in first else "jsonl"
    if any(_XROOTD_PROTOCOL.search(line) for line in lines) or all(_XROOTD_LINE.match(line) for line in lines[:3]):
        return "xrootd"
    header = {c.strip().lower() for c in first.split(",")}
    if {"t", "op"} <= header:
        return "csv"
    raise bad(path, 1, "is in no format storeval knows",
              f"give format: one of {', '.join(FORMATS)} (docs/traces.md shows each)")


def _parser(format: str) -> Callable[[str], Trace]:
    if format in ("csv", "jsonl", "storeval"):
        from . import table
        return {"csv": table.parse_csv, "jsonl": table.parse_jsonl, "storeval": table.parse_storeval}[format]
    if format == "xrootd":
        from .xrootd import parse_xrootd
        return parse_xrootd
    if format == "fio":
        from .fio import parse_fio
        return parse_fio
    raise InputError(f"trace format {format!r} is unknown; use auto or one of {', '.join(FORMATS)}")


def load_trace(path: str | Path, format: str = "auto") -> Trace:
    """Read the trace at ``path`` (``format``: ``auto`` or one of :data:`FORMATS`)."""
    path = str(path)
    if format == "auto":
        format = detect(path)
    trace = _parser(format)(path)
    if not trace.operations():
        raise bad(path, None, f"has no operations storeval reads as {format}",
                  "check the format (docs/traces.md) or give another trace")
    return trace


__all__ = ["CLOSE", "FORMATS", "KINDS", "OPEN", "OP_DTYPE", "READ", "READV", "WRITE", "Stream", "Trace",
           "TraceBuilder", "TraceFile", "detect", "load_trace"]
