"""The replay workload: a trace's reads, vector reads and writes issued again on a local directory, the testbed's
MinIO (S3) and XRootD — exactly the trace's bytes, its vector reads' elements and requests as the server saw them,
open-loop lag, closed-loop order, map mode, and one-line refusals of what cannot be replayed."""

from __future__ import annotations

import csv
import inspect
import os
from collections import Counter
from pathlib import Path

import pytest
import yaml

from storeval.drivers.s3 import S3Driver
from storeval.traces import load_trace
from storeval.traces.model import READ, READV, WRITE, TraceBuilder
from storeval.workloads.replay import _coalesced, plan_stream, trace_seconds

from .helpers import leftovers, load_json, storeval

TRACES = Path(__file__).resolve().parent / "data" / "traces"
STUDIES = Path(__file__).resolve().parent.parent / "studies"
# S3Driver.preadv(..., coalesce=0) fetches the ranges with nothing merged across a gap (the driver change replay's
# vector: native uses on object stores; without it, replay splits S3 vector reads element by element)
S3_TAKES_COALESCE = "coalesce" in inspect.signature(S3Driver.preadv).parameters

HEADER = ("t", "stream", "op", "file", "offset", "length", "request", "size")


def write_trace(path: Path, rows: list[tuple]) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        for row in rows:
            w.writerow(list(row) + [""] * (len(HEADER) - len(row)))
    return path


def two_streams(span: float = 0.3) -> list[tuple]:
    """Stream ``job1`` opens a file, reads, makes two vector reads and closes it; stream ``job2`` reads another
    file without open lines and writes an output front to back (so every target can take it)."""
    s = span / 6
    rows = [(0.0, "job1", "open", "/data/run1/a.root"),
            (s, "job1", "read", "/data/run1/a.root", 0, 65536),
            (2 * s, "job1", "readv", "/data/run1/a.root", 100_000, 4096, "v1"),
            (2 * s, "job1", "readv", "/data/run1/a.root", 300_000, 8192, "v1"),
            (2 * s, "job1", "readv", "/data/run1/a.root", 900_000, 1000, "v1"),
            (3 * s, "job1", "readv", "/data/run1/a.root", 10, 20, "v2"),
            (3 * s, "job1", "readv", "/data/run1/a.root", 1_048_000, 576, "v2"),
            (4 * s, "job1", "read", "/data/run1/a.root", 500_000, 131072),
            (5 * s, "job1", "close", "/data/run1/a.root"),
            (0.0, "job2", "read", "/data/run1/b.root", 0, 262144),
            (s, "job2", "read", "/data/run1/b.root", 262144, 262144),
            (2 * s, "job2", "write", "/out/skim.root", 0, 100_000),
            (3 * s, "job2", "write", "/out/skim.root", 100_000, 50_000),
            (6 * s, "job2", "read", "/data/run1/b.root", 600_000, 7)]
    return rows


def study(tmp_path: Path, targets: dict, params: dict, clients: int = 2) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({"targets": targets, "clients": [clients],
                                    "workloads": {"rp": {"replay": params}}}))
    return path


def run(tmp_path: Path, targets: dict, params: dict, clients: int = 2) -> dict:
    out = tmp_path / "out.json"
    r = storeval("run", str(study(tmp_path, targets, params, clients)), "--json", str(out), "--quiet",
                 "--results", str(tmp_path / "results"), cwd=tmp_path, timeout=600)
    assert r.rc == 0, r.err
    return load_json(out)


def phases(doc: dict) -> dict[str, dict]:
    out = {}
    for cell in doc["cells"]:
        assert cell["status"] == "ok", cell["error"]
        (ph,) = cell["phases"]
        out[cell["target"]] = ph
    return out


def expect(trace_path: Path) -> dict:
    t = load_trace(str(trace_path))
    return {"read": t.bytes(READ) + t.bytes(READV), "written": t.bytes(WRITE), "elements": t.elements(READV),
            "requests": t.requests(READV)}


