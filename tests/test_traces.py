"""Trace parsers (issue 18): every format read into the one model, with exact bytes, element and request counts,
files and streams; malformed input is one line naming the file, the line and the fix."""

from __future__ import annotations

import gzip
import json
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
