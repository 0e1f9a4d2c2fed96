"""The HTML report as a reader sees it (issue 19): which system, for what, on the first screens; detail on demand.

Three real runs, each shared by the tests that read it: the study of every overview figure
(``studies/report-figures.yaml``: two local "systems" with declared limits and prices), the default run's
shape (``storeval run --target DIR``, made small), and a 48-cell study on ``null://`` (4 client counts × 4
transfer sizes × 3 repetitions). The pages are opened in Debian's Chromium at 1400×900 and measured: element
bounding boxes, console errors, requests, every ``<details>`` opened and its charts drawn. Screenshots are kept
in test-artifacts/.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from storeval.analysis.figures import analyze
from storeval.analysis.overview import costs, efficiency
from storeval.store import Store

from .helpers import REPO, load_json, storeval
from .test_report import ARTIFACTS, tables_of

SCREEN = {"width": 1400, "height": 900}
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
        "--no-first-run", "--disable-extensions"]
UNIT = re.compile(r"MiB/s|MB/s|ops/s|events/s|%|µs|\(ratio\)|CPU s / wall s|clients|jobs|workers|operation|"
                  r"seconds|configuration|phase|client|rtt \(ms\)|servers|\(\w[\w ]* / \w[\w ]*\)")
NULL_48 = """\
targets:
  ceiling: {url: "null://ceiling"}
workloads:
  bw: {bandwidth: {file_size: 1MiB, transfer_size: [4KiB, 16KiB, 64KiB, 256KiB], phases: [write, read]}}
clients: [1, 2, 3, 4]
repetitions: 3
probe_interval: 0s
"""



def _run(tmp: Path, *args: str) -> tuple[dict, Path]:
    r = storeval("run", *args, "--json", "out.json", "--quiet", cwd=tmp, timeout=900)
    assert r.rc == 0, r.err
    doc = load_json(tmp / "out.json")
    return doc, tmp / "storeval-results" / f"report-{doc['run_id']}.html"


@pytest.fixture(scope="module")
def figures_run(tmp_path_factory):
    """studies/report-figures.yaml, as a user runs it: every figure type this machine can make."""
    tmp = tmp_path_factory.mktemp("figures")
    (tmp / "sysA").mkdir()
    (tmp / "sysB").mkdir()
    shutil.copy(REPO / "studies" / "report-figures.yaml", tmp / "study.yaml")
    doc, report = _run(tmp, "study.yaml")
    return tmp, doc, report


@pytest.fixture(scope="module")
def default_run(default_study_run):
    """The default study (bandwidth, metadata, skim over 1 and 2 clients), the session's one run of it."""
    tmp, r, out = default_study_run
    assert r.rc == 0, r.err
    doc = load_json(out)
    return tmp, doc, tmp / "storeval-results" / f"report-{doc['run_id']}.html"


