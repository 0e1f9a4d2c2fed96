"""Trace parsers (issue 18): every format read into the one model, with exact bytes, element and request counts,
files and streams; malformed input is one line naming the file, the line and the fix."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import numpy as np
import pytest

from storeval.errors import InputError
from storeval.traces import CLOSE, OPEN, READ, READV, WRITE, detect, load_trace

DATA = Path(__file__).parent / "data" / "traces"

CSV = """\
t,stream,op,file,offset,length,request,size
10.5,c1,open,/data/a.root,,,,5000
10.5,c1,read,/data/a.root,0,100,,
10.75,c1,readv,/data/a.root,1000,10,r1,
10.75,c1,readv,/data/a.root,2000,20,r1,
10.75,c1,readv,/data/a.root,3000,30,r1,
11.0,c1,readv,/data/a.root,4000,40,r2,
11.0,c2,write,/data/out.root,0,4096,,
11.25,c2,write,/data/out.root,4096,4096,,
12.0,c1,close,/data/a.root,,,,
12.5,c2,close,/data/out.root,,,,
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_csv_reads_every_kind_with_exact_counts(tmp_path):
    trace = load_trace(_write(tmp_path, "t.csv", CSV))
    assert trace.format == "csv"
    assert [f.name for f in trace.files] == ["/data/a.root", "/data/out.root"]
    a, out = trace.files
    assert (a.size, a.size_known) == (5000, True)  # stated, larger than the furthest read (4040)
    assert (out.size, out.size_known) == (8192, False)  # from the writes
    assert [s.name for s in trace.streams] == ["c1", "c2"]
    assert trace.counts() == {
        "open": {"ops": 1, "requests": 1, "bytes": 0}, "close": {"ops": 2, "requests": 2, "bytes": 0},
        "read": {"ops": 1, "requests": 1, "bytes": 100}, "write": {"ops": 2, "requests": 2, "bytes": 8192},
        "readv": {"ops": 4, "requests": 2, "bytes": 100}}
    c1 = trace.streams[0].ops
    assert list(c1["kind"]) == [OPEN, READ, READV, READV, READV, READV, CLOSE]
    assert list(c1["t"]) == [0.0, 0.0, 0.25, 0.25, 0.25, 0.5, 1.5]  # from the first operation of any stream
    rv = c1[c1["kind"] == READV]
    assert rv["request"][0] == rv["request"][1] == rv["request"][2] != rv["request"][3]
    assert set(c1[c1["kind"] != READV]["request"]) == {-1}
    assert trace.duration() == 2.0
    assert trace.elements(READV) == 4 and trace.requests(READV) == 2 and trace.bytes(WRITE) == 8192


def test_jsonl_with_ranges_equals_the_csv(tmp_path):
    lines = [
        {"t": 10.5, "stream": "c1", "op": "open", "file": "/data/a.root", "size": 5000},
        {"t": 10.5, "stream": "c1", "op": "read", "file": "/data/a.root", "offset": 0, "length": 100},
        {"t": 10.75, "stream": "c1", "op": "readv", "file": "/data/a.root",
         "ranges": [[1000, 10], [2000, 20], [3000, 30]]},
        {"t": 11.0, "stream": "c1", "op": "readv", "file": "/data/a.root", "offset": 4000, "length": 40,
         "request": 7},
        {"t": 11.0, "stream": "c2", "op": "write", "file": "/data/out.root", "offset": 0, "length": 4096},
        {"t": 11.25, "stream": "c2", "op": "write", "file": "/data/out.root", "offset": 4096, "length": 4096},
        {"t": 12.0, "stream": "c1", "op": "close", "file": "/data/a.root"},
        {"t": 12.5, "stream": "c2", "op": "close", "file": "/data/out.root"},
    ]
    path = _write(tmp_path, "t.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n")
    assert detect(str(path)) == "jsonl"
    trace = load_trace(path)
    ref = load_trace(_write(tmp_path, "t.csv", CSV))
    assert trace.counts() == ref.counts()
    assert trace.files == ref.files
    for mine, theirs in zip(trace.streams, ref.streams):
        assert mine.name == theirs.name
        assert np.array_equal(mine.ops[["t", "kind", "file", "offset", "length"]],
                              theirs.ops[["t", "kind", "file", "offset", "length"]])


def test_gzip_compressed_csv_is_read(tmp_path):
    path = tmp_path / "t.csv.gz"
    path.write_bytes(gzip.compress(CSV.encode()))
    assert load_trace(path).bytes(READV) == 100


def test_rows_out_of_time_order_are_sorted_per_stream(tmp_path):
    text = "t,stream,op,file,offset,length\n2,s,read,f,10,5\n1,s,read,f,0,10\n"
    ops = load_trace(_write(tmp_path, "t.csv", text)).streams[0].ops
    assert list(ops["offset"]) == [0, 10] and list(ops["t"]) == [0.0, 1.0]


