"""Sizes, rates and durations as people write them in studies, and back; counts in words.

Binary and decimal units are kept apart on purpose: ``32MB`` is 32,000,000
bytes and ``32MiB`` is 33,554,432. A bare letter (``4k``, ``1M``) follows
fio and IOZone and means the binary unit.

The units storeval prints (one per figure, the same in the terminal, the JSON and the HTML report):

* storage bandwidth — the bandwidth workload, links, faults, Table 1's bandwidth rows — in **MiB/s** (2^20
  bytes per second), as IOR and IOZone print it;
* the rates of whole-file and application-level workloads — copy, skim, jobs, command and replay, whose seeds
  quote transfer tools and job reports — in **MB/s** (10^6 bytes per second), and every table that shows them
  says so;
* operations in ops/s (commands/s, files/s where the workload says so), events in events/s, latency in
  ns/µs/ms/s, CPU efficiency as CPU seconds per wall second;
* sizes as sizes (``64KiB``, ``32MB``, never ``65536``), durations as a study writes them (``100ms``, ``2m``).

A figure keeps its unit everywhere it appears; where a table puts figures of several units in one column,
each cell carries its unit (Table 1 in ``report/terminal.py``).
"""

from __future__ import annotations

import math
import re

_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)"
_SIZE_RE = re.compile(rf"^\s*{_NUMBER}\s*([A-Za-z]*)\s*$")

_SIZE_UNITS: dict[str, int] = {"": 1, "b": 1}
for _i, _p in enumerate("kmgtpe", start=1):
    _SIZE_UNITS[_p] = 1024**_i
    _SIZE_UNITS[_p + "ib"] = 1024**_i
    _SIZE_UNITS[_p + "b"] = 1000**_i

_BIT_UNITS: dict[str, int] = {"bit": 1, "bps": 1}
for _i, _p in enumerate("kmgt", start=1):
    _BIT_UNITS[_p + "bit"] = 1000**_i
    _BIT_UNITS[_p + "bps"] = 1000**_i
    _BIT_UNITS[_p + "ibit"] = 1024**_i

_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "": 1.0}

SIZE_HINT = "e.g. 4KiB, 1MiB, 1.5GiB, 32MB"


class UnitError(ValueError):
    """A value that is not a size, rate or duration; the message says what to write instead."""


def parse_size(value: object) -> int:
    """Bytes from ``4k``, ``4KiB``, ``1.5GiB``, ``32MB`` or a plain integer."""
    if isinstance(value, bool):
        raise UnitError(f"is not a size ({SIZE_HINT})")
    if isinstance(value, int):
        if value < 0:
            raise UnitError("is negative (a size is 0 or more bytes)")
        return value
    if isinstance(value, float):
        if value < 0 or not value.is_integer():
            raise UnitError(f"is not a whole number of bytes ({SIZE_HINT})")
        return int(value)
    if not isinstance(value, str):
        raise UnitError(f"is not a size ({SIZE_HINT})")
    m = _SIZE_RE.match(value)
    if not m:
        lead = re.match(rf"^\s*{_NUMBER}", value)
        hint = f"try {lead.group(1)}MiB" if lead else SIZE_HINT
        raise UnitError(f"is not a size ({hint})")
    number, unit = m.group(1), m.group(2).lower()
    if unit not in _SIZE_UNITS:
        raise UnitError(f"is not a size (try {number}MiB)")
    scaled = float(number) * _SIZE_UNITS[unit]
    if not math.isfinite(scaled) or not scaled.is_integer():
        raise UnitError(f"is not a whole number of bytes ({SIZE_HINT})")
    return int(scaled)


def parse_rate(value: object) -> float:
    """Bytes per second from ``10Gbit``, ``10Gbit/s``, ``3GB/s``, ``800MiB/s`` or a number of bytes/s."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value <= 0:
            raise UnitError("is not a positive rate (e.g. 10Gbit, 3GB/s)")
        return float(value)
    if not isinstance(value, str):
        raise UnitError("is not a rate (e.g. 10Gbit, 3GB/s)")
    text = value.strip()
    if text.lower().endswith("/s"):
        text = text[:-2]
    m = _SIZE_RE.match(text)
    if m:
        number, unit = float(m.group(1)), m.group(2).lower()
        if unit in _BIT_UNITS:
            rate = number * _BIT_UNITS[unit] / 8
        elif unit in _SIZE_UNITS:
            rate = number * _SIZE_UNITS[unit]
        else:
            rate = -1.0
        if rate > 0:
            return rate
    raise UnitError("is not a rate (e.g. 10Gbit, 3GB/s, 800MiB/s)")


def parse_duration(value: object) -> float:
    """Seconds from ``30``, ``30s``, ``100ms``, ``5m``."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < 0:
            raise UnitError("is negative (e.g. 30s, 100ms)")
        return float(value)
    if isinstance(value, str):
        m = re.match(rf"^\s*{_NUMBER}\s*([a-z]*)\s*$", value.strip().lower())
        if m and m.group(2) in _DURATION_UNITS:
            return float(m.group(1)) * _DURATION_UNITS[m.group(2)]
    raise UnitError("is not a duration (e.g. 30s, 100ms, 5m)")


