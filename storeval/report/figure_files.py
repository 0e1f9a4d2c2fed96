"""``storeval report --figures DIR``: every figure of the report as files for papers and slides.

Each figure of ``html.figure_groups`` (the very figures the HTML page draws) becomes three files named after its
section and a slug of its title (``scaling-bandwidth-write-aggregate-mib-s-vs-clients``: ASCII, no path
separator, at most 80 characters, made unique with ``-2``…): ``.svg`` and ``.png`` drawn by kaleido 1.x through
the machine's Chromium (one browser session for all figures, each bounded in time), and ``.csv`` with the data
behind it, one row per point: trace, x, y, error (± or +), error_minus (− when the bars are asymmetric), the
axis titles with their units, and whether the trace is drawn or only in the legend. ``index.json`` lists every
figure: its files, title, section and axes (title with unit, linear or log).

Ownership, as for ``--json``/``--html`` (``outputs.py``): ``index.json`` carries storeval's ownership header (of
its own kind, ``figures``: ``--json`` never replaces it, nor this command a JSON document) and
the SHA-256 of every file it lists, so a file in DIR is replaced (or, when a new report no longer has its figure,
removed) only when the intact index lists it and it is unchanged; any other file there is refused in one line,
or left alone when the report does not need its name. Everything is drawn in memory before anything is written,
and the files go into place only after all of them were written beside it: a missing Chromium or kaleido, a
figure that cannot be drawn or a full disk leaves DIR as it was (and a DIR this command made is removed again).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import tempfile
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from ..core.remove import SKIP, remove_tree
from ..errors import InputError
from ..outputs import Mark, OutputError, failure, read_owned, write_owned

INDEX = "index.json"
STEM_MAX = 80
FORMATS = ("svg", "png", "csv")
WIDTH, HEIGHT, PNG_SCALE = 1000, 450, 2  # pixels of a figure without its own size; PNGs at twice that for print
TIMEOUT_S = 60  # to draw one image; a browser that stops answering ends the command within it
COLUMNS = ["trace", "x", "y", "error", "error_minus", "x_axis", "y_axis", "shown"]
NEED_CHROMIUM = "apt-get install chromium"
NEED_KALEIDO = "pip install 'storeval[figures]'"


@dataclass
class Figure:
    """One figure drawn: its files' names and bytes, and what the index says of it."""

    section: str
    title: str
    stem: str
    files: dict[str, bytes] = field(default_factory=dict)  # format → bytes
    axes: dict[str, dict[str, Any]] = field(default_factory=dict)
    traces: int = 0
    points: int = 0

    def entry(self) -> dict[str, Any]:
        return {"section": self.section, "title": self.title, **{fmt: f"{self.stem}.{fmt}" for fmt in FORMATS},
                "axes": self.axes, "traces": self.traces, "points": self.points}


