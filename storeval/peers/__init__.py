"""Peer benchmarks storeval speaks with: IOR, mdtest, fio and warp.

Each tool's module reads its result files into :class:`~storeval.peers.base.PeerRun` (``load(text, name)``) and,
but warp, renders a storeval cell as that tool's command line (``render(cell, path)``). This module holds the
registry, the detection of a file's tool from its content and the reading of a file with its one-line errors;
``importer.py`` stores runs, ``commands.py`` prints a plan as peer command lines.
"""

from __future__ import annotations

import os
import re

from . import fio, ior, mdtest, warp
from .base import PeerError, PeerRun

TOOLS = {"ior": ior, "mdtest": mdtest, "fio": fio, "warp": warp}
RENDERERS = {"ior": ior, "mdtest": mdtest, "fio": fio}
MAX_BYTES = 256 << 20  # a result file larger than this is not one of these tools' outputs


def detect(text: str) -> str | None:
    """The tool that wrote ``text``, from markers each writes near its start (whole or truncated), else None."""
    head = text[:65536]
    if '"fio version"' in head:
        return "fio"
    if '"Command line"' in head and '"tests"' in head or re.search(r'^\{\s*"Version": "[\d.]', head):
        return "ior"
    if mdtest.detect(text):
        return "mdtest"
    if '"operations"' in head or head.lstrip().startswith("warp:") or '_server_stats"' in head:
        return "warp"
    return None


def read_text(path: str) -> str:
    """A result file's text; one line naming the problem when it is not a readable regular file."""
    try:
        if not os.path.exists(path):
            raise PeerError(f"{path}: no such file (give the path of an IOR, mdtest, fio or warp result file)")
        if not os.path.isfile(path):
            raise PeerError(f"{path}: not a regular file (give the path of an IOR, mdtest, fio or warp result file)")
        if os.path.getsize(path) > MAX_BYTES:
            raise PeerError(f"{path}: {os.path.getsize(path)} bytes, larger than any result file of IOR, mdtest, fio "
                            "or warp (give the tool's JSON or text output, not its raw data)")
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise PeerError(f"{path}: cannot be read ({e.strerror}; check its permissions)") from None
    if not data.strip():
        raise PeerError(f"{path}: empty (the tool wrote nothing there: import the file after its run ended)")
    if b"\0" in data[:4096]:
        raise PeerError(f"{path}: binary data, not a result (warp's .csv.zst is raw data: import the output of "
                        "warp analyze --json FILE instead)")
    return data.decode("utf-8", errors="replace")


def load_file(path: str, tool: str | None = None) -> PeerRun:
    """The run ``path`` holds, read as ``tool``'s (detected from the content when None)."""
    if tool is not None and tool not in TOOLS:
        raise PeerError(f"--tool {tool}: not one of {', '.join(TOOLS)} (or leave --tool out: the tool is told from "
                        "the file)")
    text = read_text(path)
    found = detect(text)
    if tool is None:
        if found is None:
            raise PeerError(f"{path}: not an IOR, mdtest, fio or warp result (none of their markers in it; import IOR "
                            "JSON, mdtest's output, fio JSON or warp JSON, or name the tool with --tool)")
        tool = found
    elif found is not None and found != tool:
        raise PeerError(f"{path}: --tool {tool}, but the file holds {found} output (use --tool {found}, or leave "
                        "--tool out)")
    run = TOOLS[tool].load(text, path)
    run.source = os.path.abspath(path)
    return run
