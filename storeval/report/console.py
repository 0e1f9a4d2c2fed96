"""Where storeval prints: its consoles, and :func:`safe` for every user-given string printed through them.

Names, URLs, paths and error texts are data, never markup: a target named ``[/red]`` prints as itself, a
``\\x1b[31m`` or a bidi override in a name cannot recolour the terminal or reorder the line, and a
credential that slipped into a message is masked. Kept apart from the tables so the CLI's error lines do not
import the analysis to print one line.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

from rich.console import Console

from ..redact import redact_text, visible

_TAG = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])")  # what rich reads as a markup tag, with the backslashes before it


def safe(text: Any) -> str:
    """``text`` ready to go into a rich markup string: secrets masked, control and bidi characters shown as
    escapes (``\\x1b``, ``\\u202e``), tags escaped, so a name such as ``[/red]`` prints as itself.

    Unlike ``rich.markup.escape`` a trailing backslash is left single (it would print doubled at the end of
    a line or cell); storeval's own markup never puts a tag straight after a value."""
    return _TAG.sub(lambda m: f"{m[1]}{m[1]}\\{m[2]}", visible(redact_text(str(text))))


FILE_WIDTH = 160  # columns of output that no terminal shows: a batch job's log, a file written unattended


def width(stream: Any = None) -> int | None:
    """The columns storeval prints ``stream`` (stdout) in:

    1. ``COLUMNS`` when it is a positive number — POSIX: the user's preferred width overrides the one the system
       selects (Python's ``shutil.get_terminal_size`` and rich read it so too);
    2. the terminal's width when ``stream`` is one (None: rich asks it, and follows a resize);
    3. the terminal's width when stderr is one: output piped through ``less``, ``tee`` or ``grep``, or redirected
       to a file, from a terminal is read in that terminal, so it is laid out for it (every table storeval prints
       fits 100 columns with no wrapped header);
    4. else :data:`FILE_WIDTH`, 160: nobody is watching (a batch job, cron, CI), and a log is read by grep and
       awk and in wide viewers, where a table row whole on one line is worth more than a narrow page — as fio's
       and IOR's output, which never reflows; ``COLUMNS=100`` asks for less."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    stream = stream if stream is not None else sys.stdout
    if _is_terminal(stream):
        return None
    if _is_terminal(sys.stderr):
        try:
            return os.get_terminal_size(sys.stderr.fileno()).columns or FILE_WIDTH
        except (AttributeError, ValueError, OSError):
            pass
    return FILE_WIDTH


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a closed or replaced stream: as a file
        return False


def console(stderr: bool = False) -> Console:
    """A console that ignores emoji codes (``:warning:`` in a name stays text), as wide as :func:`width` says:
    stdout for tables, stderr for messages, one line each (soft-wrapped: a terminal folds a long one, a log keeps
    it whole for grep)."""
    if stderr:
        return Console(stderr=True, highlight=False, soft_wrap=True, emoji=False, width=width(sys.stderr))
    return Console(emoji=False, width=width(sys.stdout))
