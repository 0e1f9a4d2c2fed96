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
