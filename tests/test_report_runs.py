"""`storeval report --runs`: several runs of one results directory side by side in one report, with what
differed between them listed (issue 19.3).

Three runs of the same workload on three systems (two local directories both named `local` in their studies,
and the null target), then a fourth run whose cells fail, all in one results directory. Each run is also
reported on its own, so the combined report can be checked against the runs' own numbers exactly."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from markupsafe import escape

from storeval.report.across import environment_differences, run_labels

from .helpers import load_json, storeval
from .test_report import tables_of

STUDY = """\
targets:
  {name}: {{url: "{url}"{more}}}
workloads:
  bw: {{bandwidth: {{file_size: 1MiB, transfer_size: 256KiB, phases: [write, read]}}}}
clients: [1, 2]
probe_interval: 0.05s
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Results R: run 1 on local → dir a, run 2 on local → dir b, run 3 on null://, run 4 failing (its own
    study); the first three's own reports (report --run ID --json) beside it."""
    tmp = tmp_path_factory.mktemp("runs")
    ids = []
    for i, (name, url, more) in enumerate((("local", f"file://{tmp / 'a'}", ""), ("local", f"file://{tmp / 'b'}", ""),
                                           ("void", "null://", ""),
                                           ("broken", "null://", ", misbehave: {client: 0, after_ops: 1}"))):
        if url.startswith("file://"):
            Path(url.removeprefix("file://")).mkdir()
        (tmp / f"s{i}.yaml").write_text(STUDY.format(name=name, url=url, more=more))
        r = storeval("run", f"s{i}.yaml", "--results", "R", "--no-html", "--quiet", "--json", f"run{i}.json", cwd=tmp)
        assert r.rc == (1 if name == "broken" else 0), r.err
        ids.append(load_json(tmp / f"run{i}.json")["run_id"])
    for i, run_id in enumerate(ids[:3]):  # each run reported on its own, from the same store
        r = storeval("report", "R", "--run", run_id, "--json", f"own{i}.json", cwd=tmp)
        assert r.rc == 0, r.err
    return tmp, ids


def _figures(html: Path) -> dict:
    text = html.read_text(encoding="utf-8")
    found = re.search(r'<script type="application/json" id="storeval-figures">(.*?)</script>', text, re.S)
    return json.loads(found.group(1).replace("<\\/", "</"))


