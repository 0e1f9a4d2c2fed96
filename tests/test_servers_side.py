"""The servers' side of a phase (issue 35): the host's CPU split with I/O wait kept apart from idle, the target's
server processes' CPU (user and kernel) and calls, the device's busy share — and the notes that say a disk or
the servers' CPU set the figure."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from storeval.analysis.sanity import merged_probes
from storeval.analysis.servers import server_side as judge
from storeval.core.records import PhaseRecord
from storeval.probes.counters import read_cpu
from storeval.probes.server import TICKS, read_server_processes

from .helpers import load_json, storeval


def server_side(fig: SimpleNamespace, records: list[PhaseRecord], where: dict) -> None:
    """As sanity.check calls it: the hosts' probe deltas merged once, the number of hosts."""
    judge(fig, merged_probes(records), where, len({r.host for r in records}))


def _fig(seconds: float = 2.0) -> SimpleNamespace:
    return SimpleNamespace(seconds=seconds, probes={}, warnings=[], flags=[])


def _record(*, user=0.0, system=0.0, iowait=0.0, idle=0.0, busy_ms=None, server=None, host="h") -> PhaseRecord:
    total = (user + system + iowait + idle) * TICKS
    probes = {"cpu": {"all": {"busy": (user + system) * TICKS, "total": total, "user": user * TICKS,
                              "system": system * TICKS, "iowait": iowait * TICKS, "steal": 0.0}}}
    if busy_ms is not None:
        probes["disk"] = {"vda": {"busy_ms": busy_ms}}
    if server:
        probes["server"] = server
    return PhaseRecord(rank=0, host=host, phase="read", extra={"probes": probes})


def test_the_host_cpu_is_split_and_iowait_is_kept_apart_from_idle():
    # 2 s on 2 CPUs = 4 CPU s: 1 in user mode, 0.5 in the kernel, 2 waiting for I/O, 0.5 idle
    f = _fig()
    server_side(f, [_record(user=1.0, system=0.5, iowait=2.0, idle=0.5, busy_ms=1990)], {"device": "vda"})
    cpu = f.probes["servers"]["cpu"]
    assert cpu["cpus"] == 2.0 and cpu["busy"] == pytest.approx(0.375)
    assert (cpu["user"], cpu["system"], cpu["iowait"]) == pytest.approx((0.25, 0.125, 0.5))
    assert f.probes["servers"]["device"] == "vda" and f.probes["servers"]["device_busy"] == pytest.approx(0.995)
    (w,) = f.warnings
    assert w["code"] == "disk-bound" and w["message"] == (
        "device vda had I/O in flight 100% of the phase (the host's CPUs waited for I/O 50% of their time): the "
        "disk, not the network or the CPUs, set this figure")


def test_a_busy_host_whose_servers_used_most_of_it_is_server_cpu_bound_and_foreign_load_is_not():
    server = {"xrootd:42": {"cpu_seconds": 3.0, "user_seconds": 1.0, "system_seconds": 2.0, "syscr": 2000.0,
                            "syscw": 400.0, "read_bytes": 0.0, "write_bytes": 0.0}}
    f = _fig()
    server_side(f, [_record(user=2.0, system=1.8, idle=0.2, busy_ms=100, server=server)], {"device": "vda"})
    proc = f.probes["servers"]["processes"]["xrootd:42"]
    assert (proc["cpus"], proc["user_cpus"], proc["system_cpus"]) == (1.5, 0.5, 1.0)
    assert (proc["read_calls_per_s"], proc["write_calls_per_s"]) == (1000.0, 200.0) and "iowait_seconds" not in proc
    (w,) = f.warnings
    assert w["code"] == "server-cpu-bound" and w["message"].startswith(
        "the target's server processes used 1.5 of the host's 2 CPUs and the host was 95% busy (kernel 45%)")
    # the same busy host, its CPU taken by something else: not the servers' doing
    light = {"xrootd:42": {**server["xrootd:42"], "cpu_seconds": 0.5}}
    other = _fig()
    server_side(other, [_record(user=2.0, system=1.8, idle=0.2, busy_ms=100, server=light)], {"device": "vda"})
    assert other.warnings == []
    # a quiet host and device: nothing to say, the figures are still there
    calm = _fig()
    server_side(calm, [_record(user=0.5, idle=3.5, busy_ms=300, server=light)], {"device": "vda"})
    assert calm.warnings == [] and calm.probes["servers"]["device_busy"] == pytest.approx(0.15)


