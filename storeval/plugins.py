"""Plug-ins: workloads, drivers and testbed systems found through Python entry points — the one registry.

storeval's own are registered the same way a separate package registers its own, in ``[project.entry-points]``
of its ``pyproject.toml``; there is no other list of them::

    [project.entry-points."storeval.workloads"]
    mykind = "mypackage.mykind:MyWorkload"

    [project.entry-points."storeval.drivers"]
    mem = "mypackage.mem:MemDriver"         # the name is the URL scheme

    [project.entry-points."storeval.testbed"]
    mystore = "mypackage.mystore:MyServer"  # a storeval.testbed.base.Server subclass

Entry points are read once, when a registry is first used (``importlib.metadata``), never at import. storeval's
own metadata must be there (``pip install -e .`` in a source tree): without it every registry fails in one line
saying so, never as an empty list. A plug-in that fails to load costs one warning line naming its package; the
rest works. A module that is missing because an extra of its package was not installed is named with the
command that installs it.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from .errors import InputError

GROUPS = {"workloads": "storeval.workloads", "drivers": "storeval.drivers", "testbed": "storeval.testbed"}
WORDS = {"workloads": "workload", "drivers": "driver", "testbed": "testbed system"}  # how a line names one
OWN = "storeval"  # the distribution whose entry points are storeval's own
_warned: set[str] = set()


class PluginError(InputError):
    """A plug-in that cannot be registered: one line naming it, its package and the fix."""


class NotInstalled(PluginError):
    """storeval's own entry points are not installed (a source tree used without ``pip install -e .``)."""


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
    """One entry point: its name (a workload kind, a URL scheme, a testbed kind), ``module:attribute`` and its
    package."""

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


def own_entry_points(kind: str) -> dict[str, str]:
    """storeval's own entry points of ``kind``: name → ``module:attribute``. :class:`NotInstalled`, one line
    naming the fix, when storeval's metadata is missing or registers none (an install older than the code)."""
    words = f"{WORDS[kind]}s"
    fix = "install it: `pip install -e .` in its source tree, or `pip install storeval`"
    try:
        dist = metadata.distribution(OWN)
        eps = {ep.name: ep.value for ep in dist.entry_points.select(group=GROUPS[kind])}
    except metadata.PackageNotFoundError:
        raise NotInstalled(f"storeval's own {words} are not registered: its package metadata is missing (storeval "
                           f"is run from a source tree that was never installed); {fix}") from None
    if not eps:
        raise NotInstalled(f"storeval's own {words} are not registered: the installed storeval "
                           f"{dist.version} has no {GROUPS[kind]} entry points (installed before they were "
                           f"added?); {fix} again")
    return eps


def entry_points(kind: str) -> dict[str, Plugin]:
    """The plug-ins of ``kind`` (``workloads``, ``drivers``, ``testbed``): storeval's own, then every other
    installed package's. A name another package already took is left out with a warning."""
    found = {name: Plugin(name, value, OWN) for name, value in own_entry_points(kind).items()}
    try:
        eps = list(metadata.entry_points(group=GROUPS[kind]))
    except Exception as e:  # broken metadata of some package: storeval's own still work
        warn(f"the installed packages' {WORDS[kind]}s could not be listed ({type(e).__name__}: {e}); only "
             "storeval's are used")
        eps = []
    for ep in eps:
        package = ep.dist.name if getattr(ep, "dist", None) is not None else "?"
        if _norm(package) == OWN:
            continue
        old = found.get(ep.name)
        if old is not None:
            if old.value != ep.value and _norm(old.package) != _norm(package):
                warn(f"{WORDS[kind]} '{ep.name}' of package {package} is left out: package {old.package} registers "
                     f"that name already")
            continue
        found[ep.name] = Plugin(ep.name, ep.value, package)
    return found