def slug(text: str) -> str:
    """``Bandwidth · write: MiB/s vs clients`` → ``bandwidth-write-mib-s-vs-clients`` (ASCII letters, digits, -)."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")


def stems(items: list[tuple[str, str]]) -> list[str]:
    """A file name stem per (section, title), stable for the same figures, unique, at most STEM_MAX characters."""
    out: list[str] = []
    taken: set[str] = {INDEX.rsplit(".", 1)[0]}
    for section, title in items:
        named = re.sub(r"\s*\([^()]*\d[^()]*\)", "", title)  # measured values in brackets (Jain 0.99 …) change
        base = "-".join(p for p in (slug(section), slug(named)) if p) or "figure"
        base = base[:STEM_MAX].rstrip("-")
        stem, n = base, 1
        while stem in taken:
            n += 1
            suffix = f"-{n}"
            stem = base[:STEM_MAX - len(suffix)].rstrip("-") + suffix
        taken.add(stem)
        out.append(stem)
    return out


# -- what is needed, and what is there ------------------------------------------------------------------------

def find_browser() -> str:
    """The Chromium kaleido draws through (``BROWSER_PATH`` if set, else the first of chromium, chrome … on the
    PATH or in their usual places); one line naming the fix when there is none."""
    try:
        from choreographer.browsers.chromium import Chromium
    except ImportError:
        raise InputError(f"report --figures needs kaleido (the figures extra): {NEED_KALEIDO}") from None
    path = Chromium.find_browser(skip_local=False)
    if path and os.path.isfile(path) and os.access(path, os.X_OK):
        return str(path)
    where = f" (BROWSER_PATH={os.environ['BROWSER_PATH']} is not a program)" if os.environ.get("BROWSER_PATH") \
        else ""
    raise InputError(f"report --figures draws through Chromium, which is not installed here{where}: "
                     f"{NEED_CHROMIUM}")


def _index(directory: str) -> dict[str, str]:
    """file name → SHA-256 of the figure files the intact index in ``directory`` says storeval wrote; an index
    that is not storeval's own (or was changed) is refused."""
    path = os.path.join(directory, INDEX)
    if not os.path.lexists(path):
        return {}
    if not os.path.isfile(path) or os.path.islink(path):
        raise InputError(f"--figures {directory}: {INDEX} there is not a file storeval wrote (choose another "
                         "directory; storeval replaces only its own figures)")
    mark, text = read_owned(path, "figures")  # its own kind: never a JSON document or an HTML report
    try:
        doc = json.loads(text) if mark is not None else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or doc.get("kind") != "figures" or not isinstance(doc.get("files"), dict):
        raise InputError(f"--figures {directory}: {INDEX} there is not the figure index storeval wrote, or it was "
                         "changed since (choose another directory; storeval replaces only its own figures)")
    return {str(k): str(v) for k, v in doc["files"].items() if "/" not in str(k) and not str(k).startswith(".")}


def _digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _check_names(directory: str, names: list[str], owned: dict[str, str]) -> None:
    """Every name the report writes is free, or storeval's own unchanged file (listed in the index)."""
    for name in names:
        path = os.path.join(directory, name)
        if not os.path.lexists(path):
            continue
        if os.path.islink(path) or not os.path.isfile(path) or name not in owned:
            raise InputError(f"--figures {directory}: {name} is there and storeval did not write it (choose another "
                             "directory; storeval replaces only its own figures)")
        if _digest(path) != owned[name]:
            raise InputError(f"--figures {directory}: {name} was changed since storeval wrote it (choose another "
                             "directory, or move the file away; storeval replaces only its own unchanged figures)")


def check_figures(directory: str) -> None:
    """Before anything is read or drawn: kaleido and Chromium are here, DIR is a directory or can be made, and
    an existing one is empty or holds storeval's own intact index."""
    try:
        import kaleido  # noqa: F401
    except ImportError:
        raise InputError(f"report --figures needs kaleido (the figures extra): {NEED_KALEIDO}") from None
    find_browser()
    if not directory:
        raise InputError("--figures: give a directory for the figure files")
    if os.path.lexists(directory) and not os.path.isdir(directory):
        raise InputError(f"--figures {directory}: is not a directory (give a new or an existing directory)")
    if os.path.isdir(directory):
        if not os.access(directory, os.W_OK | os.X_OK):
            raise InputError(f"--figures {directory}: the directory is not writable (choose another)")
        if not os.path.lexists(os.path.join(directory, INDEX)) and os.listdir(directory):
            # like export: a directory with someone else's files (a project's, a system's) is not written into
            raise InputError(f"--figures {directory}: the directory is not empty and storeval never wrote figures "
                             "into it (give a new or empty directory, or one that holds storeval's figure index)")
        _index(directory)
    else:
        parent = _existing_parent(directory)
        if not os.access(parent, os.W_OK | os.X_OK):
            raise InputError(f"--figures {directory}: cannot be made, {parent} is not writable (choose another "
                             "directory)")


def _existing_parent(directory: str) -> str:
    parent = os.path.dirname(os.path.abspath(directory))
    while not os.path.isdir(parent):
        parent = os.path.dirname(parent)
    return parent


# -- drawing --------------------------------------------------------------------------------------------------

