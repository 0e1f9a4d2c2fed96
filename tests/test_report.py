"""Reports: the one-glance table, the HTML report (checked in a real headless Chromium), compare, export."""

from __future__ import annotations

import csv
import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import duckdb
import pytest

from storeval.report.terminal import table_rows

from .helpers import REPO, load_json, storeval

STUDY = """\
targets:
  diskA: {{url: "file://{a}"}}
  diskB: {{url: "file://{b}"}}
workloads:
  bw: {{bandwidth: {{file_size: 4MiB, transfer_size: 256KiB, phases: [write, read]}}}}
  md: {{metadata: {{items: 30, mode: [unique, single]}}}}
  sk: {{skim: {{files: 2, file_size: 1MiB, cluster_size: 64KiB}}}}
clients: [1, 2, 4]
repetitions: 2
probe_interval: 0.05s
"""
ARTIFACTS = Path(os.environ.get("STOREVAL_TEST_ARTIFACTS", REPO / "test-artifacts"))


class _Tables(HTMLParser):
    """The text of every cell of the tables of a page, by table id."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._id: str | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self._id = dict(attrs).get("id") or f"table-{len(self.tables)}"
            self.tables[self._id] = []
        elif tag == "tr" and self._id:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.tables[self._id].append(self._row)
            self._row = None
        elif tag == "table":
            self._id = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def tables_of(path: Path) -> dict[str, list[list[str]]]:
    parser = _Tables()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser.tables


@pytest.fixture(scope="module")
def study_run(tmp_path_factory):
    """Two targets, three client counts, two repetitions; bandwidth, metadata in two modes and the skim."""
    tmp = tmp_path_factory.mktemp("report")
    (tmp / "a").mkdir()
    (tmp / "b").mkdir()
    (tmp / "study.yaml").write_text(STUDY.format(a=tmp / "a", b=tmp / "b"))
    r = storeval("run", "study.yaml", "--json", "out.json", cwd=tmp, timeout=600)
    assert r.rc == 0, r.err
    doc = load_json(tmp / "out.json")
    report = tmp / "storeval-results" / f"report-{doc['run_id']}.html"
    assert f"report in {report}" in r.out.replace("\n", "")
    return tmp, doc, report, r.out


def test_the_summary_table_is_seed_000s_table_1_and_holds_the_json_numbers(study_run):
    tmp, doc, report, out = study_run
    table = doc["table"]
    # a workload's targets side by side (md twice: its two modes)
    assert [(row["target"], row["workload"]) for row in table] == [
        (t, w) for w in ("bw", "md", "sk") for _ in ([1, 1] if w == "md" else [1]) for t in ("diskA", "diskB")]
    for row in table:
        phases = [s for s in doc["summary"] if s["target"] == row["target"] and s["workload"] == row["workload"]
                  and all(s["factors"].get(k) == v for k, v in row["factors"].items())]
        if row["kind"] == "bandwidth":
            for key, phase in (("read_MiBps", "read"), ("write_MiBps", "write")):
                best = max((s for s in phases if s["phase"] == phase), key=lambda s: s["bandwidth_MiBps"]["mean"])
                assert row[key]["mean"] == best["bandwidth_MiBps"]["mean"]
                assert row[key]["stderr"] == best["bandwidth_MiBps"]["stderr"] and row[key]["n"] == 2
                assert row[key]["clients"] in (1, 2, 4)
        elif row["kind"] == "metadata":
            assert row["read_MiBps"] is None and row["write_MiBps"] is None
            assert list(row["rates"]) == ["dir-create", "file-create", "file-stat", "file-remove"]
            best = max((s for s in phases if s["phase"] == "file-stat"), key=lambda s: s["ops_per_s"]["mean"])
            assert row["rates"]["file-stat"]["mean"] == best["ops_per_s"]["mean"]
        else:
            assert row["rate_unit"] == "events/s" and row["rates"]["skim"]["mean"] > 0
            best = max(phases, key=lambda s: s["MBps"]["mean"])
            assert row["read_MiBps"]["mean"] == pytest.approx(best["MBps"]["mean"] * 1e6 / 2**20)
            assert row["read"]["unit"] == "MB/s" and row["read"]["mean"] == best["MBps"]["mean"]  # the skim's unit
    html_rows = tables_of(report)["summary-table"]
    # read mixes MiB/s (bandwidth) and MB/s (skim): each cell names its unit; the rate column ops/s and events/s
    assert html_rows[0] == ["target", "workload", "clients", "read", "write MiB/s", "rate", "notes", "conditions"]
    assert [r[:-1] for r in html_rows[1:]] == table_rows(table)  # the very numbers of --json, formatted once
    assert html_rows[1][-1].startswith("256KiB transfers, 4MiB per client")  # and how the data moved
    for text_row in table_rows(table):  # and the terminal printed the same table
        assert text_row[3] in out and text_row[4] in out


def test_storeval_report_writes_the_same_report_again(study_run):
    tmp, doc, report, _ = study_run
    r = storeval("report", "storeval-results", "--html", "again.html", "--json", "again.json", cwd=tmp)
    assert r.rc == 0, r.err
    assert "Summary — storage × workload" in r.out
    assert load_json(tmp / "again.json")["table"] == doc["table"]
    assert tables_of(tmp / "again.html")["summary-table"] == tables_of(report)["summary-table"]



def test_the_html_report_renders_every_chart_offline_in_chromium(study_run, chromium):
    from playwright.sync_api import sync_playwright

    tmp, doc, report, _ = study_run
    html = report.read_text(encoding="utf-8")
    markup = re.sub(r"<script[^>]*>.*?</script>", "", html, flags=re.S)
    assert "<script src" not in html and not re.search(r"""(src|href)=["']https?:""", markup)  # all inline
    assert re.search(r'<section id="summary"><h2>Summary — which system, for what</h2>', html)
    assert re.search(r'<section id="overview"><h2>Figures — every system side by side</h2>', html)
    sections = ["Phases", "Scaling", "Fairness", "Metadata", "Skim", "Latency", "Probe timelines",
                "Flags and warnings", "Environment", "Resolved study"]
    for title in sections:  # the detail: folded, each reached from the contents
        anchor = re.search(rf'<details id="([a-z]+)"><summary><h2>{title}</h2>', html)
        assert anchor and f'<a href="#{anchor.group(1)}">' in html, title
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--disable-background-networking", "--no-first-run", "--disable-extensions"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            errors: list[str] = []
            requests: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url) if not r.url.startswith(("file:", "data:")) else None)
            page.goto(report.as_uri())
            page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
            page.wait_for_function("[...document.querySelectorAll('.chart')]"
                                   ".every(e => e.dataset.rendered === '1')", timeout=120_000)
            charts = page.locator(".chart")
            n = charts.count()
            ids = page.eval_on_selector_all(".chart", "els => els.map(e => e.id)")
            drawn = page.eval_on_selector_all(".chart", "els => els.filter(e => e.querySelector('svg.main-svg')"
                                                        " && e.querySelectorAll('.trace, .bars, .point').length)"
                                                        ".length")
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "report.png"), full_page=False)
            page.locator("#fairness-0").screenshot(path=str(ARTIFACTS / "report-fairness.png"))
        finally:
            browser.close()
    assert errors == [] and requests == []
    for prefix in ("overview", "scaling", "fairness", "metadata", "skim", "latency", "timeline"):
        assert any(i.startswith(prefix + "-") for i in ids), prefix
    assert drawn == n and n >= 12
    assert (ARTIFACTS / "report.png").stat().st_size > 10_000