@pytest.mark.parametrize(("text", "message"), [
    ("t,stream,op,file,offset,length\n1,s,read,f,0,\n", "line 2: no length; give length"),
    ("t,stream,op,file,offset,length\n1,s,seek,f,0,1\n", "line 2: op 'seek' is unknown"),
    ("t,stream,op,file,offset,length\nx,s,read,f,0,1\n", "line 2: t 'x' is not a number"),
    ("t,stream,op,file,offset,length\n1,s,read,f,-1,1\n", "line 2: offset -1 is negative"),
    ("t,stream,op,file,offset,length\n1,s,readv,f,0,1\n", "line 2: a readv row without request"),
    ("t,stream,op,file,offset,length,request\n1,s,readv,f,0,1,a\n2,s,readv,f,9,1,a\n",
     "line 3: an element of readv request a at t=2.0 after one at t=1.0"),
    ("t,stream,op,file,offs\n", "line 1: unknown column 'offs'"),
    ("t,op,file\n1,read,f\n", "line 1: no column 'stream' in the header"),
    ("t,stream,op,file,offset,length\n1,s,read,f,0\n", "line 2: 5 fields for 6 columns"),
    ("t,stream,op,file,offset,length\n", "has no operations"),
])
def test_malformed_csv_is_one_line_naming_file_line_and_fix(tmp_path, text, message):
    path = _write(tmp_path, "bad.csv", text)
    with pytest.raises(InputError) as err:
        load_trace(path, "csv")
    assert str(err.value).startswith(f"trace {path}")
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(("text", "message"), [
    ('{"t": 1, "stream": "s", "op": "read", "file": "f", "offset": 0}\n', "line 1: no length"),
    ('{"t": 1, "stream": "s", "op": "read", "file": "f", "offset": 0, "length": 1.5}\n',
     "line 1: length 1.5 is not a whole number"),
    ('{"t": 1, "stream": "s", "op": "read", "file": "f", "bytes": 3}\n', "line 1: unknown key 'bytes'"),
    ('{"t": 1, "stream": "s", "op": "readv", "file": "f", "ranges": [[1]]}\n', "line 1: range [1] is not"),
    ('{"t": 1, "stream": "s", "op": "read"\n', "line 1: is not JSON"),
])
def test_malformed_jsonl_is_one_line(tmp_path, text, message):
    path = _write(tmp_path, "bad.jsonl", text)
    with pytest.raises(InputError) as err:
        load_trace(path)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_unknown_content_and_missing_file_are_one_line(tmp_path):
    with pytest.raises(InputError, match="is in no format storeval knows; give format: one of xrootd, fio"):
        load_trace(_write(tmp_path, "x.txt", "hello\n"))
    with pytest.raises(InputError, match="cannot be read"):
        load_trace(tmp_path / "nope.csv")
    with pytest.raises(InputError, match="trace format 'tsv' is unknown"):
        load_trace(_write(tmp_path, "t.csv", CSV), "tsv")


# -- XRootD server logs -------------------------------------------------------------------------------------
# Real excerpts of the testbed's XRootD 5.5.3 log with `xrootd.trace fs fsio request` (tests/data/traces):
#   bindings: one connection writes f0..f2 (64 KiB + 100 B each, two writes), reads f0 (read 1000@100, readv of
#             3 and of 2 elements), opens f0 and f1 at once (fh 0 and 1), closes f0, opens f2 (fh 0 again),
#             reads it and vector-reads 2 elements, fails to open `nope`; then two connections at once (alice on
#             f0, bob on f1): 3 reads of 4096 and a readv of 4 elements (1000 bytes) each. The client counted
#             1190 bytes read on the first connection and 13288 on each of the others.
#   uproot:   plain uproot 5.7.7 (XRootDSource): TTree.arrays of two branches, then TTree.iterate; uproot's own
#             counters said 259145 bytes in 8 requests and 31384 bytes in 7 requests.
#   xrdcp:    `xrdcp` of f1 (65636 bytes) to /dev/null (pgread) and of a 50000-byte local file up (pgwrite).
# The pre-5.4 excerpt is hand-made from the bindings one (see its first lines).

def _ops(trace, stream_prefix: str):
    return next(s.ops for s in trace.streams if s.name.startswith(stream_prefix))


def _bytes_by_file(trace, ops, kind) -> dict[str, int]:
    out: dict[str, int] = {}
    for row in ops[ops["kind"] == kind]:
        name = trace.files[row["file"]].name if row["file"] >= 0 else "?"
        out[name] = out.get(name, 0) + int(row["length"])
    return out