# -- a local directory ------------------------------------------------------------------------------------------
def test_local_open_loop_bytes_lag_fidelity_and_cleanup(tmp_path, target):
    trace = write_trace(tmp_path / "jobs.csv", two_streams())
    want = expect(trace)
    doc = run(tmp_path, {"local": {"url": f"file://{target}"}}, {"trace": "jobs.csv"})
    ph = phases(doc)["local"]
    assert (ph["bytes_read"], ph["bytes_written"]) == (want["read"], want["written"])
    assert (ph["trace_bytes_read"], ph["trace_bytes_written"]) == (want["read"], want["written"])
    assert ph["bytes_equal"] == 1
    assert (ph["readv_requests"], ph["readv_elements"]) == (2, 5) == (want["requests"], want["elements"])
    assert ph["vector"] == "split"  # POSIX has no vector read: element by element
    assert (ph["read_count"], ph["readv_count"], ph["write_count"]) == (5, 2, 2)
    # job2's input and output opened at their first use (no open lines), closed at the stream's end
    assert ph["open_count"] == 3 and ph["close_count"] == 3
    assert ph["implicit_opens"] == 2 and ph["implicit_closes"] == 2
    assert ph["lag_p50_ms"] is not None and ph["lag_p99_ms"] >= ph["lag_p50_ms"] and ph["lag_max_ms"] >= 0
    assert ph["trace_seconds"] == pytest.approx(0.3)
    # open-loop: the last operation cannot start before its schedule, so the replay lasts at least the trace
    assert ph["fidelity"] >= 1.0
    # the read files stay in the kept key directory at their traced sizes; what the trace wrote is gone
    kept = sorted(p for p in Path(target, "storeval-data").rglob("file-*"))
    assert [p.stat().st_size for p in kept] == [1_048_576, 600_007]
    assert not [p for p in leftovers(target) if "replay-w-" in p]
    assert not list(Path(target).glob("storeval-2*"))


def test_a_client_whose_streams_read_nothing_still_takes_part_in_clearing_the_cache(tmp_path, target):
    """Clearing the page cache before the replay is collective (as root, the clients agree at two barriers that
    the host's cache was dropped). A client whose streams only write used to skip it: its peer then waited at a
    barrier it never reached, for the whole phase timeout. Both clients now finish, and the writer's record
    says its client read nothing cold."""
    rows = [(0.0, "reader", "read", "/data/in.root", 0, 65536),
            (0.01, "writer", "write", "/out/skim.root", 0, 4096)]
    trace = write_trace(tmp_path / "jobs.csv", rows)
    path = study(tmp_path, {"local": {"url": f"file://{target}"}}, {"trace": str(trace), "mode": "closed"})
    path.write_text(path.read_text() + "phase_timeout: 60s\n")  # the hang it guards against would last an hour
    out = tmp_path / "out.json"
    r = storeval("run", str(path), "--json", str(out), "--quiet", "--results", str(tmp_path / "results"),
                 cwd=tmp_path, timeout=600)
    assert r.rc == 0, r.err
    ph = phases(load_json(out))["local"]
    assert (ph["bytes_read"], ph["bytes_written"]) == (65536, 4096) and ph["bytes_equal"] == 1


def test_closed_loop_speed_and_files_are_reused(tmp_path, target):
    trace = write_trace(tmp_path / "jobs.csv", two_streams(span=60.0))  # a minute recorded: closed-loop ignores it
    kept_before = None
    for mode in ("closed", "closed"):
        doc = run(tmp_path, {"local": {"url": f"file://{target}"}}, {"trace": str(trace), "mode": mode, "speed": 4})
        ph = phases(doc)["local"]
        assert ph["bytes_equal"] == 1 and "lag_p99_ms" not in ph
        assert ph["expected_seconds"] == pytest.approx(15.0)  # 60 s ÷ speed 4
        assert ph["fidelity"] == pytest.approx(ph["seconds"] / 15.0)  # the phase's wall time ÷ 15 s
        kept = {p: p.stat().st_mtime_ns for p in Path(target, "storeval-data").rglob("file-*")}
        assert kept_before is None or kept == kept_before  # the second run reused the laid-out files
        kept_before = kept