def _summary_figures(doc: dict) -> int:
    names = ("bandwidth_MiBps", "stonewall_MiBps", "ops_per_s", "per_client_MiBps", "latency_p50_us",
             "latency_p99_us", "cpu_seconds_per_GB", "events_per_s", "MBps", "cpu_efficiency",
             "read_amplification", "request_amplification")
    return sum(1 for s in doc["summary"] for k in names if s.get(k))


def test_compare_prints_every_figure_with_a_percent_change(tmp_path):
    (tmp_path / "t").mkdir()
    args = ["run", "--target", f"file://{tmp_path / 't'}", "--workload", "bandwidth", "--clients", "1,2",
            "--set", "file_size=2MiB", "--repetitions", "2", "--quiet", "--no-html"]
    for name in ("A", "B"):
        r = storeval(*args, "--results", name, "--json", f"{name}.json", cwd=tmp_path)
        assert r.rc == 0, r.err
    a, b = load_json(tmp_path / "A.json"), load_json(tmp_path / "B.json")
    r = storeval("compare", "A", "B", "--json", "cmp.json", "--html", "cmp.html", cwd=tmp_path)
    assert r.rc == 0, r.err
    cmp = load_json(tmp_path / "cmp.json")
    assert len(cmp["changes"]) == _summary_figures(a) == _summary_figures(b)
    assert cmp["only_in_a"] == [] and cmp["only_in_b"] == []
    by_key = {(s["clients"] if "clients" in s else None, s["phase"]): s for s in a["summary"]}
    for c in cmp["changes"]:
        assert c["percent"] == pytest.approx((c["b"]["mean"] - c["a"]["mean"]) / c["a"]["mean"] * 100)
        # Welch's t over the 2 repetitions, Holm-adjusted over every figure, and at least the 5 % minimum effect
        assert c["significant"] == (c["p_adjusted"] is not None and c["p_adjusted"] < 0.05)
        assert c["verdict"] in ("better", "worse", "within noise")
        assert (c["verdict"] in ("better", "worse")) == (c["significant"] and abs(c["percent"]) >= 5)
        low, high = c["interval_percent"]
        assert low <= c["percent"] <= high and c["confidence"] == 0.95
    assert by_key
    rows = [line for line in r.out.splitlines() if " % " in line]
    assert len(rows) == len(cmp["changes"])  # every figure printed, each with its change
    html_rows = tables_of(tmp_path / "cmp.html")["compare-table"]
    assert len(html_rows) == 1 + len(cmp["changes"])
    assert all(re.fullmatch(r"[+-]\d+\.\d %", row[7]) for row in html_rows[1:])
    assert all(re.fullmatch(r"[+-]\d+\.\d … [+-]\d+\.\d %", row[8]) for row in html_rows[1:])
    # a run id and DIR:RUN name runs too
    r2 = storeval("compare", f"A:{a['run_id']}", b["run_id"], "--results", "B", cwd=tmp_path)
    assert r2.rc == 0 and len([line for line in r2.out.splitlines() if " % " in line]) == len(cmp["changes"])