def test_too_short_or_several_hosts_are_not_judged():
    short = _fig(seconds=0.1)
    server_side(short, [_record(user=0.1, iowait=0.1, busy_ms=100)], {"device": "vda"})
    assert short.warnings == [] and short.probes["servers"]["device_busy"] == 1.0
    many = _fig()
    server_side(many, [_record(user=1, idle=1, busy_ms=2000, host="a"), _record(user=1, idle=1, busy_ms=2000,
                                                                              host="b")], {"device": "vda"})
    assert many.warnings == [] and "servers" not in many.probes


def test_the_kernel_counters_are_read_as_said():
    cpu = read_cpu()["all"]
    assert {"busy", "total", "user", "system", "iowait", "steal"} <= set(cpu)
    assert cpu["busy"] + cpu["iowait"] <= cpu["total"] and cpu["user"] + cpu["system"] <= cpu["busy"] + 1
    import psutil

    (me,) = read_server_processes([os.getpid()]).values()
    assert me["cpu_seconds"] == pytest.approx(me["user_seconds"] + me["system_seconds"])
    assert me["syscr"] > 0 and me["rchar"] > 0
    held = bytearray(64 << 20)  # 64 MiB touched: the resident set grows by it
    held[::4096] = b"x" * len(held[::4096])
    (after,) = read_server_processes([os.getpid()]).values()
    assert after["rss_bytes"] - me["rss_bytes"] >= 60 << 20
    assert after["rss_bytes"] == pytest.approx(psutil.Process().memory_info().rss, rel=0.05)
    del held


def test_a_run_carries_the_servers_side_of_each_phase_in_its_json(tmp_path):
    target = tmp_path / "t"
    target.mkdir()
    r = storeval("run", "--target", f"file://{target}", "--workload", "bandwidth", "--set", "file_size=32MiB",
                 "--set", "phases=write,read", "--json", "out.json", "--no-html", "--results", "res", cwd=tmp_path)
    assert r.rc == 0, r.err
    for ph in load_json(tmp_path / "out.json")["cells"][0]["phases"]:
        side = ph["probes"]["servers"]
        assert 0 <= side["cpu"]["iowait"] <= 1 and side["cpu"]["cpus"] >= 1
        assert side["cpu"]["busy"] == pytest.approx(ph["probes"]["cpu_busy_fraction"])


# -------------------------------------------------------------------------------- the servers' control groups
def _group(cpu=0.0, user=0.0, system=0.0, io_some=0.0, io_full=0.0, cpu_some=0.0, mem_some=0.0) -> dict:
    return {"cpu_seconds": cpu, "user_seconds": user, "system_seconds": system, "io_some_seconds": io_some,
            "io_full_seconds": io_full, "cpu_some_seconds": cpu_some, "memory_some_seconds": mem_some}