def test_map_mode_reads_existing_data_and_refuses_a_short_file(tmp_path, target):
    trace = write_trace(tmp_path / "jobs.csv", two_streams())
    data = Path(target, "mine", "run1")
    data.mkdir(parents=True)
    (data / "a.root").write_bytes(os.urandom(1_048_576))
    (data / "b.root").write_bytes(os.urandom(700_000))
    params = {"trace": "jobs.csv", "files": "map", "map": {"/data/": "mine/"}, "mode": "closed"}
    doc = run(tmp_path, {"local": {"url": f"file://{target}"}}, params)
    ph = phases(doc)["local"]
    assert ph["bytes_equal"] == 1 and ph["bytes_read"] == expect(trace)["read"]
    assert not Path(target, "storeval-data").exists()  # nothing laid out
    assert (data / "a.root").stat().st_size == 1_048_576  # input data untouched
    (data / "b.root").write_bytes(os.urandom(600_000))  # shorter than the trace's last read of it
    out = tmp_path / "short.json"
    r = storeval("run", str(study(tmp_path, {"local": {"url": f"file://{target}"}}, params)), "--json", str(out),
                 "--quiet", "--results", str(tmp_path / "results"), cwd=tmp_path, timeout=300)
    assert r.rc != 0
    (cell,) = load_json(out)["cells"]
    assert cell["status"] == "failed"
    assert "/data/run1/b.root" in cell["error"] and "600,000" in cell["error"] and "600,007" in cell["error"]
    assert "\n" not in cell["error"]


def test_map_mode_refuses_a_name_no_prefix_matches(tmp_path, target):
    write_trace(tmp_path / "jobs.csv", two_streams())
    r = storeval("run", str(study(tmp_path, {"local": {"url": f"file://{target}"}},
                                  {"trace": "jobs.csv", "files": "map", "map": {"/other/": "x/"}})),
                 "--results", str(tmp_path / "results"), cwd=tmp_path)
    assert r.rc == 2 and len(r.err_lines) == 1, r.err
    assert "/data/run1/a.root" in r.err and "map" in r.err


def test_the_trace_sets_the_client_count_whatever_the_study_says(tmp_path, target):
    """streams: per-client runs one client per traced stream, streams: N runs N clients (Workload.fixed_clients):
    the study's client counts, which its other workloads sweep, do not apply to a replay."""
    write_trace(tmp_path / "jobs.csv", two_streams())
    doc = run(tmp_path, {"local": {"url": f"file://{target}"}}, {"trace": "jobs.csv"}, clients=3)
    assert [(c["clients"], c["status"]) for c in doc["cells"]] == [(2, "ok")]
    doc = run(tmp_path, {"local": {"url": f"file://{target}"}}, {"trace": "jobs.csv", "streams": 1}, clients=2)
    assert [(c["clients"], c["status"]) for c in doc["cells"]] == [(1, "ok")]


def test_a_replay_with_client_groups_is_refused_in_one_line(tmp_path, target):
    write_trace(tmp_path / "jobs.csv", two_streams())
    path = tmp_path / "groups.yaml"
    path.write_text(yaml.safe_dump({"targets": {"local": {"url": f"file://{target}"}},
                                    "clients": {"a": {"count": [1]}, "b": {"count": [1]}},
                                    "workloads": {"replay": {"replay": {"trace": "jobs.csv"}}}}))
    r = storeval("run", str(path), "--results", str(tmp_path / "results"), cwd=tmp_path)
    assert r.rc == 2 and len(r.err_lines) == 1, r.err
    assert "fix the number of clients (2)" in r.err and "client groups" in r.err
    assert not (tmp_path / "results").exists() and not list(Path(target).iterdir())  # nothing ran


def test_streams_spread_over_fewer_clients_run_as_threads(tmp_path, target):
    trace = write_trace(tmp_path / "jobs.csv", two_streams())
    doc = run(tmp_path, {"local": {"url": f"file://{target}"}}, {"trace": "jobs.csv", "streams": 1}, clients=1)
    ph = phases(doc)["local"]
    assert ph["bytes_equal"] == 1 and ph["bytes_read"] == expect(trace)["read"]
    (stat,) = ph["client_stats"]
    assert stat["streams"] == 2


