"""Peer runs into the results store, as runs of their own that the report and compare read like storeval's.

Every file is read before anything is written, and all of an import's runs are stored in one transaction: bad
input leaves the store as it was, and no run is ever half imported. A file already imported (same content) is
refused, naming its run.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime
from typing import Any

from .. import __version__
from ..core.cell import Cell, TargetSpec
from ..core.process import HOST
from ..store import Store, now
from .base import NAMES, PeerCell, PeerError, PeerRun


def _params(cell: PeerCell) -> dict[str, Any]:
    """The mapped parameters as storeval's workload would hold them (its defaults for what the peer does not
    set), so a storeval run with the same settings compares with it; as mapped when they do not validate."""
    from pydantic import ValidationError

    from ..workloads import workload_class

    if not cell.defaults:
        return dict(cell.params)
    try:
        return workload_class(cell.kind).Params.model_validate(cell.params).model_dump(mode="json")
    except ValidationError:
        return dict(cell.params)


def _started(run: PeerRun) -> datetime:
    try:
        return datetime.fromisoformat(str(run.date).replace("Z", "+00:00")[:26]).replace(tzinfo=None)
    except ValueError:
        return now()


def _digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def import_runs(store: Store, runs: list[PeerRun], *, label: str | None, command_line: str) -> list[str]:
    """Store ``runs`` (one transaction); returns their run ids."""
    ids = []
    digests = {run.source: _digest(run.source) for run in runs}

    def not_imported_yet(con) -> None:
        for source, digest in digests.items():
            seen = con.execute("SELECT run_id FROM studies WHERE study_hash = ? AND engine LIKE 'imported%'",
                               [digest]).fetchall()
            if seen:
                raise PeerError(f"{source}: already imported as run {seen[0][0]} (report that run, or import "
                                "another file)")

    with store.batch(check=not_imported_yet):
        for run in runs:
            run_id = f"{datetime.now():%Y%m%d-%H%M%S}-{run.tool}-{secrets.token_hex(2)}"
            ids.append(run_id)
            target = label or run.target
            provenance = {**run.provenance(), "imported_at": now().isoformat(), "imported_on": HOST}
            started = _started(run)
            cells = [Cell(index=i, config=i, target=TargetSpec(target, run.url), workload=c.kind, kind=c.kind,
                          params=_params(c), factors={"clients": c.clients}, clients=c.clients, repetition=0)
                     for i, c in enumerate(run.cells)]
            study = {"name": f"imported {NAMES[run.tool]} results", "imported": provenance,
                     "targets": {target: {"url": run.url}},
                     "workloads": {c.kind: {"kind": c.kind, **c.params} for c in cells}, "repetitions": 1}
            store.begin_run(run_id, study=study, study_hash=digests[run.source], version=__version__,
                            command_line=command_line, source=run.source, engine=f"imported ({run.tool})",
                            environment={k: v for k, v in {"host": run.host, "imported": provenance}.items()
                                         if v is not None}, started=started)
            for cell, peer in zip(cells, run.cells):
                store.write_cell(run_id, cell, status="ok", error=None, started=started,
                                 phases=[(ph, it, "ok", None) for ph, it in peer.steps], records=peer.records,
                                 events=[])
            store.end_run(run_id, "ok", finished=started)
    return ids
