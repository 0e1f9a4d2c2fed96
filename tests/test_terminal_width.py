"""Every table storeval prints fits the console's width (COLUMNS=100 here, a narrow terminal's): no line longer,
each header on one line, no figure cut or folded inside a number — a table too wide is split into parts. Real
runs of every workload kind on a local directory (MiB sizes), a fault plan on a null target, issue 17's network
tables from a store written as the runner writes it, then `storeval report`, `report --runs` and `compare`.

Flag and warning lines (``✗ code: message [where]``) are the exception, on purpose: each is one line whatever the
width (a terminal folds it; a log keeps it whole for grep, and the tests that read them rely on it)."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import re
import struct
import sys
import termios
from pathlib import Path

import pytest
import yaml
from rich.cells import cell_len
from rich.console import Console

from storeval.analysis.figures import analyze
from storeval.report.console import FILE_WIDTH, console as make_console, width as console_width
from storeval.report.terminal import network_tables, phase_tables, print_fitted
from storeval.store import Store

from .helpers import load_json, storeval
from .test_report_groups import run as groups  # noqa: F401  (issue 17's store: groups, links, rtt)

WIDTH = 100
NARROW = {"COLUMNS": str(WIDTH)}
TRACES = Path(__file__).parent / "data" / "traces"


def check_fits(out: str, width: int = WIDTH) -> list[list[str]]:
    """Every line within ``width`` (flag and warning lines aside), every table's header on one line; the header
    rows, as lists of column titles."""
    lines = out.splitlines()
    long = [line for line in lines if cell_len(line.rstrip()) > width and not line.startswith(("✗ ", "⚠ "))]
    assert not long, "\n".join(long)
    headers = []
    for i, line in enumerate(lines):
        if line.startswith("┏"):
            assert lines[i + 1].startswith("┃") and lines[i + 2].startswith("┡"), "\n".join(lines[i:i + 4])
            headers.append([c.strip() for c in lines[i + 1].strip().strip("┃").split("┃")])
    assert headers, out
    return headers


def body_tokens(out: str) -> set[str]:
    """The words in the tables' rows, as printed (a cell folded inside a word would leave pieces)."""
    return {w for line in out.splitlines() if line.startswith("│")
            for cell in line.strip("│").split("│") for w in cell.split()}


def analysed(results: Path, run_id: str):
    store = Store(str(results), create=False)
    return analyze(store.load_run(run_id), False, store.load_samples(run_id))