@pytest.mark.parametrize("content, what", [
    (None, "cannot be read"),
    ("t,stream,op,file,offset,length\n0,a,read,/f,0,10\n0.1,a,fly,/f,0,10\n", "line 3"),
    ("t,stream,op,file,offset,length\n0,a,read,/f,-5,10\n", "negative"),
])
def test_a_missing_or_malformed_trace_is_refused_in_one_line(tmp_path, target, content, what):
    if content is not None:
        (tmp_path / "bad.csv").write_text(content)
    r = storeval("run", str(study(tmp_path, {"local": {"url": f"file://{target}"}}, {"trace": "bad.csv"})),
                 "--results", str(tmp_path / "results"), cwd=tmp_path)
    assert r.rc == 2 and len(r.err_lines) == 1, r.err
    assert "workloads.rp" in r.err and "bad.csv" in r.err and what in r.err and "Traceback" not in r.err
    assert not (tmp_path / "results").exists()


def test_coarse_timestamps_are_spread_over_their_second_and_vector_reads_are_one_operation():
    b = TraceBuilder("xrootd", "x", 1.0)
    s, f = b.stream("conn"), b.file("/f")
    for off in (0, 10, 20):
        b.add(s, 5.0, READ, f, off, 10)
    rid = b.new_request()
    for off in (100, 200):
        b.add(s, 5.0, READV, f, off, 5, rid)
    b.add(s, 7.0, READ, f, 0, 1)
    trace = b.build()
    plan = plan_stream(trace, 0, 2.0, None)
    # an implicit open, then 4 operations sharing second 0 at 0, 1/4, 2/4, 3/4 s — ÷ speed 2 — then second 2
    assert plan.kinds == [0, READ, READ, READ, READV, READ, 1]
    assert plan.due == [0, 0, 125_000_000, 250_000_000, 375_000_000, 1_000_000_000, 1_000_000_000]
    assert plan.ranges[4] == [(100, 5), (200, 5)] and (plan.requests, plan.elements) == (1, 2)
    assert trace_seconds(trace) == 3.0  # 0 … 2 s, plus the last second itself


# -- the testbed's servers ----------------------------------------------------------------------------------------
def test_minio_and_xrootd_replay_the_traces_bytes_and_vector_reads(tmp_path, testbed, testbed_targets):
    trace = write_trace(tmp_path / "jobs.csv", two_streams())
    want = expect(trace)
    targets = {k: v for k, v in testbed_targets.items() if k in ("minio", "xrootd")}
    xrd = testbed.load()["xrootd"]
    doc = run(tmp_path, targets, {"trace": "jobs.csv"})  # lays the files out on both
    mark = xrd.trace_mark()
    doc = run(tmp_path, targets, {"trace": "jobs.csv"})  # reuses them: the server's log holds the replay's I/O
    ops = xrd.trace_ops(mark)
    by = phases(doc)
    for name in ("minio", "xrootd"):
        ph = by[name]
        assert (ph["bytes_read"], ph["bytes_written"]) == (want["read"], want["written"]), name
        assert ph["bytes_equal"] == 1 and ph["vector"] == ("native" if name == "xrootd" or S3_TAKES_COALESCE else "split")
        assert (ph["readv_requests"], ph["readv_elements"]) == (want["requests"], want["elements"])
        assert ph["lag_p99_ms"] is not None and ph["fidelity"] is not None
    # S3: one ranged GET per element (vector: native merges nothing across a gap), and MinIO's own counters say
    # it sent exactly the trace's bytes
    if S3_TAKES_COALESCE:
        assert by["minio"]["coalesced_requests"] == 5 and by["minio"]["vector_coalesce"] == 0
    assert by["minio"]["probes"]["server_read_bytes"] == want["read"]
    # XRootD: the server saw every element of the vector reads, and every read and write at its offset
    assert Counter((o, n) for op, o, n in ops if op == "readV") == Counter(
        [(100_000, 4096), (300_000, 8192), (900_000, 1000), (10, 20), (1_048_000, 576)])
    reads = Counter((o, n) for op, o, n in ops if op == "read")
    for o, n in [(0, 65536), (500_000, 131072), (0, 262144), (262144, 262144), (600_000, 7)]:
        assert reads[(o, n)] >= 1
    writes = Counter((o, n) for op, o, n in ops if op == "write")  # beside them: the run's owner record
    assert writes[(0, 100_000)] == 1 and writes[(100_000, 50_000)] == 1
    # the server's log of the replay read as a trace: the vector reads are 2 requests of 3 and 2 elements
    (log,) = xrd.trace_logs().values()
    with open(log, "rb") as f:
        f.seek(mark[0])
        (tmp_path / "server.log").write_bytes(f.read())
    seen = load_trace(str(tmp_path / "server.log"), "xrootd")
    assert (seen.requests(READV), seen.elements(READV), seen.bytes(READV)) == (2, 5, 4096 + 8192 + 1000 + 20 + 576)


