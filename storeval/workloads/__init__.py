"""Workloads by kind."""

from __future__ import annotations

from .bandwidth import Bandwidth
from .base import ClientContext, Params, Workload
from .copy import Copy
from .metadata import Metadata
from .skim import Skim

WORKLOADS: dict[str, type[Workload]] = {w.kind: w for w in (Bandwidth, Metadata, Copy, Skim)}


def make_workload(kind: str, params: dict | Params) -> Workload:
    """Build a workload from already validated parameters: its ``Params`` (a job's), or a dict as stored in
    the plan and the run's state file."""
    cls = WORKLOADS[kind]
    return cls(params if isinstance(params, cls.Params) else cls.Params.model_validate(params))


__all__ = ["WORKLOADS", "make_workload", "Workload", "Params", "ClientContext"]
