"""Third-party copy between the testbed's two XRootD sites (xrootd-tpc): XRootD's TPC over root:// and HTTP-TPC
over davs://, pulled and pushed; every copy verified by adler32 at both ends; the client host's interfaces move
(almost) none of the data; a copy that fails is counted and the others go on; what cannot work is one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import yaml

from storeval.core.oplog import PhaseRecorder
from storeval.drivers import make_driver
from storeval.errors import StorevalError
from storeval.spec import make_target
from storeval.workloads.base import ClientContext
from storeval.workloads.tpc import Tpc, TpcParams

from .helpers import InProcessComm, everything_written, load_json, poll, storeval

MiB = 1 << 20
STUDY = Path(__file__).resolve().parent.parent / "studies" / "wlcg-tpc.yaml"


@pytest.fixture(scope="module")
def sites(tmp_path_factory):
    base = tmp_path_factory.mktemp("tpc")
    r = storeval("testbed", "up", "xrootd-tpc", "--dir", str(base / "bed"), cwd=base, timeout=600)
    try:
        assert r.rc == 0, r.err
        yield base, yaml.safe_load((base / "storeval-testbed.yaml").read_text())["targets"]
    finally:
        storeval("testbed", "down", "--dir", str(base / "bed"), cwd=base, timeout=600)


def test_two_sites_each_over_root_and_davs(sites):
    _, targets = sites
    assert sorted(targets) == ["tpc-a", "tpc-a-davs", "tpc-b", "tpc-b-davs"]
    for x, port in (("a", 1094), ("b", 1095)):
        assert targets[f"tpc-{x}"]["url"].endswith(f":{port}//storeval")
        assert targets[f"tpc-{x}-davs"]["url"].startswith("davs://") and f":{port}/storeval" in targets[f"tpc-{x}-davs"]["url"]
        assert targets[f"tpc-{x}"]["server_pids"] == targets[f"tpc-{x}-davs"]["server_pids"]  # one daemon, two protocols
    assert targets["tpc-a"]["server_pids"] != targets["tpc-b"]["server_pids"]


def test_the_ready_study_copies_and_verifies_every_file_without_the_client(tmp_path):
    """studies/wlcg-tpc.yaml (smaller files): XRootD TPC and HTTP-TPC pull and push at 1 and 2 clients; every
    destination file's adler32 equals its source's, the destination's server wrote what was copied, and the client
    host's interface towards the sites moved under 2 % of it."""
    out = tmp_path / "out.json"
    r = storeval("run", str(STUDY), "--set", "file_size=4MiB", "--set", "files=2", "--json", str(out), cwd=tmp_path,
                 timeout=900)
    assert r.rc == 0, r.err
    doc = load_json(out)
    seen = set()
    for cell in doc["cells"]:
        assert cell["status"] == "ok", cell.get("error")
        (ph,) = cell["phases"]
        n = cell["clients"]
        copied = n * 2 * 4 * MiB
        seen.add((cell["workload"], n))
        assert ph["bytes"] == copied and ph["ops"] == n * 2 and ph["failed"] == 0 and ph["copies"] == n * 2
        check = ph["written_check"]
        assert check["bytes_intact"] == check["bytes_checked"] == copied and check["files_verified"] == n * 2, check
        assert ph["via_client"] < 0.02, ph["client_net_bytes"]
        assert ph["probes"]["server_source"] == "server process io"
        assert abs(ph["write_amplification"] - 1) < 0.02, ph["probes"]  # the destination's server wrote the copies
    assert seen == {(w, n) for w in ("root-tpc", "http-pull", "http-push") for n in (1, 2)}
    assert "per copy MB/s" in r.out and "via client" in r.out