def test_closed_loop_keeps_each_streams_order_on_xrootd(tmp_path, testbed, testbed_targets):
    """One stream, reads in a shuffled order: the server's log has them in the trace's order."""
    offsets = [7, 3, 9, 1, 5, 0, 8, 2, 6, 4]
    rows = [(i * 0.001, "only", "read", "/d/f.bin", o * 10_000, 1000 + o) for i, o in enumerate(offsets)]
    write_trace(tmp_path / "order.csv", rows)
    xrd = testbed.load()["xrootd"]
    targets = {"xrootd": testbed_targets["xrootd"]}
    run(tmp_path, targets, {"trace": "order.csv", "mode": "closed"}, clients=1)
    mark = xrd.trace_mark()
    doc = run(tmp_path, targets, {"trace": "order.csv", "mode": "closed"}, clients=1)
    assert phases(doc)["xrootd"]["bytes_equal"] == 1
    seen = [(o, n) for op, o, n in xrd.trace_ops(mark) if op == "read" and (o, n) in
            {(x * 10_000, 1000 + x) for x in offsets}]
    assert seen == [(o * 10_000, 1000 + o) for o in offsets]


def test_fio_v2_has_no_times_so_it_replays_closed_loop_only(tmp_path, target):
    log = TRACES / "fio-v2-handmade-randrw.iolog"
    trace = load_trace(str(log))
    targets = {"local": {"url": f"file://{target}"}}
    r = storeval("run", str(study(tmp_path, targets, {"trace": str(log)}, len(trace.streams))),
                 "--results", str(tmp_path / "results"), cwd=tmp_path)
    assert r.rc == 2 and len(r.err_lines) == 1 and "mode: closed" in r.err, r.err
    doc = run(tmp_path, targets, {"trace": str(log), "mode": "closed"}, clients=len(trace.streams))
    ph = phases(doc)["local"]
    assert (ph["bytes_read"], ph["bytes_written"]) == (trace.bytes(READ), trace.bytes(WRITE))
    assert ph["bytes_equal"] == 1 and ph["write_count"] == trace.elements(WRITE)


def test_a_run_storeval_recorded_replays_with_its_bytes(tmp_path, target):
    """record: true on a bandwidth run writes a storeval trace; replaying it reads and writes those bytes again."""
    r = storeval("run", "--target", f"file://{target}", "--workload", "bandwidth", "--clients", "2", "--set",
                 "record=true", "--set", "file_size=1MiB", "--set", "transfer_size=64KiB", "--set",
                 "phases=[write,read]", "--results", str(tmp_path / "rec"), "--quiet", cwd=tmp_path, timeout=300)
    assert r.rc == 0, r.err
    (read_trace,) = (tmp_path / "rec" / "traces").rglob("*-read.jsonl.gz")
    (write_trace,) = (tmp_path / "rec" / "traces").rglob("*-write.jsonl.gz")
    targets = {"local": {"url": f"file://{target}"}}
    for path, kind in ((read_trace, READ), (write_trace, WRITE)):
        trace = load_trace(str(path))
        assert trace.format == "storeval" and trace.bytes(kind) == 2 << 20
        doc = run(tmp_path, targets, {"trace": str(path)}, clients=len(trace.streams))
        ph = phases(doc)["local"]
        assert ph["bytes_equal"] == 1
        assert (ph["bytes_read"], ph["bytes_written"]) == (trace.bytes(READ), trace.bytes(WRITE))
        assert ph["lag_p99_ms"] is not None


