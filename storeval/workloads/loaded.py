"""Importing this module loads every workload (storeval's and the plug-ins'): the fork server's clients
are born with them imported (``engine/clients.py`` imports ``make_workload`` from here), as they were when
the workloads were imported eagerly."""

from __future__ import annotations

from . import WORKLOADS, make_workload

WORKLOADS.load()

__all__ = ["make_workload"]
