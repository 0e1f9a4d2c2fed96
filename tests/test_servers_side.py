"""The servers' side of a phase (issue 35): the host's CPU split with I/O wait kept apart from idle, the target's
server processes' CPU (user and kernel) and calls, the device's busy share — and the notes that say a disk or
the servers' CPU set the figure."""

from __future__ import annotations

import os
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
