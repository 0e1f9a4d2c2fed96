"""Progress bars: one per cell, showing target, workload, clients and the phase running.

A cell's label holds user-given names, so it is shown as plain text (never read as markup, control and
bidi characters made visible); only the status mark after it is storeval's own markup.
"""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

from ..redact import redact_text, visible
from .console import safe

# messages --quiet still prints: what storeval is about to run as a command (systems.py says it first)
ANNOUNCED = ("setup of target ", "teardown of target ")

MARKS = {"ok": "[green]✓[/]", "failed": "[red]✗ failed[/]", "interrupted": "[yellow]interrupted[/]"}


class CellBar:
    """The bar of one cell; the engine calls :meth:`update` a few times a second."""

    def __init__(self, ui: ProgressUI | None, label: str, expected: Any) -> None:
        self.ui, self.label, self.expected = ui, visible(redact_text(label)), expected
        self.task = ui.progress.add_task(self.label, total=None, mark="") if ui else None
        self.phase: str | None = None
        self.total: int | None = None
        self.completed = 0

    def update(self, phase: str, nbytes: int, ops: int) -> None:
        if self.ui is None:
            return
        total_bytes, total_ops = self.expected(phase)
        total, done = (total_bytes, nbytes) if total_bytes else (total_ops or None, ops)
        if phase != self.phase:
            self.phase = phase
            self.ui.progress.reset(self.task, total=total, description=f"{self.label} · {visible(phase)}")
        self.total, self.completed = total, min(done, total) if total else done
        self.ui.progress.update(self.task, completed=self.completed)

    def done(self, status: str) -> None:
        if self.ui is None:
            return
        self.ui.progress.update(self.task, description=self.label, mark=MARKS.get(status, safe(status)),
                                completed=self.total or self.completed)
        self.ui.retire()


class _Frozen:
    """Lines already rendered (rich segments), drawn as they are."""

    def __init__(self, lines: list) -> None:
        self.lines = lines

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich.segment import Segment

        for line in self.lines:
            yield from line
            yield Segment.line()


class _Bars(Progress):
    """The bars, and under them the live view's table while a cell runs (report/live.py)."""

    live_table: Any = None  # (rich's Progress has its own ``live``: the Live that draws it)

    def get_renderables(self) -> Any:
        yield from super().get_renderables()
        if self.live_table is not None:
            yield self.live_table


class ProgressUI:
    """The live bars of the last ``LIVE`` cells; an older finished cell's line is printed once above them and its
    bar dropped, so each refresh draws a few lines however many cells the run has done (a 100,000-cell plan
    would otherwise redraw every finished cell ten times a second)."""

    LIVE = 8

    def __init__(self, console: Console) -> None:
        self.progress = _Bars(TextColumn("{task.description}", markup=False), TextColumn("{task.fields[mark]}"),
                                 BarColumn(), TaskProgressColumn(), TimeElapsedColumn(), console=console,
                                 transient=False)

    def retire(self) -> None:
        """Once ``LIVE`` finished bars have piled up beyond the ``LIVE`` newest, print them as plain lines (in
        order, in one go: printing costs more than drawing) and drop them."""
        tasks = self.progress.tasks
        if len(tasks) < 2 * self.LIVE:
            return
        old = [t for t in tasks[:len(tasks) - self.LIVE] if t.fields.get("mark")]
        if not old:
            return
        self.progress.console.print(self.progress.make_tasks_table(old))
        for t in old:
            self.progress.remove_task(t.id)

    def __enter__(self) -> ProgressUI:
        self.progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.stop()

    def cell(self, label: str, expected: Any) -> CellBar:
        return CellBar(self, label, expected)

    def show_live(self, renderable: Any) -> None:
        """The live view's table under the bars (None: none), drawn at the bars' next refresh. It is laid out
        here, once a second, and the bars' ten redraws a second repeat its lines: laying a table out is work the
        clients' CPUs would pay ten times over."""
        if renderable is None:
            self.progress.live_table = None
            return
        console = self.progress.console
        self.progress.live_table = _Frozen(console.render_lines(renderable, console.options, pad=False))

    def log(self, message: str) -> None:
        self.progress.console.print(safe(message), highlight=False)


class QuietUI:
    def __enter__(self) -> QuietUI:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def cell(self, label: str, expected: Any) -> CellBar:
        return CellBar(None, label, expected)

    def log(self, message: str) -> None:
        """--quiet: messages are not shown (the ones that matter are stored as events) — except a command about to
        run on the user's behalf (a target's setup or teardown), which is always said first, on stderr."""
        if message.startswith(ANNOUNCED):
            print(visible(redact_text(message)), file=sys.stderr, flush=True)
