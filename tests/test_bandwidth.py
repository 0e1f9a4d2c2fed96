"""Bandwidth workload on real files: exact accounting, layouts, verification, cleanup."""

from __future__ import annotations

import os
import time
from pathlib import Path

import duckdb
import pytest

from storeval.drivers import make_driver
from storeval.core.oplog import PhaseRecorder
from storeval.errors import StorevalError
from storeval.workloads.bandwidth import Bandwidth, BandwidthParams
from storeval.workloads.base import ClientContext

from .helpers import InProcessComm, io_uring_expected, leftovers, load_json, storeval

MiB = 1 << 20


def run_json(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "out.json"
    r = storeval("run", *args, "--json", str(out), "--quiet", cwd=tmp_path)
    assert r.rc == 0, r.err
    return load_json(out)


def stored_times(tmp_path: Path) -> dict[tuple[int, str], list[tuple[int, int, int]]]:
    """(cell, phase) → each client's (rank, start_ns, end_ns) as the store holds them: the raw clock readings the
    figures are computed from."""
    out: dict[tuple[int, str], list[tuple[int, int, int]]] = {}
    with duckdb.connect(str(tmp_path / "storeval-results" / "storeval.duckdb"), read_only=True) as con:
        for cell, phase, rank, start, end in con.execute(
                "SELECT cell_id, phase, rank, start_ns, end_ns FROM records ORDER BY cell_id, phase, rank").fetchall():
            out.setdefault((cell, phase), []).append((rank, start, end))
    return out


def test_issue_check_bytes_bandwidth_percentiles_and_cleanup(tmp_path, target):
    t0 = time.perf_counter_ns()  # CLOCK_MONOTONIC, the clock of storeval's records too
    doc = run_json(tmp_path, "--target", f"file://{target}", "--workload", "bandwidth", "--clients", "1,2",
                   "--set", "file_size=32MiB", "--set", "transfer_size=1MiB")
    t1 = time.perf_counter_ns()
    times = stored_times(tmp_path)
    assert [c["clients"] for c in doc["cells"]] == [1, 2]
    for cell in doc["cells"]:
        assert cell["status"] == "ok"
        assert [p["phase"] for p in cell["phases"]] == ["write", "read"]
        for ph in cell["phases"]:
            n = cell["factors"]["clients"]
            assert ph["bytes"] == n * 32 * MiB
            assert ph["ops"] == n * 32
            assert ph["bandwidth_MiBps"] > 0 and ph["stonewall_MiBps"] > 0 and ph["ops_per_s"] > 0
            assert ph["io_engines"] == ["psync"]  # a local file at iodepth 1: native pread/pwrite
            lat = ph["latency_us"]
            assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
            assert [c["rank"] for c in ph["client_stats"]] == list(range(n))
            assert all(c["bytes"] == 32 * MiB and c["ops"] == 32 and c["MiBps"] > 0 and c["cpu_seconds"] >= 0
                       for c in ph["client_stats"])
            # the aggregate is IOR's: the bytes asked for (n × 32 MiB) over the span from the first client's start
            # to the last one's end, as the clients' clocks read them — readings that lie inside this test's
            # own bracket around the run
            clients = times[cell["cell"], ph["phase"]]
            first, last = min(t[1] for t in clients), max(t[2] for t in clients)
            assert t0 < first < last < t1
            assert ph["seconds"] == pytest.approx((last - first) / 1e9, rel=1e-9)
            assert ph["bandwidth_MiBps"] == pytest.approx(n * 32 / ((last - first) / 1e9), rel=1e-9)
            for c, (rank, start, end) in zip(ph["client_stats"], clients):
                assert c["rank"] == rank and c["MiBps"] == pytest.approx(32 / ((end - start) / 1e9), rel=1e-9)
    assert os.listdir(target) == []


def test_a_target_of_known_speed_measures_that_speed(tmp_path):
    """The null target paced to 16 MiB/s per client (sleeps: a busy host does not slow it, a fast one cannot
    beat it): 8 MiB take each client 0.5 s, so two clients move 32 MiB/s — never more; on a busy host the
    last wake-up and the barriers may add a little to the span, never a fifth of it."""
    study = tmp_path / "s.yaml"
    study.write_text("targets:\n  t: {url: 'null://t', rate: 16MiB/s}\n"
                     "workloads:\n  bw: {bandwidth: {file_size: 8MiB, transfer_size: 256KiB}}\n")
    out = tmp_path / "out.json"
    r = storeval("run", str(study), "--clients", "2", "--json", str(out), "--quiet", "--no-html", cwd=tmp_path)
    assert r.rc == 0, r.err
    for ph in load_json(out)["cells"][0]["phases"]:
        assert ph["bytes"] == 16 * MiB and ph["ops"] == 64
        assert 0.8 * 32 <= ph["bandwidth_MiBps"] <= 32 and 0.5 <= ph["seconds"] <= 0.625
        assert all(0.8 * 16 <= c["MiBps"] <= 16 for c in ph["client_stats"])


def test_every_phase_and_random_orders_touch_each_block_once(tmp_path, target):
    phases = "write,rewrite,read,reread,randread,randwrite"
    doc = run_json(tmp_path, "--target", str(target), "--workload", "bandwidth", "--clients", "2",
                   "--set", "file_size=4MiB", "--set", "transfer_size=64KiB", "--set", f"phases={phases}",
                   "--set", "verify=true", "--set", "iodepth=3")
    cell = doc["cells"][0]
    assert [p["phase"] for p in cell["phases"]] == phases.split(",")
    for ph in cell["phases"]:
        assert ph["status"] == "ok"
        assert ph["bytes"] == 2 * 4 * MiB and ph["ops"] == 2 * 64
        assert ph["io_engines"] == ["io_uring" if io_uring_expected() else "threads"]  # iodepth 3, native
    assert leftovers(target) == []


def test_shared_file_segments_verify_with_reorder(tmp_path, target):
    """Each client writes its own segment of one file; every client then reads rank+1's segment and checks it."""
    doc = run_json(tmp_path, "--target", str(target), "--workload", "bandwidth", "--clients", "3",
                   "--set", "file_size=2MiB", "--set", "transfer_size=128KiB", "--set", "layout=shared-file",
                   "--set", "reorder=true", "--set", "verify=true", "--set", "phases=write,read,randread")
    cell = doc["cells"][0]
    assert cell["status"] == "ok", cell["error"]
    assert all(ph["bytes"] == 3 * 2 * MiB for ph in cell["phases"])
    assert os.listdir(target) == []


def _client(driver, cell_dir, rank, n, params):
    return ClientContext(rank=rank, nclients=n, driver=driver, cell_dir=cell_dir, seed=0, comm=InProcessComm(rank, n))


def test_verify_reads_back_every_segment_and_catches_corruption(target):
    """Write a shared file with two clients in-process, check every segment, then corrupt one byte."""
    params = BandwidthParams(file_size=256 * 1024, transfer_size=4096, layout="shared-file", phases=["write", "read"],
                             verify=True)
    driver = make_driver(f"file://{target}")
    os.mkdir(target / "cell")
    clients = []
    for rank in range(2):
        wl = Bandwidth(params)
        c = _client(driver, "cell", rank, 2, params)
        wl.prepare(c)
        clients.append((wl, c))
    for phase in ("write", "read"):
        for wl, c in clients:
            rec = PhaseRecorder(c.rank, phase)
            rec.begin()
            wl.run_phase(c, phase, rec)
            rec.finish()
            assert rec.record(0).bytes == params.file_size
    shared = target / "cell" / "bw.shared"
    assert shared.stat().st_size == 2 * params.file_size
    data = shared.read_bytes()
    assert data[: params.file_size] != data[params.file_size:]  # segments differ (writer stamped)
    with open(shared, "r+b") as f:
        f.seek(params.file_size + 5000)
        f.write(b"\x00" if data[params.file_size + 5000] else b"\x01")
    wl, c = clients[1]
    rec = PhaseRecorder(1, "read")
    rec.begin()
    with pytest.raises(StorevalError, match=f"byte {params.file_size + 5000} differs"):
        wl.run_phase(c, "read", rec)
    assert rec.errors == {"VerifyError": 1}
    wl.cleanup(clients[0][1])
    assert not shared.exists()


@pytest.mark.parametrize("block", [47008, 2 * 47008])
def test_interleaved_blocks_put_every_record_where_ior_puts_it(target, block):
    """IOR's shared-file layout with -b: segment × clients × block + rank × block. With block = transfer (IO500's
    ior-hard, 47,008 bytes, not a sector multiple) the clients' records alternate; every record on disk is the
    one its writer stamped for that offset, and a read phase and a shuffled one verify all of them."""
    from storeval.workloads.payload import Payload

    ts, n, segments = 47008, 3, 4
    params = BandwidthParams(file_size=segments * block, transfer_size=ts, layout="shared-file", block_size=block,
                             phases=["write", "read", "randread"], verify=True, iodepth=2)
    driver = make_driver(f"file://{target}")
    os.mkdir(target / "cell")
    clients = []
    for rank in range(n):
        wl = Bandwidth(params)
        c = _client(driver, "cell", rank, n, params)
        wl.prepare(c)
        clients.append((wl, c))
    wl0, c0 = clients[1]
    offsets = sorted(o for seq in c0.state["offsets"]["write"] for o in seq)
    assert offsets == [s * n * block + 1 * block + k for s in range(segments) for k in range(0, block, ts)]
    assert sorted(o for seq in c0.state["offsets"]["randread"] for o in seq) == offsets
    for phase in ("write", "read", "randread"):
        for wl, c in clients:
            rec = PhaseRecorder(c.rank, phase)
            rec.begin()
            wl.run_phase(c, phase, rec)
            rec.finish()
            assert rec.record(0).bytes == params.file_size and rec.errors == {}
    data = (target / "cell" / "bw.shared").read_bytes()
    assert len(data) == n * params.file_size
    checkers = [Payload(ts, rank, 0).checker() for rank in range(n)]
    for off in range(0, len(data), ts):
        writer = off // block % n
        assert checkers[writer](bytearray(data[off:off + ts]), off) == -1, (off, writer)
    wl0.cleanup(clients[0][1])


def test_block_size_is_refused_where_it_means_nothing():
    with pytest.raises(ValueError, match="block_size 96 KiB must be a whole number of transfers"):
        BandwidthParams(file_size=1 * MiB, transfer_size=64 * 1024, layout="shared-file", block_size=96 * 1024)
    with pytest.raises(ValueError, match="block_size shapes the shared file"):
        BandwidthParams(file_size=1 * MiB, transfer_size=64 * 1024, block_size=128 * 1024)


def test_payload_is_incompressible_and_never_repeats(target):
    import zlib

    params = BandwidthParams(file_size=1 * MiB, transfer_size=64 * 1024, phases=["write"])
    driver = make_driver(f"file://{target}")
    wl = Bandwidth(params)
    c = _client(driver, "", 0, 1, params)
    wl.prepare(c)
    rec = PhaseRecorder(0, "write")
    rec.begin()
    wl.run_phase(c, "write", rec)
    data = (target / "bw.0").read_bytes()
    assert len(zlib.compress(data)) > 0.99 * len(data)
    blocks = {data[i:i + 4096] for i in range(0, len(data), 4096)}
    assert len(blocks) == len(data) // 4096  # no two 4 KiB blocks alike: deduplication finds nothing


def stored_extras(tmp_path: Path) -> dict[tuple[str, int], dict]:
    """(phase, rank) → the record's extra (what the client's kernel counters and the workload said of it)."""
    import json

    with duckdb.connect(str(tmp_path / "storeval-results" / "storeval.duckdb"), read_only=True) as con:
        return {(phase, rank): json.loads(extra)
                for phase, rank, extra in con.execute("SELECT phase, rank, extra FROM records").fetchall()}


def test_reads_first_lay_out_the_data_untimed(tmp_path, target):
    doc = run_json(tmp_path, "--target", str(target), "--workload", "bandwidth", "--set", "file_size=1MiB",
                   "--set", "transfer_size=4KiB", "--set", "phases=randread", "--set", "verify=true", "--clients", "2")
    (ph,) = doc["cells"][0]["phases"]
    assert ph["phase"] == "randread" and ph["bytes"] == 2 * MiB and ph["ops"] == 2 * 256
    # the data was laid out (verify read back what was written) but not inside the timed window: each client's
    # kernel counters (/proc/self/io) over its timed phase saw its MiB read and none of the MiB it wrote
    for rank in (0, 1):
        io = stored_extras(tmp_path)["randread", rank]["proc_io"]
        assert io["rchar"] >= MiB and io["wchar"] < 64 * 1024, io


@pytest.fixture
def ramfs(tmp_path):
    """A ramfs mount: a real file system that refuses O_DIRECT (needs root)."""
    import subprocess

    mnt = tmp_path / "ramfs"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "ramfs", "ramfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount ramfs here (needs root)")
    yield mnt
    subprocess.run(["umount", str(mnt)], check=True)


