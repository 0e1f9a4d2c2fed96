"""The measured-operation kernel: the Python loop and the native engines do the same work on the same inputs.

Every case runs the bandwidth or metadata workload in this process once per engine and compares what they
did exactly — bytes, operations, the bytes left in the files (stamps), verify results and error messages —
never how fast.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storeval.drivers import make_driver
from storeval.drivers.base import NativeIO
from storeval.core.oplog import PhaseRecorder
from storeval.core.stop import STOP
from storeval.errors import StorevalError
from storeval.workloads import kernel
from storeval.workloads.bandwidth import Bandwidth, BandwidthParams
from storeval.workloads.base import ClientContext
from storeval.workloads.metadata import Metadata, MetadataParams

from .helpers import io_uring_expected

native = pytest.mark.skipif(kernel._native is None, reason="storeval._native not built (no Rust toolchain)")
KiB = 1024


URING = "io_uring" if io_uring_expected() else "threads"


def ran(engine: str, depth: int) -> str:
    """The engine that must run the timed loop when ``engine`` is asked for at ``depth``."""
    return {"python": "python", "psync": "psync" if depth == 1 else "threads", "io_uring": URING}[engine]


class Comm:
    """One client driven in this process: barriers and reductions have nobody else to wait for."""

    rank, size = 0, 1

    def barrier(self) -> None:
        pass

    def allreduce_max(self, value: int) -> int:
        return value

    def allreduce_min(self, value: int) -> int:
        return value


def _client(url: str, cell: str = "", rank: int = 0, n: int = 1) -> ClientContext:
    comm = Comm()
    comm.rank, comm.size = rank, n
    return ClientContext(rank=rank, nclients=n, driver=make_driver(url), cell_dir=cell, seed=0, comm=comm,
                         keep_cache=True)


def _phase(wl, c: ClientContext, phase: str):
    rec = PhaseRecorder(c.rank, phase)
    wl.before_phase(c, phase)
    rec.begin()
    try:
        wl.run_phase(c, phase, rec)
    finally:
        rec.finish()
    return rec


def _bandwidth(directory: Path, engine: str, clients: int = 1, **params) -> tuple[dict, dict]:
    """Every phase of a bandwidth run with ``engine``: {(rank, phase): (bytes, ops, io_engine)} and the files."""
    directory.mkdir()
    p = BandwidthParams(engine=engine, **params)
    url = f"file://{directory}"
    pairs = []
    for rank in range(clients):
        wl, c = Bandwidth(p), _client(url, rank=rank, n=clients)
        wl.prepare(c)
        pairs.append((wl, c))
    seen = {}
    for phase in wl.phases():
        for wl, c in pairs:
            rec = _phase(wl, c, phase).record(0)
            seen[c.rank, phase] = (rec.bytes, rec.ops, rec.extra["io_engine"],
                                   rec.extra.get("stonewall", {}).get("ops"))
    files = {f.name: f.read_bytes() for f in directory.iterdir()}
    return seen, files


def _strip_engine(seen: dict) -> dict:
    return {k: (b, o, s) for k, (b, o, _, s) in seen.items()}


CASES = {
    "sequential": dict(file_size=256 * KiB, transfer_size=4 * KiB, phases=["write", "rewrite", "read", "reread"]),
    "random": dict(file_size=256 * KiB, transfer_size=4 * KiB, phases=["write", "randread", "randwrite", "read"],
                   random_seed=7),
    "verify": dict(file_size=512 * KiB, transfer_size=64 * KiB, phases=["write", "read", "randread"], verify=True),
    "odd-size": dict(file_size=3 * 1000, transfer_size=1000, phases=["write", "read"], verify=True),
    "shared-file": dict(file_size=128 * KiB, transfer_size=8 * KiB, layout="shared-file", reorder=True,
                        verify=True, phases=["write", "read", "randread"]),
}


@native
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("engine,depth", [("psync", 1), ("psync", 3), ("io_uring", 4)])
def test_native_does_what_python_does(tmp_path, case, engine, depth):
    """Same bytes, operations and file contents (every sector's stamp) as the Python loop; verify passes."""
    params = dict(CASES[case], iodepth=depth)
    clients = 2 if case == "shared-file" else 1
    ref, ref_files = _bandwidth(tmp_path / "python", "python", clients, **params)
    got, got_files = _bandwidth(tmp_path / engine, engine, clients, **params)
    assert _strip_engine(got) == _strip_engine(ref)
    assert got_files == ref_files  # byte for byte: the stamps are the Python payload's
    assert {e for *_, e, _ in ref.values()} == {"python"}
    assert {e for *_, e, _ in got.values()} == {ran(engine, depth)}


@native
def test_auto_picks_native_for_local_files_and_python_elsewhere(tmp_path):
    seen, _ = _bandwidth(tmp_path / "a", "auto", file_size=64 * KiB, transfer_size=4 * KiB, phases=["write"])
    assert seen[0, "write"][2] == "psync"
    seen, _ = _bandwidth(tmp_path / "b", "auto", file_size=64 * KiB, transfer_size=4 * KiB, phases=["write"],
                         iodepth=8)
    assert seen[0, "write"][2] == URING
    assert kernel.choose_engine("auto", None, 4) == ("python", None)
    engine, why = kernel.choose_engine("io_uring", None, 4)
    assert engine == "python" and "not available" in why
    assert kernel.choose_engine("auto", NativeIO("null"), 4) == ("null", None)
    assert kernel.choose_engine("python", NativeIO("syscall", 3), 1) == ("python", None)


@native
@pytest.mark.parametrize("engine,depth", [("python", 1), ("psync", 1), ("python", 2), ("psync", 2), ("io_uring", 2)])
def test_verify_mismatch_is_caught_by_every_engine(tmp_path, engine, depth):
    """One flipped byte: the same error, naming the same byte, counted as a VerifyError."""
    d = tmp_path / "t"
    d.mkdir()
    ts = 8 * KiB
    p = BandwidthParams(file_size=16 * ts, transfer_size=ts, phases=["write", "read"], verify=True, engine=engine,
                        iodepth=depth)
    wl, c = Bandwidth(p), _client(f"file://{d}")
    wl.prepare(c)
    assert _phase(wl, c, "write").record(0).extra["io_engine"] == ran(engine, depth)
    bad = 5 * ts + 700  # inside a sector's data, past its tag
    for where in (bad, 9 * ts + 512 + 3):  # then inside a tag
        data = bytearray((d / "bw.0").read_bytes())
        data[where] ^= 0xFF
        (d / "bw.0").write_bytes(bytes(data))
        rec = PhaseRecorder(0, "read")
        rec.begin()
        try:
            with pytest.raises(StorevalError, match=f"byte {where} differs from what was written"):
                wl.run_phase(c, "read", rec)
        finally:
            STOP.clear()  # a failing thread stops its siblings (the engine ends the client after it)
        assert rec.errors == {"VerifyError": 1} and rec.extra["io_engine"] == ran(engine, depth)
        data[where] ^= 0xFF
        (d / "bw.0").write_bytes(bytes(data))


@native
@pytest.mark.parametrize("engine", ["python", "psync", "io_uring"])
def test_stonewall_deadline_then_wear_out(tmp_path, engine):
    """A deadline already past when the first operation ends: each stream stops after what it had in flight,
    and the wear-out finishes to the agreed count; later phases read what was written."""
    depth = 1 if engine != "io_uring" else 4
    seen, files = _bandwidth(tmp_path / engine, engine, file_size=64 * KiB, transfer_size=4 * KiB,
                             phases=["write", "read"], deadline=1e-9, iodepth=depth, verify=True)
    written, ops, used, stonewalled = seen[0, "write"]
    assert stonewalled == ops == depth and written == depth * 4 * KiB
    assert used == seen[0, "read"][2] == ran(engine, depth)
    assert seen[0, "read"][:2] == (written, ops)
    assert len(files["bw.0"]) == written


def test_python_kernel_reports_the_failing_offset(tmp_path):
    """A failing transfer is raised with its offset and kind; what ran before it is folded."""
    from storeval.core.oplog import OpLog
    from storeval.workloads.toolkit import IOFailure, run_ops

    log = OpLog(0, 4)

    def io(bufs, off):
        if off == 5 * 10:
            raise OSError(28, "No space left on device")
        return 10

    with pytest.raises(IOFailure, match="at offset 50") as e:
        run_ops(io, [bytearray(10)], range(0, 100, 10), log, 10)
    assert e.value.kind == "ENOSPC" and log.ops == 5 and log.bytes == 50
    with pytest.raises(IOFailure, match="short transfer: 3 of 10") as e:
        run_ops(lambda bufs, off: 3, [bytearray(10)], range(0, 100, 10), OpLog(0, 4), 10)
    assert e.value.kind == "short-transfer"


@native
def test_native_errors_are_the_python_errors(tmp_path):
    """A read-only file written to: the same OSError kind and offset from both engines."""
    d = tmp_path / "t"
    d.mkdir()
    f = d / "x"
    f.write_bytes(bytes(64 * KiB))
    from storeval.core.oplog import OpLog
    from storeval.workloads.toolkit import IOFailure, run_ops
    from storeval.workloads.payload import aligned_buffer

    fd = os.open(f, os.O_RDONLY)
    try:
        buf = aligned_buffer(4 * KiB)
        msgs = []
        for job in (None, kernel.DataJob("psync", fd, True, [buf], 4 * KiB, range(0, 64 * KiB, 4 * KiB))):
            with pytest.raises(IOFailure) as e:
                run_ops(lambda bufs, off: os.pwritev(fd, bufs, off), [buf], range(0, 64 * KiB, 4 * KiB),
                        OpLog(0, 16), 4 * KiB, native=job)
            msgs.append((str(e.value), e.value.kind, e.value.offset))
        assert msgs[0] == msgs[1] and msgs[0][1] == "EBADF"
        job = kernel.DataJob("psync", fd, False, [buf], 4 * KiB, range(60 * KiB, 128 * KiB, 4 * KiB))
        with pytest.raises(IOFailure, match="short transfer: 0 of 4096") as e:
            run_ops(None, [buf], range(60 * KiB, 128 * KiB, 4 * KiB), OpLog(0, 16), 4 * KiB, native=job)
        assert e.value.offset == 64 * KiB and e.value.kind == "short-transfer"
    finally:
        os.close(fd)


@native
def test_null_engine_counts_like_the_null_driver():
    """The native null loop counts what the Python loop does through the null driver, and times every
    operation: one latency per operation, each within the phase, the percentiles in order inside [min, max]."""
    seen = {}
    for engine in ("python", "auto"):
        p = BandwidthParams(file_size=1 << 20, transfer_size=4 * KiB, phases=["write", "randread"], engine=engine,
                            iodepth=2)
        wl, c = Bandwidth(p), _client("null://")
        wl.prepare(c)
        for phase in p.phases:
            rec = _phase(wl, c, phase).record(0)
            seen[engine, phase] = (rec.bytes, rec.ops, rec.extra["io_engine"])
            h, span = rec.hist, rec.end_ns - rec.start_ns
            assert h.total == rec.ops == 256, (engine, phase)  # every operation timed, once
            assert 0 <= h.min <= h.max <= span  # no operation outlasts the phase it ran in
            # two streams: the operations' times add up to at most twice the phase, and their mean lies inside
            assert h.sum <= 2 * span and h.min <= h.mean <= h.max
            p50, p90, p99, p100 = h.percentiles([50, 90, 99, 100])
            assert h.min <= p50 <= p90 <= p99 <= p100 <= h.max and p100 >= 0.996 * h.max  # buckets: ≤ 0.4 % off
    assert seen["python", "write"][:2] == seen["auto", "write"][:2] == (1 << 20, 256)
    assert seen["python", "randread"][:2] == seen["auto", "randread"][:2]
    assert {seen["auto", ph][2] for ph in p.phases} == {"null"}
    assert {seen["python", ph][2] for ph in p.phases} == {"python"}


def _metadata(directory: Path, engine: str, url: str | None = None, **params) -> dict:
    directory.mkdir()
    p = MetadataParams(engine=engine, **params)
    wl, c = Metadata(p), _client(url or f"file://{directory}")
    wl.prepare(c)
    seen = {}
    for phase in wl.phases():
        rec = _phase(wl, c, phase).record(0)
        seen[phase] = (rec.bytes, rec.ops, rec.extra["io_engine"], rec.extra.get("entries_listed"))
    wl.cleanup(c)
    assert url or list(directory.iterdir()) == []
    return seen


@native
@pytest.mark.parametrize("params", [dict(items=40, depth=1, branching=3, file_size=3000),
                                    dict(items=25, file_size=0, random_order=True, stat_stride=0),
                                    dict(items_per_dir=4, depth=2, branching=2, leaf_only=True, file_size=512,
                                         phases=["tree-create", "dir-create", "dir-list", "dir-stat", "file-create",
                                                 "file-read", "file-remove", "dir-remove", "tree-remove"])])
def test_metadata_native_does_what_python_does(tmp_path, params):
    ref = _metadata(tmp_path / "python", "python", **params)
    got = _metadata(tmp_path / "psync", "psync", **params)
    assert {k: v[:2] + v[3:] for k, v in got.items()} == {k: v[:2] + v[3:] for k, v in ref.items()}
    assert {v[2] for k, v in got.items() if k != "dir-list"} == {"psync"}
    assert {v[2] for v in ref.values()} == {"python"}
    null = _metadata(tmp_path / "null", "auto", url="null://", **params)
    assert {k: v[:2] for k, v in null.items()} == {k: v[:2] for k, v in ref.items()}


@native
def test_metadata_stonewall_and_errors_match(tmp_path):
    """The create stonewall stops at the same count; a failing remove gives the same message and kind."""
    outcomes = []
    for engine in ("python", "psync"):
        d = tmp_path / engine
        d.mkdir()
        p = MetadataParams(items=30, file_size=100, deadline=1e-9, engine=engine,
                           phases=["tree-create", "file-create", "file-read", "file-remove", "tree-remove"])
        wl, c = Metadata(p), _client(f"file://{d}")
        wl.prepare(c)
        _phase(wl, c, "tree-create")
        rec = _phase(wl, c, "file-create").record(0)
        assert rec.ops == rec.extra["stonewall"]["ops"] == 1 and rec.extra["io_engine"] == engine
        assert _phase(wl, c, "file-read").record(0).ops == 1  # later phases use the stonewalled count
        victim = next(d.rglob("f.*"))
        victim.write_bytes(b"x" * 10)  # too short now
        rec = PhaseRecorder(0, "file-read")
        rec.begin()
        with pytest.raises(StorevalError) as short:
            wl.run_phase(c, "file-read", rec)
        victim.unlink()
        rec2 = PhaseRecorder(0, "file-remove")
        rec2.begin()
        with pytest.raises(StorevalError) as missing:
            wl.run_phase(c, "file-remove", rec2)
        outcomes.append((str(short.value).replace(str(d), "D"), rec.errors,
                         str(missing.value).replace(str(d), "D"), rec2.errors))
        c.state["has"]["file"] = False  # the only file is gone
        _phase(wl, c, "tree-remove")
    assert outcomes[0] == outcomes[1]
    assert "short read: 10 of 100 bytes" in outcomes[0][0] and outcomes[0][3] == {"ENOENT": 1}


@native
def test_stop_is_honoured_between_native_batches(tmp_path):
    """STOP set while a native loop runs: the client stops at the next fold, with what it did counted."""
    from storeval.core.oplog import OpLog
    from storeval.core.stop import ClientStopped

    log = OpLog(0, 16)
    job = kernel.DataJob("null", -1, False, [bytearray(8)], 8, range(0, 8 * 10_000, 8))
    STOP.set()
    try:
        with pytest.raises(ClientStopped):
            kernel.measure(log, 8, range(0, 8 * 10_000, 8), native=job, fail=lambda item, exc: exc)
    finally:
        STOP.clear()
    assert log.ops == 16


def test_without_the_native_module_everything_runs_python(monkeypatch, tmp_path):
    """An install without Rust: auto runs the Python kernel silently, a forced engine says why it did not."""
    monkeypatch.setattr(kernel, "_native", None)
    assert kernel.choose_engine("auto", NativeIO("syscall", 3), 8) == ("python", None)
    engine, why = kernel.choose_engine("psync", NativeIO("syscall", 3), 1)
    assert engine == "python" and "without its native module" in why
    seen, _ = _bandwidth(tmp_path / "t", "auto", file_size=64 * KiB, transfer_size=4 * KiB, phases=["write", "read"],
                         iodepth=2)
    assert seen[0, "read"] == (64 * KiB, 16, "python", None)


@native
def test_the_output_says_which_engine_ran_the_timed_loop(tmp_path):
    """The phase JSON carries the engine each phase ran on, and the table's caption says it in words (one run
    sweeping the engine: a cell per engine, both named in the caption)."""
    import json
    import subprocess
    import sys

    (tmp_path / "t").mkdir()
    r = subprocess.run([sys.executable, "-m", "storeval", "run", "--target", f"file://{tmp_path / 't'}",
                        "--workload", "bandwidth", "--clients", "1", "--repetitions", "1", "--set",
                        "file_size=1MiB", "--set", "transfer_size=64KiB", "--set", "engine=python,auto",
                        "--json", "out.json", "--no-html"], cwd=tmp_path, capture_output=True, text=True,
                       env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "out.json").read_text())
    engines = {c["factors"]["engine"]: [p["io_engines"] for p in c["phases"]] for c in doc["cells"]}
    assert engines == {"python": [["python"], ["python"]], "auto": [["psync"], ["psync"]]}
    text = " ".join(r.stdout.split())
    target = str(tmp_path / "t")
    assert (f"timed loop run by: {target} — the Python loop (one operation at a time per thread); "
            f"{target} — native pread/pwrite, one operation at a time.") in text