def format_size(n: float) -> str:
    """``67108864`` -> ``64 MiB``; exact binary multiples print without decimals."""
    n = float(n)
    for unit, scale in (("EiB", 1024**6), ("PiB", 1024**5), ("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2),
                        ("KiB", 1024)):
        if abs(n) >= scale:
            v = n / scale
            return f"{v:.0f} {unit}" if v.is_integer() else f"{v:.3g} {unit}"
    return f"{n:.0f} B"


def format_size_compact(n: int) -> str:
    """A size as a study writes it, for labels, factor values and defaults: ``1048576`` -> ``1MiB``,
    ``32000000`` -> ``32MB``, ``1500`` -> ``1500B``; always with its unit, and read back exactly by
    :func:`parse_size`."""
    n = int(n)
    found = []  # the largest exact unit of each kind; the shorter number wins, binary on a tie
    for units, base in ((("EiB", "PiB", "TiB", "GiB", "MiB", "KiB"), 1024), (("EB", "PB", "TB", "GB", "MB", "KB"), 1000)):
        for i, unit in enumerate(units):
            scale = base ** (len(units) - i)
            if n >= scale and n % scale == 0:
                found.append((n // scale, unit))
                break
    if not found:
        return f"{n}B"
    value, unit = min(found, key=lambda c: c[0])
    return f"{value}{unit}"


def format_duration(seconds: float) -> str:
    """A duration as a study writes it (read back by :func:`parse_duration`): ``0.1`` -> ``100ms``,
    ``120`` -> ``2m``, ``1.5`` -> ``1.5s``, ``0`` -> ``0s``."""
    s = float(seconds)
    if s == 0:
        return "0s"
    if s >= 3600 and s % 3600 == 0:
        return f"{s / 3600:g}h"
    if s >= 60 and s % 60 == 0:
        return f"{s / 60:g}m"
    if s >= 1:
        return f"{s:g}s"
    if s >= 1e-3:
        return f"{s * 1e3:.6g}ms"
    return f"{s * 1e6:.6g}us"


def plural(n: float, word: str, words: str | None = None) -> str:
    """``1 client``, ``2 clients``, ``1,000 files``; ``words`` for an irregular plural."""
    text = f"{n:,}" if isinstance(n, int) else f"{n:g}"
    return f"{text} {word if n == 1 else (words or word + 's')}"


# Bytes per second of each rate unit storeval prints (see the module's docstring for which figure uses which).
RATE_UNITS = {"B/s": 1.0, "KiB/s": 2.0**10, "MiB/s": 2.0**20, "GiB/s": 2.0**30, "KB/s": 1e3, "MB/s": 1e6, "GB/s": 1e9}


def convert_rate(value: float | None, unit: str, to: str) -> float | None:
    """A byte rate from one unit of :data:`RATE_UNITS` into another (``None`` stays ``None``)."""
    if value is None:
        return None
    return value * RATE_UNITS[unit] / RATE_UNITS[to]


def is_byte_rate(unit: str) -> bool:
    """Whether ``unit`` is a rate of bytes (MiB/s, MB/s …), as opposed to ops/s or events/s."""
    return unit in RATE_UNITS


def sig(x: float | None, digits: int = 3) -> str:
    """A number with ``digits`` significant digits, no scientific notation for everyday magnitudes."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if x == 0:
        return "0"
    mag = math.floor(math.log10(abs(x)))
    if mag >= digits - 1:
        return f"{x:,.0f}"
    decimals = max(0, digits - 1 - mag)
    return f"{x:.{decimals}f}"


def format_bitrate(bytes_per_s: float, compact: bool = False) -> str:
    """A link's rate in the bit unit that fits, as networks are quoted: ``125e6`` -> ``1 Gbit/s``, ``1000`` ->
    ``8 kbit/s`` (never ``8e-06 Gbit/s``); ``compact`` as a study writes it (``1Gbit/s``, read back by
    :func:`parse_rate`)."""
    bits = float(bytes_per_s) * 8
    unit, scale = "bit/s", 1.0
    for u, sc in (("Tbit/s", 1e12), ("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if abs(bits) >= sc:
            unit, scale = u, sc
            break
    value = f"{round(bits / scale, 6):.6g}"
    return f"{value}{unit}" if compact else f"{value} {unit}"


def format_share(fraction: float) -> str:
    """A share as a percentage with the digits it needs to be itself: ``0.3`` -> ``30%``, ``0.9999`` ->
    ``99.99%`` (never rounded up to a value it is not, such as 100%)."""
    pct = float(fraction) * 100
    for digits in range(0, 13):
        text = f"{pct:.{digits}f}"
        if abs(float(text) - pct) <= 1e-9 * max(1.0, abs(pct)):
            return f"{text}%"
    return f"{pct!r}%"


def format_duration_ns(ns: float) -> str:
    """Latency in the unit that keeps three significant digits readable."""
    if ns < 1e3:
        return f"{sig(ns)} ns"
    if ns < 1e6:
        return f"{sig(ns / 1e3)} µs"
    if ns < 1e9:
        return f"{sig(ns / 1e6)} ms"
    return f"{sig(ns / 1e9)} s"
