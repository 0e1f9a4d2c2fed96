"""Where storeval prints: its consoles, and :func:`safe` for every user-given string printed through them.

Names, URLs, paths and error texts are data, never markup: a target named ``[/red]`` prints as itself, a
``\\x1b[31m`` or a bidi override in a name cannot recolour the terminal or reorder the line, and a
credential that slipped into a message is masked. Kept apart from the tables so the CLI's error lines do not
import the analysis to print one line.
"""

from __future__ import annotations

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


def console(stderr: bool = False) -> Console:
    """A console that ignores emoji codes (``:warning:`` in a name stays text): stdout wide enough to stay
    readable when written to a file or a pipe; stderr for messages, one line each."""
    if stderr:
        return Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)
    return Console(emoji=False) if sys.stdout.isatty() else Console(width=160, emoji=False)
