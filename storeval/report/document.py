"""The JSON document of a run (``--json FILE``): stable field names, only ever extended."""

from __future__ import annotations

import json
from typing import Any

from ..analysis.figures import CellFigures, ConfigSummary
from ..analysis.scaling import along_settings, scaling
from ..analysis.table import summary_table
from ..outputs import Mark, write_atomic, write_owned
from ..store import RunData


def _iso(t: Any) -> str | None:
    return t.isoformat() if t is not None else None


def run_document(run: RunData, cells: list[CellFigures], summary: list[ConfigSummary]) -> dict[str, Any]:
    from ..analysis.figures import OUTLIER_RULE

    return {
        "storeval_version": run.storeval_version,
        "run_id": run.run_id,
        "status": run.status,
        "started": _iso(run.started),
        "finished": _iso(run.finished),
        "command_line": run.command_line,
        "engine": run.engine,
        "study": run.study,
        "study_hash": run.study_hash,
        "environment": run.environment,
        "cells": [{
            "cell": cf.cell.cell_id, "target": cf.cell.target, "target_url": cf.cell.target_url,
            "workload": cf.cell.workload, "kind": cf.cell.kind, "factors": cf.cell.factors,
            "params": cf.cell.params, "clients": cf.cell.clients, "repetition": cf.cell.repetition,
            "status": cf.cell.status, "error": cf.cell.error,
            "phases": [ph.as_dict() for ph in cf.phases],
            **({"rtt": cf.rtt} if cf.rtt else {}),  # issue 17: each group's requested and measured RTT
            **({"result": cf.result} if cf.result else {}),  # the workload's figure of the whole cell (IO500's score)
        } for cf in cells],
        "summary": [s.as_dict() for s in summary],
        "outlier_rule": OUTLIER_RULE,
        "outliers_excluded": any(s.outliers_excluded for s in summary),
        "scaling": scaling(cells),
        "scaling_settings": along_settings(cells, run.study),  # the aggregate vs swept system settings (servers)
        "table": summary_table(summary),
        "events": [{**ev, "t": _iso(ev.get("t"))} for ev in run.events],
    }


def write_text_atomic(path: str, text: str, suffix: str = ".tmp") -> None:
    """Write ``text`` to ``path`` through a temporary file beside it: a reader never sees half a file, and a
    failure leaves the old file (if any) as it was and no temporary file."""
    write_atomic(path, text.encode("utf-8"), suffix)


def write_document(path: str, doc: dict[str, Any], kind: str, runs: list[str]) -> tuple[Mark, int]:
    """``--json``: the document with storeval's ownership header as its first member (see ``storeval.owned``);
    replaces only storeval's own unchanged output."""
    return write_owned(path, "--json", "json", kind, runs, json.dumps(doc, indent=2, default=str) + "\n")