class Registry(Mapping):
    """Name → loaded object, filled on first use from :func:`entry_points` (the group of ``kind``). ``check(obj,
    plugin)`` raises :class:`PluginError` for an object that is not what the group holds.

    ``lazy=False`` (workloads, testbed systems): every plug-in is imported on first use; one that fails to load
    or to pass ``check`` is no key, and ``refused`` keeps why (``announce`` says it; ``warn_refused`` says it
    as soon as it is known). ``lazy=True`` (drivers): every registered name is a key and each object is
    imported when first asked for, its failure raised to the one who asked — a missing client library costs only
    its own scheme, and listing the names imports nothing. ``first``: names listed first, in that order (the
    metadata holds entry points sorted by name); the rest follow in the order they were found."""

    def __init__(self, kind: str, check: Callable[[Any, Plugin], None], *, lazy: bool = False,
                 first: Iterable[str] = (), warn_refused: bool = False) -> None:
        self.kind, self.check, self.lazy, self.first, self.warn_refused = kind, check, lazy, tuple(first), warn_refused
        self.word = WORDS[kind]
        self._plugins: dict[str, Plugin] | None = None
        self._objects: dict[str, Any] = {}
        self._complete = False  # every plug-in tried (lazy=False)
        self.refused: dict[str, str] = {}

    # -- what is registered (nothing imported) ---------------------------------------------------------------
    def plugins(self) -> dict[str, Plugin]:
        """Name → :class:`Plugin`, every registered one, in listing order."""
        if self._plugins is None:
            found = entry_points(self.kind)
            ordered = {name: found[name] for name in self.first if name in found}
            ordered.update(found)
            self._plugins = ordered
        return self._plugins

    @property
    def packages(self) -> dict[str, str]:
        """Name → the package that registers it."""
        return {name: p.package for name, p in self.plugins().items()}

    # -- loading ---------------------------------------------------------------------------------------------
    def load_one(self, name: str) -> Any:
        """The object of ``name``, imported and checked once: KeyError if none is registered; the plug-in's
        failure (:class:`MissingExtra`, :class:`PluginError`, its own exception) as it came."""
        if name in self._objects:
            return self._objects[name]
        plugin = self.plugins()[name]
        obj = plugin.load()
        self.check(obj, plugin)
        self._objects[name] = obj
        return obj

    def _load(self) -> dict[str, Any]:
        if self._complete or self.lazy:
            return self._objects
        said = []
        for name, plugin in self.plugins().items():
            if name in self._objects or name in self.refused:
                continue
            try:
                self.load_one(name)
                continue
            except MissingExtra as e:
                why = f"{self.word} '{name}' of package {plugin.package} {e}"
            except PluginError as e:
                why = str(e)
            except Exception as e:  # noqa: BLE001 - a plug-in's own failure, whatever it is, is one line
                if plugin.package == OWN or type(e).__module__.startswith("storeval."):
                    raise  # storeval's own must load; a stop (ClientStopped) is not the plug-in's fault
                first = str(e).strip().splitlines()[0] if str(e).strip() else ""
                why = (f"{self.word} '{name}' of package {plugin.package} cannot load "
                       f"({type(e).__name__}{': ' + first if first else ''}); it is left out")
            self.refused[name] = why
            said.append(why)
        self._complete = True
        if self.warn_refused:
            for why in said:
                warn(why)
        return self._objects

    def load(self) -> None:
        """Load every plug-in now (a fork server preloads them for its clients); refusals are kept, not said."""
        self._load()

    def announce(self) -> None:
        """Say, one warning line each (once per process), which plug-ins were left out and why."""
        self._load()
        for why in self.refused.values():
            warn(why)

    # -- adding at run time (tests, programs that embed storeval; a package registers through entry points) ---
    def register(self, name: str, obj: Any, package: str = "?") -> None:
        """Add ``obj`` under ``name`` (after ``check``, which raises :class:`PluginError`)."""
        plugin = Plugin(name, f"{getattr(obj, '__module__', '?')}:{getattr(obj, '__qualname__', '?')}", package)
        self.check(obj, plugin)
        self.plugins()[name] = plugin
        self._objects[name] = obj
        self.refused.pop(name, None)

    def __setitem__(self, name: str, value: Any) -> None:
        """``registry[name] = "module:attr"`` (imported and checked when used, as an entry point's) or the object."""
        if not isinstance(value, str):
            self.register(name, value)
            return
        self.plugins()[name] = Plugin(name, value, "?")
        self._objects.pop(name, None)
        self.refused.pop(name, None)
        self._complete = False

    def __delitem__(self, name: str) -> None:
        del self.plugins()[name]
        self._objects.pop(name, None)
        self.refused.pop(name, None)

    # -- the mapping -----------------------------------------------------------------------------------------
    def __getitem__(self, name: str) -> Any:
        if self.lazy:
            return self.load_one(name)
        return self._load()[name]

    def __iter__(self) -> Iterator[str]:
        names = self.plugins()
        if self.lazy:
            return iter(list(names))
        loaded = self._load()
        return iter([n for n in names if n in loaded])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, name: object) -> bool:
        if self.lazy:
            return name in self.plugins()
        return name in self._load()