def test_across_a_wan_the_copies_cross_the_sites_links_and_not_the_clients(tmp_path):
    """studies/wlcg-tpc-wan.yaml (smaller files): site b behind a 1 Gbit/s link at 0, 12 and 50 ms, the client on a
    third host. Every copy verified; the client host's link moved under 2 % of what was copied (counted between the
    phase's barriers); site b's link took in the copies; each copy took several of the link's round trips."""
    out = tmp_path / "out.json"
    r = storeval("run", str(STUDY.with_name("wlcg-tpc-wan.yaml")), "--set", "file_size=4MiB", "--set", "files=2",
                 "--json", str(out), cwd=tmp_path, timeout=900)
    assert r.rc == 0, r.err
    seen = set()
    for cell in load_json(out)["cells"]:
        assert cell["status"] == "ok", cell.get("error")
        (ph,) = cell["phases"]
        n = cell["clients"]
        copied = n * 2 * 4 * MiB
        assert ph["bytes"] == copied and ph["written_check"]["bytes_intact"] == copied, ph["written_check"]
        control, far = ph["links"]["control"], ph["links"]["site-b"]
        assert control["counted"] == "barriers" and control["rx_bytes"] + control["tx_bytes"] < 0.02 * copied, control
        # site b's link is sampled once a second (the phase's share of its samples): not exact, but the copies' bytes
        # are there, orders of magnitude above the client's
        assert far["rx_bytes"] > 10 * (control["rx_bytes"] + control["tx_bytes"]), (far, control)
        assert ph["via_client"] < 0.02
        rtt = cell["factors"]["rtt"]
        # a copy crosses the link several times before its last byte (the sites' connection, its handshakes, the
        # request, TCP's slow start): a lower bound that a busy host can only raise (measured: about 18 round trips)
        assert ph["latency_us"]["p50"] >= 4 * rtt * 1e6, (rtt, ph["latency_us"])
        seen.add((cell["workload"], n, rtt))
    assert len(seen) == 12, seen


def test_a_source_killed_mid_phase_fails_some_copies_and_the_rest_are_verified(tmp_path):
    """Site a (the source) killed at 30 % of the copies for 1 s: the copies it misses fail with the server's words
    and are counted, the phase goes on, and every copy made is verified intact at the destination (the source's
    own checksum may be missing while it is down: the sum as written proves the copy)."""
    files = 40
    study = tmp_path / "kill.yaml"
    study.write_text(yaml.safe_dump({
        "targets": {"site-a": {"testbed": "xrootd-tpc", "use": "tpc-a-davs"},
                    "site-b": {"testbed": "xrootd-tpc", "use": "tpc-b-davs"}},
        "clients": [1],
        "workloads": {"w": {"tpc": {"source": "site-a", "files": files, "file_size": "4MiB"}, "targets": ["site-b"],
                            "faults": [{"at": "30%", "phase": "copy", "action": "kill", "server": "xrootd-tpc.sitea",
                                        "for": "1s"}]}}}))
    out = tmp_path / "out.json"
    r = storeval("run", str(study), "--json", str(out), cwd=tmp_path, timeout=900)
    assert r.rc == 0, r.err
    (cell,) = load_json(out)["cells"]
    (ph,) = cell["phases"]
    assert cell["status"] == "ok" and ph["status"] == "ok", cell.get("error")
    assert ph["failed"] >= 1 and ph["copies"] + ph["failed"] == files and ph["ops"] == ph["copies"], ph
    assert ph["bytes"] == ph["copies"] * 4 * MiB and ph["errors"] == {}
    check = ph["written_check"]
    assert check["bytes_intact"] == ph["bytes"] and check["files_verified"] == ph["copies"], str(check)
    codes = {w["code"] for w in ph["warnings"]} | {f["code"] for f in ph["flags"]}
    assert "copies-failed" in codes and not codes & {"data-lost", "fault-missed", "stalled"}, codes


def test_bearer_tokens_go_with_the_copies_and_reach_no_output(sites, tmp_path):
    """Each site's token from its own environment variable: HTTP-TPC sends the other end's as
    TransferHeaderAuthorization (pull and push); neither token is in any output, result or report."""
    _, targets = sites
    tokens = {"SV_TPC_TOKEN_A": "sv-tpc-a-7e3f1b9c.only-in-the-environment",
              "SV_TPC_TOKEN_B": "sv-tpc-b-2d8a6c4e.only-in-the-environment"}
    study = tmp_path / "s.yaml"
    study.write_text(yaml.safe_dump({
        "targets": {"a": {**targets["tpc-a-davs"], "token_env": "SV_TPC_TOKEN_A"},
                    "b": {**targets["tpc-b-davs"], "token_env": "SV_TPC_TOKEN_B"}},
        "workloads": {m: {"tpc": {"source": "a", "mode": m, "files": 1, "file_size": "1MiB"}, "targets": ["b"]}
                      for m in ("pull", "push")}}))
    out = tmp_path / "out.json"
    r = storeval("run", str(study), "--json", str(out), "--html", str(tmp_path / "r.html"), cwd=tmp_path, env=tokens)
    assert r.rc == 0, r.err
    assert all(c["status"] == "ok" and c["phases"][0]["written_check"]["files_verified"] == 1
               for c in load_json(out)["cells"])
    blob = everything_written(tmp_path, r.out, r.err)
    assert "environment variable SV_TPC_TOKEN_A" in blob and not any(t in blob for t in tokens.values())