def test_compare_of_unrelated_runs_or_missing_runs_is_a_one_line_error(tmp_path):
    r = storeval("compare", "nowhere", "elsewhere", cwd=tmp_path)
    assert r.rc == 2 and len(r.err_lines) == 1
    assert r.err_lines[0] == ("error: nowhere: neither a results directory nor a run id in storeval-results (pass a "
                              "results directory, DIR:RUN_ID, or --results DIR)")


@pytest.mark.parametrize("fmt", ["json", "csv", "parquet"])
def test_export_writes_every_table_from_the_store(study_run, tmp_path, fmt):
    tmp, doc, _, _ = study_run
    out = tmp_path / f"exp-{fmt}"
    r = storeval("export", str(tmp / "storeval-results"), "--format", fmt, "--out", str(out))
    assert r.rc == 0, r.err
    db = tmp / "storeval-results" / "storeval.duckdb"
    tables = ["studies", "cells", "phases", "records", "events", "environment", "samples", "outputs", "processes",
              "testbeds"]
    assert sorted(os.listdir(out)) == sorted(f"{t}.{fmt}" for t in tables)
    with duckdb.connect(str(db), read_only=True) as con:
        for t in tables:
            expected = con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            path = out / f"{t}.{fmt}"
            if fmt == "json":
                got = len(json.loads(path.read_text()))
            elif fmt == "csv":
                with open(path, newline="") as f:
                    got = sum(1 for _ in csv.reader(f)) - 1
            else:
                got = duckdb.connect().execute(f"SELECT count(*) FROM '{path}'").fetchone()[0]
            assert got == expected, t
    if fmt == "parquet":
        total = duckdb.connect().execute(f"SELECT sum(bytes) FROM '{out / 'records.parquet'}'").fetchone()[0]
        assert total == sum(ph["bytes"] for c in doc["cells"] for ph in c["phases"])


