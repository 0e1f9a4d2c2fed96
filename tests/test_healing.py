"""Healing after a fault (issue 35, part 1): storeval reads the system's own word on its repair once a second,
keeps the cell's data until it is whole again (Job.hold), and times it. GlusterFS's heal is checked with its
replicated volume (tests/test_testbed_glusterfs.py), Ceph's with its cluster (tests/test_testbed_ceph.py); HDFS's
re-replication here, on four datanodes, against the NameNode and the datanodes' own counters."""

from __future__ import annotations

import os
import shutil
import time

import pytest
import yaml

from storeval.core.faultplan import Fault
from storeval.errors import StorevalError
from storeval.faults import FaultRunner
from storeval.testbed import Testbed
from storeval.testbed.glusterfs import parse_heal_summary

from .helpers import load_json, storeval

MiB = 1 << 20


# ------------------------------------------------------------------------------------------------ GlusterFS's words
def _summary(*bricks: tuple[str, str, int, int, int, int], ret: str = "0", err: str = "") -> str:
    rows = "".join(f"<brick hostUuid='u'><name>{n}</name><status>{st}</status><totalNumberOfEntries>{t}"
                   f"</totalNumberOfEntries><numberOfEntriesInHealPending>{h}</numberOfEntriesInHealPending>"
                   f"<numberOfEntriesInSplitBrain>{s}</numberOfEntriesInSplitBrain><numberOfEntriesPossiblyHealing>{p}"
                   f"</numberOfEntriesPossiblyHealing></brick>" for n, st, t, h, s, p in bricks)
    return (f"<?xml version='1.0'?><cliOutput><healInfo><bricks>{rows}</bricks></healInfo><opRet>{ret}</opRet>"
            f"<opErrno>0</opErrno><opErrstr>{err}</opErrstr></cliOutput>")


def test_heal_info_summary_is_read_per_brick_with_its_connection():
    got = parse_heal_summary(_summary(("vm:/b/brick1", "Connected", 3, 2, 0, 1),
                                      ("vm:/b/brick2", "Transport endpoint is not connected", 0, 0, 0, 0)))
    assert got == {"vm:/b/brick1": {"entries": 3, "heal_pending": 2, "split_brain": 0, "healing": 1, "connected": True},
                   "vm:/b/brick2": {"entries": 0, "heal_pending": 0, "split_brain": 0, "healing": 0,
                                    "connected": False}}
    with pytest.raises(StorevalError, match="^glusterfs: heal info failed: storeval: Not able to fetch volfile"):
        parse_heal_summary(_summary(ret="-1", err="storeval: Not able to fetch volfile from glusterd"))
    with pytest.raises(StorevalError, match="^glusterfs: heal info gave no XML: Usage: glfsheal"):
        parse_heal_summary("Usage: glfsheal <VOLNAME>\n")


# ------------------------------------------------------------------------------------------------ the watch itself
def _runner(fault: Fault, said: list[dict]) -> FaultRunner:
    """A runner whose system says ``said`` reading after reading (the last one for ever), acting on nothing."""
    readings = iter(said)
    last = [said[-1]]

    def redundancy() -> dict:
        last[0] = next(readings, last[0])
        return last[0]

    runner = FaultRunner([fault], lambda phase: (0, 0), None, redundancy=redundancy)
    runner._act = lambda f, action: f"{action} x"  # the testbed is not needed to follow the system's word
    return runner