def test_a_servers_group_gives_its_io_wait_and_says_when_its_storage_set_the_figure():
    rec = _record(user=0.5, system=0.5, iowait=1.0, idle=2.0)
    rec.extra["probes"]["server_group"] = {"/storeval-nfs-1a2b3c4d": _group(0.8, 0.2, 0.6, 1.9, 1.2, 0.1, 0.0)}
    f = _fig()
    server_side(f, [rec], {})  # a network target: no device of its own
    g = f.probes["servers"]["groups"]["/storeval-nfs-1a2b3c4d"]
    assert g == pytest.approx({"cpus": 0.4, "user_cpus": 0.1, "system_cpus": 0.3, "io_wait": 0.95, "io_wait_all": 0.6,
                               "cpu_wait": 0.05, "memory_wait": 0.0})
    (w,) = f.warnings
    assert w == {"code": "server-io-bound", "message": (
        "the target's servers (control group /storeval-nfs-1a2b3c4d) had every working task waiting for I/O 60% of "
        "the phase (some task 95%): the servers' storage, not the network or the CPUs, set this figure")}
    # waiting some of the time while others worked is not bound
    rec.extra["probes"]["server_group"]["/storeval-nfs-1a2b3c4d"]["io_full_seconds"] = 0.9
    calm = _fig()
    server_side(calm, [rec], {})
    assert calm.warnings == [] and calm.probes["servers"]["groups"]["/storeval-nfs-1a2b3c4d"]["io_wait_all"] == 0.45


def test_the_servers_cpu_is_their_groups_where_they_have_them():
    """A server whose work runs in helpers that came and went (their CPU left with them): its processes look
    light, its group counted all of it."""
    light = {"xrootd:42": {"cpu_seconds": 0.4, "user_seconds": 0.2, "system_seconds": 0.2}}
    rec = _record(user=2.0, system=1.8, idle=0.2, server=light)
    rec.extra["probes"]["server_group"] = {"/storeval-xrootd-0f0f0f0f": _group(3.2, 1.2, 2.0)}
    f = _fig()
    server_side(f, [rec], {})
    (w,) = f.warnings
    assert w["code"] == "server-cpu-bound" and w["message"].startswith(
        "the target's servers (every process of their control groups) used 1.6 of the host's 2 CPUs")


def _in_group(group: Path, code: str) -> subprocess.Popen:
    """A Python child moved into ``group`` before it runs ``code`` (as the testbed starts a server)."""
    from storeval.testbed.cgroups import joiner

    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, preexec_fn=joiner(str(group)))


@pytest.mark.skipif(os.geteuid() != 0, reason="making a control group needs root (the CI runs as root)")
def test_a_real_group_counts_cpu_and_io_wait_and_is_removed_only_once_empty(tmp_path):
    from storeval.probes.cgroup import group_of, mount, read_groups, server_groups
    from storeval.testbed.cgroups import hierarchy, new_name, remove

    root = hierarchy()
    assert root is not None and root == mount(), "no writable cgroup v2 hierarchy (the servers' I/O wait needs one)"
    group = root / new_name("test")
    os.mkdir(group)
    name = f"/{group.name}"
    try:
        data = tmp_path / "direct"
        # synchronous writes, each waited for on the device: the group's tasks wait for I/O; then 0.3 s of CPU
        work = (f"import os, time\nfd = os.open({str(data)!r}, os.O_WRONLY | os.O_CREAT | os.O_DSYNC)\n"
                "b = b'x' * 65536\nfor _ in range(200):\n    os.write(fd, b)\n    os.fsync(fd)\nos.close(fd)\n"
                "t = time.process_time()\nwhile time.process_time() - t < 0.3:\n    pass\n"
                "import sys; sys.stdout.write('done'); sys.stdout.flush(); time.sleep(600)\n")
        child = _in_group(group, work)
        try:
            assert child.stdout.read(4) == b"done"
            assert group_of(child.pid) == name
            assert server_groups([child.pid, os.getpid()]) == {name: child.pid}  # the probe's own group is never the server's
            (g,) = read_groups([name]).values()
            assert g["cpu_seconds"] >= 0.3 and g["cpu_seconds"] == pytest.approx(g["user_seconds"] + g["system_seconds"],
                                                                                abs=0.01)
            assert g["io_some_seconds"] > 0 and g["io_some_seconds"] >= g["io_full_seconds"] > 0
            why = remove(group, wait=0.3)  # busy: it stays, its process named
            assert why == f"control group still holds process(es) {child.pid} (stop them)" and group.is_dir()
        finally:
            child.kill()
            child.wait()
        assert remove(group) is None and not group.exists()
        assert remove(group) is None  # gone: nothing to do
    finally:
        if group.exists():
            os.rmdir(group)