def _axis_title(layout: dict[str, Any], name: str) -> str:
    """The title (with its unit) of axis ``x``/``y2``…; a small multiple's axis without one takes the axis it
    matches, else the first axis's."""
    key = f"{name[0]}axis{name[1:]}"
    axis = layout.get(key) or {}
    title = axis.get("title")
    text = title.get("text") if isinstance(title, dict) else title
    if text:
        return str(text)
    if axis.get("matches") and axis["matches"] != name:
        return _axis_title(layout, axis["matches"])
    return _axis_title(layout, name[0]) if name[1:] else ""


def _axes(layout: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = {}
    for key in sorted(k for k in layout if re.fullmatch(r"[xy]axis\d*", k)):
        axis = layout[key] or {}
        name = key[0] + key[5:]
        out[key] = {"title": _axis_title(layout, name), "type": axis.get("type") or "linear"}
    return out


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def data_rows(fig: dict[str, Any]) -> list[list[str]]:
    """The CSV rows of a figure: one per point of every trace, in the figure's order (COLUMNS)."""
    layout = fig.get("layout") or {}
    rows = []
    for i, trace in enumerate(fig.get("data") or []):
        name = str(trace.get("name") or f"trace {i + 1}")
        xs, ys = list(trace.get("x") or []), list(trace.get("y") or [])
        horizontal = trace.get("orientation") == "h"
        bars = (trace.get("error_x") if horizontal else trace.get("error_y")) or {}
        plus = list(bars.get("array") or [])
        minus = list(bars.get("arrayminus") or []) if bars.get("symmetric") is False else []
        x_axis = _axis_title(layout, trace.get("xaxis") or "x")
        y_axis = _axis_title(layout, trace.get("yaxis") or "y")
        shown = "legend only" if trace.get("visible") == "legendonly" else \
            "hidden" if trace.get("visible") is False else "drawn"
        for j in range(max(len(xs), len(ys))):
            rows.append([name, _cell(xs[j] if j < len(xs) else None), _cell(ys[j] if j < len(ys) else None),
                         _cell(plus[j] if j < len(plus) else None), _cell(minus[j] if j < len(minus) else None),
                         x_axis, y_axis, shown])
    return rows


def _csv(fig: dict[str, Any]) -> tuple[bytes, int]:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    rows = data_rows(fig)
    writer.writerows(rows)
    return out.getvalue().encode("utf-8"), len(rows)


def render_figures(directory: str, groups: dict[str, list[tuple[str, dict]]]) -> list[Figure]:
    """Every figure drawn as SVG and PNG (one Chromium for all) and tabulated as CSV, in memory; the names they
    will take in ``directory`` are checked first (only free names or storeval's own unchanged files)."""
    items = [(section, title, fig) for section, figs in groups.items() for title, fig in figs]
    figures = [Figure(section, title, stem) for (section, title, _), stem in
               zip(items, stems([(s, t) for s, t, _ in items]))]
    if os.path.isdir(directory):
        _check_names(directory, [f"{f.stem}.{fmt}" for f in figures for fmt in FORMATS], _index(directory))
    for f, (_, _, fig) in zip(figures, items):
        f.files["csv"], f.points = _csv(fig)
        f.axes, f.traces = _axes(fig.get("layout") or {}), len(fig.get("data") or [])
    if figures:
        images = _draw([fig for _, _, fig in items], find_browser())
        for f, (svg, png) in zip(figures, images):
            f.files["svg"], f.files["png"] = svg, png
    return figures


def _draw(figs: list[dict[str, Any]], browser: str) -> list[tuple[bytes, bytes]]:
    """SVG and PNG bytes of each figure, in one kaleido session (one browser) for all of them."""
    import asyncio

    from kaleido import Kaleido

    async def draw() -> list[tuple[bytes, bytes]]:
        out = []
        async with Kaleido(n=1, timeout=TIMEOUT_S, mathjax=False, path=browser) as k:
            for fig in figs:
                layout = fig.get("layout") or {}
                size = {"width": layout.get("width") or WIDTH, "height": layout.get("height") or HEIGHT}
                svg = await k.calc_fig(fig, opts={"format": "svg", **size})
                png = await k.calc_fig(fig, opts={"format": "png", "scale": PNG_SCALE, **size})
                out.append((bytes(svg), bytes(png)))
        return out

    async def bounded() -> list[tuple[bytes, bytes]]:  # a browser that never starts or answers ends it too
        return await asyncio.wait_for(draw(), timeout=TIMEOUT_S + 5 * len(figs))

    try:
        return asyncio.run(bounded())
    except Exception as e:  # noqa: BLE001 - the browser's or kaleido's failure, in one line
        text = " ".join(str(e).split()) or type(e).__name__
        if "choreo_get_chrome" in text:  # kaleido's own advice is a browser download: the fix here is Debian's
            text = f"no usable Chromium ({NEED_CHROMIUM})"
        raise OutputError(f"--figures: Chromium could not draw the figures ({type(e).__name__}: {text[:300]}); "
                          f"nothing was written (check that {browser} starts: {browser} --headless --version)") \
            from None


# -- writing --------------------------------------------------------------------------------------------------

def write_figures(directory: str, figures: list[Figure], runs: list[str]) -> tuple[tuple[str, Mark, int], int]:
    """Put the drawn files into ``directory`` (made if absent) with the index that proves them storeval's;
    returns the index's (path, header, size) for the store's outputs table, and the number of figures."""
    from .. import __version__

    made = not os.path.isdir(directory)
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as e:
        raise OutputError(failure(e, f"cannot make --figures {directory}")) from None
    owned = _index(directory)
    names = {f"{f.stem}.{fmt}": data for f in figures for fmt, data in f.files.items()}
    _check_names(directory, list(names), owned)  # again: something may have appeared while the figures were drawn
    temps: dict[str, str] = {}
    try:
        for name, data in names.items():  # every file written beside its place first: all or nothing
            fd, tmp = tempfile.mkstemp(prefix=".storeval-", suffix="." + name.rsplit(".", 1)[1], dir=directory)
            temps[name] = tmp
            with os.fdopen(fd, "wb") as out:
                umask = os.umask(0)
                os.umask(umask)
                os.fchmod(out.fileno(), 0o666 & ~umask)
                out.write(data)
        _check_names(directory, list(names), owned)
        for name, tmp in temps.items():
            os.replace(tmp, os.path.join(directory, name))
        temps.clear()
    except OSError as e:
        for tmp in temps.values():
            if os.path.lexists(tmp):
                os.unlink(tmp)
        temps.clear()
        if made:  # the directory this command made, with what it put there (anything else keeps it)
            remove_tree(os.path.dirname(os.path.abspath(directory)), os.path.basename(os.path.abspath(directory)),
                        judge=lambda rel, name, st, fd: None if "/" not in rel and (
                            name in names or name.startswith(".storeval-")) else SKIP)
        raise OutputError(failure(e, f"cannot write --figures {directory}")) from None
    finally:
        for tmp in temps.values():
            if os.path.lexists(tmp):
                os.unlink(tmp)
    digests = {name: hashlib.sha256(data).hexdigest() for name, data in names.items()}
    for name, digest in owned.items():  # a figure the report no longer has: its unchanged file goes
        path = os.path.join(directory, name)
        if name not in names and os.path.isfile(path) and not os.path.islink(path) and _digest(path) == digest:
            os.unlink(path)
    doc = {"storeval_version": __version__, "kind": "figures", "runs": runs,
           "note": "each figure as SVG and PNG (drawn by kaleido through Chromium, as the HTML report draws it) and "
                   "its data as CSV, one row per point: trace, x, y, error (± when error_minus is empty, else +), "
                   "error_minus, the axis titles with their units, shown (drawn, legend only, hidden)",
           "csv_columns": COLUMNS, "png_scale": PNG_SCALE,
           "figures": [f.entry() for f in figures], "files": digests}
    path = os.path.join(directory, INDEX)
    mark, size = write_owned(path, "--figures", "json", "figures", runs, json.dumps(doc, indent=2) + "\n")
    return (path, mark, size), len(figures)