@pytest.fixture(scope="module")
def run_48(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cells48")
    (tmp / "study.yaml").write_text(NULL_48)
    doc, report = _run(tmp, "study.yaml")
    assert len(doc["cells"]) == 48
    return tmp, doc, report


def _figures(report: Path) -> dict:
    html = report.read_text(encoding="utf-8")
    m = re.search(r'<script type="application/json" id="storeval-figures">(.*?)</script>', html, re.S)
    return json.loads(m.group(1).replace("<\\/", "</"))


class Page:
    """What the browser saw of a report: positions, errors, requests, charts drawn after opening every section."""

    def __init__(self, report: Path, browser_path: str, shot: str) -> None:
        from playwright.sync_api import sync_playwright

        self.errors: list[str] = []
        self.requests: list[str] = []
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=browser_path, args=ARGS)
            try:
                page = browser.new_page(viewport=SCREEN)
                page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda e: self.errors.append(str(e)))
                page.on("request", lambda r: self.requests.append(r.url)
                        if not r.url.startswith(("file:", "data:")) else None)
                page.goto(report.as_uri())
                page.wait_for_function("[...document.querySelectorAll('.chart')].filter(e => !e.closest("
                                       "'details:not([open])')).every(e => e.dataset.rendered === '1')",
                                       timeout=180_000)
                box = "e => { const b = e.getBoundingClientRect(); return [b.top + scrollY, b.bottom + scrollY]; }"
                self.summary = page.eval_on_selector("#summary-table", box)
                self.overview = page.eval_on_selector_all(
                    "#overview .chart", f"els => els.map(e => [e.id, ({box})(e)])")
                self.detail_top = page.eval_on_selector("#detail", box)[0]
                self.closed = page.eval_on_selector_all("details", "els => els.filter(e => !e.open).map(e => e.id)")
                self.undrawn_before = page.eval_on_selector_all(
                    "details .chart", "els => els.filter(e => e.dataset.rendered).length")
                ARTIFACTS.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(ARTIFACTS / f"{shot}.png"), full_page=False)
                page.screenshot(path=str(ARTIFACTS / f"{shot}-overview.png"), clip={
                    "x": 0, "y": 0, "width": SCREEN["width"], "height": self.detail_top}, full_page=True)
                # a link of the contents opens its section, and the section's charts draw at their full width
                self.linked = {}
                for anchor in page.eval_on_selector_all("details", "els => els.map(e => e.id)"):
                    page.click(f"nav.toc a[href='#{anchor}']")
                    page.wait_for_function(f"document.getElementById('{anchor}').open && [...document"
                                           f".querySelectorAll('#{anchor} .chart')].every(e => e.dataset.rendered"
                                           " === '1')", timeout=180_000)
                    self.linked[anchor] = page.eval_on_selector_all(
                        f"#{anchor} .chart", "els => els.map(e => [e.id, e.getBoundingClientRect().width, "
                        "!!e.querySelector('svg.main-svg') && e.querySelectorAll('.trace, .bars, .point').length > 0"
                        " && Math.abs(e.querySelector('svg.main-svg').getBoundingClientRect().width"
                        " - e.getBoundingClientRect().width) < 2])")
                if page.locator("#timelines").count():
                    page.locator("#timelines").screenshot(path=str(ARTIFACTS / f"{shot}-timelines.png"))
            finally:
                browser.close()


def test_the_default_run_shows_its_summary_and_main_figures_in_the_first_three_screens(default_run, chromium):
    tmp, doc, report = default_run
    page = Page(report, chromium, "report-page-default")
    assert page.errors == [] and page.requests == []
    height = SCREEN["height"]
    assert page.summary[1] <= 3 * height
    ids = [i for i, _ in page.overview]
    figures = _figures(report)
    titles = [figures[i]["layout"]["title"]["text"] for i in ids]
    assert [t.split(":")[0] for t in titles] == ["bandwidth (bandwidth)", "skim (skim)", "metadata (metadata)",
                                                 "Fairness"]
    for chart_id, (top, bottom) in page.overview:
        assert bottom <= 3 * height, (chart_id, bottom)
    # the detail is folded: every section closed, none of its charts drawn until it is opened
    assert set(page.closed) >= {"phases", "scaling", "fairness", "latency", "timelines", "messages", "environment",
                                "study"}
    assert page.undrawn_before == 0
    for anchor, charts in page.linked.items():
        # drawn when opened, at the width of the section (a chart drawn while hidden would not be)
        assert all(width > 500 and drawn for _, width, drawn in charts), (anchor, charts)
    assert page.linked["timelines"] and page.linked["latency"] and page.linked["scaling"]


def test_a_48_cell_study_stays_under_15_screens_before_the_detail(run_48, chromium):
    tmp, doc, report = run_48
    page = Page(report, chromium, "report-page-48")
    assert page.errors == [] and page.requests == []
    assert page.detail_top < 15 * SCREEN["height"]
    figures = _figures(report)
    (bw,) = [figures[i] for i, _ in page.overview if figures[i]["layout"]["title"]["text"].startswith("bw")]
    # one figure: a panel per phase, a line per transfer size, each named by it, the system's one colour
    assert [a["text"] for a in bw["layout"]["annotations"]] == ["write: aggregate MiB/s", "read: aggregate MiB/s"]
    names = [d["name"] for d in bw["data"] if d["xaxis"] == "x"]
    assert names == [f"ceiling transfer_size={s}" for s in ("4KiB", "16KiB", "64KiB", "256KiB")] or names == [
        f"ceiling transfer_size={s}" for s in (4096, 16384, 65536, 262144)]
    assert {d["line"]["color"] for d in bw["data"]} == {"#1f77b4"}
    assert len({d["line"]["dash"] for d in bw["data"] if d["xaxis"] == "x"}) == 4
    assert bw["layout"]["xaxis"]["tickvals"] == [1, 2, 3, 4] and bw["layout"]["yaxis"]["rangemode"] == "tozero"
    for anchor, charts in page.linked.items():
        assert all(drawn for _, _, drawn in charts), anchor