def test_three_runs_on_three_systems_are_shown_side_by_side_with_what_differed(runs):
    tmp, ids = runs
    r = storeval("report", "R", "--runs", ",".join(ids[:3]), "--json", "all.json", "--html", "all.html",
                 "--figures", "figs", cwd=tmp, timeout=600)
    assert r.rc == 0, r.err
    doc = load_json(tmp / "all.json")
    labels = run_labels(ids[:3])
    shown = [f"local (run {labels[ids[0]]})", f"local (run {labels[ids[1]]})", "void"]
    # the runs, in the order named, each with its status, its targets under their shown names and its cells
    assert [(x["run_id"], x["status"], x["targets"], x["label"]) for x in doc["runs"]] == [
        (i, "ok", [name], labels[i]) for i, name in zip(ids, shown)]
    assert doc["run_id"] is None and doc["runs"][1]["target_names"] == {shown[1]: "local"}
    # every cell of every run, renumbered without collision, each under its run's name for its target
    own = [load_json(tmp / f"own{i}.json") for i in range(3)]
    assert [c["cell"] for c in doc["cells"]] == list(range(sum(len(o["cells"]) for o in own)))
    expected_cells = [(name, c["workload"], c["clients"], c["phases"]) for o, name in zip(own, shown)
                      for c in o["cells"]]
    assert [(c["target"], c["workload"], c["clients"], c["phases"]) for c in doc["cells"]] == expected_cells
    for x, o in zip(doc["runs"], own):
        first = sum(len(p["cells"]) for p in own[:own.index(o)])
        assert x["cells"] == [first, first + len(o["cells"]) - 1]
    # Table 1 across the runs: each run's own rows, its target renamed, its numbers unchanged
    assert doc["table"] == [{**row, "target": name} for o, name in zip(own, shown) for row in o["table"]]
    assert doc["summary"] == [{**s, "target": name} for o, name in zip(own, shown) for s in o["summary"]]
    # what differed: the two `local` systems' URLs (void is no local: not compared with them), the studies
    differences = doc["environment_differences"]
    assert (f"targets.local.url: file://{tmp / 'a'} (run {labels[ids[0]]}) vs file://{tmp / 'b'} "
            f"(run {labels[ids[1]]})") in differences
    assert not [d for d in differences if d.startswith(("target.local.url:", "target:local.url:"))]  # said once
    hashes = [o["study_hash"] for o in own]
    assert (f"study hash: {hashes[0]} (run {labels[ids[0]]}) vs {hashes[1]} (run {labels[ids[1]]}) vs {hashes[2]} "
            f"(run {labels[ids[2]]})") in differences
    assert not [d for d in differences if d.startswith(("kernel:", "cpu_model:", "storeval_version:", "target.void."))]
    # the terminal: the combined Table 1 (one row per system), which run is which, and each difference
    out = " ".join(r.out.split())
    for name in shown:
        assert re.search(rf"│ {re.escape(name)} +│ bw +│", r.out), name
    for x in doc["runs"]:
        assert f"run {x['label']} = {x['run_id']}: {x['targets'][0]}" in out
    assert f"what differed between the runs ({len(differences)};" in out
    for line in differences:
        assert " ".join(line.split()) in out
    # the page: the summary table holds the three systems, and each scaling chart has a line per system
    rows = tables_of(tmp / "all.html")["summary-table"][1:]
    assert [row[0] for row in rows] == shown
    page = (tmp / "all.html").read_text(encoding="utf-8")
    assert [r[0] for r in tables_of(tmp / "all.html")["runs-table"][1:]] == ids[:3]  # the runs, at the top
    for line in differences:
        assert f"<li>{escape(line)}</li>" in page
    scaling = [f for key, f in _figures(tmp / "all.html").items() if key.startswith("scaling-")]
    assert scaling and all({t["name"] for t in f["data"] if "per client" not in t["name"]} == set(shown)
                           for f in scaling)
    # and the figure files: one index for the three runs, each scaling CSV with a line per system
    index = load_json(tmp / "figs" / "index.json")
    assert index["runs"] == ids[:3]
    for f in index["figures"]:
        if f["section"] == "scaling":
            names = {line.split(",")[0] for line in (tmp / "figs" / f["csv"]).read_text().splitlines()[1:]}
            assert {n for n in names if "per client" not in n} == set(shown)
    # one run's figures into the same directory: the figures it no longer has go, a file of someone else stays
    (tmp / "figs" / "notes.txt").write_text("mine")
    r = storeval("report", "R", "--run", ids[2], "--figures", "figs", cwd=tmp, timeout=600)
    assert r.rc == 0, r.err
    one = load_json(tmp / "figs" / "index.json")
    assert one["runs"] == [ids[2]] and 0 < len(one["figures"]) < len(index["figures"])
    assert sorted(os.listdir(tmp / "figs")) == sorted(["index.json", "notes.txt", *one["files"]])


def test_the_page_across_three_runs_opens_with_the_runs_and_their_differences_in_chromium(runs, chromium):
    """The check of issue 19: three runs on three targets side by side in a browser, the runs and what differed at
    the top, the three systems in the summary and in one figure, no console error, no request."""
    from .test_report_page import SCREEN, Page

    tmp, ids = runs
    r = storeval("report", "R", "--runs", ",".join(ids[:3]), "--html", "three.html", cwd=tmp, timeout=600)
    assert r.rc == 0, r.err
    page = Page(tmp / "three.html", chromium, "report-page-runs")
    assert page.errors == [] and page.requests == []
    assert page.summary[1] <= 3 * SCREEN["height"]
    tables = tables_of(tmp / "three.html")
    assert [row[0] for row in tables["runs-table"][1:]] == ids[:3]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", row[1]) for row in tables["runs-table"][1:])
    labels = run_labels(ids[:3])
    systems = [f"local (run {labels[ids[0]]})", f"local (run {labels[ids[1]]})", "void"]
    assert [row[0] for row in tables["summary-table"][1:]] == systems
    figures = _figures(tmp / "three.html")
    (bw,) = [figures[i] for i, _ in page.overview if figures[i]["layout"]["title"]["text"].startswith("bw")]
    assert {d["name"] for d in bw["data"]} == set(systems)  # one line per system, in its colour


def test_all_runs_include_a_failed_one_with_its_status_and_ids_may_be_prefixes_in_any_order(runs):
    tmp, ids = runs
    r = storeval("report", "R", "--runs", "all", "--json", "every.json", cwd=tmp)
    assert r.rc == 0, r.err
    doc = load_json(tmp / "every.json")
    assert [x["run_id"] for x in doc["runs"]] == ids  # all: oldest first
    assert [x["status"] for x in doc["runs"]] == ["ok", "ok", "ok", "failed"]
    assert {c["status"] for c in doc["cells"] if c["target"] == "broken"} == {"failed"}
    assert f"run {ids[3]} (" in r.out and "): failed; 2 cells, 2 failed" in r.out
    # prefixes name runs; the order given is the order shown
    r = storeval("report", "R", "--runs", f"{ids[2]},{ids[0][:-2]}", "--json", "two.json", cwd=tmp)
    assert r.rc == 0, r.err
    two = load_json(tmp / "two.json")
    assert [x["run_id"] for x in two["runs"]] == [ids[2], ids[0]]
    assert [x["targets"] for x in two["runs"]] == [["void"], ["local"]]  # one `local`: nothing to tell apart


