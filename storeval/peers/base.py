"""What every peer tool's module shares: the imported run as plain data, the one-line errors, size words.

An imported run is made of the same :class:`~storeval.core.records.PhaseRecord` rows a storeval run stores, so
the analysis, report and compare read it as they read their own; only what the peer measured is in them (one
aggregate record per phase and iteration, or one per job where the tool gives them) and a warning on every
record says who timed it.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from ..core.records import NS, PhaseRecord
from ..errors import InputError

MiB = float(1 << 20)
IMPORTED = "imported"  # the code of the warning every imported record carries


@dataclass
class PeerCell:
    """One configuration the peer ran: storeval's workload kind it maps to, the mapped parameters, its records."""

    kind: str  # bandwidth | metadata
    params: dict[str, Any]
    clients: int
    steps: list[tuple[str, int]]  # (phase, iteration) in the order the tool ran them
    records: list[PhaseRecord]
    notes: list[str] = field(default_factory=list)  # what of the tool's output was not imported, and why
    defaults: bool = True  # storeval's defaults may fill what the peer does not set (not where they would invent)


@dataclass
class PeerRun:
    """What one result file holds, with its provenance."""

    tool: str  # ior | mdtest | fio | warp
    version: str | None
    command_line: str | None
    host: str | None
    date: str | None  # when the tool ran, as it wrote it (ISO 8601 where it can be told)
    target: str  # where it ran (a path or an endpoint), the default target name
    url: str
    counting: str  # how the peer counted: what its figures mean
    cells: list[PeerCell]
    source: str = ""  # the file it came from (set by the importer)
    notes: list[str] = field(default_factory=list)

    def provenance(self) -> dict[str, Any]:
        return {"tool": self.tool, "version": self.version, "command_line": self.command_line, "host": self.host,
                "date": self.date, "file": self.source, "counting": self.counting,
                "measured_by": f"imported, measured by {NAMES[self.tool]} — storeval did not time this",
                **({"not_imported": self.notes + [n for c in self.cells for n in c.notes]}
                   if self.notes or any(c.notes for c in self.cells) else {})}


NAMES = {"ior": "IOR", "mdtest": "mdtest", "fio": "fio", "warp": "warp"}


class PeerError(InputError):
    """A result file that cannot be imported: one line naming the file, the problem and the fix (exit 2)."""


class BadFigure(ValueError):
    """A figure no run of the tool measures (negative, infinite, not a number, zero where it divides): the
    loader names the file and says to import it unchanged."""


def figure(value: Any, what: str, *, zero: bool = False) -> float:
    """``value`` as the finite, positive number a tool writes for ``what`` (zero allowed with ``zero``)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise BadFigure(f"{what} is {value!r}, not a number") from None
    if not math.isfinite(x) or x < 0 or (x == 0 and not zero):
        raise BadFigure(f"{what} is {value!r}, not a figure a run measures")
    return x


def parse_guarded(parse: Any, doc: Any, name: str, tool: str) -> Any:
    """``parse(doc, name)``, with what it could not take (a missing field, a value of the wrong kind, a figure no
    run measures) as the one line of :func:`load_error`."""
    try:
        return parse(doc, name)
    except (KeyError, TypeError, ValueError) as e:
        raise load_error(name, tool, e) from None


def load_error(name: str, tool: str, e: Exception) -> PeerError:
    """The one line a loader raises for what its parser could not take: a missing field, a value of the wrong
    kind, a figure no run measures."""
    if isinstance(e, BadFigure):
        why = str(e)
    elif isinstance(e, KeyError):
        why = f"{tool}'s output without its {e} field"
    else:
        why = f"a value {tool} does not write ({e})"
    return PeerError(f"{name}: {why} (import the file {tool} wrote, unchanged)")


def record(phase: str, iteration: int, nbytes: int, ops: int, seconds: float, start_ns: int, host: str,
           rank: int = 0, extra: dict[str, Any] | None = None) -> PhaseRecord:
    """One record spanning the peer's timed ``seconds`` from ``start_ns`` (no histogram: the peer gave none)."""
    figure(seconds, f"the {phase} phase's duration ({seconds!r} s)")
    figure(nbytes, f"the {phase} phase's bytes", zero=True)
    figure(ops, f"the {phase} phase's operations", zero=True)
    span = max(1, round(seconds * NS))
    return PhaseRecord(rank=rank, host=host, phase=phase, iteration=iteration, bytes=int(nbytes), ops=int(ops),
                       start_ns=start_ns, end_ns=start_ns + span, barrier_ns=start_ns + span, extra=dict(extra or {}))


SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?b?)\s*$", re.I)


def size_bytes(text: Any, *, si_default: bool = False) -> int | None:
    """``64k``, ``1m``, ``1MiB``, ``4096`` → bytes (k = 1024 unless ``si_default`` and a bare ``kb`` …)."""
    if isinstance(text, (int, float)):
        return int(text)
    m = SIZE.match(str(text))
    if not m:
        return None
    number, unit, tail = float(m.group(1)), m.group(2).lower(), m.group(3).lower()
    power = "kmgtp".index(unit) + 1 if unit else 0
    base = 1000 if si_default and tail == "b" else 1024
    return int(number * base**power)


def split_command(line: str | None) -> list[str]:
    if not line:
        return []
    try:
        return shlex.split(line)
    except ValueError:
        return line.split()


def percentile_words(tool: str, unit: str, values: dict[str, float]) -> str:
    """The latency percentiles a peer printed, as words for the phase's note (storeval keeps no histogram of
    them: the report's latency columns stay empty)."""
    shown = ", ".join(f"{k} {v:.4g} {unit}" for k, v in values.items() if v is not None)
    return f"; {tool}'s own latency: {shown}" if shown else ""