def test_export_never_overwrites_and_rejects_unknown_formats(study_run, tmp_path):
    tmp = study_run[0]
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "keep.txt").write_text("mine")
    r = storeval("export", str(tmp / "storeval-results"), "--format", "csv", "--out", str(tmp_path / "busy"))
    assert r.rc == 2 and len(r.err_lines) == 1 and "export never overwrites files" in r.err
    assert os.listdir(tmp_path / "busy") == ["keep.txt"]
    r = storeval("export", str(tmp / "storeval-results"), "--format", "xlsx", "--out", str(tmp_path / "x"))
    assert r.rc == 2 and r.err_lines == ["error: --format xlsx: not a format storeval exports (choose json, csv or "
                                         "parquet)"]
    assert not (tmp_path / "x").exists()


def test_report_and_html_paths_are_checked_before_anything_is_written(tmp_path):
    r = storeval("report", str(tmp_path / "none"), cwd=tmp_path)
    assert r.rc == 2 and len(r.err_lines) == 1 and "is not a results directory" in r.err
    r = storeval("run", "--target", f"file://{tmp_path}", "--workload", "bandwidth", "--clients", "1",
                 "--set", "file_size=1MiB", "--html", str(tmp_path / "no" / "r.html"), "--quiet", cwd=tmp_path)
    assert r.rc == 2 and r.err_lines == [f"error: --html {tmp_path / 'no' / 'r.html'}: directory "
                                         f"{tmp_path / 'no'} does not exist (create it or choose another path)"]
    assert not (tmp_path / "storeval-results").exists()


def test_outputs_never_replace_files_storeval_did_not_write(study_run, tmp_path):
    tmp = study_run[0]
    store = tmp / "storeval-results" / "storeval.duckdb"
    before = store.stat().st_size
    mine = tmp_path / "notes.html"
    mine.write_text("my notes")
    for option, path in (("--html", store), ("--html", mine), ("--json", mine)):
        r = storeval("report", str(tmp / "storeval-results"), option, str(path), cwd=tmp_path)
        assert r.rc == 2 and r.err_lines == [f"error: {option} {path}: a file that storeval did not write is there "
                                             "(choose a new file name; storeval replaces only its own output)"]
    assert store.stat().st_size == before and mine.read_text() == "my notes"
    for option, name in (("--html", "r.html"), ("--json", "r.json")):  # its own output is replaced, again and again
        for _ in range(2):
            r = storeval("report", str(tmp / "storeval-results"), option, str(tmp_path / name), cwd=tmp_path)
            assert r.rc == 0, r.err


def test_compare_does_not_compare_configurations_whose_parameters_differ(tmp_path):
    (tmp_path / "t").mkdir()
    base = ["run", "--target", f"file://{tmp_path / 't'}", "--workload", "bandwidth", "--clients", "1", "--quiet",
            "--no-html"]
    assert storeval(*base, "--set", "file_size=2MiB", "--results", "A", cwd=tmp_path).rc == 0
    assert storeval(*base, "--set", "file_size=4MiB", "--results", "B", cwd=tmp_path).rc == 0
    r = storeval("compare", "A", "B", cwd=tmp_path)
    assert r.rc == 2 and len(r.err_lines) == 1
    assert "have no configuration in common; same names, other parameters: " in r.err
    assert "file_size 2097152 → 4194304" in r.err


