"""The ``storeval`` trace format: what ``record: true`` writes, one gzip-compressed JSONL file per phase.

The first line is the header ``{"storeval_trace": 1, "run": ..., "cell": ..., "phase": ..., "iteration": ...,
"workload": ..., "kind": ..., "target": ..., "clients": N, "bound": B, "dropped": {"rank": n, ...}}`` (the
target by its name in the study, never its URL); every other line one operation in storeval's JSONL format
(:mod:`.table`): ``t`` in seconds on the coordinator's clock (ns resolution), ``stream`` ``c<rank>`` — one
stream per client, its handles inside it in time order, so a replay keeps each client's order (``c<rank>.t<n>``
per thread where the recorder says which thread issued each row and a client ran more than one) —,
``op``, ``file`` (the path the client used, relative to the target), ``offset``, ``length`` and, for the
elements of a vector read, ``request`` (``<rank>.<n>``). :func:`storeval.traces.load_trace` reads it back.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from collections.abc import Iterable
from typing import Any

import numpy as np

from .model import KINDS, READV
from .table import STOREVAL_VERSION


def render(header: dict[str, Any], parts: Iterable[tuple[int, int, np.ndarray, list[str]]]) -> bytes:
    """The file's bytes: ``parts`` are (rank, the record's start on the coordinator's clock in ns, its rows
    with times from that start, its file names)."""
    lines = [json.dumps({"storeval_trace": STOREVAL_VERSION, **header}, sort_keys=False)]
    ops = [json.dumps(k) for k in KINDS]
    for rank, start_ns, rows, files in parts:
        names = [json.dumps(f) for f in files]
        t = (rows["t_ns"] + start_ns) / 1e9
        threads = rows["thread"] if "thread" in (rows.dtype.names or ()) else None
        if threads is not None and len(np.unique(threads)) < 2:
            threads = None
        for i in range(len(rows)):
            kind = int(rows["kind"][i])
            stream = f"c{rank}" if threads is None else f"c{rank}.t{int(threads[i])}"
            line = (f'{{"t": {t[i]:.9f}, "stream": "{stream}", "op": {ops[kind]}, '
                    f'"file": {names[int(rows["file"][i])]}, "offset": {int(rows["offset"][i])}, '
                    f'"length": {int(rows["length"][i])}')
            if kind == READV:
                line += f', "request": "{rank}.{int(rows["request"][i])}"'
            lines.append(line + "}")
    return gzip.compress(("\n".join(lines) + "\n").encode(), compresslevel=6)


def write_new(path: str, data: bytes) -> None:
    """Write ``data`` to a new file ``path`` (never over an existing one), through a temporary file beside it."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".trace-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.link(tmp, path)
    finally:
        os.unlink(tmp)


__all__ = ["render", "write_new"]
