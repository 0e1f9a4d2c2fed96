"""Progress bars: one per cell, showing target, workload, clients and the phase running.

A cell's label holds user-given names, so it is shown as plain text (never read as markup, control and
bidi characters made visible); only the status mark after it is storeval's own markup.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

from ..redact import redact_text, visible
from .console import safe

MARKS = {"ok": "[green]✓[/]", "failed": "[red]✗ failed[/]", "interrupted": "[yellow]interrupted[/]"}


class CellBar:
    """The bar of one cell; the engine calls :meth:`update` a few times a second."""

    def __init__(self, ui: ProgressUI | None, label: str, expected: Any) -> None:
        self.ui, self.label, self.expected = ui, visible(redact_text(label)), expected
        self.task = ui.progress.add_task(self.label, total=None, mark="") if ui else None
        self.phase: str | None = None

    def update(self, phase: str, nbytes: int, ops: int) -> None:
        if self.ui is None:
            return
        total_bytes, total_ops = self.expected(phase)
        total, done = (total_bytes, nbytes) if total_bytes else (total_ops or None, ops)
        if phase != self.phase:
            self.phase = phase
            self.ui.progress.reset(self.task, total=total, description=f"{self.label} · {visible(phase)}")
        self.ui.progress.update(self.task, completed=min(done, total) if total else done)

    def done(self, status: str) -> None:
        if self.ui is None:
            return
        task = self.ui.progress.tasks[[t.id for t in self.ui.progress.tasks].index(self.task)]
        self.ui.progress.update(self.task, description=self.label, mark=MARKS.get(status, safe(status)),
                                completed=task.total or task.completed)


class ProgressUI:
    def __init__(self, console: Console) -> None:
        self.progress = Progress(TextColumn("{task.description}", markup=False), TextColumn("{task.fields[mark]}"),
                                 BarColumn(), TaskProgressColumn(), TimeElapsedColumn(), console=console,
                                 transient=False)

    def __enter__(self) -> ProgressUI:
        self.progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.stop()

    def cell(self, label: str, expected: Any) -> CellBar:
        return CellBar(self, label, expected)

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
        """--quiet: messages are not shown (the ones that matter are stored as events)."""