def _wait(check, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_the_heal_is_judged_against_what_the_system_held_before_the_fault_and_timed_from_the_part_s_return():
    """Two blocks were short already when the phase began (an older heal): the fault is healed when the system is
    back to two, not to none; the part came back when the undo's action returned; while the watch goes on the
    runner holds the clients (Job.hold), and the cell's end brings a planned undo forward."""
    fault = Fault(where="faults[0]", action="kill", phase="write", at_s=0.0, server="x", for_s=600.0,
                  heal_timeout_s=60.0)
    assert FaultRunner.holds([fault]) and not FaultRunner.holds([Fault(where="f", action="kill", phase="w", at_s=0)])
    said = [{"under": 2, "missing": 0}, {"under": 2, "missing": 0}, {"under": 6, "missing": 0},
            {"under": 4, "missing": 1}, {"under": 3, "missing": 0}, {"under": 2, "missing": 0}]
    runner = _runner(fault, said)
    runner.phase_started("write", 0, time.perf_counter_ns())
    _wait(lambda: runner.watchers, "the fault acted and its heal is watched")
    assert runner.holding()  # its undo is due in 10 minutes, and the heal is watched
    runner.phase_ended("write", 0, time.perf_counter_ns())
    runner.phases_over()  # the undo is brought forward: the part comes back now
    _wait(lambda: not runner.holding(), "the heal watch ended")
    (event,) = runner.finish()
    h = event["detail"]["healing"]
    assert h["pending_before"] == 2 and h["max_pending"] == 6 and h["pending_at_end"] == 2
    assert [s[1] for s in h["samples"]][-1] == 2 and h["healed_after_s"] >= h["detected_after_s"]
    assert h["back_after_s"] is not None and h["back_after_s"] <= h["healed_after_s"]
    assert h["heal_s"] == pytest.approx(h["healed_after_s"] - h["back_after_s"])
    assert "at the cell's end" in event["message"] and "(2 before the fault)" in event["message"]


def test_a_system_that_does_not_heal_within_heal_timeout_says_so_and_lets_the_clients_go():
    fault = Fault(where="faults[0]", action="stop", phase="read", at_s=0.0, server="x", heal_timeout_s=1.0)
    runner = _runner(fault, [{"under": 0, "missing": 0}, {"under": 3, "missing": 0}])
    runner.phase_started("read", 0, time.perf_counter_ns())
    _wait(lambda: runner.watchers, "the fault acted")
    runner.phase_ended("read", 0, time.perf_counter_ns())
    runner.phases_over()
    _wait(lambda: not runner.holding(), "the heal watch gave up after heal_timeout")
    (event,) = runner.finish()
    h = event["detail"]["healing"]
    assert h["healed_after_s"] is None and h["heal_s"] is None and h["pending_at_end"] == 3
    assert "3 still pending when storeval stopped watching (heal_timeout 1s after the cell's phases)" in event["message"]


def test_a_cell_that_failed_waits_for_no_heal():
    fault = Fault(where="faults[0]", action="kill", phase="write", at_s=0.0, server="x", heal_timeout_s=600.0)
    runner = _runner(fault, [{"under": 0, "missing": 0}, {"under": 4, "missing": 0}])
    runner.phase_started("write", 0, time.perf_counter_ns())
    _wait(lambda: runner.watchers, "the fault acted")
    _wait(lambda: runner.watchers[0].is_alive() and runner.planned[0].heal_ready.is_set(), "the heal is watched")
    started = time.monotonic()
    (event,) = runner.finish(heal=False)  # e.g. a stop signal: the run must not wait 10 minutes for a heal
    assert time.monotonic() - started < 60 and not runner.holding()
    assert event["detail"]["healing"]["stopped"] == "the cell did not end ok: storeval stopped watching"
    assert "4 still pending when storeval stopped watching (the cell did not end ok" in event["message"]


# ------------------------------------------------------------------------------------------------ HDFS, for real
pytestmark_hdfs = pytest.mark.skipif(not (shutil.which("java") and shutil.which("mvn")),
                                     reason="the HDFS testbed needs java and mvn")


@pytest.fixture(scope="module")
def four_datanodes(tmp_path_factory):
    """`storeval testbed up hdfs --hdfs-datanodes 4` (replication 3): a datanode can die and every block can
    still get its third replica."""
    here = tmp_path_factory.mktemp("heal-hdfs")
    r = storeval("testbed", "up", "hdfs", "--hdfs-datanodes", "4", "--dir", str(here / "bed"), cwd=here, timeout=900)
    try:
        assert r.rc == 0, r.err
        yield here
    finally:
        storeval("testbed", "down", "--dir", str(here / "bed"), cwd=here, timeout=600)


@pytestmark_hdfs
def test_hdfs_re_replicates_around_a_dead_datanode_and_storeval_times_it_by_the_namenode(four_datanodes):
    """Seed 003: replication 3 on 4 datanodes, datanode 2 killed for good. The heal is what the NameNode says
    (blocks under-replicated, missing or being copied back to none) and the bytes moved are the datanodes' own
    BytesWritten: exactly the blocks that had a replica on the dead datanode, each copied once."""
    from hdfs_native import Client, WriteOptions

    here = four_datanodes
    server = Testbed(here / "bed").load()["hdfs"]
    url = yaml.safe_load((here / "storeval-testbed.yaml").read_text())["targets"]["hdfs"]["url"]
    client = Client(url.rsplit("/", 1)[0])
    files = [f"/storeval-heal/f{i}.bin" for i in range(3)]
    for name in files:
        with client.create(name, WriteOptions(block_size=MiB, replication=3)) as w:
            w.write(os.urandom(4 * MiB))
    dead_port = server.state.info["datanode_ports"][1]
    held = [b for name in files for b in server.blocks(name) if dead_port in b["ports"]]
    assert held and all(len(b["ports"]) == 3 for name in files for b in server.blocks(name))
    # the workload writes no block of its own (empty files): what the datanodes write meanwhile is the heal
    study = here / "heal.yaml"
    study.write_text(yaml.safe_dump({
        "targets_from": "storeval-testbed.yaml", "testbed": "bed", "clients": [2],
        "workloads": {"md": {"metadata": {"items": 20, "files_only": True, "phases": ["file-create", "file-stat"],
                                          "repeat_for": "2s"},
                             "faults": [{"at": "0s", "phase": "file-stat", "action": "kill",
                                         "server": "hdfs.datanode2", "heal_timeout": "5m"}]}}}))
    out = here / "heal.json"
    r = storeval("run", str(study), "--json", str(out), "--no-html", cwd=here, timeout=900)
    assert r.rc == 0, r.err
    (cell,) = load_json(out)["cells"]
    stat = next(p for p in cell["phases"] if p["phase"] == "file-stat")
    (f,) = stat["timeline"]["faults"]
    h = f["healing"]
    assert h["unit"] == "blocks" and h["source"].startswith("the NameNode's FSNamesystem (JMX)")
    assert h["pending_before"] == 0 and h["max_pending"] >= 1 and h["pending_at_end"] == 0
    assert h["back_after_s"] is None and h["heal_s"] == pytest.approx(h["healed_after_s"] - h["detected_after_s"])
    # the namenode declares a datanode dead after 20 s here (heartbeats every second, recheck every 5 s)
    assert 10 < h["detected_after_s"] < h["healed_after_s"]
    assert h["samples"][-1] == [h["healed_after_s"], 0, 0], h  # the reading that said whole is the last
    assert all(s[1] > 0 for s in h["samples"] if h["detected_after_s"] <= s[0] < h["healed_after_s"]), h
    expected = sum(b["length"] for b in held)
    assert expected <= h["bytes_moved"] <= expected + 4096, (h["bytes_moved"], expected, h["bytes_by_part"])
    assert h["parts"]["dead_datanodes"] == 1
    # what the NameNode says now: every block has its three replicas again, none on the dead datanode
    for name in files:
        for b in server.blocks(name):
            assert len(b["ports"]) == 3 and dead_port not in b["ports"]
        client.delete(name)
    client.delete("/storeval-heal", True)
    assert "the system said" in f["message"] and "healed" in f["message"]
    assert "Healing — what each system repaired after its fault" in r.out