def check_tables(out: str, specs: list[dict]) -> None:
    """Each table's columns are printed, each in a header of one line, and each figure whole: every word of
    every figure cell is a word of the printed rows."""
    headers = check_fits(out)
    titles = {title for header in headers for title in header}
    words = body_tokens(out)
    for spec in specs:
        for k, column in enumerate(spec["columns"]):
            if column in ("notes", "context") and not any(row[k].strip() for row in spec["rows"]):
                continue  # a column no row fills may be left out of a split table
            assert column in titles, (spec["title"], column)
            if column in ("target", "workload", "configuration", "notes", "host", "group"):
                continue  # names and notes may fold
            for row in spec["rows"]:
                assert set(row[k].split()) <= words, (spec["title"], column, row[k])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Run A: one of each workload kind at 2 clients; run B: bandwidth and metadata again (for compare);
    run F: a fault plan on a null target. Each printed at COLUMNS=100."""
    tmp = tmp_path_factory.mktemp("width")
    target = tmp / "target"
    target.mkdir()
    url = f"file://{target}"
    small = {"files": 1, "file_size": "2MiB", "cluster_size": "512KiB"}
    study_a = {"targets": {"local": {"url": url}}, "clients": [2], "workloads": {
        "bw": {"bandwidth": {"file_size": "2MiB", "transfer_size": "256KiB"}},
        "md": {"metadata": {"items": 20}},
        "sk": {"skim": small},
        "cp": {"copy": {"chunk_size": "2MiB", "transfer_size": "1MiB", "stagger": 0}},
        "jb": {"jobs": {"duration": "2s", "steady_after": "1s", "file_size": "2MiB"}},
        "cmd": {"command": {"write": "cp {local} {url}", "read": "dd if={url} of=/dev/null bs=1M",
                            "file_size": "1MiB"}},
        "rp": {"replay": {"trace": str(TRACES / "fio-3.33-randrw.iolog")}}}}
    study_b = {"targets": {"local": {"url": url}}, "clients": [2], "workloads": {
        k: study_a["workloads"][k] for k in ("bw", "md")}}
    study_f = {"targets": {"t": {"url": "null://t", "rate": "16MiB/s"}}, "workloads": {"bw": {
        "bandwidth": {"file_size": "16MiB", "transfer_size": "1MiB", "phases": ["write"]},
        "faults": [{"at": "0.3s", "action": "exec", "run": "true", "undo": "true", "for": "0.3s"}]}}}
    out = {}
    for name, study, results in (("a", study_a, "res"), ("b", study_b, "res"), ("f", study_f, "res-f")):
        path = tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump(study))
        r = storeval("run", str(path), "--results", str(tmp / results), "--no-html", cwd=tmp, timeout=900,
                     env=NARROW)
        assert r.rc == 0, r.err
        out[name] = r.out
    return tmp, out


def _run_ids(tmp: Path) -> list[str]:
    return sorted(Store(str(tmp / "res"), create=False).run_ids())  # A, then B (ids start with the time)


def test_a_run_of_every_workload_kind_prints_tables_that_fit_100_columns(runs):
    tmp, out = runs
    a, b = _run_ids(tmp)
    specs = phase_tables(analysed(tmp / "res", a)[1])
    assert {s["kind"] for s in specs} == {"bandwidth", "metadata", "skim", "copy", "jobs", "command", "replay"}
    check_tables(out["a"], specs)  # what `storeval run` printed as it ended
    r = storeval("report", "--results", str(tmp / "res"), "--run", a, cwd=tmp, env=NARROW)
    assert r.rc == 0, r.err
    check_tables(r.out, specs)
    # a table wider than 100 columns is split, its parts named as such, each starting with the keys of a row
    assert "skim (part 2 of " in r.out and "Summary — storage × workload" in r.out
    assert all(header[0] in ("target", "#") for header in check_fits(r.out))
    check_tables(out["b"], phase_tables(analysed(tmp / "res", b)[1]))


def test_report_of_runs_side_by_side_and_compare_fit_100_columns(runs):
    tmp, _ = runs
    a, b = _run_ids(tmp)
    r = storeval("report", "--results", str(tmp / "res"), "--runs", "all", cwd=tmp, env=NARROW)
    assert r.rc == 0, r.err
    check_fits(r.out)
    # each difference between the runs on a line of its own, a long one folded under it, deeper
    facts = r.out.split("what differed between the runs", 1)[1].splitlines()[1:]
    assert facts and all(line.startswith("  ") for line in facts)
    assert any(line.startswith("  study.workloads.rp.replay.trace: ") for line in facts)
    assert any(line.startswith("    ") for line in facts)  # the trace's path and the run labels do not fit on one
    r = storeval("compare", a, b, "--results", str(tmp / "res"), "--json", "cmp.json", cwd=tmp, env=NARROW)
    assert r.rc == 0, r.err
    headers = check_fits(r.out)
    titles = [t for h in headers for t in h]
    for column in ("target", "workload", "clients", "phase", "figure", "A", "B", "change", "interval", "verdict"):
        assert column in titles, column
    # the keys (wide here) are printed once; every part numbers its rows, so each change is found again
    assert all(h[0] == "#" for h in headers) and titles.count("figure") == 1
    doc = load_json(tmp / "cmp.json")
    numbers = [line.split("│")[1].strip() for line in r.out.splitlines() if line.startswith("│")]
    assert numbers.count("1") == len(headers) and numbers.count(str(len(doc["changes"]))) == len(headers)
    for change in doc["changes"]:
        if change["percent"] is not None:
            assert f"{change['percent']:+.1f} %" in r.out  # never folded inside the number


def test_the_fault_table_fits_100_columns(runs):
    _, out = runs
    assert "Faults — what the clients saw" in out["f"]
    titles = [t for h in check_fits(out["f"]) for t in h]
    for column in ("cell", "where", "fault", "struck–undone", "before", "during", "after", "stall s",
                   "recovered s", "written"):
        assert column in titles, column
    assert re.search(r"│ +\d+\.\d\d–\d+\.\d\d s │", out["f"]), out["f"]  # struck–undone, whole


def test_network_tables_groups_and_aggregate_vs_rtt_fit_100_columns(groups):  # noqa: F811
    r = storeval("report", "--results", str(groups.tmp / "storeval-results"), env=NARROW)
    assert r.rc == 0, r.err
    for title in ("Fairness per client group", "Emulated links", "requested vs measured RTT", "Aggregate vs rtt"):
        assert title in r.out, title
    check_tables(r.out, phase_tables(groups.summary) + network_tables(groups.summary))


def test_a_wide_table_is_split_with_every_figure_whole_and_long_names_folded():
    """In-process: long user names fold, figures (± stderr) never break inside a word, no header wraps, the
    notes once, at 100 columns and at 80."""
    columns = ["target", "workload", "clients", "phase", *(f"figure number {k} MiB/s" for k in range(8)), "notes"]
    rows = [["a-very-long-target-name-" * 3, "bw transfer_size=64KiB", str(c), "write",
             *(f"{123456.789 * (k + 1) * c:,.1f} ± {k * 11.5:,.2f}" for k in range(8)), "✗ short-phase in 3 of 3 reps"]
            for c in (1, 2, 16)]
    for width in (WIDTH, 80):
        con = Console(record=True, width=width, emoji=False)
        print_fitted(con, "wide — a table", columns, rows, "caption " * 40, left=("target", "workload", "notes"))
        text = con.export_text()
        headers = check_fits(text, width)
        assert len(headers) > 1 and "wide (part 2 of" in text
        assert sum(h.count("notes") for h in headers) == 1
        words = body_tokens(text)
        for row in rows:
            for cell in row[4:-1]:
                assert set(cell.split()) <= words, cell


def test_the_console_honours_columns_then_the_terminal_then_prints_160_wide_unwatched(monkeypatch):
    """COLUMNS first; a terminal's own width (stdout's, else stderr's: output piped to less or a file from a
    terminal is read there — a real pseudo-terminal here, 93 columns wide); 160 when no terminal shows it."""
    monkeypatch.setenv("COLUMNS", "73")
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert console_width() == 73 and make_console().width == 73 and make_console(stderr=True).width == 73
    monkeypatch.setenv("COLUMNS", "wide")  # not a number: as if unset
    assert console_width(io.StringIO()) == FILE_WIDTH == 160
    monkeypatch.delenv("COLUMNS")
    assert console_width(io.StringIO()) == 160
    master, slave = pty.openpty()
    try:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 93, 0, 0))
        with os.fdopen(os.dup(slave), "w") as tty:
            assert console_width(tty) is None  # stdout a terminal: rich follows it
            with monkeypatch.context() as m:
                m.setattr(sys, "stderr", tty)
                assert console_width(io.StringIO()) == 93
                m.setenv("COLUMNS", "120")
                assert console_width(io.StringIO()) == 120
    finally:
        os.close(master)
        os.close(slave)
