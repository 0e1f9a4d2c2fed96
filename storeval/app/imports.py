"""The import use case: IOR, mdtest, fio and warp results as runs of their own, so that ``report --runs`` and
``compare`` put them beside storeval's."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Imported:
    tool: str  # its name as users write it
    source: str  # the path or endpoint it ran against
    phases: int
    run_id: str


@dataclass
class ImportRequest:
    files: list[str]
    results: str = "storeval-results"
    tool: str | None = None
    label: str | None = None
    command_line: str = field(default="")


def import_results(request: ImportRequest) -> tuple[str, list[Imported]]:
    """Every file is read first (bad input writes nothing), then each becomes a run; (store dir, the runs)."""
    from ..peers import load_file
    from ..peers.base import NAMES
    from ..peers.importer import import_runs
    from ..store import Store

    runs = [load_file(path, request.tool) for path in request.files]
    Store.check_location(request.results)
    store = Store(request.results)
    ids = import_runs(store, runs, label=request.label, command_line=request.command_line)
    return store.dir, [Imported(NAMES[run.tool], run.source, sum(len(c.steps) for c in run.cells), run_id)
                       for run, run_id in zip(runs, ids)]


__all__ = ["ImportRequest", "Imported", "import_results"]
