"""Issue 17's analysis and report: client groups (on-board vs external), emulated links and latency as a factor.

The runs are written into a real results store the way the runner writes them (``Store.write_cell``: records
with ``extra["group"]``, factors ``clients.<group>`` and ``rtt``, a ``network`` event per cell, samples of probe
``link``), with figures chosen so every expected number can be worked out by hand; the report reads them back
through ``Store.load_run`` / ``load_samples`` and the real ``storeval report`` command.
"""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
from rich.console import Console

from storeval.analysis.figures import analyze
from storeval.analysis.scaling import along_settings
from storeval.analysis.table import summary_table
from storeval.core.records import NS, PhaseRecord
from storeval.report.document import run_document
from storeval.report.html import render_report
from storeval.report.terminal import print_scaling, print_summary, table_rows
from storeval.store import Store

from .helpers import load_json, storeval
from .test_report import ARTIFACTS, tables_of

MiB = 1 << 20
LINK = 40 * MiB  # the external host's emulated link: 40 MiB/s (335.5 Mbit/s)
STUDY = {"targets": {"t": {"url": "file:///tmp/storeval-groups-test"}},
         "workloads": {"bw": {"bandwidth": {"file_size": "200MiB", "phases": ["read"]}},
                       "sk": {"skim": {"files": 1, "strategy": ["basket", "ttreecache"]}}},
         "network": {"links": {"wan": {"rate": "40MiB/s", "rtt": ["0ms", "12ms", "50ms"]}},
                     "hosts": {"server1": {}, "client-net": {"link": "wan"}}},
         "clients": {"onboard": {"count": [2], "host": "server1"},
                     "external": {"count": [0, 2], "host": "client-net", "link": "wan"}}}