def test_direct_io_falls_back_with_a_warning_where_refused(tmp_path, ramfs):
    doc = run_json(tmp_path, "--target", str(ramfs), "--workload", "bandwidth", "--set", "file_size=1MiB",
                   "--set", "direct=true")
    for ph in doc["cells"][0]["phases"]:
        assert ph["status"] == "ok" and ph["bytes"] == MiB
        codes = [w["code"] for w in ph["warnings"]]
        assert codes[0] == "direct-refused" and "memory-medium" in codes  # ramfs is RAM: said so too
        assert "refuses O_DIRECT" in ph["warnings"][0]["message"] and "buffered" in ph["warnings"][0]["message"]
    assert os.listdir(ramfs) == []


O_ACCMODE = 0o3
O_DIRECTORY = 0o200000  # x86-64, as the kernel writes it in fdinfo


def open_flags_while_running(target: Path, args: list[str], cwd: Path) -> tuple[int, dict[str, set[int]]]:
    """Run storeval and, while it runs, read the open flags of every descriptor its processes hold on a file (not a
    directory) in ``target`` (/proc/PID/fdinfo, the kernel's own record of how the file was opened): (rc, path → flags)."""
    import subprocess
    import sys

    import psutil

    seen: dict[str, set[int]] = {}
    proc = subprocess.Popen([sys.executable, "-m", "storeval", "run", *args], cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while proc.poll() is None:
            try:
                pids = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
            for pid in pids:
                try:
                    for fd in os.listdir(f"/proc/{pid}/fd"):
                        path = os.readlink(f"/proc/{pid}/fd/{fd}")
                        if path.startswith(f"{target}/"):
                            with open(f"/proc/{pid}/fdinfo/{fd}", encoding="ascii") as f:
                                flags = next(int(line.split()[1], 8) for line in f if line.startswith("flags:"))
                            if not flags & O_DIRECTORY:  # the cleanup's directory descriptors are not data files
                                seen.setdefault(os.path.basename(path), set()).add(flags)
                except (FileNotFoundError, ProcessLookupError, StopIteration):
                    pass  # the process or descriptor ended while being read
            time.sleep(0.002)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    return proc.returncode, seen


def test_direct_io_works_where_supported(tmp_path, target):
    """direct=true: no warning, and every descriptor a client held on its data file had O_DIRECT set, as the
    kernel reports it while the phases run (each phase stonewalled at 0.5 s, so the files stay open to be seen)."""
    out = tmp_path / "out.json"
    rc, flags = open_flags_while_running(target, [
        "--target", str(target), "--workload", "bandwidth", "--set", "file_size=64MiB", "--set", "transfer_size=4KiB",
        "--set", "direct=true", "--set", "phases=write,randread", "--set", "deadline=0.5s", "--clients", "1",
        "--json", str(out), "--quiet", "--no-html"], tmp_path)
    assert rc == 0
    doc = load_json(out)
    for ph in doc["cells"][0]["phases"]:
        assert ph["status"] == "ok" and ph["bytes"] > 0
        # no warning about the I/O itself (a 4 KiB O_DIRECT loop may keep the device busy: said, and allowed)
        assert [w for w in ph["warnings"] if w["code"] != "disk-bound"] == []
    assert set(flags) == {"bw.0"}, flags  # the client's file was seen open, and only it
    assert all(f & os.O_DIRECT for f in flags["bw.0"]), [oct(f) for f in flags["bw.0"]]  # 0o40000 on x86-64
    assert {f & O_ACCMODE for f in flags["bw.0"]} == {os.O_WRONLY, os.O_RDONLY}  # written, then read
    assert stored_extras(tmp_path)["randread", 0]["cache"]["client"] == "direct"  # and the record says so


def test_storeval_never_touches_files_it_did_not_create(tmp_path, target):
    mine = target / "precious.dat"
    mine.write_bytes(b"user data")
    (target / "bw.0").write_bytes(b"same name as storeval's file, but outside its scratch directory")
    run_json(tmp_path, "--target", str(target), "--workload", "bandwidth", "--set", "file_size=1MiB")
    assert sorted(os.listdir(target)) == ["bw.0", "precious.dat"]
    assert mine.read_bytes() == b"user data"


def test_a_mixed_phase_splits_its_operations_as_drawn_and_verifies_every_read(tmp_path, target):
    """randrw at 70/30 (fio's rwmixread=70): every block of each client's file is visited once, each operation's
    direction drawn before the phase; the reads and writes are counted apart, sum to the phase's work, split
    70/30 within the draw's own noise, and every block read (some after the mix rewrote them) is the one its writer
    stamped. Phases run in storeval's order: the read (of the laid-out file) first."""
    doc = run_json(tmp_path, "--target", str(target), "--workload", "bandwidth", "--clients", "2",
                   "--set", "file_size=4MiB", "--set", "transfer_size=4KiB", "--set", "phases=read,randrw",
                   "--set", "mix={read: 70, write: 30}", "--set", "verify=true", "--set", "iodepth=2")
    cell = doc["cells"][0]
    assert cell["status"] == "ok", cell["error"]
    read, mixed = cell["phases"]
    assert mixed["phase"] == "randrw" and mixed["io_engines"] == ["python"]
    assert mixed["ops"] == mixed["read_ops"] + mixed["write_ops"] == 2 * 1024
    assert mixed["bytes"] == 2 * 4 * MiB
    assert 0.67 <= mixed["read_share"] <= 0.73  # 2,048 draws: 3 standard deviations
    assert mixed["read_MiBps"] + mixed["write_MiBps"] == pytest.approx(mixed["bandwidth_MiBps"], rel=1e-9)
    for c in mixed["client_stats"]:
        assert c["read_ops"] + c["write_ops"] == 1024 and c["read_bytes"] == c["read_ops"] * 4096
    assert read["ops"] == 2 * 1024 and read["errors"] == {} and mixed["errors"] == {}
    assert leftovers(target) == []


def test_distributions_concentrate_the_random_blocks_as_asked():
    import numpy as np

    from storeval.workloads.bandwidth import draw_blocks

    rng = np.random.default_rng(7)
    n = 10_000
    assert sorted(draw_blocks(rng, n, "uniform")) == list(range(n))
    for dist, hot_share in (("hotset:10/90", 0.90), ("zipf:1.2", 0.80), ("pareto:0.9", 0.80)):
        draws = draw_blocks(np.random.default_rng(7), n, dist)
        assert len(draws) == n and draws.min() >= 0 and draws.max() < n
        counts = np.sort(np.bincount(draws, minlength=n))[::-1]
        top = counts[: n // 10].sum() / n  # the share of operations on the busiest 10 % of the blocks
        assert top >= hot_share - 0.02, (dist, top)
    hot = draw_blocks(np.random.default_rng(3), n, "hotset:10/90")
    busiest = set(np.argsort(np.bincount(hot, minlength=n))[::-1][: n // 10])
    assert 0.88 <= np.isin(hot, list(busiest)).mean() <= 0.92
    with pytest.raises(ValueError, match="distribution 'zipf' is not one of"):
        BandwidthParams(distribution="zipf")


def test_a_paced_client_never_runs_ahead_of_its_rate(tmp_path):
    """iops 400 per client on the null target (no storage to wait on): each client's 200 operations take at least
    200 intervals of 2.5 ms — pacing is open-loop on an absolute schedule, so a busy host can make a client late
    but never early — and the record says what was asked and how much of it was held."""
    doc = run_json(tmp_path, "--target", "null://paced", "--workload", "bandwidth", "--clients", "2",
                   "--set", "file_size=800KiB", "--set", "transfer_size=4KiB", "--set", "phases=write,read",
                   "--set", "iops=400")
    for ph in doc["cells"][0]["phases"]:
        assert ph["ops"] == 400 and ph["io_engines"] == ["python"]
        for c in ph["client_stats"]:
            assert c["paced_ops_per_s"] == pytest.approx(400)
            assert c["seconds"] >= 200 * 0.0025 and c["ops_per_s"] <= 400
            # held over the paced loop (the phase's start to its last interval's end): never above the pace, and
            # never below the share of it the whole phase kept (which adds the close after the loop)
            assert c["ops_per_s"] / 400 <= c["rate_held"] <= 1.0
        assert ph["rate_held"] == min(c["rate_held"] for c in ph["client_stats"])


@pytest.mark.parametrize("settings, message", [
    ({"rate": 1 << 20, "iops": 10}, "give rate or iops, not both"),
    ({"mix": {"read": 70, "write": 20}}, "mix: read 70 and write 20 add up to 90, not 100"),
    ({"iops": 10, "engine": "psync"}, "engine psync: mixed .* and paced .* phases run on the python loop"),
])
def test_mix_and_pace_settings_are_checked(settings, message):
    with pytest.raises(ValueError, match=message):
        BandwidthParams(**settings)
