"""`storeval report --figures DIR`: every figure of the report as SVG and PNG (kaleido through Debian's Chromium)
with its data as CSV, an index, and DIR's files replaced only when storeval wrote them (issue 19.6).

One small run (bandwidth on a local directory, 1 and 2 clients, with probe timelines) is drawn once; the files
are checked against the figures the HTML page draws (``html.figure_groups`` over the same store)."""

from __future__ import annotations

import csv
import os
import re
import struct
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from .helpers import load_json, storeval

pytest.importorskip("kaleido")

STUDY = """\
targets:
  disk: {{url: "file://{d}"}}
workloads:
  bw: {{bandwidth: {{file_size: 1MiB, transfer_size: 256KiB, phases: [write, read]}}}}
clients: [1, 2]
probe_interval: 0.05s
"""



@pytest.fixture(scope="module")
def drawn(tmp_path_factory, chromium):
    tmp = tmp_path_factory.mktemp("figures")
    (tmp / "d").mkdir()
    (tmp / "s.yaml").write_text(STUDY.format(d=tmp / "d"))
    r = storeval("run", "s.yaml", "--no-html", "--quiet", cwd=tmp)
    assert r.rc == 0, r.err
    r = storeval("report", "storeval-results", "--figures", "out/figs", cwd=tmp, timeout=600)
    assert r.rc == 0, r.err
    return tmp, r


def _groups(results: Path) -> dict:
    """The page's figures, computed here from the same store."""
    from storeval.analysis.figures import analyze
    from storeval.report.html import figure_groups
    from storeval.store import Store

    store = Store(str(results), create=False)
    run = store.load_run(store.resolve_run(None))
    samples = store.load_samples(run.run_id)
    cells, summary = analyze(run, False, samples)
    return figure_groups(run, cells, summary, samples)


def _texts(path: Path) -> list[str]:
    return [e.text for e in ET.parse(path).iter() if e.tag.endswith("text") and e.text]


def _title(axis: dict | None) -> str:
    title = (axis or {}).get("title")
    return (title.get("text") if isinstance(title, dict) else title) or ""


def test_every_figure_of_the_page_is_an_svg_a_png_and_a_csv_listed_in_the_index(drawn):
    tmp, r = drawn
    figs = tmp / "out" / "figs"
    index = load_json(figs / "index.json")
    groups = _groups(tmp / "storeval-results")
    expected = [(section, title, fig) for section, items in groups.items() for title, fig in items]
    assert [(f["section"], f["title"]) for f in index["figures"]] == [(s, t) for s, t, _ in expected]
    assert {s for s, _, _ in expected} >= {"scaling", "fairness", "latency", "timeline"}
    assert f"{len(expected)} figures in out/figs (SVG, PNG and CSV each" in r.out
    names = [f[fmt] for f in index["figures"] for fmt in ("svg", "png", "csv")]
    assert len(set(names)) == len(names) and sorted(names + ["index.json"]) == sorted(os.listdir(figs))
    for f, (section, _, fig) in zip(index["figures"], expected):
        stem = f["svg"].removesuffix(".svg")
        assert re.fullmatch(r"[a-z0-9-]{1,80}", stem) and stem.startswith(section) \
            and f["png"] == f"{stem}.png" and f["csv"] == f"{stem}.csv"
        layout = fig["layout"]
        # the SVG is XML holding the title and the axis titles (with their units)
        texts = _texts(figs / f["svg"])
        assert _title(layout) in texts
        for key in ("xaxis", "yaxis", "yaxis2"):
            if _title(layout.get(key)):
                assert _title(layout[key]) in texts and f["axes"][key]["title"] == _title(layout[key]), (stem, key)
                assert f["axes"][key]["type"] == layout[key].get("type", "linear")
        # the PNG: its signature, and twice the figure's size in pixels
        png = (figs / f["png"]).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
        assert struct.unpack(">II", png[16:24]) == (2 * (layout.get("width") or 1000), 2 * layout["height"])
        # the CSV: one row per point of every trace, the very numbers of the figure
        with open(figs / f["csv"], newline="") as fh:
            rows = list(csv.reader(fh))
        assert rows[0] == ["trace", "x", "y", "error", "error_minus", "x_axis", "y_axis", "shown"]
        points = []
        for trace in fig["data"]:
            ys = trace.get("y") or []
            plus = (trace.get("error_y") or {}).get("array") or []
            axis = "yaxis" + (trace.get("yaxis") or "y")[1:]
            for j, x in enumerate(trace.get("x") or []):
                points.append((trace["name"], x, ys[j] if j < len(ys) else None, plus[j] if j < len(plus) else None,
                               _title(layout["xaxis"]), _title(layout[axis]),
                               "legend only" if trace.get("visible") == "legendonly" else "drawn"))
        assert len(rows) - 1 == len(points) == f["points"] > 0

        def value(text: str, like):
            if text == "":
                return None
            return float(text) if isinstance(like, (int, float)) and not isinstance(like, bool) else text

        for row, (name, x, y, err, xt, yt, shown) in zip(rows[1:], points):  # symmetric bars: no error_minus
            assert (row[0], value(row[1], x), value(row[2], y), value(row[3], err), row[4], row[5], row[6], row[7]) \
                == (name, x, y, err, "", xt, yt, shown)