def rec(rank: int, group: str, nbytes: int, start_s: float, end_s: float, phase: str = "read", **extra) -> PhaseRecord:
    """One client's read: ``nbytes`` spread evenly over its seconds (its per-second timeline)."""
    start, end = int(start_s * NS), int(end_s * NS)
    seconds = max(1, round(end_s - start_s + 0.4999))
    return PhaseRecord(rank=rank, host="node", phase=phase, bytes=nbytes, ops=nbytes // MiB, start_ns=start,
                       end_ns=end, barrier_ns=end, cpu_user=extra.pop("cpu", 0.0),
                       tl_bytes=[nbytes // seconds] * seconds, tl_ops=[nbytes // MiB // seconds] * seconds,
                       extra={"group": group, **extra})


def network(rtt: float = 0.0, measured: float | None = None, groups: dict | None = None) -> dict:
    """The runner's ``network`` event: the links of the hosts that have one, where each group with clients sits."""
    groups = groups if groups is not None else {"onboard": "server1", "external": "client-net"}
    return {"kind": "network", "message": "links and measured RTT", "detail": {
        "links": {"client-net": {"rate": LINK, "rtt": rtt, "jitter": 0.0, "loss": 0.0}},
        "hosts": {"server1": None, "client-net": "wan"}, "groups": groups, "server_host": "server1",
        "rtt": {"onboard": {"requested_s": 0.0, "median_s": 0.0001, "p90_s": 0.0002},
                "external": {"requested_s": rtt, "median_s": rtt if measured is None else measured,
                             "p90_s": (rtt if measured is None else measured) * 1.1}}}}


def link_samples(rx_MiB: list[float]) -> list[tuple]:
    """The external host's link counters, one sample a second from t = 0: cumulative rx bytes as given, a
    constant tx trickle, drops growing by 3 a second and a queue that fills to 64 KiB; the server's host's CPU and
    I/O wait."""
    out = []
    for s, rx in enumerate(rx_MiB):
        t = s * NS
        out += [(t, "link", "client-net", "rx_bytes", rx * MiB), (t, "link", "client-net", "tx_bytes", s * 0.5 * MiB),
                (t, "link", "client-net", "tbf_drops", 3.0 * s), (t, "link", "client-net", "tbf_backlog_bytes",
                                                                   min(s, 2) * 32768.0),
                (t, "link", "server1", "rx_bytes", 0.0), (t, "link", "server1", "tx_bytes", s * 100.0 * MiB),
                # what ran on the server's host (its control group): half a CPU, a quarter of each second in I/O wait
                (t, "link", "server1", "cpu_seconds", 0.5 * s), (t, "link", "server1", "io_some_seconds", 0.25 * s)]
    return [(*row, "coordinator") for row in out]  # every sample taken on the coordinator's host


def cell(index: int, config: int, workload: str, kind: str, factors: dict, clients: int, params: dict | None = None):
    return SimpleNamespace(index=index, config=config, target=SimpleNamespace(name="t", url="file:///tmp/x"),
                           workload=workload, kind=kind, params=params or {}, factors=factors, clients=clients,
                           repetition=0)


def skim_rec(rank: int, events: int, seconds: float, cpu: float) -> PhaseRecord:
    return rec(rank, "external", events * 1000, 0.0, seconds, phase="skim", cpu=cpu, events=events,
               bytes_requested=events * 1000, bytes_needed=events * 1000)


# skim: events per client at each rtt, per strategy (each client runs 2 s): basket falls faster with latency
SKIM = {("basket", "0ms"): 1000, ("basket", "12ms"): 600, ("basket", "50ms"): 200,
        ("ttreecache", "0ms"): 1000, ("ttreecache", "12ms"): 900, ("ttreecache", "50ms"): 700}
CPU = {"0ms": 1.6, "12ms": 1.2, "50ms": 0.8}  # client CPU seconds in its 2 s: efficiency 0.8, 0.6, 0.4


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Cell 0: 2 on-board + 2 external clients read; the external link (40 MiB/s) is saturated.
    Cell 1: the 2 external clients alone read 200 MiB in 1 s through that 40 MiB/s link: not physical.
    Cells 2–7: the skim of the 2 external clients at rtt 0/12/50 ms, strategies basket and ttreecache."""
    tmp = tmp_path_factory.mktemp("groups")
    store = Store(str(tmp / "storeval-results"))
    run_id = "20991231-000000-grps"
    store.begin_run(run_id, study=STUDY, study_hash="h", version="test", command_line="storeval run study.yaml",
                    source=None, engine="local", environment={"targets": {}})
    # onboard: 200 MiB in 1 s and 200 MiB in 2 s → 400 MiB over 2 s; external 50 MiB each in 0–2 s and 0.5–2.5 s
    records = [rec(0, "onboard", 200 * MiB, 0.0, 1.0), rec(1, "onboard", 200 * MiB, 0.0, 2.0),
               rec(2, "external", 50 * MiB, 0.0, 2.0), rec(3, "external", 50 * MiB, 0.5, 2.5)]
    store.write_cell(run_id, cell(0, 0, "bw", "bandwidth", {"clients.onboard": 2, "clients.external": 2}, 4),
                     status="ok", error=None, started=None, phases=[("read", 0, "ok", None)], records=records,
                     events=[network()], samples=link_samples([0, 40, 80, 120, 120]))
    alone = [rec(0, "external", 100 * MiB, 0.0, 1.0), rec(1, "external", 100 * MiB, 0.0, 1.0)]
    store.write_cell(run_id, cell(1, 1, "bw", "bandwidth", {"clients.onboard": 0, "clients.external": 2}, 2),
                     status="ok", error=None, started=None, phases=[("read", 0, "ok", None)], records=alone,
                     events=[network(groups={"external": "client-net"})],
                     samples=link_samples([0, 40, 80]))
    index = 2
    for strategy in ("basket", "ttreecache"):
        for rtt, seconds in (("0ms", 0.0), ("12ms", 0.012), ("50ms", 0.05)):
            events = SKIM[(strategy, rtt)]
            measured = 0.0149 if rtt == "12ms" and strategy == "basket" else None  # 24 % off: rtt-off
            # the factor holds the value (seconds), as the plan makes it; the reports write it as the study did
            store.write_cell(run_id, cell(index, 2 + index, "sk", "skim", {"clients.external": 2, "rtt": seconds,
                                                                          "strategy": strategy}, 2),
                             status="ok", error=None, started=None, phases=[("skim", 0, "ok", None)],
                             records=[skim_rec(0, events, 2.0, CPU[rtt]), skim_rec(1, events, 2.0, CPU[rtt])],
                             events=[network(seconds, measured, {"external": "client-net"})])
            index += 1
    store.end_run(run_id, "ok")
    data = store.load_run(run_id)
    samples = store.load_samples(run_id)
    cells, summary = analyze(data, samples=samples)
    return SimpleNamespace(tmp=tmp, store=store, data=data, samples=samples, cells=cells, summary=summary)


def _phase(run, cell_id: int):
    return next(cf for cf in run.cells if cf.cell.cell_id == cell_id).phases[0]


def test_each_group_has_its_aggregate_over_its_own_span_beside_the_total(run):
    ph = _phase(run, 0)
    assert ph.bandwidth_MiBps == pytest.approx(500 / 2.5)  # 500 MiB over 0 → 2.5 s
    onboard, external = ph.groups["onboard"], ph.groups["external"]
    assert (onboard.clients, external.clients) == (2, 2)
    assert onboard.bandwidth_MiBps == pytest.approx(400 / 2.0)  # its own span 0 → 2 s
    assert external.bandwidth_MiBps == pytest.approx(100 / 2.5)  # its own span 0 → 2.5 s
    assert onboard.client_MiBps[0] == pytest.approx((200 + 100) / 2)
    assert external.client_MiBps[0] == pytest.approx(25.0)
    doc = run_document(run.data, run.cells, run.summary)
    groups = doc["cells"][0]["phases"][0]["groups"]
    assert groups["onboard"]["bandwidth_MiBps"] == pytest.approx(200.0) and groups["onboard"]["ranks"] == [0, 1]
    assert groups["external"]["bandwidth_MiBps"] == pytest.approx(40.0) and groups["external"]["ranks"] == [2, 3]
    s = next(s for s in doc["summary"] if s["factors"] == {"clients.onboard": 2, "clients.external": 2})
    assert s["groups"]["onboard"]["bandwidth_MiBps"]["mean"] == pytest.approx(200.0)
    assert s["groups"]["external"]["per_client_MiBps"]["mean"] == pytest.approx(25.0)
    assert s["groups"]["external"]["clients"] == 2


def test_fairness_is_given_overall_and_per_group(run):
    f = _phase(run, 0).fairness
    rates = [200.0, 100.0, 25.0, 25.0]
    assert f["jain"] == pytest.approx(sum(rates) ** 2 / (4 * sum(r * r for r in rates)))  # 0.5976
    assert f["groups"]["onboard"]["jain"] == pytest.approx(300.0 ** 2 / (2 * (200.0 ** 2 + 100.0 ** 2)))  # 0.9
    assert f["groups"]["external"]["jain"] == pytest.approx(1.0)
    assert f["relative_time"] == {"0": 1.0, "1": 2.0, "2": 2.0, "3": 2.0}  # to the fastest of all
    assert f["groups"]["onboard"]["relative_time"] == {"0": 1.0, "1": 2.0}  # to the group's fastest
    assert f["groups"]["external"]["relative_time"] == {"2": 1.0, "3": 1.0}
    assert [(row["rank"], row["group"]) for row in f["sorted"]] == [(0, "onboard"), (1, "onboard"),
                                                                    (2, "external"), (3, "external")]


def test_a_saturated_rate_limited_link_is_noted_with_its_traffic(run):
    ph = _phase(run, 0)
    link = ph.links["client-net"]
    # rx counter 0, 40, 80, 120 MiB at 0, 1, 2, 3 s: 100 MiB in the phase's 0 → 2.5 s = 40 MiB/s = the rate
    assert link["rx_bytes"] == pytest.approx(100 * MiB) and link["rx_MiBps"] == pytest.approx(40.0)
    assert link["tx_MiBps"] == pytest.approx(0.5) and link["utilisation"] == pytest.approx(1.0)
    assert link["tbf_drops"] == 8.0 and link["dropped"] == 8.0  # 7.5 interpolated: drops are whole
    assert link["tbf_backlog_bytes_max"] == 65536.0
    assert ph.links["server1"]["utilisation"] is None  # no rate: never saturated
    notes = [w for w in ph.warnings if w["code"] == "link-saturated"]
    assert len(notes) == 1 and "emulated host client-net" in notes[0]["message"] and "100%" in notes[0]["message"]
    # the on-board clients are not behind a link: no link limit, no not-physical for 200 MiB/s
    assert not [f for f in ph.flags if f["code"] == "not-physical"]


def test_an_aggregate_above_the_clients_links_is_not_physical_and_names_the_link(run):
    ph = _phase(run, 1)
    assert ph.bandwidth_MiBps == pytest.approx(200.0)
    flags = [f for f in ph.flags if f["code"] == "not-physical"]
    assert len(flags) == 1
    assert flags[0]["message"] == ("200 MiB/s (210 MB/s) is more than 5% above the 41.9 MB/s of emulated link client-net "
                                   "(the links every client sits behind): not physical — cache (or compression) "
                                   "suspected")
    # the table's row of all clients spans both cells (the group counts are swept like clients): both saturated
    assert summary_table(run.summary)[0]["notes"] == ["✗ not-physical in 1 of 2 reps", "⚠ link-saturated in 2 of 2 reps"]


def test_the_one_glance_table_has_one_row_per_group(run):
    table = [r for r in summary_table(run.summary) if r["workload"] == "bw"]
    assert [(r.get("group"), r["clients"]) for r in table] == [(None, [2, 4]), ("onboard", [2]), ("external", [2])]
    total, onboard, external = table
    assert total["read_MiBps"]["mean"] == pytest.approx(200.0)  # best of 200 (4 clients) and 200 (2 clients)
    assert onboard["read_MiBps"]["mean"] == pytest.approx(200.0) and onboard["read_MiBps"]["clients"] == 2
    assert external["read_MiBps"]["mean"] == pytest.approx(200.0)  # cell 1: the 2 external clients alone


def test_rtt_is_a_factor_charted_like_a_system_setting(run):
    rows = [s for s in along_settings(run.cells, run.data.study) if s["along"] == "rtt"]
    assert sorted(s["factors"]["strategy"] for s in rows) == ["basket", "ttreecache"]
    for s in rows:
        strategy = s["factors"]["strategy"]
        assert [p["rtt"] for p in s["series"]] == ["0ms", "12ms", "50ms"]
        assert [p["x"] for p in s["series"]] == [0.0, 0.012, 0.05]
        assert [p["events_per_s"] for p in s["series"]] == pytest.approx(
            [2 * SKIM[(strategy, r)] / 2.0 for r in ("0ms", "12ms", "50ms")])
        assert [p["cpu_efficiency"] for p in s["series"]] == pytest.approx([0.8, 0.6, 0.4])
    out = Console(record=True, width=200)
    print_scaling(along_settings(run.cells, run.data.study), out)
    text = out.export_text()
    assert "Aggregate vs rtt" in text and "rtt=12ms" in text


def test_measured_rtt_is_shown_beside_the_requested_and_flagged_when_off(run):
    skims = {(s.factors["strategy"], s.factors["rtt"]): s for s in run.summary if s.kind == "skim"}
    off = skims[("basket", 0.012)]
    assert off.rtt["external"] == {"requested_s": 0.012, "median_s": 0.0149, "p90_s": pytest.approx(0.01639),
                                   "off": True, "cells": 1}
    assert [w["code"] for w in off.warnings] == ["rtt-off"]
    assert skims[("ttreecache", 0.012)].rtt["external"]["off"] is False
    out = Console(record=True, width=220)
    print_summary(run.summary, out)
    text = out.export_text()
    assert "requested vs measured RTT" in text
    assert "12 ms" in text and "14.9 ms ✗" in text


def _figures(html: str) -> dict:
    """The charts' JSON the page's script reads."""
    m = re.search(r'<script type="application/json" id="storeval-figures">(.*?)</script>', html, re.S)
    return json.loads(m.group(1).replace("<\\/", "</"))


def test_the_html_report_shows_groups_links_and_rtt(run, tmp_path):
    path = tmp_path / "report.html"
    html = render_report(run.data, run.cells, run.summary, run.samples)
    path.write_text(html, encoding="utf-8")
    tables = tables_of(path)
    summary = tables["summary-table"]
    # read mixes bandwidth's MiB/s and the skim's MB/s, the rate ops/s and events/s: each cell names its unit
    assert summary[0] == ["target", "workload", "clients", "group", "read", "write MiB/s", "rate", "notes",
                          "conditions"]
    assert [row[3] for row in summary[1:4]] == ["all", "onboard", "external"]
    assert [row[:-1] for row in summary[1:]] == table_rows(summary_table(run.summary))
    fair = tables["fairness-table"]
    assert [row[3:6] for row in fair[1:4]] == [["all", "4", "0.598"], ["onboard", "2", "0.900"],
                                               ["external", "2", "1.00"]]
    assert ["t · bw clients.onboard=2 clients.external=2", "4", "read", "client-net", "40.0", "40.0", "0.500",
            "100% ✗", "8", "64 KiB", "–"] in tables["links-table"]
    assert ["t · sk clients.external=2 rtt=12ms strategy=basket", "external", "12 ms", "14.9 ms ✗",
            "16.4 ms"] in tables["rtt-table"]
    assert re.search(r'<details id="network"><summary><h2>Network</h2>', html)
    rtt = next(t for t in tables.values() if t and t[0][:5] == ["target", "workload", "phase", "held fixed", "figure"]
               and "rtt=0ms" in t[0])
    assert ["t", "sk", "skim", "clients.external=2, strategy=basket, clients=2", "events/s", "1,000", "600", "200",
            "events/s"] in rtt
    figures = _figures(html)
    fairness = next(f for f in figures.values() if f["layout"]["title"]["text"].startswith(
        "t · bw · read · 4 clients (clients.onboard=2 clients.external=2): per-client MiB/s"))
    assert [(d["name"], d["x"]) for d in fairness["data"]] == [("group onboard", ["client 0", "client 1"]),
                                                              ("group external", ["client 2", "client 3"])]
    assert fairness["data"][0]["marker"]["color"] != fairness["data"][1]["marker"]["color"]
    assert "onboard Jain 0.900, external Jain 1.000" in fairness["layout"]["title"]["text"]
    link = next(f for f in figures.values() if f["layout"]["title"]["text"].startswith("cell 0:")
                and "emulated links" in f["layout"]["title"]["text"])
    rx = next(d for d in link["data"] if d["name"] == "link client-net rx MiB/s")
    assert rx["y"] == [40.0, 40.0, 40.0, 0.0]
    assert any(d["name"] == "link client-net rate 40 MiB/s" and d["y"] == [40.0, 40.0] for d in link["data"])
    assert next(d for d in link["data"] if d["name"] == "link client-net drops/s")["y"] == [3.0, 3.0, 3.0, 3.0]
    assert next(d for d in link["data"] if d["name"] == "host server1 CPUs used")["y"] == [0.5, 0.5, 0.5, 0.5]
    wait = next(d for d in link["data"] if d["name"] == "host server1 I/O wait")
    assert wait["y"] == [0.25, 0.25, 0.25, 0.25] and wait["yaxis"] == "y3" and "yaxis3" in link["layout"]
    cpu = next(f for f in figures.values() if f["layout"]["title"]["text"] == "sk · skim: CPU efficiency "
               "(CPU s / wall s) vs rtt")
    assert [(d["x"], d["y"]) for d in cpu["data"]] == [([0.0, 12.0, 50.0], pytest.approx([0.8, 0.6, 0.4]))] * 2


def test_storeval_report_prints_groups_side_by_side(run, tmp_path):
    r = storeval("report", str(run.tmp / "storeval-results"), "--json", str(tmp_path / "out.json"))
    assert r.rc == 0, r.err
    assert "Fairness per client group" in r.out and "Network — requested vs measured RTT" in r.out
    doc = load_json(tmp_path / "out.json")
    rows = [(row["workload"], row.get("group"), row["read_MiBps"]["mean"]) for row in doc["table"]
            if row["workload"] == "bw"]
    assert rows == [("bw", None, pytest.approx(200.0)), ("bw", "onboard", pytest.approx(200.0)),
                    ("bw", "external", pytest.approx(200.0))]
    s = next(s for s in doc["summary"] if s["workload"] == "bw" and s["factors"]["clients.onboard"] == 2)
    assert {g: x["bandwidth_MiBps"]["mean"] for g, x in s["groups"].items()} == {
        "onboard": pytest.approx(200.0), "external": pytest.approx(40.0)}
    assert [x for x in doc["scaling_settings"] if x["along"] == "rtt"][0]["series"][1]["rtt"] == "12ms"
    assert doc["cells"][2 + 1]["rtt"]["external"] == {"requested_s": 0.012, "median_s": 0.0149,
                                                      "p90_s": pytest.approx(0.01639), "off": True}


def test_compare_compares_each_group_on_its_own(run):
    from storeval.report.compare import compare

    changes, only_a, only_b, differ = compare(run.summary, run.summary)
    groups = {(c.phase, c.clients, c.figure): c.percent for c in changes if "group" in c.phase
              and c.factors == {"clients.onboard": 2, "clients.external": 2}}
    assert groups[("read · group onboard", 2, "bandwidth")] == 0.0
    assert groups[("read · group external", 2, "bandwidth")] == 0.0
    assert only_a == only_b == differ == []



def test_the_groups_report_draws_every_chart_in_chromium(run, tmp_path, chromium):
    """The charts' dicts are valid plotly: every chart draws, offline, without an error."""
    from playwright.sync_api import sync_playwright

    path = tmp_path / "report.html"
    path.write_text(render_report(run.data, run.cells, run.summary, run.samples), encoding="utf-8")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--disable-background-networking", "--no-first-run", "--disable-extensions"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(path.as_uri())
            page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
            page.wait_for_function("[...document.querySelectorAll('.chart')]"
                                   ".every(e => e.dataset.rendered === '1')", timeout=120_000)
            n = page.locator(".chart").count()
            drawn = page.eval_on_selector_all(".chart", "els => els.filter(e => e.querySelector('svg.main-svg')"
                                                        " && e.querySelectorAll('.trace, .bars, .point').length)"
                                                        ".length")
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.locator("#fairness-0").screenshot(path=str(ARTIFACTS / "report-groups-fairness.png"))
            link = page.locator(".chart[aria-label*='emulated links']").first
            link.screenshot(path=str(ARTIFACTS / "report-groups-link.png"))
        finally:
            browser.close()
    assert errors == [] and drawn == n and n >= 8


def test_the_link_limit_needs_every_group_with_clients_behind_a_rate_limited_link():
    from storeval.analysis.links import link_limits

    detail = {"links": {"a": {"rate": 1e8}, "b": {"rate": 2e8}, "c": {"rate": None, "rtt": 0.01}},
              "groups": {"x": "a", "y": "b", "z": "c"}}
    assert link_limits(detail, {"clients.x": 1, "clients.y": 2, "clients.z": 0}) == {
        "links": {"a": 1e8, "b": 2e8}, "link_rate": 3e8}  # z has no clients here; a and b add up
    assert link_limits(detail, {"clients.x": 1, "clients.y": 1, "clients.z": 1}) == {
        "links": {"a": 1e8, "b": 2e8}}  # z's link has no rate: no limit for the whole
    assert link_limits({**detail, "groups": {"x": "a", "y": None}}, {}) == {"links": {"a": 1e8, "b": 2e8}}
    assert link_limits({**detail, "groups": {"x": "a", "w": "a"}}, {}) == {"links": {"a": 1e8}, "link_rate": 1e8}


def test_the_link_limit_is_not_applied_to_a_local_file_system():
    from storeval.analysis.sanity import rate_limits

    links = {"link_rate": 1e8, "links": {"a": 1e8}}
    assert [n for n, _, _ in rate_limits({}, {**links, "medium": "network"}, "read", 1)] == ["link_rate"]
    assert rate_limits({}, {**links, "medium": "device", "device": "sda"}, "read", 1) == []
    assert rate_limits({}, {**links, "medium": "memory"}, "read", 1) == []
