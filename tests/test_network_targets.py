"""S3, XRootD (root:// and davs://) and HDFS targets against real servers started by the testbed (no mocks anywhere)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import duckdb
import pytest
import yaml

from storeval.drivers import make_driver
from storeval.testbed.base import free_port

from .helpers import load_json, storeval

MiB = 1 << 20
NETWORK = ("minio", "xrootd", "xrootd-davs", "hdfs")


def study_file(tmp_path: Path, targets: dict) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({"targets": targets}))
    return path


def run_json(tmp_path: Path, *args: str, rc: int = 0, timeout: float = 600) -> dict:
    out = tmp_path / "out.json"
    r = storeval("run", *args, "--json", str(out), "--quiet", cwd=tmp_path, timeout=timeout)
    assert r.rc == rc, r.err
    return load_json(out)


def test_same_byte_and_op_accounting_on_every_server_and_a_local_directory(tmp_path, testbed_targets, target):
    targets = {**testbed_targets, "local": {"url": f"file://{target}"}}
    study = study_file(tmp_path, targets)
    doc = run_json(tmp_path, str(study), "--workload", "bandwidth", "--workload", "metadata", "--clients", "2",
                   "--set", "bandwidth.file_size=16MiB", "--set", "metadata.file_size=4KiB")
    by_target: dict[str, dict] = {}
    for cell in doc["cells"]:
        assert cell["status"] == "ok", (cell["target"], cell["error"])
        by_target.setdefault(cell["target"], {})[cell["workload"]] = cell
    assert set(by_target) == {*NETWORK, "local"}
    reference = {w: {p["phase"]: (p["bytes"], p["ops"]) for p in c["phases"]} for w, c in by_target["local"].items()}
    for name, cells in by_target.items():
        bw = {p["phase"]: (p["bytes"], p["ops"]) for p in cells["bandwidth"]["phases"]}
        assert bw == reference["bandwidth"] == {"write": (2 * 16 * MiB, 32), "read": (2 * 16 * MiB, 32)}, name
        for ph in cells["metadata"]["phases"]:
            if ph["status"] == "skipped":
                assert name == "minio" and ph["phase"].startswith(("tree-", "dir-"))
                assert "no directories" in ph["reason"]
                continue
            assert (ph["bytes"], ph["ops"]) == reference["metadata"][ph["phase"]], (name, ph["phase"])
    # directory phases run where there are directories, file phases everywhere
    ran = {n: [p["phase"] for p in c["metadata"]["phases"] if p["status"] == "ok"] for n, c in by_target.items()}
    assert ran["minio"] == ["file-create", "file-stat", "file-read", "file-remove"]
    assert ran["xrootd"] == ran["xrootd-davs"] == ran["hdfs"] == ran["local"]
    assert os.listdir(target) == []


def test_every_bandwidth_phase_and_verify_on_every_server(tmp_path, testbed_targets):
    study = study_file(tmp_path, testbed_targets)
    doc = run_json(tmp_path, str(study), "--workload", "bandwidth", "--clients", "2", "--set", "file_size=4MiB",
                   "--set", "transfer_size=256KiB", "--set", "verify=true",
                   "--set", "phases=write,rewrite,read,reread,randread,randwrite")
    for cell in doc["cells"]:
        status = {p["phase"]: p["status"] for p in cell["phases"]}
        if cell["target"] == "xrootd":
            assert set(status.values()) == {"ok"}
        else:  # objects and HDFS files are written front to back
            assert status["randwrite"] == "skipped"
            assert {k: v for k, v in status.items() if k != "randwrite"} == dict.fromkeys(
                ["write", "rewrite", "read", "reread", "randread"], "ok")
        for ph in cell["phases"]:
            if ph["status"] == "ok":
                assert ph["bytes"] == 2 * 4 * MiB and ph["ops"] == 2 * 16


def test_copy_workload_up_and_down_on_every_server(tmp_path, testbed_targets):
    study = study_file(tmp_path, testbed_targets)
    doc = run_json(tmp_path, str(study), "--workload", "copy", "--clients", "1,2", "--set", "chunk_size=32MiB",
                   "--set", "transfer_size=8MiB", "--set", "stagger=0.2")
    for cell in doc["cells"]:
        assert cell["status"] == "ok", cell["error"]
        for ph in cell["phases"]:
            n = cell["clients"]
            assert ph["bytes"] == n * 32 * MiB and ph["ops"] == n * 4
            stats = ph["client_stats"]
            assert all(c["MiBps"] > 0 and c["cpu_seconds_per_MB"] >= 0 for c in stats)
            if n == 2:  # worker 1 started 0.2 s after worker 0: the aggregate spans both copies
                assert ph["seconds"] >= 0.2
    peaks = {(s["target"], s["phase"]): s["workers_to_peak"] for s in doc["scaling"]}
    assert set(peaks) == {(t, p) for t in NETWORK for p in ("upload", "download")}
    assert all(v in (1, 2) for v in peaks.values())


def test_a_down_or_refusing_target_fails_its_cell_quickly_and_the_others_run(tmp_path, testbed_targets,
                                                                              testbed_credentials):
    closed = free_port()
    bad_creds = tmp_path / "bad-credentials"
    bad_creds.write_text("[default]\naws_access_key_id = storeval-wrong\naws_secret_access_key = WrongSecret123456\n")
    minio = testbed_targets["minio"]
    targets = {
        "s3-down": {**minio, "endpoint": f"http://127.0.0.1:{closed}"},
        "s3-bad-credentials": {**minio, "credentials_file": str(bad_creds)},
        "xrootd-down": {"url": f"root://127.0.0.1:{closed}//storeval", "timeout": "5s"},
        "hdfs-down": {"url": f"hdfs://127.0.0.1:{closed}/storeval", "timeout": "10s"},
        "davs-down": {"url": f"davs://127.0.0.1:{closed}/storeval", "timeout": "5s"},
        "minio": minio,
    }
    study = study_file(tmp_path, targets)
    t0 = time.monotonic()
    doc = run_json(tmp_path, str(study), "--workload", "bandwidth", "--set", "file_size=1MiB", "--clients", "1", rc=1)
    assert time.monotonic() - t0 < 4 * 30 + 30
    errors = {c["target"]: c["error"] for c in doc["cells"]}
    assert errors["minio"] is None
    assert errors["s3-down"] == (f"target s3-down: listing of the bucket failed: connection refused by "
                                 f"127.0.0.1:{closed} (the server is down or unreachable)")
    assert errors["s3-bad-credentials"].startswith("target s3-bad-credentials")
    assert f"refused the credentials from {bad_creds} [default]" in errors["s3-bad-credentials"]
    assert errors["xrootd-down"] == (f"target xrootd-down: stat of /storeval failed: cannot talk to 127.0.0.1:{closed} "
                                     "(the server is down or unreachable)")
    assert errors["hdfs-down"] == (f"target hdfs-down: stat of /storeval failed: no answer from 127.0.0.1:{closed} "
                                   "within 10 s (the server is frozen, overloaded or unreachable)")
    assert errors["davs-down"] == (f"target davs-down: stat of /storeval failed: connection refused by "
                                   f"127.0.0.1:{closed} (the server is down or unreachable)")
    assert all("\n" not in e for e in errors.values() if e)
    blob = everything_written(tmp_path)
    assert "WrongSecret123456" not in blob
    assert testbed_credentials[1] not in blob


def everything_written(tmp_path: Path, *extra: str) -> str:
    """The JSON document, every table of the results store, and any extra text (stdout, stderr)."""
    texts = [*extra, (tmp_path / "out.json").read_text()]
    con = duckdb.connect(str(tmp_path / "storeval-results" / "storeval.duckdb"), read_only=True)
    for (table,) in con.execute("SHOW TABLES").fetchall():
        texts.append(str(con.execute(f"SELECT * FROM {table}").fetchall()))
    con.close()
    return "\n".join(texts)


def test_credentials_from_the_environment_never_appear_in_results_or_output(tmp_path, testbed_targets,
                                                                            testbed_credentials):
    key_id, secret = testbed_credentials
    minio = {k: v for k, v in testbed_targets["minio"].items() if k != "credentials_file"}
    study = study_file(tmp_path, {"minio": {**minio, "access_key_env": "SV_TEST_KEY", "secret_key_env": "SV_TEST_SECRET"}})
    out = tmp_path / "out.json"
    r = storeval("run", str(study), "--workload", "bandwidth", "--workload", "metadata", "--set", "file_size=1MiB",
                 "--set", "items=20", "--json", str(out), cwd=tmp_path, env={"SV_TEST_KEY": key_id, "SV_TEST_SECRET": secret})
    assert r.rc == 0, r.err
    blob = everything_written(tmp_path, r.out, r.err)
    assert "SV_TEST_SECRET" in blob  # the name of the variable is recorded …
    assert secret not in blob and key_id not in blob  # … never its value


@pytest.mark.parametrize("name", NETWORK)
def test_driver_vector_reads_and_metadata_calls(name, testbed_targets):
    entry = dict(testbed_targets[name])
    driver = make_driver(entry.pop("url"), entry)
    driver.connect()
    data = os.urandom(3 * MiB + 123)
    path = f"vread-{os.getpid()}"
    try:
        driver.put(path, data)
        assert driver.stat(path).size == len(data)
        assert path in driver.listdir("")
        h = driver.open(path, "r")
        ranges = [(0, 10), (5000, 4096), (MiB - 7, 2 * MiB + 14), (len(data) - 1, 1)]
        if name == "xrootd":  # force splitting: tiny server limits must give the same bytes
            driver.iov_max, driver.ior_max = 2, 100_000
        got = driver.preadv(h, ranges)
        assert [bytes(g) for g in got] == [data[o:o + n] for o, n in ranges]
        buf = bytearray(4096)
        assert driver.pread(h, buf, 4096) == 4096 and bytes(buf) == data[4096:8192]
        driver.close(h)
        whole = bytearray(len(data))
        assert driver.get_into(path, whole) == len(data) and bytes(whole) == data
    finally:
        driver.remove_quietly(path)
        driver.shutdown()
    driver2 = make_driver(testbed_targets[name]["url"], {k: v for k, v in testbed_targets[name].items() if k != "url"})
    driver2.connect()
    with pytest.raises(FileNotFoundError):
        driver2.stat(path)
    with pytest.raises(FileNotFoundError):
        driver2.get_into(path, bytearray(10))
    odd = "odd dir/with space+plus=é.bin"  # names that must be encoded in URLs and signatures
    if name != "minio":
        driver2.ensure_dir("odd dir")
    driver2.put(odd, b"0123456789")
    buf = bytearray(4)
    h = driver2.open(odd, "r")
    assert driver2.pread(h, buf, 3) == 4 and bytes(buf) == b"3456"
    assert driver2.pread(h, buf, 10) == 0  # past the end: nothing, not an error
    driver2.close(h)
    driver2.remove(odd)
    if name != "minio":
        driver2.rmdir("odd dir")
        # a directory that is not empty is kept, and reads as such (not as the server's exception)
        driver2.ensure_dir("full dir")
        driver2.put("full dir/f", b"1")
        assert driver2.rmdir_quietly("full dir") is False and driver2.exists("full dir/f")
        driver2.remove("full dir/f")
        assert driver2.rmdir_quietly("full dir") and not driver2.exists("full dir")
    driver2.shutdown()


def test_s3_streaming_writes_time_each_upload_request_and_keep_every_byte(testbed_targets):
    """A streaming S3 write is a multipart upload whose parts are timed one by one (the writes only fill part
    buffers); every byte arrives in order, an object smaller than a part is one PUT, and nothing stays
    incomplete on the server."""
    entry = {**testbed_targets["minio"], "part_size": "5MiB", "upload_concurrency": 2}
    driver = make_driver(entry.pop("url"), entry)
    driver.connect()
    base = f"parts-{os.getpid()}"
    try:
        assert driver.take_requests() is None  # nothing sent yet
        data = os.urandom(12 * MiB + 4096)  # two full parts and a last one of 2 MiB + 4 KiB
        h = driver.open(f"{base}/big", "w")
        block = bytearray(MiB)
        for off in range(0, len(data), MiB):
            piece = data[off:off + MiB]
            block[:len(piece)] = piece
            assert driver.pwrite(h, memoryview(block)[:len(piece)], off) == len(piece)
            block[:] = bytes(MiB)  # the caller reuses its buffer at once: the driver must have copied it
        driver.close(h)
        taken = driver.take_requests()
        assert (taken.count, taken.bytes) == (3, len(data)) and taken.hist.total == 3
        assert "UploadPart" in taken.what
        assert taken.hist.min > 0 and taken.hist.max < 60e9
        whole = bytearray(len(data))
        assert driver.get_into(f"{base}/big", whole) == len(data) and bytes(whole) == data
        assert driver.take_requests() is None  # taken once; reads are not upload requests
        for size in (3 * MiB, 0, 5 * MiB):  # smaller than a part: one PUT; empty; exactly one part
            h = driver.open(f"{base}/o{size}", "w")
            if size:
                driver.pwrite(h, data[:size], 0)
            driver.close(h)
            got = bytearray(max(size, 1))
            assert driver.get_into(f"{base}/o{size}", got) == size and bytes(got[:size]) == data[:size]
            taken = driver.take_requests()
            assert (taken.count, taken.bytes) == (1, size), size
        # a write that is given up (degraded mode's retry) aborts its upload: no incomplete upload stays
        h = driver.open(f"{base}/dropped", "w")
        driver.pwrite(h, data[:11 * MiB], 0)  # two parts sent, the upload exists
        assert driver.resume_write(h) == 0
        driver.pwrite(h, data[:MiB], 0)
        driver.close(h)
        assert driver.list_uploads(f"{base}/dropped") == []  # MinIO lists the uploads of an exact key
        got = bytearray(MiB)
        assert driver.get_into(f"{base}/dropped", got) == MiB and bytes(got) == data[:MiB]
        driver.take_requests()  # the dropped object's: whatever of it was sent before it was given up, then its PUT
        # more objects being filled at once than the driver keeps part buffers for (upload_concurrency + 1 = 3):
        # each holds its own, none waits for another's
        handles = [driver.open(f"{base}/many{i}", "w") for i in range(5)]
        for k in range(2):
            for i, h in enumerate(handles):
                driver.pwrite(h, data[(i + k) * MiB:(i + k) * MiB + 3 * MiB], k * 3 * MiB)  # a part fills at k=1
        for h in handles:
            driver.close(h)
        for i in range(5):
            got = bytearray(6 * MiB)
            assert driver.get_into(f"{base}/many{i}", got) == 6 * MiB
            assert bytes(got) == data[i * MiB:i * MiB + 3 * MiB] + data[(i + 1) * MiB:(i + 1) * MiB + 3 * MiB]
        assert driver.take_requests().count == 10  # two parts each
    finally:
        for name in ("big", "o0", f"o{3 * MiB}", f"o{5 * MiB}", "dropped", *(f"many{i}" for i in range(5))):
            driver.remove_quietly(f"{base}/{name}")
        driver.shutdown()


def test_a_resumed_hdfs_write_that_kept_part_of_a_transfer_completes_it_with_its_stamps(testbed_targets):
    """HDFS keeps what its write pipeline acknowledged, packet by packet: a file reopened after a failed write
    (degraded mode, Driver.resume_write) can end inside a transfer. The bandwidth workload writes the rest of
    that transfer, with the stamps it had, and goes on after it — it used to refuse, and every try of the retry
    window failed again (seen beside other load: a killed datanode, 118 tries, the cell failed). Each transfer
    then reads back as written, and a kept part of the last transfer leaves nothing to go on with."""
    from storeval.core.oplog import OpLog
    from storeval.workloads import make_workload
    from storeval.workloads.base import ClientContext
    from storeval.workloads.kernel import PAST_END
    from storeval.workloads.payload import Payload

    entry = dict(testbed_targets["hdfs"])
    driver = make_driver(entry.pop("url"), entry, client=0)
    driver.connect()
    ts = 64 << 10
    wl = make_workload("bandwidth", {"transfer_size": ts, "file_size": 4 * ts, "on_error": "retry"})
    payload = Payload(ts, 0, wl.p.random_seed)
    buf, stamp = payload.write_buffer()
    c = ClientContext(rank=0, nclients=1, driver=driver, cell_dir="", seed=0, comm=None)
    seq = [0, ts, 2 * ts, 3 * ts]
    paths = [f"partial-{os.getpid()}-{k}" for k in range(2)]
    try:
        for path, kept in zip(paths, (ts + ts // 2, 3 * ts + 100)):  # inside the 2nd transfer; inside the last
            h = driver.open(path, "w")
            for off in range(0, kept, ts):
                payload.stamp(buf, off)
                n = min(ts, kept - off)
                assert driver.pwrite(h, memoryview(buf)[:n], off) == n
            held = [h]
            log = OpLog(time.perf_counter_ns())
            op, restart = wl._resume(c, held, [buf], stamp, seq, log)
            assert (log.ops, log.bytes) == (1, ts)  # the completed transfer counts as one, whole
            if kept < 3 * ts:
                assert restart == 2 * ts
                for off in seq[2:]:  # as the kernel goes on: stamp, then write
                    payload.stamp(buf, off)
                    assert op(off) == ts
            else:
                assert restart is PAST_END
            driver.close(held[0])
            assert driver.stat(path).size == 4 * ts
            check, got = payload.checker(), bytearray(4 * ts)
            assert driver.get_into(path, got) == 4 * ts
            assert [check(memoryview(got)[off:off + ts], off) for off in seq] == [-1] * 4  # -1: every byte as stamped
    finally:
        for path in paths:
            driver.remove_quietly(path)
        driver.shutdown()