def test_figures_are_redrawn_over_storevals_own_files_and_never_over_anyone_elses(drawn):
    tmp, _ = drawn
    figs = tmp / "out" / "figs"
    index = load_json(figs / "index.json")
    first = index["figures"][0]
    r = storeval("report", "storeval-results", "--figures", "out/figs", cwd=tmp, timeout=600)
    assert r.rc == 0, r.err  # its own files, unchanged since: replaced
    assert [f["csv"] for f in load_json(figs / "index.json")["figures"]] == [f["csv"] for f in index["figures"]]
    (figs / "notes.txt").write_text("mine")  # a file the report does not need is left alone
    # one of its files edited since: refused, nothing written or removed
    csv_file = figs / first["csv"]
    original = csv_file.read_bytes()
    csv_file.write_bytes(original + b"edited,1,2,,,x,y,drawn\n")
    before = {p.name: p.read_bytes() for p in figs.iterdir()}
    r = storeval("report", "storeval-results", "--figures", "out/figs", cwd=tmp, timeout=600)
    assert r.rc == 2 and r.out == "" and r.err_lines == [
        f"error: --figures out/figs: {first['csv']} was changed since storeval wrote it (choose another directory, "
        "or move the file away; storeval replaces only its own unchanged figures)"]
    assert {p.name: p.read_bytes() for p in figs.iterdir()} == before
    csv_file.write_bytes(original)
    # a directory storeval never wrote figures into: refused if anything is in it (a project's, a system's)
    (tmp / "fresh").mkdir()
    (tmp / "fresh" / "README").write_text("my own notes")
    r = storeval("report", "storeval-results", "--figures", "fresh", cwd=tmp, timeout=600)
    assert r.rc == 2 and r.out == "" and r.err_lines == [
        "error: --figures fresh: the directory is not empty and storeval never wrote figures into it (give a new or "
        "empty directory, or one that holds storeval's figure index)"]
    assert os.listdir(tmp / "fresh") == ["README"] and (tmp / "fresh" / "README").read_text() == "my own notes"
    # an index.json that is not storeval's own: the directory is refused as a whole
    (figs / "index.json").write_text('{"mine": true}\n')
    r = storeval("report", "storeval-results", "--figures", "out/figs", cwd=tmp)
    assert r.rc == 2 and r.err_lines == ["error: --figures out/figs: index.json there is not the figure index "
                                         "storeval wrote, or it was changed since (choose another directory; "
                                         "storeval replaces only its own figures)"]
    assert (figs / "notes.txt").read_text() == "mine" and (figs / "index.json").read_text() == '{"mine": true}\n'
    # a file where the directory should be
    (tmp / "plain").write_text("x")
    r = storeval("report", "storeval-results", "--figures", "plain", cwd=tmp)
    assert r.rc == 2 and r.err_lines == ["error: --figures plain: is not a directory (give a new or an existing "
                                         "directory)"]


def test_without_chromium_or_kaleido_one_line_names_the_install_and_nothing_is_written(drawn, tmp_path):
    tmp, _ = drawn
    r = storeval("report", str(tmp / "storeval-results"), "--figures", "new", "--json", "doc.json", cwd=tmp_path,
                 env={"BROWSER_PATH": str(tmp_path / "no-chromium")})
    assert r.rc == 2 and r.err_lines == [
        f"error: report --figures draws through Chromium, which is not installed here (BROWSER_PATH="
        f"{tmp_path / 'no-chromium'} is not a program): apt-get install chromium"]
    shadow = tmp_path / "shadow" / "kaleido"  # a kaleido that cannot be imported, first on the path
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('no kaleido here')\n")
    r = storeval("report", str(tmp / "storeval-results"), "--figures", "new", cwd=tmp_path,
                 env={"PYTHONPATH": os.pathsep.join(filter(None, [str(shadow.parent), os.environ.get("PYTHONPATH")]))})
    assert r.rc == 2 and r.err_lines == ["error: report --figures needs kaleido (the figures extra): pip install "
                                         "'storeval[figures]'"]
    assert os.listdir(tmp_path) == ["shadow"]  # no DIR, no JSON
