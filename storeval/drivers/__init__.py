"""Drivers by URL scheme, and turning a target URL into a driver.

Network drivers are imported on first use: `storeval --help` stays fast, and a client library that fails
to load affects only the targets of its scheme.
"""

from __future__ import annotations

import importlib
import os
from urllib.parse import quote, urlsplit

from ..errors import InputError
from .base import Capabilities, Driver, DriverOptions, FastOps, Handle, StatResult, join

DRIVERS: dict[str, str] = {
    "file": "storeval.drivers.posix:PosixDriver",
    "null": "storeval.drivers.null:NullDriver",
    "s3": "storeval.drivers.s3:S3Driver",
    "root": "storeval.drivers.xrootd:XrootdDriver",
    "hdfs": "storeval.drivers.hdfs:HdfsDriver",
}


def normalize_url(url: str) -> str:
    """Turn a bare path into a ``file://`` URL with an absolute path; leave URLs as they are."""
    if "://" not in url:
        return "file://" + quote(os.path.abspath(os.path.expanduser(url)))
    return url


def driver_class(url: str) -> type[Driver]:
    scheme = urlsplit(url).scheme
    if scheme not in DRIVERS:
        known = ", ".join(f"{s}://" for s in sorted(DRIVERS))
        raise InputError(f"target {url}: unknown scheme '{scheme}://' (known: {known})")
    module, name = DRIVERS[scheme].split(":")
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as e:
        raise InputError(f"target {url}: the {scheme}:// driver cannot load ({e}); reinstall storeval") from None


def make_driver(url: str, options: dict | DriverOptions | None = None, *, client: int = -1) -> Driver:
    cls = driver_class(url)
    if not isinstance(options, DriverOptions):
        options = cls.Options(**(options or {}))
    return cls(url, options, client=client)


__all__ = ["Capabilities", "Driver", "DriverOptions", "FastOps", "Handle", "StatResult", "DRIVERS", "join",
           "make_driver", "driver_class", "normalize_url"]