def test_export_into_an_existing_empty_directory_keeps_it(study_run, tmp_path):
    out = tmp_path / "mine"
    out.mkdir(mode=0o755)
    os.chmod(out, 0o755)
    r = storeval("export", str(study_run[0] / "storeval-results"), "--format", "csv", "--out", str(out))
    assert r.rc == 0, r.err
    assert oct(out.stat().st_mode & 0o777) == "0o755" and len(os.listdir(out)) == 10  # every table of the store
    assert [p.name for p in tmp_path.iterdir()] == ["mine"]  # no temporary directory left beside it


def _config(phase: str, clients: int, reps: int, flags=(), warnings=(), seen=None, outliers=0):
    from storeval.analysis.figures import ConfigSummary
    from storeval.stats import summarize

    return ConfigSummary(target="t", workload="bw", kind="bandwidth", factors={"clients": clients}, params={},
                         clients=clients, phase=phase, repetitions=reps, statuses=["ok"] * reps,
                         bandwidth=summarize([100.0 + i for i in range(reps)]), ops_per_s=None, stonewall=None,
                         latency_p50_us=None, latency_p99_us=None, per_client_MiBps=None, cpu_seconds_per_GB=None,
                         extras={}, reason=None, warnings=[{"code": c, "message": "m"} for c in warnings], errors={},
                         outliers=[{"cell": i, "repetition": i, "iteration": 0, "value": 1.0} for i in range(outliers)],
                         flags=[{"code": c, "message": "m"} for c in flags], seen=seen or {})


def test_notes_count_flags_warnings_and_outliers_over_repetitions_instead_of_listing_each():
    from storeval.analysis.table import summary_table
    from storeval.report.terminal import notes_for

    rows = [_config("write", 1, 3, flags=["short-phase"], warnings=["write-back"],
                    seen={"short-phase": 3, "write-back": 3}, outliers=1),
            _config("write", 2, 3, flags=["short-phase"], warnings=["write-back"],
                    seen={"short-phase": 2, "write-back": 3}),
            _config("read", 1, 3, outliers=1), _config("read", 2, 3, flags=["busy-host"], seen={"busy-host": 1})]
    (row,) = summary_table(rows)
    assert row["notes"] == ["✗ short-phase in 5 of 12 reps", "✗ busy-host in 1 of 12 reps", "2 of 12 reps outlier",
                            "⚠ write-back in 6 of 12 reps"]
    # the phase tables keep the detail: per configuration, counted over its own repetitions
    assert notes_for(rows[0]) == "✗ short-phase in 3 of 3 reps; 1 of 3 reps outlier; ⚠ write-back in 3 of 3 reps"
    assert notes_for(rows[1]) == "✗ short-phase in 2 of 3 reps; ⚠ write-back in 3 of 3 reps"
    assert notes_for(_config("read", 4, 3)) == ""  # a clean configuration has no notes


def test_a_warning_in_every_repetition_is_one_counted_note(tmp_path):
    (tmp_path / "t").mkdir()
    r = storeval("run", "--target", f"file://{tmp_path / 't'}", "--workload", "bandwidth", "--clients", "1,2",
                 "--set", "file_size=1MiB", "--set", "fsync=false", "--set", "phases=write", "--repetitions", "3",
                 "--quiet", "--no-html", "--json", "out.json", cwd=tmp_path)
    assert r.rc == 0, r.err
    doc = load_json(tmp_path / "out.json")
    (row,) = doc["table"]
    assert "⚠ write-back in 6 of 6 reps" in row["notes"]
    assert [n for n in row["notes"] if "write-back" in n] == ["⚠ write-back in 6 of 6 reps"]
    assert all(n.count("✗") + n.count("⚠") <= 1 and "outlier rep." not in n for n in row["notes"])
