"""Workloads by kind: storeval's own and every installed package's, through the ``storeval.workloads`` entry
points only (``storeval/plugins.py``; storeval's own are in its ``pyproject.toml``), loaded on first use. A
workload is one file: its parameters, steps and report (``Workload.report``); a class that declares no report
figures is refused in one line."""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import InputError
from ..plugins import Plugin, Registry
from .base import ClientContext, Params, Workload, check_workload


def _check(cls: object, plugin: Plugin) -> None:
    check_workload(cls, plugin.name, plugin.package)


WORKLOADS: Registry = Registry("workloads", _check)


def register_workload(cls: type[Workload], package: str = "?") -> None:
    """Add a workload class (refused in one line, PluginError, if it declares no report figures)."""
    WORKLOADS.register(getattr(cls, "kind", "?"), cls, package)


def workload_class(kind: str) -> type[Workload]:
    """The class of ``kind``; InputError listing the known kinds (and why a plug-in was refused) if none."""
    if kind in WORKLOADS:
        return WORKLOADS[kind]
    why = WORKLOADS.refused.get(kind)
    raise InputError(f"workload kind '{kind}' " + (f"cannot be used: {why}" if why else
                     f"is not installed here (known: {', '.join(sorted(WORKLOADS))}; install the package that adds it)"))


def make_workload(kind: str, params: dict | Params) -> Workload:
    """Build a workload from already validated parameters: its ``Params`` (a job's), or a dict as stored in
    the plan and the run's state file."""
    cls = workload_class(kind)
    return cls(params if isinstance(params, cls.Params) else cls.Params.model_validate(params))


def preload_of(workloads: Iterable[tuple[str, Params]]) -> tuple[str, ...]:
    """The heavy modules the clients of these (kind, parameters) use (``Workload.preload_for``), each once, in
    order."""
    return tuple(dict.fromkeys(m for kind, params in workloads for m in workload_class(kind).preload_for(params)))


__all__ = ["WORKLOADS", "make_workload", "preload_of", "register_workload", "workload_class", "Workload", "Params",
           "ClientContext"]
