"""Plug-ins: workloads and drivers found through Python entry points.

storeval's own workloads and drivers are registered the same way a separate package registers its own, in
``[project.entry-points]`` of its ``pyproject.toml``::

    [project.entry-points."storeval.workloads"]
    mykind = "mypackage.mykind:MyWorkload"

    [project.entry-points."storeval.drivers"]
    mem = "mypackage.mem:MemDriver"         # the name is the URL scheme

Entry points are read once, when a registry is first used (``importlib.metadata``), never at import. A
plug-in that fails to load costs one warning line naming its package; the rest works. A module that is
missing because an extra of its package was not installed is named with the command that installs it.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from .errors import InputError

GROUPS = {"workloads": "storeval.workloads", "drivers": "storeval.drivers"}
_warned: set[str] = set()


class PluginError(InputError):
    """A workload or driver that cannot be registered: one line naming it, its package and the fix."""


class MissingExtra(InputError):
    """A plug-in's module needs a library of an extra that is not installed."""

    def __init__(self, package: str, extra: str, module: str) -> None:
        self.package, self.extra, self.module = package, extra, module
        super().__init__(f"needs the {extra} extra: {self.install}")

    @property
    def install(self) -> str:
        return f"pip install '{self.package}[{self.extra}]'"


@dataclass(frozen=True)
class Plugin:
    """One entry point: its name (a workload kind, a URL scheme), ``module:attribute`` and its package."""

    name: str
    value: str
    package: str

    def load(self) -> Any:
        """Import the entry point's object; :class:`MissingExtra` when an extra's library is missing, else the
        ImportError as it came."""
        module, _, attr = self.value.partition(":")
        try:
            obj: Any = importlib.import_module(module)
        except ImportError as e:
            extra = missing_extra(self.package, e.name or "")
            if extra:
                raise MissingExtra(self.package, extra, e.name or "") from None
            raise
        for part in filter(None, attr.split(".")):
            obj = getattr(obj, part)
        return obj


def warn(line: str) -> None:
    """A one-line warning on stderr, once per process (under mpiexec, rank 0's: every rank meets the same)."""
    import os

    rank = next((os.environ[k] for k in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK") if k in os.environ), "0")
    if line not in _warned and rank.strip() in ("0", ""):
        _warned.add(line)
        print(f"warning: {line}", file=sys.stderr, flush=True)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def missing_extra(package: str, module: str) -> str | None:
    """The extra of ``package`` whose requirements install the missing top-level ``module`` (the smallest such
    extra: ``s3`` rather than ``all``); None when no extra does."""
    if not module:
        return None
    wanted = _norm(module.split(".")[0])
    try:
        requires = metadata.requires(package) or []
    except metadata.PackageNotFoundError:
        return None
    extras: dict[str, int] = {}
    names: dict[str, set[str]] = {}
    for req in requires:
        m = re.search(r"""extra\s*==\s*["']([^"']+)["']""", req)
        if not m:
            continue
        name = _norm(re.match(r"[A-Za-z0-9._-]*", req).group(0))
        names.setdefault(m.group(1), set()).add(name)
    for extra, members in names.items():
        if wanted in members:
            extras[extra] = len(members)
    return min(extras, key=lambda e: (extras[e], e)) if extras else None


def entry_points(kind: str, builtin: Mapping[str, str]) -> dict[str, Plugin]:
    """The plug-ins of ``kind`` (``workloads``, ``drivers``): storeval's own (``builtin``, also when storeval
    runs from a source tree without its metadata) and every installed package's. A name another package
    already took is left out with a warning."""
    found = {name: Plugin(name, value, "storeval") for name, value in builtin.items()}
    try:
        eps = list(metadata.entry_points(group=GROUPS[kind]))
    except Exception as e:  # broken metadata of some package: storeval's own still work
        warn(f"the installed packages' {kind} could not be listed ({type(e).__name__}: {e}); only storeval's are used")
        eps = []
    for ep in eps:
        package = ep.dist.name if getattr(ep, "dist", None) is not None else "?"
        old = found.get(ep.name)
        if old is not None:
            if old.value != ep.value and _norm(old.package) != _norm(package):
                warn(f"{kind[:-1]} '{ep.name}' of package {package} is left out: package {old.package} registers "
                     f"that name already")
            continue
        found[ep.name] = Plugin(ep.name, ep.value, package)
    return found


class Registry(Mapping):
    """Name → loaded object, filled on first use from :func:`entry_points`; a plug-in that fails to load or
    to pass ``check`` is left out with one warning line (``refused`` keeps why)."""

    def __init__(self, kind: str, builtin: Mapping[str, str], check: Callable[[Any, Plugin], None]) -> None:
        self.kind, self.builtin, self.check = kind, dict(builtin), check
        self._items: dict[str, Any] | None = None
        self.refused: dict[str, str] = {}
        self.packages: dict[str, str] = {}

    def _load(self) -> dict[str, Any]:
        if self._items is None:
            items: dict[str, Any] = {}
            for name, plugin in entry_points(self.kind, self.builtin).items():
                try:
                    obj = plugin.load()
                    self.check(obj, plugin)
                except MissingExtra as e:
                    why = f"{self.kind[:-1]} '{name}' of package {plugin.package} {e}"
                except PluginError as e:
                    why = str(e)
                except Exception as e:  # noqa: BLE001 - a plug-in's own failure, whatever it is, is one line
                    if plugin.package == "storeval" or type(e).__module__.startswith("storeval."):
                        raise  # storeval's own workloads must load; a stop (ClientStopped) is not the plug-in's fault
                    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
                    why = (f"{self.kind[:-1]} '{name}' of package {plugin.package} cannot load "
                           f"({type(e).__name__}{': ' + first if first else ''}); it is left out")
                else:
                    items[name] = obj
                    self.packages[name] = plugin.package
                    continue
                self.refused[name] = why
            self._items = items
        return self._items

    def load(self) -> None:
        """Load every plug-in now (a fork server preloads them for its clients); refusals are kept, not said."""
        self._load()

    def announce(self) -> None:
        """Say, one warning line each (once per process), which plug-ins were left out and why."""
        self._load()
        for why in self.refused.values():
            warn(why)

    def register(self, name: str, obj: Any, package: str = "?") -> None:
        """Add ``obj`` under ``name`` (after ``check``, which raises :class:`PluginError`)."""
        self.check(obj, Plugin(name, f"{getattr(obj, '__module__', '?')}:{getattr(obj, '__qualname__', '?')}",
                               package))
        self._load()[name] = obj
        self.packages[name] = package

    def __getitem__(self, name: str) -> Any:
        return self._load()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())

    def __contains__(self, name: object) -> bool:
        return name in self._load()