def test_xrootd_log_of_the_python_bindings():
    trace = load_trace(DATA / "xrootd-5.5.3-bindings.log")
    assert trace.format == "xrootd" and trace.resolution == 1.0
    assert [s.name for s in trace.streams] == ["root.5570:25@10.14.226.105", "alice.5570:22@10.14.226.105",
                                               "bob.5570:23@10.14.226.105"]
    assert [f.name for f in trace.files] == ["/storeval/fx/f0", "/storeval/fx/f1", "/storeval/fx/f2"]  # no `nope`
    main, alice, bob = (s.ops for s in trace.streams)
    assert int(main["length"][main["kind"] == READ].sum() + main["length"][main["kind"] == READV].sum()) == 1190
    assert _bytes_by_file(trace, main, WRITE) == {f"/storeval/fx/f{i}": 65636 for i in range(3)}
    # handles: f0 and f1 open at once on fh 0 and 1; after f0's close, f2 gets fh 0
    assert _bytes_by_file(trace, main, READ) == {"/storeval/fx/f0": 1010, "/storeval/fx/f1": 50,
                                                 "/storeval/fx/f2": 40}
    assert _bytes_by_file(trace, main, READV) == {"/storeval/fx/f0": 84, "/storeval/fx/f2": 6}
    rv = main[main["kind"] == READV]
    assert [len(rv[rv["request"] == r]) for r in dict.fromkeys(rv["request"])] == [3, 2, 2]
    assert int(np.count_nonzero(main["kind"] == OPEN)) == 7 == int(np.count_nonzero(main["kind"] == CLOSE))
    for ops, name in ((alice, "/storeval/fx/f0"), (bob, "/storeval/fx/f1")):
        assert _bytes_by_file(trace, ops, READ) == {name: 12288}
        assert _bytes_by_file(trace, ops, READV) == {name: 1000}
        assert int(np.count_nonzero(ops["kind"] == READV)) == 4 and len(set(ops["request"][ops["kind"] == READV])) == 1
    assert trace.counts()["readv"] == {"ops": 15, "requests": 5, "bytes": 2090}
    assert trace.bytes(READ) == 25676 and trace.bytes(WRITE) == 196908
    assert trace.files[0].size == 65636 and not trace.files[0].size_known


def test_xrootd_log_of_plain_uproot():
    trace = load_trace(DATA / "xrootd-5.5.3-uproot.log")
    assert [f.name for f in trace.files] == ["/storeval/fx/small.root"]
    assert len(trace.streams) == 1  # both uproot.open calls of the process share one connection
    assert trace.counts() == {"open": {"ops": 2, "requests": 2, "bytes": 0},
                              "close": {"ops": 2, "requests": 2, "bytes": 0},
                              "read": {"ops": 15, "requests": 15, "bytes": 259145 + 31384},
                              "write": {"ops": 0, "requests": 0, "bytes": 0},
                              "readv": {"ops": 0, "requests": 0, "bytes": 0}}


def test_xrootd_log_of_xrdcp_pgread_and_pgwrite():
    trace = load_trace(DATA / "xrootd-5.5.3-xrdcp.log")
    assert trace.bytes(READ) == 65636 and trace.bytes(WRITE) == 50000  # pgwrite: the CRC32C bytes taken off
    up = trace.files[[f.name for f in trace.files].index("/storeval/fx/up.bin")]
    assert (up.size, up.size_known) == (50000, True)  # ?oss.asize=50000 on the open line
    assert len(trace.streams) == 2


def test_xrootd_log_before_5_4_without_request_lines():
    trace = load_trace(DATA / "xrootd-pre5.4-fs-fsio-handmade.log")
    ref = load_trace(DATA / "xrootd-5.5.3-bindings.log")
    assert trace.files == ref.files and [s.name for s in trace.streams] == [s.name for s in ref.streams]
    for kind in (READ, WRITE, READV, OPEN, CLOSE):
        assert trace.bytes(kind) == ref.bytes(kind) and trace.elements(kind) == ref.elements(kind)
    # without `request`, the two vector reads of one second on one handle cannot be told apart
    assert trace.requests(READV) == 4 and ref.requests(READV) == 5
    assert any("consecutive readV lines" in n for n in trace.notes)


def test_xrootd_fsio_only_lines_have_unknown_files(tmp_path):
    lines = ["261121 05:23:01 9619 root.12366:20@localhost Xrootd_Protocol: 0 fh=0 read 2176@64970135",
             "261121 05:23:01 9619 root.12366:20@localhost Xrootd_Protocol: fh=0 readV 10@0",
             "261121 05:23:01 9619 root.12366:20@localhost Xrootd_Protocol: fh=0 readV 20@100",
             "261121 05:23:02 9619 root.12366:20@localhost Xrootd_Protocol: fh=0 readV 30@200",
             "261121 05:23:02 9619 root.12366:20@localhost Xrootd_Protocol: 0 pgread 8388608@0 fn=/storeval/f"]
    trace = load_trace(_write(tmp_path, "x.log", "\n".join(lines) + "\n"))
    ops = trace.streams[0].ops
    assert list(ops["file"]) == [-1, -1, -1, -1, 0] and trace.files[0].name == "/storeval/f"
    assert trace.requests(READV) == 2 and trace.elements(READV) == 3  # one per second
    assert list(ops["t"]) == [0, 0, 0, 1, 1] and trace.duration() == 1.0
    assert any("opened before the log began" in n for n in trace.notes)
    assert any("trace 'fs'" in n for n in trace.notes)