@pytest.mark.skipif(os.geteuid() != 0, reason="the servers' control groups need root (the CI runs as root)")
def test_the_server_bound_study_shows_a_slow_disk_and_the_servers_cpu(tmp_path):
    """studies/server-bound.yaml, smaller: MinIO with its disk limited to 20 MB/s waits on it (its I/O wait and
    server-io-bound; the rate never above the limit), the same MinIO on this machine's disk is much faster, and
    under small objects its CPU is shown (user and kernel)."""
    from storeval.testbed.minio import install_minio

    install_minio()  # built (or found cached) now: a build that fails is this test's failure, not a skip
    study = Path(__file__).resolve().parent.parent / "studies" / "server-bound.yaml"
    r = storeval("run", str(study), "--set", "bulk.file_size=24MiB", "--set", "small-objects.items=300",
                 "--clients", "1", "--json", "out.json", "--no-html", "--results", "res", cwd=tmp_path, timeout=1200)
    assert r.rc == 0, r.err
    cells = {(c["target"], c["workload"]): c for c in load_json(tmp_path / "out.json")["cells"]}
    assert set(cells) == {(t, w) for t in ("minio-slow-disk", "minio") for w in ("bulk", "small-objects")}
    limit_mibps = 20e6 / (1 << 20)
    rates = {}
    for target in ("minio-slow-disk", "minio"):
        for ph in cells[(target, "bulk")]["phases"]:
            assert ph["status"] == "ok" and ph["bytes"] == 24 << 20
            (group,) = ph["probes"]["servers"]["groups"].values()
            rates[(target, ph["phase"])] = ph["bandwidth_MiBps"]
            if target == "minio-slow-disk" and ph["phase"] == "write":
                assert ph["bandwidth_MiBps"] <= limit_mibps * 1.05, ph["bandwidth_MiBps"]  # the limit holds: never faster
                assert group["io_wait_all"] >= 0.5 and group["io_wait"] >= group["io_wait_all"]
                assert group["disk_write_bytes"] >= 24 << 20  # the object went to the disk through the limit
                assert "server-io-bound" in [w["code"] for w in ph["warnings"]]
    assert rates[("minio", "write")] > 1.5 * rates[("minio-slow-disk", "write")], rates
    for ph in cells[("minio", "small-objects")]["phases"]:
        (group,) = ph["probes"]["servers"]["groups"].values()
        assert group["cpus"] > 0.05 and group["cpus"] == pytest.approx(group["user_cpus"] + group["system_cpus"],
                                                                       abs=0.01)
    assert "server-io-bound" in r.out  # the terminal says it
    from storeval.probes.cgroup import mount

    named = {g for c in cells.values() for ph in c["phases"] for g in ph["probes"]["servers"].get("groups", {})}
    assert len(named) == 2 and not [g for g in named if (mount() / g.lstrip("/")).exists()]  # stopped: gone


def test_a_v2_only_hosts_io_stat_gives_a_groups_disk_bytes_and_operations(tmp_path):
    """Where the io controller is v2's (a v2-only host), a group's io.stat says what it read and wrote on each
    disk: summed over the disks, as the blkio hierarchy gives it on a hybrid host."""
    from storeval.probes.cgroup import read_groups

    group = tmp_path / "storeval-nfs-0a0b0c0d"
    group.mkdir()
    (group / "cpu.stat").write_text("usage_usec 2000000\nuser_usec 500000\nsystem_usec 1500000\n")
    for name in ("io", "cpu", "memory"):
        (group / f"{name}.pressure").write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=250000\n"
                                                "full avg10=0.00 avg60=0.00 avg300=0.00 total=100000\n")
    (group / "io.stat").write_text("254:0 rbytes=4096 wbytes=1048576 rios=1 wios=8 dbytes=0 dios=0\n"
                                   "8:0 rbytes=8192 wbytes=0 rios=2 wios=0 dbytes=0 dios=0\n")
    (row,) = read_groups(["/storeval-nfs-0a0b0c0d"], root=tmp_path).values()
    assert row == {"cpu_seconds": 2.0, "user_seconds": 0.5, "system_seconds": 1.5, "io_some_seconds": 0.25,
                   "io_full_seconds": 0.1, "cpu_some_seconds": 0.25, "memory_some_seconds": 0.25,
                   "disk_read_bytes": 12288.0, "disk_write_bytes": 1048576.0, "disk_read_ops": 3.0,
                   "disk_write_ops": 8.0}


