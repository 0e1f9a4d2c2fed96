"""Heavy libraries imported on first use, not when their module is.

Every storeval command loads every workload's class (to validate a study, to list them), and the fork server
imports them all before a cell; uproot and awkward alone cost about 0.6 s of CPU each time, though only the skim,
jobs and replay workloads touch them. A module names such a library once, ``uproot = lazy("uproot")``, and uses
it as it would the module: the import happens at the first attribute read.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class LazyModule:
    """A stand-in for a module that imports it on the first attribute read (then reads through to it)."""

    __slots__ = ("_name", "_module")

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str) -> Any:
        module = self._module
        if module is None:
            module = self._module = importlib.import_module(self._name)
        return getattr(module, attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}{' (imported)' if self._module is not None else ''}>"


def lazy(name: str) -> Any:
    """``name``, imported when first used."""
    return LazyModule(name)