# -- a live server: what clients did == what the parsed trace says ------------------------------------------
@pytest.fixture(scope="module")
def live_trace(testbed, tmp_path_factory):
    """The shared testbed XRootD: one connection writes, reads and vector-reads three files (two open at once),
    two more connections read at the same time, and plain uproot reads a ROOT file; every connection logs in
    under a user name of its own, so the test finds its streams whatever else the log holds. Returns the
    parsed log excerpt and what the clients counted themselves."""
    client = pytest.importorskip("XRootD.client")
    from XRootD.client.flags import MkDirFlags, OpenFlags
    import threading
    import uproot

    server = testbed.load()["xrootd"]
    hostport = server.url.split("://", 1)[1]
    base = f"/storeval/traces-{id(server) % 100000}"
    tmp = tmp_path_factory.mktemp("live-trace")

    def url(user: str, name: str) -> str:
        return f"root://{user}@{hostport}/{base}/{name}"

    def ok(result):
        assert result[0].ok, result[0].message
        return result[1]

    mark = server.trace_mark()
    fs = client.FileSystem(f"root://trmain@{hostport}")
    ok(fs.mkdir(base, MkDirFlags.MAKEPATH))
    counted = {"write": 0, "read": {}, "readv": {}, "readv_requests": 0, "readv_elements": 0}
    data = bytes(range(256)) * 1024
    for name in ("f0", "f1", "f2"):
        f = client.File()
        ok(f.open(url("trmain", name), OpenFlags.DELETE | OpenFlags.NEW))
        ok(f.write(data, offset=0))
        ok(f.write(data[:777], offset=len(data)))
        ok(f.close())
        counted["write"] += len(data) + 777

    def read(f, name, offset, length):
        counted["read"][name] = counted["read"].get(name, 0) + len(ok(f.read(offset, length)))

    def readv(f, name, chunks):
        got = ok(f.vector_read(chunks=chunks))
        counted["readv"][name] = counted["readv"].get(name, 0) + sum(c.length for c in got.chunks)
        counted["readv_requests"] += 1
        counted["readv_elements"] += len(got.chunks)

    f = client.File()
    ok(f.open(url("trmain", "f0")))
    read(f, "f0", 100, 5000)
    readv(f, "f0", [(0, 10), (5000, 20), (200000, 30)])
    readv(f, "f0", [(7, 11), (9000, 13), (100, 1), (4096, 4096)])
    ok(f.close())
    fa, fb, fc = client.File(), client.File(), client.File()
    ok(fa.open(url("trmain", "f0")))
    ok(fb.open(url("trmain", "f1")))
    read(fa, "f0", 0, 10)
    read(fb, "f1", 0, 20)
    ok(fa.close())
    ok(fc.open(url("trmain", "f2")))  # gets f0's handle back
    read(fc, "f2", 0, 40)
    readv(fc, "f2", [(1, 2), (3, 4)])
    read(fb, "f1", 20, 30)
    ok(fc.close())
    ok(fb.close())
    assert not client.File().open(url("trmain", "nope"))[0].ok

    others: dict[str, int] = {}

    def worker(user: str, name: str) -> None:
        g = client.File()
        ok(g.open(url(user, name)))
        total = sum(len(ok(g.read(k * 8192, 8192))) for k in range(4))
        got = ok(g.vector_read(chunks=[(0, 100), (8192, 200), (16384, 300)]))
        ok(g.close())
        others[user] = total + sum(c.length for c in got.chunks)

    threads = [threading.Thread(target=worker, args=(u, n)) for u, n in (("tralice", "f0"), ("trbob", "f1"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    local = tmp / "events.root"
    with uproot.recreate(local) as out:
        rng = np.random.default_rng(18)
        out["Events"] = {"pt": rng.random(20000), "n": rng.integers(0, 9, 20000)}
    ok(client.FileSystem(f"root://trcopy@{hostport}").copy(str(local), url("trcopy", "events.root"), force=True))
    handler = uproot.source.xrootd.XRootDSource
    uproot_bytes = uproot_requests = 0
    with uproot.open(url("truproot", "events.root"), handler=handler) as rf:
        assert len(rf["Events"].arrays(["pt", "n"])) == 20000
        uproot_bytes, uproot_requests = rf.file.source.num_requested_bytes, rf.file.source.num_requests
    with uproot.open(url("truproot", "events.root"), handler=handler) as rf:
        assert sum(len(b) for b in rf["Events"].iterate(["n"], step_size=5000)) == 20000
        uproot_bytes += rf.file.source.num_requested_bytes
        uproot_requests += rf.file.source.num_requests

    excerpt = tmp / "xrootd.log"
    with open(server.trace_log(), "rb") as log:
        log.seek(mark[0])
        excerpt.write_bytes(log.read())
    for name in ("f0", "f1", "f2", "events.root"):
        fs.rm(f"{base}/{name}")
    fs.rmdir(base)
    return {"trace": load_trace(excerpt), "base": base, "counted": counted, "others": others,
            "uproot": (uproot_bytes, uproot_requests), "copied": local.stat().st_size}


def _stream(trace, user: str):
    found = [s.ops for s in trace.streams if s.name.startswith(user + ".")]
    assert len(found) == 1, [s.name for s in trace.streams]
    return found[0]


def test_live_xrootd_trace_equals_what_the_bindings_did(live_trace):
    trace, base, counted = live_trace["trace"], live_trace["base"], live_trace["counted"]
    main = _stream(trace, "trmain")
    assert _bytes_by_file(trace, main, WRITE) == {f"{base}/f{i}": 262144 + 777 for i in range(3)}
    assert sum(_bytes_by_file(trace, main, WRITE).values()) == counted["write"]
    assert _bytes_by_file(trace, main, READ) == {f"{base}/{n}": b for n, b in counted["read"].items()}
    assert _bytes_by_file(trace, main, READV) == {f"{base}/{n}": b for n, b in counted["readv"].items()}
    rv = main[main["kind"] == READV]
    assert len(rv) == counted["readv_elements"] and len(set(rv["request"])) == counted["readv_requests"]
    assert f"{base}/nope" not in [f.name for f in trace.files]


def test_live_xrootd_trace_has_one_stream_per_connection(live_trace):
    trace, base = live_trace["trace"], live_trace["base"]
    for user, name in (("tralice", "f0"), ("trbob", "f1")):
        ops = _stream(trace, user)
        moved = _bytes_by_file(trace, ops, READ)[f"{base}/{name}"] + _bytes_by_file(trace, ops, READV)[f"{base}/{name}"]
        assert moved == live_trace["others"][user]
        assert int(np.count_nonzero(ops["kind"] == READV)) == 3 and len(set(ops["request"][ops["kind"] == READV])) == 1
        assert list(ops["kind"][[0, -1]]) == [OPEN, CLOSE]


def test_live_xrootd_trace_of_a_copy_through_pgwrite(live_trace):
    trace, base = live_trace["trace"], live_trace["base"]
    ops = _stream(trace, "trcopy")
    assert _bytes_by_file(trace, ops, WRITE) == {f"{base}/events.root": live_trace["copied"]}
    events = trace.files[[f.name for f in trace.files].index(f"{base}/events.root")]
    assert (events.size, events.size_known) == (live_trace["copied"], True)


def test_live_xrootd_trace_of_plain_uproot(live_trace):
    trace, base = live_trace["trace"], live_trace["base"]
    ops = _stream(trace, "truproot")
    nbytes, requests = live_trace["uproot"]
    assert _bytes_by_file(trace, ops, READ) == {f"{base}/events.root": nbytes}
    assert int(np.count_nonzero(ops["kind"] == READ)) == requests
    assert int(np.count_nonzero(ops["kind"] == OPEN)) == 2


# -- fio iologs ---------------------------------------------------------------------------------------------
# Real logs of fio 3.33 (`--write_iolog`, which writes version 3; paths shortened to /data):
#   randrw: --nrfiles=2 --filesize=64k --bs=4k --rw=randrw --rwmixread=50 --randseed=18 --fsync=8
#           --ioengine=psync; fio's JSON said read 49152 bytes in 12 I/Os, write 81920 bytes in 20, 2 syncs.
#   rate10: --size=64k --bs=4k --rw=read --rate_iops=10: 16 reads, 100 ms apart.
# fio 3.33 cannot write version 2: the v2 log is hand-made from the randrw log by dropping the timestamps.

def test_fio_v3_log_equals_the_jobs_own_numbers():
    trace = load_trace(DATA / "fio-3.33-randrw.iolog")
    assert trace.format == "fio" and trace.resolution == 1e-6
    assert [f.name for f in trace.files] == ["/data/fx.0.0", "/data/fx.0.1"]
    assert (trace.bytes(READ), trace.elements(READ)) == (49152, 12)
    assert (trace.bytes(WRITE), trace.elements(WRITE)) == (81920, 20)
    assert trace.elements(OPEN) == 2 and trace.elements(CLOSE) == 2
    assert len(trace.streams) == 1 and trace.streams[0].name == "fio-3.33-randrw.iolog"
    assert all(f.size == 65536 and not f.size_known for f in trace.files)
    assert any("2 sync" in n for n in trace.notes)


def test_fio_v3_times_are_microseconds():
    trace = load_trace(DATA / "fio-3.33-rate10.iolog")
    reads = trace.streams[0].ops[trace.streams[0].ops["kind"] == READ]
    assert len(reads) == 16 and trace.bytes(READ) == 65536
    gaps = np.diff(reads["t"])
    assert np.all((gaps > 0.09) & (gaps < 0.11))  # rate_iops=10, as fio itself paced them
    assert trace.duration() == pytest.approx((1501830 - 96) * 1e-6)  # from the open to the close


def test_fio_v2_log_is_untimed_and_equal_in_bytes():
    trace = load_trace(DATA / "fio-v2-handmade-randrw.iolog")
    ref = load_trace(DATA / "fio-3.33-randrw.iolog")
    assert trace.resolution is None and not trace.timed and trace.duration() == 0.0
    assert trace.counts() == ref.counts()
    assert np.array_equal(trace.streams[0].ops[["kind", "file", "offset", "length"]],
                          ref.streams[0].ops[["kind", "file", "offset", "length"]])  # fio's issue order kept
    assert any("carries no times" in n for n in trace.notes)


def test_fio_v2_wait_lines_give_times(tmp_path):
    text = ("fio version 2 iolog\n/d/f add\n/d/f open\n/d/f read 0 4096\n/d/f wait 250000 0\n"
            "/d/f write 4096 4096\n/d/f wait 50 0\n/d/f close\n")
    trace = load_trace(_write(tmp_path, "v2.iolog", text))
    assert list(trace.streams[0].ops["t"]) == [0.0, 0.0, 0.25, 0.25 + 50e-6]
    assert trace.resolution == 1e-6


@pytest.mark.parametrize(("text", "message"), [
    ("fio version 3 iolog\nx /d/f add\n", "line 2: timestamp 'x' is not a whole number"),
    ("fio version 3 iolog\n1 /d/f frob 0 1\n", "line 2: action 'frob' is unknown"),
    ("fio version 3 iolog\n1 /d/f wait 10 0\n", "line 2: a wait line in a version 3 log"),
    ("fio version 2 iolog\n/d/f read 0\n", "line 2: 3 fields"),
])
def test_malformed_fio_log_is_one_line(tmp_path, text, message):
    with pytest.raises(InputError) as err:
        load_trace(_write(tmp_path, "bad.iolog", text))
    assert message in str(err.value) and "\n" not in str(err.value)


# -- bounds: no input takes the machine's memory or time, and every number fits the model -------------------
HEAD = "t,stream,op,file,offset,length\n"


def _one_line(err: pytest.ExceptionInfo, path: Path, message: str) -> None:
    text = str(err.value)
    assert text.startswith(f"trace {path}") and message in text and "\n" not in text, text


def test_a_device_or_pipe_is_refused_before_it_is_read(tmp_path):
    with pytest.raises(InputError) as err:  # read as before, /dev/zero grew python until the OOM killer came
        load_trace("/dev/zero")
    _one_line(err, Path("/dev/zero"), "is not a regular file (a device, pipe or socket); give the path")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(InputError) as err:  # opening it would wait for a writer forever
        load_trace(fifo, "csv")
    _one_line(err, fifo, "is not a regular file")
    with pytest.raises(InputError) as err:
        load_trace(tmp_path)
    _one_line(err, tmp_path, "is a directory; give the path of a trace file")
    with pytest.raises(InputError, match="^trace : is not a file name"):
        load_trace("")


@pytest.mark.parametrize("format", ["auto", "csv", "jsonl", "xrootd", "fio"])
def test_a_line_beyond_64_kib_is_refused_with_its_number(tmp_path, format):
    path = tmp_path / "long.csv.gz"
    with gzip.open(path, "wb") as f:  # a small gzip of one long line (the review's: 2 MB inflating to 2 GB)
        f.write(b"\n" + b"x" * (8 << 20))
    with pytest.raises(InputError) as err:
        load_trace(path, format)
    _one_line(err, path, "line 2: is longer than 64 KiB")
    exact = _write(tmp_path, "exact.csv", HEAD + "0,a,read,/f,0,10" + " " * (64 * 1024 - 17) + "\n")
    assert load_trace(exact).operations() == 1  # 64 KiB with its newline is still a line


def test_blank_lines_count_and_a_run_of_them_is_refused(tmp_path):
    path = tmp_path / "blank.csv.gz"
    with gzip.open(path, "wb") as f:  # the review's gzip of 2 GB of blank lines ran for minutes
        f.write(HEAD.encode() + b"\n" * 1_000_001 + b"0,a,read,/f,0,10\n")
    with pytest.raises(InputError) as err:
        load_trace(path, "csv")
    _one_line(err, path, "line 1000002: more than 1,000,000 blank lines in a row")
    blank = tmp_path / "blank.jsonl.gz"
    blank.write_bytes(gzip.compress(b"\n" * (2 << 20)))
    with pytest.raises(InputError) as err:  # detection reads a bounded head
        load_trace(blank)
    _one_line(err, blank, "has nothing but blank lines in its first 256 KiB")
    text = _write(tmp_path, "gaps.csv", HEAD + "\n\n\n1,a,read,/f,0,10\n\n2,a,oops,/f,0,10\n")
    with pytest.raises(InputError) as err:  # blank lines are counted in the line numbers
        load_trace(text)
    _one_line(err, text, "line 7: op 'oops' is unknown")


def test_a_gzip_that_inflates_beyond_200_times_is_refused(tmp_path):
    path = tmp_path / "bomb.csv.gz"
    with gzip.open(path, "wb", compresslevel=9) as f:
        f.write(HEAD.encode() + b"0,a,read,/f,0,10\n" * (1 << 20))  # 17 MiB of one row: ~1000 times
    with pytest.raises(InputError) as err:
        load_trace(path)
    _one_line(err, path, "decompresses to more than 200 times its compressed size")


@pytest.mark.parametrize(("text", "message"), [
    (HEAD + "0,a,read,/f,0,99999999999999999999999\n",
     "line 2: length beyond 2^63-1 (99999999999999999999999); give length in bytes below 2^63"),
    (HEAD + "0,a,read,/f,9223372036854775808,1\n", "line 2: offset beyond 2^63-1"),
    (HEAD + "0,a,read,/f,9223372036854775800,100\n",
     "line 2: offset 9223372036854775800 + length 100 is beyond 2^63-1"),
    ("t,stream,op,file,size\n0,a,open,/f,99999999999999999999\n", "line 2: size beyond 2^63-1"),
    (HEAD + "0,a,read,/f,0,1\n1e300,a,read,/f,0,1\n", "line 3: t 1e+300 is not a finite number of seconds"),
    (HEAD + "0,a,read,/f,0,1\n" + "9" * 400 + ",a,read,/f,0,1\n", "line 3: t "),
    (HEAD + "0,a,read,/f,0,1\n2e7,a,read,/f,0,1\n", "its operations span 2e+07 s, more than the 1e+07 s"),
    (HEAD + "0,a,read,/data/x\x00y,0,1\n", r"line 2: file '/data/x\x00y' holds the control character '\x00'"),
    (HEAD + "0,a,read,/data/x\x1b[2J,0,1\n", r"line 2: file '/data/x\x1b[2J' holds the control character"),
    (HEAD + "0,a\x00,read,/f,0,1\n", "line 2: stream 'a\\x00' holds the control character"),
    ("t,stream,op,file,offset,length,request\n0,a,readv,/d/a,0,1,r\n0,a,readv,/d/b,5,1,r\n",
     "line 3: readv request r goes on to another file ('/d/b'); a vector read is on one file"),
    (HEAD + '0,a,read,"/f\n' + "x" * 60000 + "\n" + "x" * 60000 + "\n" + "x" * 60000 + "\n",
     "is not CSV (field larger than field limit"),
])
def test_numbers_names_and_requests_beyond_the_model_are_one_line(tmp_path, text, message):
    path = _write(tmp_path, "bad.csv", text)
    with pytest.raises(InputError) as err:
        load_trace(path)
    _one_line(err, path, message)


@pytest.mark.parametrize(("line", "message"), [
    ('{"t": 0, "stream": "a", "op": "read", "file": "/f", "offset": 0, "length": 1' + "0" * 400 + "}",
     "line 1: length beyond 2^63-1 (100000000000000000000000000000...)"),
    ('{"t": 0, "stream": "a", "op": "read", "file": "/f", "offset": ' + "9" * 5000 + ', "length": 1}',
     "line 1: is not JSON storeval reads (Exceeds the limit"),
    ('{"t": 0, "stream": "a", "op": "read", "file": ' + "[" * 30000 + "]" * 30000 + "}",
     "line 1: is JSON nested too deep; give one flat JSON object per line"),
    ('{"t": 0, "stream": {"a": 1}, "op": "read", "file": "/f", "offset": 0, "length": 1}',
     'line 1: stream {"a": 1} is not a name; give stream as a string (or a number)'),
    ('{"t": 0, "stream": "a", "op": "read", "file": ["/f"], "offset": 0, "length": 1}',
     'line 1: file ["/f"] is not a name; give file as a string'),
    ('{"t": 0, "stream": "a", "op": "read", "file": 7, "offset": 0, "length": 1}', "line 1: file 7 is not a name"),
    ('{"t": 0, "stream": "a", "op": "read", "file": "/x\\u0000y", "offset": 0, "length": 1}',
     "line 1: file '/x\\x00y' holds the control character '\\x00'"),
    ('{"t": 1e400, "stream": "a", "op": "read", "file": "/f", "offset": 0, "length": 1}',
     "line 1: t inf is not a finite number"),
    ('{"t": 1' + "0" * 400 + ', "stream": "a", "op": "read", "file": "/f", "offset": 0, "length": 1}',
     "line 1: t 1000"),
    ('{"t": 0, "stream": "a", "op": "readv", "file": "/f", "ranges": [[9223372036854775800, 100]]}',
     "line 1: offset 9223372036854775800 + length 100 is beyond 2^63-1"),
])
def test_jsonl_numbers_nesting_and_types_beyond_the_model_are_one_line(tmp_path, line, message):
    path = _write(tmp_path, "bad.jsonl", line + "\n")
    with pytest.raises(InputError) as err:
        load_trace(path, "jsonl")
    _one_line(err, path, message)


def test_a_stream_may_be_a_number_in_jsonl(tmp_path):
    path = _write(tmp_path, "n.jsonl", '{"t": 0, "stream": 3, "op": "read", "file": "/f", "offset": 0, "length": 1}\n')
    assert [s.name for s in load_trace(path).streams] == ["3"]


XR = "261126 09:00:20 1525 root.2789:22@10.14.226.105 Xrootd_Protocol: 0100 "


@pytest.mark.parametrize(("body", "message"), [
    ("0 fh=0 read 99999999999999999999999@0", "line 2: length beyond 2^63-1 (99999999999999999999999)"),
    ("0 fh=0 read 100@9223372036854775800", "line 2: offset 9223372036854775800 + length 100 is beyond 2^63-1"),
    ("open rt /storeval/f?oss.asize=99999999999999999999", "line 2: oss.asize beyond 2^63-1"),
    ("0 pgread 10@0 fn=/x\x01y", "line 2: file '/x\\x01y' holds the control character"),
])
def test_xrootd_numbers_and_names_beyond_the_model_are_one_line(tmp_path, body, message):
    path = _write(tmp_path, "bad.log", XR + "open rt /storeval/f\n" + XR + body + "\n")
    with pytest.raises(InputError) as err:
        load_trace(path)
    _one_line(err, path, message)


@pytest.mark.parametrize(("text", "message"), [
    ("fio version 3 iolog\n" + "9" * 30 + " /d/f open\n", "line 2: timestamp '999999999999999999999999999999' is not"),
    ("fio version 3 iolog\n1 /d/f read 0 99999999999999999999999\n", "line 2: length beyond 2^63-1"),
    ("fio version 3 iolog\n1 /d/f read 9223372036854775800 100\n", "line 2: offset 9223372036854775800 + length"),
    ("fio version 2 iolog\n/d/f wait -5 0\n", "line 2: wait -5 is not between 0 and 1e21 µs"),
    ("fio version 3 iolog\n1 /d/\x00f open\n", "line 2: file '/d/\\x00f' holds the control character"),
])
def test_fio_numbers_and_names_beyond_the_model_are_one_line(tmp_path, text, message):
    path = _write(tmp_path, "bad.iolog", text)
    with pytest.raises(InputError) as err:
        load_trace(path)
    _one_line(err, path, message)


def test_a_csv_with_a_utf8_bom_is_read(tmp_path):
    """Excel writes CSV with a byte-order mark: before, "in no format storeval knows"."""
    path = tmp_path / "excel.csv"
    path.write_bytes(b"\xef\xbb\xbf" + CSV.encode())
    assert detect(str(path)) == "csv"
    assert load_trace(path).counts() == load_trace(_write(tmp_path, "plain.csv", CSV)).counts()
    gz = tmp_path / "excel.csv.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert load_trace(gz).operations() == 10


def test_bad_traces_through_the_cli_are_one_line_exit_2_and_write_nothing(tmp_path):
    from .helpers import storeval
    (tmp_path / "tgt").mkdir()
    huge = _write(tmp_path, "huge.csv", HEAD + "0,a,read,/f,0,99999999999999999999999\n")
    for trace, message in (("/dev/zero", "trace /dev/zero: is not a regular file"),
                           (str(huge), f"trace {huge} line 2: length beyond 2^63-1")):
        r = storeval("run", "--target", f"file://{tmp_path / 'tgt'}", "--workload", "replay", "--set",
                     f"trace={trace}", "--results", str(tmp_path / "res"), cwd=tmp_path)
        assert r.rc == 2 and len(r.err_lines) == 1 and message in r.err, r.err
        assert "internal error" not in r.err and "Traceback" not in r.err
        assert not (tmp_path / "res").exists() and not list((tmp_path / "tgt").iterdir())