def _run_dirs(driver) -> list[str]:
    return [n for n in driver.listdir("") if n.startswith("storeval-")]


def test_a_coordinator_killed_mid_copy_leaves_nothing_on_either_site(sites, tmp_path):
    """SIGKILL to the coordinator while its clients copy: its watchdog removes the cell's files from the
    destination and from the source (the other end its workload names), and the run's scratch directories."""
    _, targets = sites
    study = tmp_path / "s.yaml"
    study.write_text(yaml.safe_dump({"targets": {"a": targets["tpc-a-davs"], "b": targets["tpc-b-davs"]},
                                     "clients": [2],
                                     "workloads": {"w": {"tpc": {"source": "a", "files": 400, "file_size": "1MiB"},
                                                         "targets": ["b"]}}}))
    ends = []
    for name in ("tpc-a-davs", "tpc-b-davs"):
        t = make_target(name, dict(targets[name]), name)
        ends.append(make_driver(t.url, t.options))
        ends[-1].connect()
    assert [_run_dirs(d) for d in ends] == [[], []]
    results = tmp_path / "results"
    proc = subprocess.Popen([sys.executable, "-m", "storeval", "run", str(study), "--results", str(results), "-q"],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        def copying() -> bool:
            for path in results.glob(".storeval-*.watch"):
                try:
                    return json.loads(path.read_text()).get("phase") == "copy"
                except (OSError, ValueError):
                    return False
            assert proc.poll() is None, proc.stderr.read()
            return False

        poll(copying, "the run's clients copying", 600, 0.02)
        assert _run_dirs(ends[0]) and _run_dirs(ends[1])  # the source files and the copies are there now
        os.kill(proc.pid, signal.SIGKILL)
        said = proc.communicate(timeout=600)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "was killed" in said, said
    poll(lambda: [_run_dirs(d) for d in ends] == [[], []], "both sites free of the run's files", 600)
    for d in ends:
        d.shutdown()


def _context(targets: dict, dest: str, source: str, tmp_path: Path) -> ClientContext:
    """Client 0 of a cell copying to ``dest`` from ``source``, as the runner hands them to it."""
    d, s = (make_target(n, targets[n], n) for n in (dest, source))
    driver = make_driver(d.url, d.options)
    driver.connect()
    return ClientContext(rank=0, nclients=1, driver=driver, cell_dir=f"t-{tmp_path.name}", seed=1,
                         comm=InProcessComm(0, 1), peers={"source": {"target": source, "url": s.url,
                                                                     "options": s.options}})


@pytest.mark.parametrize("dest,source,mode", [("tpc-b", "tpc-a", "pull"), ("tpc-b-davs", "tpc-a-davs", "pull"),
                                              ("tpc-b-davs", "tpc-a-davs", "push")])
def test_a_failed_copy_is_counted_and_the_others_go_on(sites, tmp_path, dest, source, mode):
    """The source of the second copy removed after the layout: that copy fails with the server's words, the
    other two are made and verified (each source's adler32 as written, zlib's, equals the destination's)."""
    _, targets = sites
    wl = Tpc(TpcParams(source=source, files=3, file_size=1 * MiB, mode=mode, poll=0.01))
    c = _context(targets, dest, source, tmp_path)
    src = c.peer_driver("source")
    for d in (c.driver, src):
        d.ensure_dir(c.cell_dir)
    try:
        wl.prepare(c)
        src.remove(f"{c.cell_dir}/tpc-src.0.1")
        rec = PhaseRecorder(0, "copy")
        rec.begin()
        wl.run_phase(c, "copy", rec)
        rec.finish()
        t = rec.extra["tpc"]
        assert t["copies"] == 2 and t["failed"] == 1 and sum(t["failed_by_kind"].values()) == 1
        assert rec.errors == {}  # a failed copy is left out of the figures, not retried inside them
        assert "tpc.0.1" in t["first_problem"]
        assert [w["code"] for w in rec.extra["warnings"]] == ["copies-failed"]
        check = wl.check_after(c, "copy")
        assert check["files_verified"] == 2 and check["bytes_intact"] == 2 * MiB and check["bytes_corrupted"] == 0
        assert check["source_unanswered"] == 0
        buf = bytearray(MiB)
        h = src.open(f"{c.cell_dir}/tpc-src.0.0", "r")
        try:
            assert src.reader(h)([buf], 0) == MiB
        finally:
            src.close(h)
        assert c.state["sums"][0] == f"{zlib.adler32(buf):08x}" == c.driver.checksum(f"{c.cell_dir}/tpc.0.0")
    finally:
        wl.cleanup(c)
        for d in (c.driver, src):
            d.rmdir_quietly(c.cell_dir)
        c.close_peers()
        c.driver.shutdown()


def test_protocols_that_cannot_copy_together_are_one_line(sites, tmp_path):
    _, targets = sites
    for dest, source, mode, words in (
            ("tpc-b-davs", "tpc-a", "pull", "speak different protocols; a third-party copy needs davs:// (HTTP-TPC) "
                                            "or root:// on both"),
            ("tpc-b", "tpc-a", "push", "root:// copies by pull only, not push (set mode: pull)")):
        wl = Tpc(TpcParams(source=source, files=1, file_size=MiB, mode=mode))
        c = _context(targets, dest, source, tmp_path)
        try:
            with pytest.raises(StorevalError) as e:
                wl.prepare(c)
            assert words in str(e.value) and "\n" not in str(e.value)
        finally:
            c.close_peers()
            c.driver.shutdown()


def test_a_study_naming_no_such_source_or_target_is_one_line(tmp_path):
    study = tmp_path / "s.yaml"
    for workload, where in (({"tpc": {"source": "nowhere"}}, "workloads.w.source: 'nowhere' is not a target of the "
                                                            "study (one of a, b)"),
                            ({"tpc": {"source": "a"}, "targets": ["c"]}, "workloads.w.targets: 'c' is not a target of "
                                                                         "the study (one of a, b)"),
                            ({"tpc": {"source": "a"}, "targets": "b b"}, "workloads.w.targets: 'b b' is not a target "
                                                                         "of the study (one of a, b)")):
        study.write_text(yaml.safe_dump({"targets": {"a": {"url": str(tmp_path)}, "b": {"url": str(tmp_path)}},
                                         "workloads": {"w": workload}}))
        r = storeval("run", str(study), "--dry-run", cwd=tmp_path)
        assert r.rc == 2 and r.err_lines == [f"error: {where}"], r.err


def test_the_source_is_never_its_own_destination_and_targets_narrow_a_workload(tmp_path):
    from storeval.plan import plan
    from storeval.spec import load_study

    study = tmp_path / "s.yaml"
    study.write_text(yaml.safe_dump({
        "targets": {n: {"url": str(tmp_path)} for n in ("a", "b", "c")},
        "workloads": {"all": {"tpc": {"source": "a"}}, "one": {"tpc": {"source": "b"}, "targets": ["c"]}}}))
    cells = plan(load_study(str(study)))
    assert sorted((c.workload, c.target.name) for c in cells) == [("all", "b"), ("all", "c"), ("one", "c")]
    narrowed = load_study(str(study), targets=["c"])  # --target c: the sources are still known, as the other ends
    assert sorted(narrowed.others) == ["a", "b"] and list(narrowed.targets) == ["c"]


def test_figures_from_the_clients_records():
    """Per copy rates, the median first byte, failures, and what the host's interfaces moved (only the host
    leader's record has counters) — with the warning when that is most of what was copied."""
    lead = Tpc.client_extra({"tpc": {"copies": 2, "failed": 1, "copy_s": [0.5, 0.25], "first_byte_ms": [10.0, None],
                                     "file_size": 10**6, "devices": ["veth1", "lo"]},
                             "probes": {"net": {"veth1": {"rx_bytes": 1000.0, "tx_bytes": 600.0},
                                                "eth0": {"rx_bytes": 9e9, "tx_bytes": 9e9}}}}, 1.0, 0.1)
    other = Tpc.client_extra({"tpc": {"copies": 2, "failed": 0, "copy_s": [1.0, 1.0], "first_byte_ms": [30.0, 20.0],
                                      "file_size": 10**6, "devices": ["veth1"]}}, 1.0, 0.1)
    assert lead["client_net_bytes"] == 1600.0 and lead["devices"] == ["veth1"] and "client_net_bytes" not in other
    ph = Tpc.phase_extra([lead, other], 2.0, None)
    assert ph["copies"] == 4 and ph["failed"] == 1 and ph["first_byte_unseen"] == 1
    assert ph["copy_MBps"] == pytest.approx((2 + 4 + 1 + 1) / 4) and ph["first_byte_ms"] == 20.0
    assert ph["via_client"] == pytest.approx(1600 / 4e6) and "warnings" not in ph
    heavy = dict(lead, client_net_bytes=3.5e6)
    warned = Tpc.phase_extra([heavy, other], 2.0, None)
    assert [w["code"] for w in warned["warnings"]] == ["through-client"]
    assert "moved 3.34 MiB, 88% of the 3.81 MiB copied" in warned["warnings"][0]["message"]