def test_every_overview_figure_of_the_figures_study(figures_run, chromium):
    tmp, doc, report = figures_run
    page = Page(report, chromium, "report-page-figures")
    assert page.errors == [] and page.requests == []
    assert page.summary[1] <= 3 * SCREEN["height"]
    figures = _figures(report)
    titles = {figures[i]["layout"]["title"]["text"].split(":")[0]: figures[i] for i, _ in page.overview}
    assert list(titles) == ["bw (bandwidth)", "sk (skim)", "hepix (jobs)", "cp (copy)", "slow (bandwidth)",
                            "md (metadata)", "Fairness", "Efficiency"]
    assert [a["text"] for a in titles["sk (skim)"]["layout"]["annotations"]] == [
        "skim: aggregate MB/s", "skim: events/s", "skim: CPU efficiency (CPU s / wall s)"]
    assert [a["text"] for a in titles["hepix (jobs)"]["layout"]["annotations"]][0] == "jobs: aggregate events/s"
    assert titles["hepix (jobs)"]["layout"]["xaxis"]["title"]["text"] == "jobs"
    assert titles["cp (copy)"]["layout"]["xaxis"]["title"]["text"] == "workers"
    md = titles["md (metadata)"]["layout"]
    assert md["yaxis"]["type"] == "log" and md["yaxis"]["title"]["text"] == "ops/s (log scale)"
    # one colour per system, the same on every figure
    colors: dict[str, set] = {}
    for fig in titles.values():
        for d in fig["data"]:
            name = d.get("name", "")
            if name.startswith(("sysA", "sysB")):
                color = (d.get("line") or {}).get("color") or (d.get("marker") or {}).get("color")
                colors.setdefault(name.split()[0], set()).add(color)
    assert colors == {"sysA": {"#1f77b4"}, "sysB": {"#d62728"}}
    # every axis of every figure on the page says what it shows, with its unit
    for chart_id, fig in figures.items():
        for key, axis in fig["layout"].items():
            if re.fullmatch(r"[xy]axis\d*", key) and fig["layout"].get("title", {}).get("text"):
                text = (axis.get("title") or {}).get("text", "")
                assert UNIT.search(text), (chart_id, key, text)
    # efficiency: the best aggregate ÷ the declared device limit, recomputed here from the store
    store = Store(str(tmp / "storeval-results"))
    run = store.load_run(doc["run_id"])
    cells, summary = analyze(run)
    rows = efficiency(run, cells)
    eff = titles["Efficiency"]
    bars = {x: y for d in eff["data"] for x, y in zip(d["x"], d["y"])}
    for r in rows:
        limit = 4e9 if r["phase"] in ("read", "download", "skim", "jobs") else 2e9
        assert r["limit_Bps"] == limit and r["limit"] in ("device_read", "device_write")
        assert bars[f"{r['target']} · {r['workload']} · {r['phase']}"] == pytest.approx(r["ratio"] * 100)
    assert {(r["target"], r["workload"], r["phase"]) for r in rows} >= {
        (t, "bw", p) for t in ("sysA", "sysB") for p in ("write", "read")}
    # the cost table: the best Table-1 aggregate × the price per GB/s
    cost = tables_of(report)["cost-table"]
    assert cost[0] == ["system", "price per TB", "price per GB/s", "best measured aggregate", "cost of that bandwidth"]
    for row, c in zip(cost[1:], costs(run.study, summary)):
        best = max((x for t in doc["table"] if t["target"] == c["target"] and not t.get("group")
                    for x in (t["read_MiBps"], t["write_MiBps"]) if x), key=lambda x: x["mean"])
        assert c["best_GBps"] == pytest.approx(best["mean"] * 2**20 / 1e9)
        assert row[0] == c["target"] and row[4] == f"{c['per_gbps'] * c['best_GBps']:,.0f} USD"
    assert [r[:3] for r in cost[1:]] == [["sysA", "40.00 USD", "1,200.00 USD"], ["sysB", "25.00 USD", "2,000.00 USD"]]
    # fairness: each client a dot, in one compact figure
    from storeval.analysis.overview import fairness_rows
    from storeval.report.charts import MAX_FAIRNESS_ROWS

    fair = titles["Fairness"]
    assert fair["layout"]["height"] <= 450  # one figure for all of them (the old page: two charts per phase)
    last = fair["data"][-1]["xaxis"]  # the time-relative-to-fastest panel: a dot per client
    clients = [c for r in fairness_rows(cells, MAX_FAIRNESS_ROWS) for c in r["per_client"]]
    assert sum(len(d["y"]) for d in fair["data"] if d["xaxis"] == last) == len(clients) > 0
    assert sorted(y for d in fair["data"] if d["xaxis"] == last for y in d["y"]) == pytest.approx(
        sorted(c["relative_time"] for c in clients))
    # faults: the exec fault shaded on each configuration's first repetition
    assert tables_of(report)["fault-table"][1:] and any(i.startswith("faults-") for i in figures)
    for anchor, charts in page.linked.items():
        assert all(drawn for _, _, drawn in charts), anchor


