"""Drivers by URL scheme, and turning a target URL into a driver."""

from __future__ import annotations

import os
from urllib.parse import quote, urlsplit

from ..errors import InputError
from .base import Capabilities, Driver, DriverOptions, Handle, StatResult, join
from .null import NullDriver
from .posix import PosixDriver

DRIVERS: dict[str, type[Driver]] = {"file": PosixDriver, "null": NullDriver}


def normalize_url(url: str) -> str:
    """Turn a bare path into a ``file://`` URL with an absolute path; leave URLs as they are."""
    if "://" not in url:
        return "file://" + quote(os.path.abspath(os.path.expanduser(url)))
    return url


def driver_class(url: str) -> type[Driver]:
    scheme = urlsplit(url).scheme
    try:
        return DRIVERS[scheme]
    except KeyError:
        known = ", ".join(f"{s}://" for s in sorted(DRIVERS))
        raise InputError(f"target {url}: unknown scheme '{scheme}://' (known: {known})") from None


def make_driver(url: str, options: dict | DriverOptions | None = None, *, client: int = -1) -> Driver:
    cls = driver_class(url)
    if not isinstance(options, DriverOptions):
        options = cls.Options(**(options or {}))
    return cls(url, options, client=client)


__all__ = ["Capabilities", "Driver", "DriverOptions", "Handle", "StatResult", "DRIVERS", "join",
           "make_driver", "driver_class", "normalize_url"]