@pytest.mark.parametrize("args, line", [
    (["--runs", ""], "error: --runs: name the runs to show side by side (--runs all, or --runs ID,ID)"),
    (["--runs", " , "], "error: --runs: name the runs to show side by side (--runs all, or --runs ID,ID)"),
    (["--runs", "ID0,"], "error: --runs ID0,: an empty run id in the list (give ids separated by single commas)"),
    (["--runs", "ID0,ID0"], "error: --runs ID0,ID0: run ID0 is named twice (name each run once)"),
    (["--run", "ID0", "--runs", "ID1,ID2"], "error: --run and --runs: give one run with --run or several with "
                                            "--runs, not both"),
    (["--runs", "ID0,nosuchrun"], "error: run 'nosuchrun' is not in R (known: ID0, ID1, ID2, ID3)"),
])
def test_bad_run_lists_are_one_line_and_write_nothing(runs, args, line):
    tmp, ids = runs
    names = {f"ID{i}": run_id for i, run_id in enumerate(ids)}
    args = [re.sub(r"ID\d", lambda m: names[m.group(0)], a) for a in args]
    line = re.sub(r"ID\d", lambda m: names[m.group(0)], line).replace(" R ", f" {tmp / 'R'} ")
    r = storeval("report", "R", *args, "--json", "bad.json", "--figures", "badfigs", cwd=tmp)
    assert r.rc == 2 and r.err_lines == [line] and r.out == ""
    assert not (tmp / "bad.json").exists() and not (tmp / "badfigs").exists()


class _Run:
    def __init__(self, env: dict, targets: dict, study_hash: str = "h", **study) -> None:
        self.environment, self.study, self.study_hash = env, {"targets": targets, **study}, study_hash


def test_differences_name_the_runs_that_share_a_value_and_compare_a_target_only_where_it_was_measured():
    host = {"host": "h1", "kernel": "6.1.0-18", "storeval_version": "0.4", "start_time": "x", "command_line": "c",
            "targets": {"local": {"mount": {"fstype": "ext4"}}}}
    a = _Run(host, {"local": {"url": "file:///a"}}, "h1", clients=[1, 2])
    b = _Run({**host, "kernel": "6.1.0-21", "targets": {"local": {"mount": {"fstype": "xfs"}}}},
             {"local": {"url": "file:///a"}}, "h1", clients=[1, 2])
    c = _Run({**host, "targets": {"s3": {"mount": None}}}, {"s3": {"url": "s3://b"}}, "h2", clients=[1, 2, 4])
    assert environment_differences([a, b, c], ["run A", "run B", "run C"], study=True) == [
        "kernel: 6.1.0-18 (run A, run C) vs 6.1.0-21 (run B)",
        "targets.local.mount.fstype: ext4 (run A) vs xfs (run B)",  # C measured no `local`: not a difference
        "study hash: h1 (run A, run B) vs h2 (run C)",
        "study.clients: [1, 2] (run A, run B) vs [1, 2, 4] (run C)"]
    # without the study (compare): the environments only
    assert environment_differences([a, b], ["A", "B"]) == ["kernel: 6.1.0-18 (A) vs 6.1.0-21 (B)",
                                                           "targets.local.mount.fstype: ext4 (A) vs xfs (B)"]
    assert environment_differences([a, a], ["A", "B"], study=True) == []


def test_run_labels_are_short_and_still_tell_runs_apart():
    assert run_labels(["20261126-120300-ab12", "20261127-091500-cd34"]) == {
        "20261126-120300-ab12": "20261126-1203", "20261127-091500-cd34": "20261127-0915"}
    assert run_labels(["20261126-120300-ab12", "20261126-120359-cd34"]) == {
        "20261126-120300-ab12": "20261126-120300", "20261126-120359-cd34": "20261126-120359"}
    assert run_labels(["20261126-120300-ab12", "20261126-120300-cd34"]) == {
        "20261126-120300-ab12": "20261126-120300-ab12", "20261126-120300-cd34": "20261126-120300-cd34"}