def test_s3_replays_the_traces_ranges_and_flags_coalesced_gets_that_read_more(tmp_path, testbed_targets):
    """vector: native on S3 fetches only the trace's ranges (MinIO's counters: the trace's bytes, moved × 1);
    vector: coalesced merges ranges closer than the target's vector_coalesce into whole-span GETs, which read the
    gaps too: the client still gets the trace's bytes, but the replay says the server moved more, and why."""
    log = STUDIES / "traces" / "seed003-uproot-skim.log"
    trace = load_trace(str(log))
    want = trace.bytes(READ) + trace.bytes(READV)
    ranges = [[(int(r["offset"]), int(r["length"])) for r in s.ops[s.ops["request"] == q]]
              for s in trace.streams for q in set(s.ops["request"][s.ops["kind"] == READV].tolist())]
    gets = sum(_coalesced(r, 0) for r in ranges)
    assert gets > len(ranges)
    doc = run(tmp_path, {"minio": testbed_targets["minio"]},
              {"trace": str(log), "mode": "closed", "vector": ["native", "coalesced"]}, clients=len(trace.streams))
    by = {c["factors"]["vector"]: c for c in doc["cells"]}
    native, merged = by["native"]["phases"][0], by["coalesced"]["phases"][0]
    for ph in (native, merged):
        assert ph["bytes_read"] == ph["trace_bytes_read"] == want and ph["bytes_equal"] == 1
        assert ph["readv_elements"] == trace.elements(READV)
    assert native["probes"]["server_read_bytes"] == want and native["read_amplification"] == 1.0
    if S3_TAKES_COALESCE:  # one GET per run of adjacent ranges, nothing merged across a gap
        assert native["vector"] == "native" and native["coalesced_requests"] == gets and native["vector_coalesce"] == 0
    else:  # the driver's preadv cannot be told not to merge: element by element gives the trace's bytes
        assert native["vector"] == "split"
    assert merged["vector"] == "native"
    assert not [f for f in native["flags"] if f["code"] == "replay-moved"]
    assert merged["coalesced_requests"] == sum(_coalesced(r, 1 << 20) for r in ranges) < gets
    moved = merged["probes"]["server_read_bytes"]
    assert moved > 1.05 * want and merged["read_amplification"] == pytest.approx(moved / want)
    (flag,) = [f for f in merged["flags"] if f["code"] == "replay-moved"]
    assert f"moved {moved:,.0f} bytes for the trace's {want:,}" in flag["message"]
    assert "vector_coalesce 1 MiB" in flag["message"] and "vector: native" in flag["message"]


# -- refusals at validation: one line, exit 2, nothing run or written -------------------------------------------
def refused(tmp_path: Path, target: Path, params: dict, *args: str) -> str:
    r = storeval("run", str(study(tmp_path, {"local": {"url": f"file://{target}"}}, params)), *args,
                 "--results", str(tmp_path / "results"), cwd=tmp_path)
    assert r.rc == 2 and len(r.err_lines) == 1 and "Traceback" not in r.err, r.err
    assert not (tmp_path / "results").exists() and not list(Path(target).iterdir())
    return r.err


XROOTD_TRAVERSAL = """\
261126 09:01:19 2833 XrootdXeq: a.1:2@h pvt IP46 login
261126 09:01:19 2833 a.1:2@h Xrootd_Protocol: 0100 open rt /../../../../etc/passwd
261126 09:01:19 2833 a.1:2@h Xrootd_Protocol: 0100 0 fh=0 read 100@0
"""


def test_map_refuses_paths_that_leave_the_target(tmp_path, target):
    (tmp_path / "trav.log").write_text(XROOTD_TRAVERSAL)
    err = refused(tmp_path, target, {"trace": "trav.log", "mode": "closed", "files": "map", "map": {"/": "data/"}})
    assert "'/../../../../etc/passwd' maps to 'data/../../../../etc/passwd'" in err and "'..'" in err
    assert "files: create" in err
    write_trace(tmp_path / "jobs.csv", two_streams())
    err = refused(tmp_path, target, {"trace": "jobs.csv", "files": "map", "map": {"/data/": "../elsewhere/"}})
    assert "'../elsewhere/'" in err and "no '..'" in err


