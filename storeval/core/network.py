"""Where the clients sit: client groups, emulated hosts and the links that attach them, as plain data.

A study may split its clients into **groups** (seed 000's on-board and external clients): each group has its own
client counts, and either an emulated host of storeval's testbed network (``host:``, with the ``link:`` that
attaches that host) or, under MPI, the real hosts or ranks it runs on (``hosts:``, ``ranks:``). A cell runs one
count of every group at once (the product of the groups' counts; a count may be 0), ranks numbered group by group
in the order written, so each client knows its group and the report can put the groups side by side.

The **network** (``network:`` in a study) names links — ``rate``, ``rtt``, ``jitter``, ``loss`` — and the hosts
they attach. A link setting given as a list is a factor (``rtt: [0ms, 12ms, 50ms]`` draws seed 003's curve): the
link is changed between cells, nothing is restarted. Each swept setting becomes the factor of its own name (one
link per setting may sweep it).

Values here are already validated (spec.py does that): rate in bytes/s (None: unlimited), rtt and jitter in
seconds, loss a fraction.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from ..units import format_bitrate

LINK_KEYS = ("rate", "rtt", "jitter", "loss")
LINK_DEFAULTS: dict[str, Any] = {"rate": None, "rtt": 0.0, "jitter": 0.0, "loss": 0.0}


@dataclass(frozen=True)
class Group:
    """One group of clients: its counts (swept), and where its clients run."""

    name: str
    counts: tuple[int, ...]
    host: str | None = None  # an emulated host of the testbed network (local engine)
    link: str | None = None  # the link attaching that host (a name of network.links)
    hosts: tuple[str, ...] = ()  # MPI: the real hosts whose ranks are this group's
    ranks: tuple[int, ...] = ()  # MPI: the ranks that are this group's

    def to_json(self) -> dict[str, Any]:
        return {"count": list(self.counts), **({"host": self.host} if self.host else {}),
                **({"link": self.link} if self.link else {}), **({"hosts": list(self.hosts)} if self.hosts else {}),
                **({"ranks": list(self.ranks)} if self.ranks else {})}


@dataclass(frozen=True)
class NetworkSpec:
    """The study's emulated network: link name -> settings (a list value is swept), host -> its link or None."""

    links: dict[str, dict[str, Any]] = field(default_factory=dict)
    hosts: dict[str, str | None] = field(default_factory=dict)

    def swept(self) -> dict[str, str]:
        """Setting -> the link that sweeps it."""
        return {key: name for name, s in self.links.items() for key, v in s.items()
                if isinstance(v, list) and len(v) > 1}

    def combinations(self) -> list[tuple[dict[str, dict[str, Any]], dict[str, Any]]]:
        """Every combination of the swept link settings: (link -> its settings now, the factors it adds)."""
        sweeps = self.swept()
        names = list(sweeps)
        out = []
        for values in itertools.product(*(self.links[sweeps[k]][k] for k in names)):
            chosen = dict(zip(names, values))
            links = {}
            for name, settings in self.links.items():
                now = {**LINK_DEFAULTS}
                for key, v in settings.items():
                    now[key] = chosen[key] if sweeps.get(key) == name else (v[0] if isinstance(v, list) else v)
                links[name] = now
            out.append((links, chosen))
        return out or [({}, {})]

    def to_json(self) -> dict[str, Any]:
        return {"links": self.links, "hosts": self.hosts}


def group_combinations(groups: dict[str, Group]) -> list[dict[str, int]]:
    """Every combination of the groups' counts with at least one client, in the order written."""
    names = list(groups)
    out = []
    for counts in itertools.product(*(groups[n].counts for n in names)):
        if sum(counts):
            out.append(dict(zip(names, counts)))
    return out


def cell_groups(groups: dict[str, Group], counts: dict[str, int]) -> tuple[dict[str, Any], ...]:
    """The groups of one cell in rank order: name, count, and where its clients run — an emulated host, or
    (MPI) the real hosts or ranks to take them from (groups with no client left out)."""
    return tuple({"name": n, "count": counts[n], **({"host": groups[n].host} if groups[n].host else {}),
                  **({"hosts": list(groups[n].hosts)} if groups[n].hosts else {}),
                  **({"ranks": list(groups[n].ranks)} if groups[n].ranks else {})}
                 for n in groups if counts[n])


def rank_groups(groups: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    """Rank -> its group (name, host), for a cell's groups in rank order."""
    out = []
    for g in groups:
        out += [g] * g["count"]
    return out


def group_factors(counts: dict[str, int]) -> dict[str, int]:
    return {f"clients.{n}": c for n, c in counts.items()}


def factor_text(key: str, value: Any) -> str:
    """A link factor as it is written in a study (``12ms``, ``1Gbit/s``, ``0.1%``); other factors as they are."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "unlimited" if key == "rate" and value is None else str(value)
    if key in ("rtt", "jitter"):
        return f"{value * 1e3:g}ms"
    if key == "rate":
        return format_bitrate(value, compact=True)
    if key == "loss":
        return f"{value * 100:g}%"
    return str(value)


def describe_link(settings: dict[str, Any]) -> str:
    """``rate 1 Gbit/s, rtt 12 ms, loss 0.1 %`` — what a link is set to, for events and progress lines."""
    parts = []
    if settings.get("rate"):
        parts.append(f"rate {format_bitrate(settings['rate'])}")
    parts.append(f"rtt {settings.get('rtt', 0.0) * 1e3:g} ms")
    if settings.get("jitter"):
        parts.append(f"jitter {settings['jitter'] * 1e3:g} ms")
    if settings.get("loss"):
        parts.append(f"loss {settings['loss'] * 100:g} %")
    return ", ".join(parts)


WEB_PORTS = {"http": 80, "https": 443}  # an endpoint option's (S3's) URL without a port


def server_endpoint(url: str, options: dict[str, Any], default_port: int | None = None) -> tuple[str, int] | None:
    """(address, port) of the server a target's bytes go to — its URL's, or its ``endpoint`` option's (S3) —
    where the round trip over an emulated path is measured; None for a local file system. ``default_port``:
    the target driver's, for a URL that gives none."""
    from urllib.parse import urlsplit

    for text in (options.get("endpoint"), url):
        if not isinstance(text, str) or "://" not in text:
            continue
        parts = urlsplit(text)
        if not parts.hostname:
            continue
        try:
            port = parts.port or WEB_PORTS.get(parts.scheme) or (default_port if text == url else None)
        except ValueError:
            continue
        if port:
            return parts.hostname, port
    return None


__all__ = ["server_endpoint", "Group", "NetworkSpec", "LINK_KEYS", "LINK_DEFAULTS", "group_combinations", "cell_groups", "rank_groups",
           "group_factors", "describe_link", "factor_text"]
