"""Drivers by URL scheme, and turning a target URL into a driver.

Network drivers are imported on first use: `storeval --help` stays fast, and a client library that fails
to load affects only the targets of its scheme. Every target URL is split by ``drivers/url.py`` against the
parts its driver declares (``Driver.url_parts``): what a driver would ignore is refused, never dropped.
"""

from __future__ import annotations

import importlib
import os
from urllib.parse import quote, urlsplit

from ..errors import InputError
from ..redact import redact_text, visible
from .base import Capabilities, Driver, DriverOptions, FastOps, Handle, StatResult, join
from .url import ParsedUrl, parse_url

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
    shown = visible(redact_text(url))
    if scheme not in DRIVERS:
        known = ", ".join(f"{s}://" for s in sorted(DRIVERS))
        raise InputError(f"target {shown}: unknown scheme '{visible(scheme)}://' (known: {known})")
    module, name = DRIVERS[scheme].split(":")
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as e:
        raise InputError(f"target {shown}: the {scheme}:// driver cannot load ({e}); reinstall storeval") from None


def target_url(url: str) -> ParsedUrl:
    """The parts of a target URL as its driver reads them; InputError for a part it would ignore."""
    return driver_class(url).parse(url)


def make_driver(url: str, options: dict | DriverOptions | None = None, *, client: int = -1) -> Driver:
    cls = driver_class(url)
    if not isinstance(options, DriverOptions):
        options = cls.Options(**(options or {}))
    return cls(url, options, client=client)


__all__ = ["Capabilities", "Driver", "DriverOptions", "FastOps", "Handle", "ParsedUrl", "StatResult", "DRIVERS", "join",
           "make_driver", "driver_class", "normalize_url", "parse_url", "target_url"]
