"""``storeval run … --as ior|mdtest|fio``: each planned cell as the peer command line that does the same work, and
one line per setting the peer cannot express. Nothing runs: the user runs the peer."""

from __future__ import annotations

import shlex
from urllib.parse import unquote, urlparse

from ..core.cell import Cell
from .base import NAMES, PeerError

STOREVAL_ONLY = {"on_error": "fail", "record": False}  # settings of storeval's own, and the value a peer matches


def _path(cell: Cell) -> tuple[str | None, str | None]:
    """(directory, why not) of the cell's target for a POSIX peer."""
    url = cell.target.url or ""
    parsed = urlparse(url)
    if parsed.scheme == "file":
        return unquote(parsed.path), None
    if not url:
        return None, f"target {cell.target.name}: its URL is known only once storeval brings its system up " \
                     "(run the peer against that system's mount)"
    return None, f"target {cell.target.name} ({parsed.scheme}://): {{tool}} here reaches a file system path only"


def render(cells: list[Cell], tool: str) -> list[tuple[Cell, list[str], list[str]]]:
    """(cell, argv, what ``tool`` cannot express) per cell; argv is empty when the cell cannot be run at all."""
    from . import RENDERERS

    if tool not in RENDERERS:
        raise PeerError(f"--as {tool}: not one of {', '.join(RENDERERS)} (storeval prints the command of one of them)")
    out = []
    for cell in cells:
        path, why = _path(cell)
        argv, cannot = RENDERERS[tool].render(cell, path)
        if why:
            cannot.insert(0, why.format(tool=NAMES[tool]))
        for key, plain in STOREVAL_ONLY.items():
            if cell.settings.get(key, plain) != plain:
                cannot.append(f"{key} {cell.settings[key]}: storeval's own ({NAMES[tool]} stops at the first error and "
                              "records no trace)")
        if cell.faults:
            cannot.append(f"faults ({len(cell.faults)}): {NAMES[tool]} injects none; act on the servers yourself")
        if cell.groups:
            cannot.append("client groups: one " + NAMES[tool] + " command runs alike clients (run one per group)")
        if cell.network:
            cannot.append("emulated network: run the peer's processes inside the emulated hosts yourself")
        out.append((cell, argv, cannot))
    return out


def lines(cells: list[Cell], tool: str) -> list[str]:
    """The printed form: per cell a comment naming it, the command (one shell line), a line per setting not
    expressed."""
    text = []
    for cell, argv, cannot in render(cells, tool):
        text.append(f"# cell {cell.index}: {cell.label}")
        if argv:
            text.append(shlex.join(argv))
        text += [f"#   not in {NAMES[tool]}: {c}" for c in cannot]
    return text
