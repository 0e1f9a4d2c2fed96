"""fio's I/O logs (``--write_iolog``), versions 2 and 3, as a trace.

fio 3.33 writes version 3 (measured: ``fio --write_iolog=F`` starts the file with ``fio version 3 iolog``)::

    fio version 3 iolog
    18 /data/f add
    96 /data/f open
    102 /data/f read 0 4096
    100078 /data/f read 4096 4096
    1501830 /data/f close

The leading number is the time since the job started in **microseconds** (fio's documentation gives no unit;
a job at ``rate_iops=10`` logs its reads 100,000 apart). Version 2 (fio 1.17 to 3.30) has no timestamps; its
``wait N`` lines (microseconds since the previous wait; version 3 has none) are the only times it carries —
without them every operation is at t = 0 and the trace is untimed (``resolution`` None: replay it closed-loop).

One log is one fio job: one stream (named after the log file), in the order fio issued its I/O. ``add`` names a
file, ``open``/``close`` are open and close rows, ``read``/``write`` data rows; ``sync``, ``datasync`` and
``trim`` have no kind in the model and are counted in the notes. File sizes come from the furthest operation
(fio does not log them). Each job needs its own log (fio appends to the file; jobs sharing one are interleaved).
"""

from __future__ import annotations

from pathlib import Path

from . import MAX_TIME, bad, check_extent, check_name, open_text
from .model import CLOSE, OPEN, READ, WRITE, Trace, TraceBuilder

_ACTIONS = {"read": READ, "write": WRITE}
_FILE_ACTIONS = {"open": OPEN, "close": CLOSE}
_SKIPPED = ("sync", "datasync", "trim")


def parse_fio(path: str) -> Trace:
    b = TraceBuilder("fio", path, 1e-6)
    stream = b.stream(Path(path).name)
    skipped: dict[str, int] = {}
    version = None
    clock_us = 0  # v2: the sum of the waits so far
    waits = False
    with open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            fields = line.split()
            if not fields:
                continue
            if version is None:
                if line.strip() not in ("fio version 2 iolog", "fio version 3 iolog"):
                    raise bad(path, lineno, f"starts with {line.strip()[:40]!r}, not 'fio version 2|3 iolog'",
                              "give a log fio wrote with --write_iolog (versions 2 and 3 are read)")
                version = int(fields[2])
                continue
            if version == 3:
                try:
                    t_us = int(fields[0])
                except ValueError:
                    raise bad(path, lineno, f"timestamp {fields[0]!r} is not a whole number",
                              "a version 3 line starts with its time in microseconds") from None
                if not 0 <= t_us <= MAX_TIME * 1e6:
                    raise bad(path, lineno, f"timestamp {fields[0][:30]!r} is not between 0 and 1e21 µs",
                              "a version 3 line starts with its time in microseconds since the job started")
                fields = fields[1:]
            else:
                t_us = clock_us
            if len(fields) not in (2, 4):
                raise bad(path, lineno, f"{len(fields)} fields after the time" if version == 3 else
                          f"{len(fields)} fields", "give 'FILE ACTION' or 'FILE ACTION OFFSET LENGTH'")
            name, action = check_name(path, lineno, "file", fields[0]), fields[1]
            if len(fields) == 2:
                if action == "add":
                    b.file(name)
                elif action in _FILE_ACTIONS:
                    b.add(stream, t_us * 1e-6, _FILE_ACTIONS[action], b.file(name))
                else:
                    raise bad(path, lineno, f"file action {action!r} is unknown", "use add, open or close")
                continue
            try:
                offset, length = int(fields[2]), int(fields[3])
            except ValueError:
                raise bad(path, lineno, "offset and length are not whole numbers", "give them in bytes") from None
            if action == "wait":
                if version == 3:
                    raise bad(path, lineno, "a wait line in a version 3 log", "version 3 times every line itself")
                if not 0 <= offset <= MAX_TIME * 1e6:
                    raise bad(path, lineno, f"wait {offset} is not between 0 and 1e21 µs",
                              "give waits in microseconds")
                clock_us += offset
                if clock_us > MAX_TIME * 1e6:
                    raise bad(path, lineno, "the waits add up to more than 1e21 µs", "give waits in microseconds")
                waits = True
            elif action in _ACTIONS:
                if offset < 0 or length < 0:
                    raise bad(path, lineno, "a negative offset or length", "give them in bytes")
                check_extent(path, lineno, offset, length)
                b.add(stream, t_us * 1e-6, _ACTIONS[action], b.file(name), offset, length)
            elif action in _SKIPPED:
                skipped[action] = skipped.get(action, 0) + 1
            else:
                raise bad(path, lineno, f"action {action!r} is unknown",
                          "use read, write, sync, datasync, trim (or wait in version 2)")
    if version is None:
        raise bad(path, None, "is empty", "give a log fio wrote with --write_iolog")
    if version == 2 and not waits:
        b.resolution = None
        b.note("fio iolog v2 carries no times: every operation at t = 0 (replay it closed-loop)")
    elif version == 2:
        b.note("fio iolog v2: times from its wait lines only (operations between two waits share one time)")
    if skipped:
        b.note("fio actions with no kind in the trace left out: " +
               ", ".join(f"{n} {a}" for a, n in sorted(skipped.items())))
    b.header = {"fio_iolog_version": version}
    return b.build()


__all__ = ["parse_fio"]
