"""Copy uploads end durably inside their timed region — fsync for files, the PUT / multipart-complete
acknowledgment for objects — the same for every worker and transfer size, and warn ``write-back`` where the
figure may include unflushed data (issue 13.6)."""

from __future__ import annotations

import os
import time

import pytest

from storeval.drivers import make_driver
from storeval.core.oplog import PhaseRecorder
from storeval.workloads.base import ClientContext
from storeval.workloads.copy import Copy, CopyParams

from .helpers import InProcessComm, load_json, storeval

MiB = 1 << 20
NO_FSYNC = ("upload may have ended with data still in the page cache (fsync turned off, no O_DIRECT): the figure "
            "can exceed what the storage accepts")


class Calls:
    """Wraps a driver and notes, with a timestamp, every write, fsync and close it is asked for."""

    def __init__(self, driver) -> None:
        self.driver, self.calls = driver, []

    def __getattr__(self, name):
        return getattr(self.driver, name)

    def writer(self, h):
        io = self.driver.writer(h)

        def write(bufs, offset):
            self.calls.append(("write", time.perf_counter_ns()))
            return io(bufs, offset)
        return write

    def fsync(self, h):
        self.driver.fsync(h)
        self.calls.append(("fsync", time.perf_counter_ns()))

    def close(self, h):
        self.driver.close(h)
        self.calls.append(("close", time.perf_counter_ns()))  # returned: an object store has acknowledged


def upload(driver, cell_dir: str, params: CopyParams, workers: int) -> list[PhaseRecorder]:
    """Every worker's timed upload, one after another in this process."""
    recs = []
    for rank in range(workers):
        c = ClientContext(rank=rank, nclients=workers, driver=driver, cell_dir=cell_dir, seed=0,
                          comm=InProcessComm(rank, workers))
        wl = Copy(params)
        wl.prepare(c)
        rec = PhaseRecorder(rank, "upload")
        rec.begin()
        wl.run_phase(c, "upload", rec)
        rec.finish()
        recs.append(rec)
    return recs


@pytest.mark.parametrize("transfer", [256 << 10, MiB])
def test_every_file_upload_is_fsynced_before_its_timed_region_ends(target, transfer):
    driver = Calls(make_driver(f"file://{target}"))
    os.mkdir(target / "cell")
    params = CopyParams(chunk_size=2 * MiB, transfer_size=transfer, direction="upload", stagger=0)
    recs = upload(driver, "cell", params, workers=3)
    kinds = [k for k, _ in driver.calls]
    per_upload = ["write"] * (2 * MiB // transfer) + ["fsync", "close"]
    assert kinds == per_upload * 3  # each worker: its writes, one fsync, then close
    fsyncs = [t for k, t in driver.calls if k == "fsync"]
    for rec, t in zip(recs, fsyncs):
        assert rec.start_ns <= t <= rec.end_ns  # inside the timed region
        assert rec.extra["durable"] == "fsync" and "warnings" not in rec.extra
    # fsync turned off: no fsync, and the figure is warned about
    driver.calls.clear()
    recs = upload(driver, "cell", params.model_copy(update={"fsync": False}), workers=2)
    assert "fsync" not in [k for k, _ in driver.calls]
    for rec in recs:
        assert rec.extra["durable"] == "none"
        assert rec.extra["warnings"] == [{"code": "write-back", "message": NO_FSYNC}]


def test_copy_run_warns_write_back_only_without_fsync(tmp_path, target):
    args = ["run", "--target", str(target), "--workload", "copy", "--clients", "2", "--set", "chunk_size=4MiB",
            "--set", "transfer_size=1MiB", "--set", "stagger=0", "--quiet", "--no-html"]
    for fsync, name in (("true", "clean"), ("false", "flawed")):
        r = storeval(*args, "--set", f"fsync={fsync}", "--json", f"{name}.json", cwd=tmp_path)
        assert r.rc == 0, r.err
    phases = {name: {p["phase"]: p for c in load_json(tmp_path / f"{name}.json")["cells"] for p in c["phases"]}
              for name in ("clean", "flawed")}
    assert [w for w in phases["clean"]["upload"]["warnings"] if w["code"] == "write-back"] == []
    assert [w for w in phases["flawed"]["upload"]["warnings"] if w["code"] == "write-back"] == [
        {"code": "write-back", "message": NO_FSYNC}]
    probes = phases["clean"]["upload"]["probes"]
    if probes.get("device"):  # on a block device the fsynced uploads reached it inside the phase
        assert probes["device_write_bytes"] >= 0.9 * 2 * 4 * MiB


@pytest.fixture(scope="module")
def minio(tmp_path_factory):
    from storeval.testbed import Testbed

    bed = Testbed(tmp_path_factory.mktemp("minio") / "bed")
    servers = bed.up(["minio"], log=lambda *_: None)
    try:
        yield servers["minio"].targets()["minio"]
    finally:
        bed.down(log=lambda *_: None)


@pytest.mark.parametrize("transfer", [5 * MiB, 8 * MiB])  # one part per PUT; then a multipart upload
def test_every_object_upload_is_acknowledged_whole_before_its_timed_region_ends(minio, transfer):
    entry = dict(minio)
    driver = Calls(make_driver(entry.pop("url"), {**entry, "part_size": "5MiB"}))
    driver.connect()
    cell = f"copy-durable-{transfer}"
    params = CopyParams(chunk_size=16 * MiB if transfer == 8 * MiB else 5 * MiB, transfer_size=transfer,
                        direction="upload", stagger=0)
    try:
        recs = upload(driver, cell, params, workers=2)
        for rank, rec in enumerate(recs):
            # close (the PUT or multipart-complete) returned inside the timed region, and the object is whole
            (closed,) = [t for k, t in driver.calls if k == "close"][rank:rank + 1]
            assert rec.start_ns <= closed <= rec.end_ns
            assert rec.extra["durable"] == "close" and "warnings" not in rec.extra
            assert driver.stat(f"{cell}/copy.{rank}").size == params.chunk_size
        assert "fsync" not in [k for k, _ in driver.calls]
    finally:
        for rank in range(2):
            driver.remove_quietly(f"{cell}/copy.{rank}")
