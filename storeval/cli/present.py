"""What ``storeval run`` prints: a dry run's plan and verdict, and what a run came to."""

from __future__ import annotations

from ..app import EXIT_INPUT, EXIT_OK
from ..units import plural
from .common import console as _console, safe as _safe

DRY_RUN_CELLS = 500  # cells listed one by one; a larger plan's rest is counted


def show_dry_run(request) -> int:
    """``run --dry-run``: the resolved study, the cells and their needs, preflight's verdict; the exit code a
    run would have at its start (2: preflight would stop it)."""
    import yaml
    from rich.table import Table

    from ..app.run import dry_run
    from ..units import format_size

    d = dry_run(request)
    out, err = _console(), _console(stderr=True)
    out.print("study, as it resolves:", highlight=False)
    for line in yaml.safe_dump(d.study, sort_keys=False, allow_unicode=True).splitlines():
        out.print(f"  {_safe(line)}", highlight=False, soft_wrap=True)
    table = Table(title=f"{plural(len(d.cells), 'cell')}, in the order they run", title_justify="left",
                  caption="memory: per client process; scratch and entries: on the target while the cell runs, all "
                          "clients together; kept: laid out once and kept for later cells and runs.",
                  caption_justify="left")
    for col in ("cell", "configuration", "rep"):
        table.add_column(col, overflow="fold")
    for col in ("memory", "scratch", "entries", "kept"):
        table.add_column(col, justify="right", no_wrap=True)
    for pc in d.cells[:DRY_RUN_CELLS]:
        c = pc.cell
        table.add_row(str(c.index), _safe(c.label), str(c.repetition + 1), format_size(pc.memory_per_client),
                      format_size(pc.scratch), str(pc.entries), format_size(pc.kept) if pc.kept else "")
    out.print(table)
    if len(d.cells) > DRY_RUN_CELLS:
        out.print(f"… and {len(d.cells) - DRY_RUN_CELLS} more cells", highlight=False)
    for line in d.warnings:
        err.print(f"warning: {_safe(line)}", highlight=False)
    if d.refused is not None:
        err.print(f"error: {_safe(d.refused)} (dry run: nothing ran)", highlight=False)
        return EXIT_INPUT
    out.print("preflight: every cell fits this host; nothing ran (dry run)", highlight=False)
    return EXIT_OK


def show_run(o, quiet: bool) -> None:
    """What a run came to: outputs that could not be written, the tables, the last line, what failed."""
    from ..report.terminal import print_run

    out, err = _console(), _console(stderr=True)
    for line in o.unwritten:
        err.print(f"error: {_safe(line)}", highlight=False)
    result = o.result
    if not quiet:
        print_run(o.summary, o.cells, out, o.data.study)
        failed = (f", {result.failed} failed" if result.failed else "") + \
            (f", {result.not_run} not run" if result.not_run else "")
        out.print(f"run {result.run_id}: {plural(result.cells, 'cell')}{failed}; results in {_safe(o.store_dir)}"
                  + (f", JSON in {_safe(o.json_out)}" if o.json_out else "")
                  + (f", report in {_safe(o.html_out)}" if o.html_out else ""))
    for cf in o.cells:
        if cf.cell.status == "failed":
            err.print(f"[red]cell {cf.cell.cell_id} ({_safe(cf.cell.target)} · {_safe(cf.cell.workload)} · "
                      f"{plural(cf.cell.clients, 'client')}) failed:[/] {_safe(cf.cell.error)}", highlight=False)
    if result.fatal:
        err.print(f"[red]error:[/] {_safe(result.fatal)}; the job is aborted (the cell's files were removed)",
                  highlight=False)
    for flag in o.failing_flags:  # a fault the study asked for that never struck (or was never undone)
        err.print(f"[red]{flag['code']}:[/] {_safe(flag['message'])}", highlight=False)
    if result.status == "interrupted":
        err.print("[yellow]interrupted: the running cell was stopped, its files removed and it is stored as interrupted[/]")