@pytest.mark.parametrize("speed, what", [(1e-300, "is outside 0.001 … 1e+06"), (1e-7, "is outside 0.001 … 1e+06"),
                                         (float("nan"), "is outside"), ("fast", "is not a number")])
def test_speed_is_bounded(tmp_path, target, speed, what):
    write_trace(tmp_path / "jobs.csv", two_streams())
    err = refused(tmp_path, target, {"trace": "jobs.csv", "speed": speed})
    assert "workloads.rp.speed" in err and what in err
    assert "give speed: a factor" in err or speed == "fast"  # a string fails before the bounds: "'fast' is not a number"


def test_an_open_loop_schedule_beyond_a_week_is_refused_and_closed_loop_ignores_it(tmp_path, target):
    # 30 days between two reads (a trace's times themselves are bounded by the parser: tests/test_traces.py)
    write_trace(tmp_path / "far.csv", [(0, "c1", "read", "/d/a", 0, 10), (30 * 86400, "c1", "read", "/d/a", 0, 10)])
    err = refused(tmp_path, target, {"trace": "far.csv"})
    assert "would take 30 days, more than the 7 days" in err and "mode: closed" in err
    write_trace(tmp_path / "slow.csv", [(0, "c1", "read", "/d/a", 0, 10), (1000, "c1", "read", "/d/a", 0, 10)])
    err = refused(tmp_path, target, {"trace": "slow.csv", "speed": 0.001})  # 1000 s ÷ 0.001 = 11.6 days
    assert "lasts 0.278 h: at speed 0.001 the open-loop replay would take 11.6 days" in err
    out = tmp_path / "out.json"
    r = storeval("run", str(study(tmp_path, {"local": {"url": f"file://{target}"}},
                                  {"trace": "far.csv", "mode": "closed"}, clients=1)),
                 "--json", str(out), "--quiet", "--results", str(tmp_path / "results"), cwd=tmp_path, timeout=300)
    assert r.rc == 0 and "Warning" not in r.err, r.err  # no numpy overflow on the way
    assert phases(load_json(out))["local"]["bytes_read"] == 20


def test_an_idle_gap_longer_than_the_phase_timeout_is_not_a_hang(tmp_path, target):
    """Open-loop, a stream waiting for its next scheduled start keeps its heartbeat: a 6 s gap in the trace
    replays under --phase-timeout 2s."""
    write_trace(tmp_path / "gap.csv", [(0, "c1", "read", "/d/a", 0, 4096), (6, "c1", "read", "/d/a", 4096, 4096)])
    out = tmp_path / "out.json"
    r = storeval("run", str(study(tmp_path, {"local": {"url": f"file://{target}"}}, {"trace": "gap.csv"}, 1)),
                 "--phase-timeout", "2s", "--json", str(out), "--quiet", "--results", str(tmp_path / "results"),
                 cwd=tmp_path, timeout=300)
    assert r.rc == 0, r.err
    ph = phases(load_json(out))["local"]
    assert ph["bytes_read"] == 8192 and ph["bytes_equal"] == 1 and ph["fidelity"] >= 1.0
    # the trace's own idle time is not a stall of the target
    assert "stalled" not in [f["code"] for f in ph["flags"]], ph["flags"]


@pytest.mark.parametrize("streams", [0, -1, "many"])
def test_streams_out_of_range_is_one_line(tmp_path, target, streams):
    write_trace(tmp_path / "jobs.csv", two_streams())
    err = refused(tmp_path, target, {"trace": "jobs.csv", "streams": streams})
    assert "workloads.rp.streams" in err and "is not a client count" in err
    assert "streams: per-client" in err and "N from 1 to 100,000" in err


def test_too_many_streams_for_the_host_names_streams_not_clients(tmp_path, target):
    """A trace fixes the replay's client count: when the host cannot take one client per stream, the fix is
    streams: N (--clients changes nothing)."""
    write_trace(tmp_path / "wide.csv", [(0, f"s{i}", "read", "/d/a", 0, 10) for i in range(50_000)])
    err = refused(tmp_path, target, {"trace": "wide.csv", "mode": "closed"})
    assert "50,000 client processes" in err and "lower --clients" not in err
    assert "set streams: N below 50,000 — the trace's 50,000 streams spread over N clients as threads" in err
