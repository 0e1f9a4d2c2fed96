"""A phase in which storage froze is flagged `stalled`, with when and how long, not stored as a normal figure."""

from __future__ import annotations

import yaml

from storeval.analysis.guards import HOST_CODES
from storeval.analysis.figures import phase_figures
from storeval.core.oplog import OpLog
from storeval.core.records import NS, PhaseRecord, quiet_spans
from storeval.histogram import Histogram

from .helpers import load_json, storeval

MS = 1_000_000


def test_oplog_keeps_the_pauses_between_completions_as_it_folds():
    log = OpLog(t0=0, cap=4)
    for i, end in enumerate([1200 * MS, 1201 * MS, 1202 * MS, 4500 * MS]):  # 1.2 s to the first, then 3.3 s
        log.ends[i], log.lats[i] = end, MS
    log.fold(4, 4096)
    log.ends[0], log.lats[0] = 4501 * MS, MS
    log.ends[1], log.lats[1] = 6000 * MS, MS  # a pause across two folds is seen too
    log.fold(2, 4096)
    assert log.gaps == [(0, 1200 * MS), (1202 * MS, 3298 * MS), (4501 * MS, 1499 * MS)]
    assert log.last_end == 6000 * MS and log.ops == 6
    # time a workload spent computing (the skim's analysis) is work, not a pause of the storage
    log.add(6100 * MS, 6100 * MS)
    log.worked(9000 * MS)
    log.add(9100 * MS, 9200 * MS)
    log.flush()
    assert len(log.gaps) == 3 and log.last_end == 9200 * MS and log.ops == 8


def test_a_stall_is_when_every_working_client_pauses():
    s = NS
    # two clients pause together from 1 s to 4 s: one stall
    assert quiet_spans([(0, 10 * s, [(1 * s, 3 * s)]), (0, 10 * s, [(1 * s, 3 * s)])]) == [(1 * s, 3 * s)]
    # one pauses while the other works: the phase progressed
    assert quiet_spans([(0, 10 * s, [(1 * s, 3 * s)]), (0, 10 * s, [])]) == []
    # overlapping pauses: only the common part
    assert quiet_spans([(0, 10 * s, [(1 * s, 3 * s)]), (0, 10 * s, [(2 * s, 4 * s)])]) == [(2 * s, 2 * s)]
    # a client that has finished neither blocks nor makes a stall: the other's pause counts on its own
    assert quiet_spans([(0, 2 * s, []), (0, 9 * s, [(1 * s, 5 * s)])]) == [(2 * s, 4 * s)]
    # nobody working (a staggered start after the first finished) is no stall
    assert quiet_spans([(0, 1 * s, []), (5 * s, 9 * s, [])]) == []
    # shorter than the floor: not kept
    assert quiet_spans([(0, 10 * s, [(1 * s, s // 2)])]) == []


def _record(rank: int, start: int, end: int, gaps: list, errors: dict | None = None) -> PhaseRecord:
    hist = Histogram()
    hist.record(MS)
    return PhaseRecord(rank=rank, host="h", phase="write", bytes=100 << 20, ops=100, errors=errors or {},
                       start_ns=start, end_ns=end, barrier_ns=end, hist=hist, tl_bytes=[], tl_ops=[],
                       extra={"last_op_ns": end - start, "gaps": gaps})


def test_stalls_are_flagged_with_their_intervals_and_the_limit_is_the_targets():
    records = [_record(0, 10 * NS, 20 * NS, [[3 * NS, 5 * NS]]), _record(1, 10 * NS, 20 * NS, [[4 * NS, 3 * NS]])]
    fig = phase_figures("write", "ok", None, records, 2)
    assert fig.stalls == [{"start_s": 4.0, "seconds": 3.0}]
    assert fig.flags == [{"code": "stalled", "message": "no client completed an operation for 3.00 s from 4.00 s into "
                                                        "the phase (stall limit 2 s): the figure includes the pause"}]
    assert fig.as_dict()["stalls"] == fig.stalls
    tolerant = phase_figures("write", "ok", None, records, 2, limits={"stall": 5.0})
    assert tolerant.stalls == [] and tolerant.flags == []
    # errors that clients retried inside a phase that passed
    retried = phase_figures("write", "ok", None, [_record(0, 0, 10 * NS, [], {"ETIMEDOUT": 3})], 1)
    assert retried.flags == [{"code": "stalled", "message": "errors were retried and the phase still passed "
                                                            "(ETIMEDOUT×3): the figure includes the retries"}]


STUDY = {
    "targets": {
        "frozen": {"url": "null://", "misbehave": {"client": "all", "after_ops": 100, "action": "pause", "seconds": "3s"}},
        "tolerant": {"url": "null://", "misbehave": {"client": "all", "after_ops": 100, "action": "pause",
                                                      "seconds": "3s"}, "limits": {"stall": "10s"}},
        "clean": {"url": "null://"},
    },
    "workloads": {"bw": {"bandwidth": {"file_size": "1MiB", "transfer_size": "4KiB", "phases": ["write", "read"]}}},
    "clients": [1],
}


def own(flags: list[dict]) -> list[dict]:
    """The flags about the storage: those judging the host (a busy test machine) or the phase's length left out."""
    return [f for f in flags if f["code"] not in HOST_CODES]


def test_a_frozen_target_is_flagged_stalled_everywhere_and_a_clean_run_is_not(tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(STUDY))
    out, html = tmp_path / "out.json", tmp_path / "report.html"
    r = storeval("run", str(study), "--json", str(out), "--html", str(html), cwd=tmp_path, timeout=300)
    assert r.rc == 0, r.err
    doc = load_json(out)
    cells = {c["target"]: {p["phase"]: p for p in c["phases"]} for c in doc["cells"]}
    write = cells["frozen"]["write"]
    (stall,) = write["stalls"]
    assert write["status"] == "ok" and stall["seconds"] >= 3.0
    assert 0 <= stall["start_s"] and stall["start_s"] + stall["seconds"] <= write["seconds"]
    message = (f"no client completed an operation for {stall['seconds']:.2f} s from {stall['start_s']:.2f} s into the "
               "phase (stall limit 2 s): the figure includes the pause")
    assert own(write["flags"]) == [{"code": "stalled", "message": message}]
    # the pause came once: the read phase of the same cell, and the other targets, are clean
    assert cells["frozen"]["read"]["stalls"] == [] and own(cells["frozen"]["read"]["flags"]) == []
    assert cells["tolerant"]["write"]["stalls"] == [] and own(cells["tolerant"]["write"]["flags"]) == []
    assert all(p["stalls"] == [] and own(p["flags"]) == [] for p in cells["clean"].values())
    # the summary, the terminal tables and the HTML report carry it
    (row,) = [s for s in doc["summary"] if s["target"] == "frozen" and s["phase"] == "write"]
    assert own(row["flags"]) == [{"code": "stalled", "message": message}]
    assert "✗ stalled" in r.out and f"✗ stalled: {message} [frozen · bw · 1 client · write]" in r.out
    assert f"✗ stalled: {message} [frozen · bw · 1 client" in html.read_text()
