"""``record: true`` (issue 18): any workload writes its per-operation trace into the results, bounded, and the
``storeval`` trace format reads it back with exactly the phase's bytes and operations."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest

from storeval.errors import InputError
from storeval.traces import CLOSE, OPEN, READ, READV, WRITE, detect, load_trace
from storeval.traces.recorded import render

from .helpers import load_json, storeval

WRITTEN = re.compile(r"cell (\d+) (\S+): trace of (\d+) operations written to (\S+)(?: \((\d+) beyond the bound "
                     r"not recorded\))?")


def _run(tmp_path: Path, target: Path, *args: str) -> tuple[dict, dict[str, tuple[int, Path, int]]]:
    out = tmp_path / "out.json"
    r = storeval("run", "--target", f"file://{target}", *args, "--json", str(out), cwd=tmp_path, timeout=600)
    assert r.rc == 0, r.err
    said = {m[2]: (int(m[3]), Path(m[4]), int(m[5] or 0)) for m in WRITTEN.finditer(r.out + r.err)}
    return load_json(out), said


def _phases(doc: dict) -> dict[str, dict]:
    (cell,) = doc["cells"]
    assert cell["status"] == "ok", cell["error"]
    return {p["phase"]: p for p in cell["phases"]}


def test_bandwidth_write_and_read_recorded_exactly(tmp_path, target):
    doc, said = _run(tmp_path, target, "--workload", "bandwidth", "--clients", "2", "--set", "record=true",
                     "--set", "file_size=2MiB", "--set", "transfer_size=64KiB")
    phases = _phases(doc)
    assert set(said) == {"write", "read"}
    results = tmp_path / "storeval-results"
    for phase, kind in (("write", WRITE), ("read", READ)):
        ops, path, dropped = said[phase]
        assert path.parent == results / "traces" / doc["run_id"] and path.name == f"cell-0000-{phase}.jsonl.gz"
        assert detect(str(path)) == "storeval" and dropped == 0
        trace = load_trace(path)
        assert trace.format == "storeval" and trace.resolution == 1e-9
        assert trace.header["phase"] == phase and trace.header["clients"] == 2 and trace.header["kind"] == "bandwidth"
        assert trace.bytes(kind) == phases[phase]["bytes"] == 2 * 2 * 2**20
        assert trace.elements(kind) == phases[phase]["ops"] == 2 * 32
        assert trace.elements(OPEN) == trace.elements(CLOSE) == 2 and trace.operations() == ops == 68
        assert sorted(s.name for s in trace.streams) == ["c0", "c1"]  # one stream per client
        assert len(trace.files) == 2 and all(f.size == 2 * 2**20 for f in trace.files)
        for s in trace.streams:  # in each stream: open, 32 transfers in file order, close
            assert list(s.ops["kind"][[0, -1]]) == [OPEN, CLOSE]
            assert list(s.ops["offset"][1:-1]) == [i * 65536 for i in range(32)]


def test_the_bound_truncates_and_says_how_many_were_dropped(tmp_path, target):
    doc, said = _run(tmp_path, target, "--workload", "bandwidth", "--clients", "2", "--set", "record=5",
                     "--set", "file_size=1MiB", "--set", "transfer_size=64KiB", "--set", "phases=[write]")
    ops, path, dropped = said["write"]
    assert ops == 2 * 5 and dropped == 2 * (18 - 5)  # each client: open, 16 writes, close — 5 kept
    trace = load_trace(path)
    assert trace.operations() == 10 and trace.header["dropped"] == {"0": 13, "1": 13} and trace.header["bound"] == 5
    assert trace.bytes(WRITE) == 2 * 4 * 65536
    assert any("stopped at its bound" in n for n in trace.notes)


def test_skim_recorded_with_its_vector_reads(tmp_path, target):
    doc, said = _run(tmp_path, target, "--workload", "skim", "--clients", "2", "--set", "record=true",
                     "--set", "files=2", "--set", "file_size=4MiB", "--set", "cluster_size=512KiB")
    ph = _phases(doc)["skim"]
    trace = load_trace(said["skim"][1])
    assert trace.bytes(READ) + trace.bytes(READV) == ph["bytes"] == ph["bytes_requested"]
    counters = ph["counters"]
    assert trace.requests(READV) == counters["readv-numOperations"] > 0
    assert trace.elements(READV) == counters["readv-numChunks"]
    assert trace.elements(READ) == counters["read-numOperations"] + counters["open-numOperations"]
    assert trace.elements(READ) + trace.requests(READV) == ph["ops"]
    assert trace.elements(OPEN) == trace.elements(CLOSE)


def test_one_client_with_two_files_is_one_stream_in_its_order(tmp_path, target):
    """A replay runs each stream concurrently: the stream is the client (its handles inside it in time order),
    not the handle, or a one-client skim of two files would replay as two clients at once."""
    doc, said = _run(tmp_path, target, "--workload", "skim", "--clients", "1", "--set", "record=true",
                     "--set", "files=2", "--set", "file_size=2MiB", "--set", "cluster_size=512KiB")
    trace = load_trace(said["skim"][1])
    (stream,) = trace.streams
    assert stream.name == "c0" and len(trace.files) == 2
    ops = stream.ops
    assert np.all(np.diff(ops["t"]) >= 0) and set(ops["file"]) == {0, 1}
    opens = np.flatnonzero(ops["kind"] == OPEN)
    assert len(opens) == 2 and ops["file"][opens[0]] != ops["file"][opens[1]]


def test_render_gives_a_stream_per_thread_only_where_the_recorder_says_which(tmp_path):
    rows = np.zeros(4, [("t_ns", "i8"), ("kind", "u1"), ("file", "i4"), ("offset", "i8"), ("length", "i8"),
                        ("request", "i8"), ("stream", "i4"), ("thread", "i4")])
    rows["kind"], rows["t_ns"], rows["length"] = READ, [0, 1, 2, 3], 10
    rows["stream"], rows["thread"] = [0, 1, 0, 1], [0, 1, 0, 1]
    for threads, names in ((True, ["c3.t0", "c3.t1"]), (False, ["c3"])):
        part = rows if threads else rows[[n for n in rows.dtype.names if n != "thread"]]
        path = tmp_path / f"t{threads}.jsonl.gz"
        path.write_bytes(render({"clients": 1}, [(3, 0, part, ["f"])]))
        trace = load_trace(path)
        assert sorted(s.name for s in trace.streams) == names and trace.bytes(READ) == 40


def test_record_must_be_true_false_or_a_bound(tmp_path, target):
    r = storeval("run", "--target", f"file://{target}", "--workload", "bandwidth", "--set", "record=-1", cwd=tmp_path)
    assert r.rc == 2 and "record: give true (or false), or the most operations to keep" in r.err
    assert "Traceback" not in r.err and len(r.err_lines) == 1


def test_a_damaged_storeval_trace_is_one_line(tmp_path):
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(gzip.compress(json.dumps({"storeval_trace": 9}).encode() + b"\n"))
    with pytest.raises(InputError, match="storeval_trace 9 is not a version this storeval reads"):
        load_trace(path)
    path.write_bytes(gzip.compress(b'{"storeval_trace": 1}\n')[:-6])
    with pytest.raises(InputError, match="is damaged"):
        load_trace(path)


def test_metadata_whole_file_calls_are_recorded_and_empty_phases_write_nothing(tmp_path, target):
    out = tmp_path / "out.json"
    r = storeval("run", "--target", f"file://{target}", "--workload", "metadata", "--clients", "2",
                 "--set", "record=true", "--set", "items=30", "--set", "phases=[file-create,file-read,file-remove]",
                 "--json", str(out), cwd=tmp_path, timeout=600)
    assert r.rc == 0, r.err
    said = {m[2]: (int(m[3]), Path(m[4])) for m in WRITTEN.finditer(r.out + r.err)}
    assert set(said) == {"file-create", "file-read"}
    assert "cell 0 file-remove: no data operations to record" in r.out + r.err
    phases = _phases(load_json(out))
    created, read = load_trace(said["file-create"][1]), load_trace(said["file-read"][1])
    n = phases["file-create"]["ops"]
    assert n == 60 and phases["file-read"]["ops"] == 60
    assert created.elements(OPEN) == created.elements(WRITE) == created.elements(CLOSE) == n
    assert sorted(s.name for s in created.streams) == ["c0", "c1"]
    assert read.elements(READ) == n and read.bytes(READ) == phases["file-read"]["bytes"]
    assert not list((tmp_path / "storeval-results" / "traces").rglob("*file-remove*"))
def test_iodepth_threads_are_streams_of_their_own(tmp_path, target):
    """iodepth threads share one handle: the recorder tells them apart by thread, so a replay runs them at once."""
    doc, said = _run(tmp_path, target, "--workload", "bandwidth", "--clients", "1", "--set", "record=true",
                     "--set", "iodepth=2", "--set", "file_size=1MiB", "--set", "transfer_size=64KiB",
                     "--set", "phases=[read]")
    trace = load_trace(said["read"][1])
    # the thread that opens and closes, then the iodepth threads that read (they share the work as they go: on a
    # busy machine one of them may take it all)
    streams = {s.name: int(np.count_nonzero(s.ops["kind"] == READ)) for s in trace.streams}
    assert streams["c0.t0"] == 0 and set(streams) - {"c0.t0"} in ({"c0.t1"}, {"c0.t1", "c0.t2"}), streams
    assert sum(streams.values()) == 16