def test_only_a_group_the_testbed_made_is_read_as_a_servers():
    """A process in a terminal's session, a shared slice or the root holds far more than the server: such groups
    are never taken for the server's (its figures then come from its processes alone)."""
    from storeval.probes.cgroup import SERVER_GROUP

    for name in ("storeval-minio-0a1b2c3d", "storeval-minio-ec-99aa00ff", "storeval-xrootd-tpc-12345678"):
        assert SERVER_GROUP.fullmatch(name)
    for name in ("session-3.scope", "system.slice", "minio.service", "storeval-host-svn-ab12-1", "storeval-minio",
                 "storeval-minio-0A1B2C3D", "storeval--0a1b2c3d0"):
        assert not SERVER_GROUP.fullmatch(name), name


def test_a_kernel_without_psi_still_gives_a_groups_cpu(tmp_path):
    from storeval.probes.cgroup import read_groups

    group = tmp_path / "storeval-nfs-0a0b0c0d"
    group.mkdir()
    (group / "cpu.stat").write_text("usage_usec 1000000\nuser_usec 250000\nsystem_usec 750000\n")
    (row,) = read_groups(["/storeval-nfs-0a0b0c0d"], root=tmp_path).values()
    assert row == {"cpu_seconds": 1.0, "user_seconds": 0.25, "system_seconds": 0.75}
    rec = _record(user=1.0, idle=3.0)
    rec.extra["probes"]["server_group"] = {"/storeval-nfs-0a0b0c0d": row}
    f = _fig()
    server_side(f, [rec], {})  # no I/O wait figures and no server-io-bound: nothing says it
    assert f.probes["servers"]["groups"]["/storeval-nfs-0a0b0c0d"] == {"cpus": 0.5, "user_cpus": 0.125,
                                                                      "system_cpus": 0.375}
    assert f.warnings == []


@pytest.mark.skipif(os.geteuid() != 0, reason="the servers' control groups need root (the CI runs as root)")
def test_a_disk_limit_on_no_disk_is_one_line_and_down_leaves_nothing(tmp_path):
    """--disk-rate for a server whose files are on a tmpfs: refused in one line before the server runs; the
    group made for the limit is gone at once, the other with `down`."""
    from storeval.testbed.minio import install_minio

    install_minio()
    shm = Path("/dev/shm")
    assert shm.is_dir(), "no /dev/shm: the test needs a tmpfs"
    bed = Path(tempfile.mkdtemp(prefix="svt-disk-", dir=shm)) / "tb"
    try:
        r = storeval("testbed", "up", "minio", "--disk-rate", "10MB/s", "--dir", str(bed), cwd=tmp_path, timeout=600)
        assert r.rc == 1 and r.err.strip().splitlines()[-1] == (
            f"error: minio: disk_rate/disk_iops: its files ({bed / 'minio'}) are on no block device (a tmpfs, an "
            "overlay or a network file system): give --dir on a disk"), r.err
        info = json.loads((bed / "state.json").read_text())["servers"]["minio"]["info"]
        assert "blkio" not in info and Path(info["cgroup"]).is_dir()  # the limit's group went with its refusal
        r = storeval("testbed", "down", "--dir", str(bed), cwd=tmp_path, timeout=600)
        assert r.rc == 0, r.err
        assert not bed.exists() and not Path(info["cgroup"]).exists()
    finally:
        shutil.rmtree(bed.parent, ignore_errors=True)
