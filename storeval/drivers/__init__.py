"""Drivers by URL scheme, and turning a target URL into a driver.

Drivers are storeval's own and every installed package's, registered only through the ``storeval.drivers``
entry points (the name is the URL scheme; see ``storeval/plugins.py``; storeval's own are in its
``pyproject.toml``). Each is imported on first use: `storeval --help` stays fast, and a client library that
is missing (an extra not installed: ``pip install 'storeval[s3]'``) or fails to load affects only the targets
of its scheme. Every target URL is split by ``drivers/url.py`` against the parts its driver declares
(``Driver.url_parts``): what a driver would ignore is refused, never dropped.
"""

from __future__ import annotations

import os
from urllib.parse import quote, urlsplit

from ..errors import InputError
from ..plugins import MissingExtra, Plugin, PluginError, Registry
from ..redact import redact_text, visible
from .base import Capabilities, Driver, DriverOptions, FastOps, Handle, StatResult, join
from .url import ParsedUrl, parse_url


class NeedsExtra(InputError):
    """A target whose driver needs a library of an extra that is not installed; ``spec`` names the target."""

    def __init__(self, shown: str, missing: MissingExtra) -> None:
        self.shown, self.need = shown, str(missing)
        super().__init__(f"target {shown} {self.need}")


def _check_driver(cls: object, plugin: Plugin) -> None:
    where = f"driver '{plugin.name}://' of package {plugin.package}"
    if not (isinstance(cls, type) and issubclass(cls, Driver)):
        raise PluginError(f"{where} is not a storeval.drivers.base.Driver subclass")
    if getattr(cls, "scheme", None) != plugin.name:
        raise PluginError(f"{where}: its class says scheme = {getattr(cls, 'scheme', None)!r}; the entry point's "
                          f"name and the class's scheme must be the same")


# scheme -> driver class; every scheme is listed without importing anything, each driver imported when used
DRIVERS: Registry = Registry("drivers", _check_driver, lazy=True)


def register_driver(cls: type[Driver], package: str = "?") -> None:
    """Add a driver class under its ``scheme`` (PluginError, one line, if it is not a Driver)."""
    DRIVERS.register(getattr(cls, "scheme", "?"), cls, package)


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
    try:
        return DRIVERS[scheme]
    except MissingExtra as e:
        raise NeedsExtra(shown, e) from None
    except PluginError as e:
        raise InputError(f"target {shown}: {e}") from None
    except Exception as e:  # noqa: BLE001 - a driver package's own failure, whatever it is, is one line
        package = DRIVERS.plugins()[scheme].package
        first = (str(e).strip().splitlines() or [""])[0]
        raise InputError(f"target {shown}: the {scheme}:// driver of package {package} cannot load "
                         f"({type(e).__name__}{': ' + first if first else ''}); reinstall {package}") from None


def target_url(url: str) -> ParsedUrl:
    """The parts of a target URL as its driver reads them; InputError for a part it would ignore."""
    return driver_class(url).parse(url)


def make_driver(url: str, options: dict | DriverOptions | None = None, *, client: int = -1) -> Driver:
    cls = driver_class(url)
    if not isinstance(options, DriverOptions):
        options = cls.Options(**(options or {}))
    return cls(url, options, client=client)


__all__ = ["Capabilities", "Driver", "DriverOptions", "FastOps", "Handle", "ParsedUrl", "StatResult", "DRIVERS", "join",
           "make_driver", "driver_class", "normalize_url", "parse_url", "register_driver", "target_url", "NeedsExtra"]
