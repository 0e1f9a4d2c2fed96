"""The results store as the commands meet it: opened (held results stored on the way), a run named by the user
found, and the run's JSON document and HTML report written with their ownership headers."""

from __future__ import annotations

import os
from typing import Any

from ..errors import InputError
from . import Say


STDOUT = "-"  # --json -: the document on standard output, alone (the tables are not printed then)


def check_output(path: str, option: str = "--json", creating: str | None = None) -> None:
    """An output file's place must exist and be writable before anything runs, and an existing file there is
    replaced only if storeval wrote it and nobody changed it since (its ownership header and digest): never a
    user's file, never the results store. ``creating`` names a directory this command will create."""
    from ..outputs import check_output as check

    if path == STDOUT and option == "--json":
        return

    check(path, option, "json" if option == "--json" else "html", creating)


def open_results(results: str, say: Say) -> Any:
    """An existing results store (a damaged or foreign file is one line); held results that a run could not
    store are stored now, and the user hears about them."""
    from ..store import Store

    if not os.path.isdir(results):
        raise InputError(f"{results} is not a results directory (run storeval run first, or pass the directory)")
    store = Store(results, create=False)
    for path in store.imported:
        say.info(f"stored the held results of {path} in {store.path}")
    for path in store.unimported:
        say.warn(f"held results in {path} are not in {store.path} yet (the store cannot be written now; the next "
                 "storeval command here tries again)")
    return store


def run_of(ref: str, results: str, say: Say) -> tuple[Any, str]:
    """A run named as a results directory (its latest run), DIR:RUN_ID, or a run id in ``results``."""
    if os.path.isdir(ref):
        store = open_results(ref, say)
        return store, store.resolve_run(None)
    directory, sep, run_id = ref.rpartition(":")
    if sep and os.path.isdir(directory):
        store = open_results(directory, say)
        return store, store.resolve_run(run_id)
    if not os.path.isdir(results):
        raise InputError(f"{ref}: neither a results directory nor a run id in {results} (pass a results directory, "
                         "DIR:RUN_ID, or --results DIR)")
    store = open_results(results, say)
    return store, store.resolve_run(ref)


def write_json(store: Any, path: str, doc: dict, runs: list[str]) -> None:
    """--json: the document with its ownership header, noted in the store's ``outputs`` table; ``-``: the
    document alone on standard output (a stream: no header, nothing to record)."""
    from ..report.document import write_document

    if path == STDOUT:
        write_stdout(doc)
        return
    mark, size = write_document(path, doc, "run", runs)
    store.record_output(path, mark, size)


def write_html(store: Any, data: Any, cells: list, summary: list, path: str, samples: Any = None,
               across: Any = None) -> None:
    """--html: the report with its ownership header, noted in the store's ``outputs`` table; ``across``: several
    runs side by side (their list and differences head the page)."""
    from ..outputs import write_owned
    from ..report.html import render_report

    if across is None:
        text = render_report(data, cells, summary, store.load_samples(data.run_id) if samples is None else samples)
        runs = [data.run_id]
    else:
        text = render_report(data, cells, summary, samples, runs=across.runs, differences=across.differences)
        runs = [r["run_id"] for r in across.runs]
    mark, size = write_owned(path, "--html", "html", "run", runs, text)
    store.record_output(path, mark, size)


def write_stdout(doc: Any) -> None:
    """A JSON document on standard output, flushed (a reader of the pipe gets it whole before the exit)."""
    import json
    import sys

    sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
    sys.stdout.flush()


def write_listing(path: str, doc: object) -> None:
    """``--json PATH`` of a listing command: ``-`` writes it to stdout (nothing else is printed then); a file is
    written with storeval's ownership header and replaces only a listing storeval wrote."""
    import json

    if path == STDOUT:
        write_stdout(doc)
        return
    from ..outputs import check_output as check_owned, write_owned

    check_owned(path, "--json", "json", kind="listing")
    write_owned(path, "--json", "json", "listing", [], json.dumps(doc, indent=2, default=str) + "\n")
