"""What carries a target's bytes on this machine, as its driver knows it from the URL and options alone.

A driver says *where* (a local path, a server's host, nothing); ``probes/topology.py`` turns that into the
block device or network interface, its link speed and the mount, with no branch per scheme.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Carrier:
    """``path``: a local path (its mount's device, or for a network file system the interface to its server);
    ``host``: the server the driver talks to over the network (None when unknown); ``medium="none"``: no
    bytes travel anywhere (storeval's own ceiling)."""

    path: str | None = None
    host: str | None = None
    medium: str = "auto"  # "none": nothing carries bytes; "auto": from path or host


def option(options: object, name: str) -> object:
    """An option's value from a target's options, given as a dict (stored) or a DriverOptions model."""
    if options is None:
        return None
    if isinstance(options, dict):
        return options.get(name)
    return getattr(options, name, None)