def test_the_summary_table_carries_each_rows_conditions(figures_run):
    tmp, doc, report = figures_run
    rows = tables_of(report)["summary-table"]
    assert rows[0][-1] == "conditions"
    by = {(r[0], r[1]): r[-1] for r in rows[1:]}
    assert by[("sysA", "bw")].startswith("256KiB transfers, 4MiB per client")
    assert "2MiB per worker, in 256KiB pieces" in by[("sysB", "cp")]


def test_several_runs_are_listed_with_their_environment_differences(figures_run, tmp_path):
    from storeval.report.html import render_report

    tmp, doc, _ = figures_run
    store = Store(str(tmp / "storeval-results"))
    run = store.load_run(doc["run_id"])
    cells, summary = analyze(run)
    runs = [{"run_id": "r1", "started": "2026-01-01 10:00", "finished": "2026-01-01 10:05", "command_line": "a",
             "engine": "local", "targets": ["sysA"], "status": "ok"},
            {"run_id": "r2", "started": "2026-01-02 10:00", "finished": None, "command_line": "b",
             "engine": "mpi", "targets": ["sysB", "x"], "status": "failed"}]
    path = tmp_path / "runs.html"
    path.write_text(render_report(run, cells, summary, store.load_samples(doc["run_id"]), runs=runs,
                                  differences=["kernel: 6.1 → 6.8"]), encoding="utf-8")
    html = path.read_text(encoding="utf-8")
    assert tables_of(path)["runs-table"] == [
        ["run", "started", "finished", "status", "engine", "targets", "command"],
        ["r1", "2026-01-01 10:00", "2026-01-01 10:05", "ok", "local", "sysA", "a"],
        ["r2", "2026-01-02 10:00", "–", "failed", "mpi", "sysB, x", "b"]]
    assert re.search(r'<ul id="differences-list"><li>kernel: 6.1 → 6.8</li></ul>', html)
    assert "<h1>storeval report — 2 runs</h1>" in html
    one = render_report(run, cells, summary, store.load_samples(doc["run_id"]))
    assert "runs-table" not in one and f"run {doc['run_id']}</h1>" in one


def test_prices_are_checked_in_one_line(tmp_path):
    (tmp_path / "a").mkdir()
    base = f'targets:\n  a: {{url: "file://{tmp_path / "a"}"}}\nworkloads:\n  bw: {{bandwidth: {{file_size: 1MiB}}}}\n'
    for prices, line in (
            ("{b: {per_tb: 1}}", "error: prices.b: no target of that name (targets: a)"),
            ("{a: {per_tb: -1}}", "error: prices.a.per_tb: -1 is not a price (a number from 0 to 1e+15)"),
            ("{a: {per_gbps: 1" + "0" * 400 + "}}", "error: prices.a.per_gbps: " + "1" + "0" * 56
             + "... is not a price (a number from 0 to 1e+15)"),  # a float would overflow: refused, cut short
            ("{a: {per_pb: 1}}", "error: prices.a.per_pb: unknown key (did you mean 'per_tb'?)"),
            ("{a: {currency: EUR}}", "error: prices.a: give per_tb or per_gbps (the price of a TB of capacity or of "
                                     "a GB/s)")):
        (tmp_path / "s.yaml").write_text(base + f"prices: {prices}\n")
        r = storeval("run", "s.yaml", "--quiet", "--no-html", cwd=tmp_path)
        assert r.rc == 2 and r.err_lines == [line], r.err
    assert not (tmp_path / "storeval-results").exists()
