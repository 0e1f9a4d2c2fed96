"""Issue 17's checks, end to end through `storeval run` with real servers on emulated hosts: a 1 Gbit/s link caps a
read and shows saturated; seed 003's skim over XRootD at 0, 12 and 50 ms (studies/seed003-wan.yaml); seed 000's
on-board vs external clients side by side (studies/seed000-placement.yaml); and nothing of the network is left."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from .helpers import load_json, storeval

STUDIES = Path(__file__).resolve().parent.parent / "studies"
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="emulated hosts are network namespaces: root only")


def _ours() -> dict[str, list[str]]:
    """What of storeval's emulated networks exists now: namespaces, root-namespace links, relay processes."""
    namespaces = [n for n in os.listdir("/run/netns") if n.startswith("svn-")] if os.path.isdir("/run/netns") else []
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    veths = [line.split(":")[1].strip().split("@")[0] for line in links.splitlines()
             if line.split(":")[1].strip().startswith("sv") and line.split(":")[1].strip().split("@")[0].endswith("c")]
    relays = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if "storeval.testbed.relay" in cmd:
            relays.append(str(p.pid))
    return {"namespaces": namespaces, "links": veths, "relays": relays}


def _left_of(token: str) -> dict[str, list[str]]:
    """What of the network with this token exists now (its namespaces, its controller's veth, its relays)."""
    now = _ours()
    relays = [pid for pid in now["relays"] if psutil.pid_exists(int(pid))
              and any(token in part for part in psutil.Process(int(pid)).cmdline())]
    return {"namespaces": [n for n in now["namespaces"] if n.startswith(f"svn-{token}-")],
            "links": [n for n in now["links"] if n == f"sv{token}c"], "relays": relays}


@pytest.fixture
def nothing_left(tmp_path):
    """The test's run (its JSON in out.json names its network) must leave no namespace, veth, bridge, qdisc or
    relay of that network — whatever other storeval runs on this machine do meanwhile."""
    yield
    doc = load_json(tmp_path / "out.json")
    token = doc["environment"]["network"]["token"]
    assert _left_of(token) == {"namespaces": [], "links": [], "relays": []}


def _phase(doc: dict, cell: dict, name: str) -> dict:
    return next(p for p in cell["phases"] if p["phase"] == name)


def test_a_1_gbit_link_caps_a_read_and_is_shown_saturated(tmp_path, nothing_left):
    study = tmp_path / "link.yaml"
    study.write_text(textwrap.dedent("""\
        targets:
          minio: {testbed: minio, host: store}
        network:
          links:
            wan: {rate: 1Gbit}
        clients:
          far: {count: 2, host: far, link: wan}
        workloads:
          bw: {bandwidth: {file_size: 80MiB, transfer_size: 4MiB, phases: [write, read]}}
        """))
    # two clients on the far host: while one waits for its next GET's first byte (MinIO reading from its disk)
    # the other keeps the link busy, so a slow disk on a busy test machine does not leave the link idle
    r = storeval("run", str(study), "--results", str(tmp_path / "r"), "--json", str(tmp_path / "out.json"),
                 cwd=tmp_path, timeout=900)
    assert r.rc in (0, 1), r.err[-3000:]  # 1: a figure flagged (a busy host), never a failed cell
    doc = load_json(tmp_path / "out.json")
    (cell,) = doc["cells"]
    assert cell["status"] == "ok"
    read = _phase(doc, cell, "read")
    assert read["bytes"] == 160 << 20 and read["clients"] == 2
    rate = read["bandwidth_MiBps"] * (1 << 20)
    assert 0.5 * 125e6 <= rate <= 125e6  # what a 1 Gbit/s link carries at most, and it did carry it
    link = read["links"]["far"]
    assert link["rate_Bps"] == 125e6
    # what the link carried in the phase, counted by the client on that host between the phase's barriers: every
    # byte read, and HTTP's own
    assert link["counted"] == "barriers" and 160 << 20 <= link["rx_bytes"] <= 1.05 * (160 << 20)
    saturated = [w for w in read["warnings"] if w["code"] == "link-saturated"]
    if link["utilisation"] >= 0.9:
        assert len(saturated) == 1 and "emulated host far" in saturated[0]["message"]
    else:  # a host too busy to fill the link (its CPUs taken by others) says so, and the link is not called full
        codes = {x["code"] for x in (*read["flags"], *read["warnings"])}
        assert codes & {"busy-host", "client-bound"} and not saturated, (link["utilisation"], codes)
    assert not [f for f in read["flags"] if f["code"] == "not-physical"]
    # the link is what the flag logic holds the figure against: the server's host has no link, the clients' has
    network = next(e for e in doc["events"] if e["kind"] == "network")
    assert network["detail"]["links"] == {"far": {"rate": 125e6, "rtt": 0.0, "jitter": 0.0, "loss": 0.0}}
    assert "Emulated links" in r.out


def test_s3_parts_slowed_by_a_link_show_in_the_write_latency(tmp_path, nothing_left):
    """An S3 write phase's latency is that of its uploads: parts of 16 MiB behind a 100 Mbit/s link take at
    least 1.34 s each, while the writes that filled them only copied 4 MiB into a buffer."""
    study = tmp_path / "slow.yaml"
    study.write_text(textwrap.dedent("""\
        targets:
          minio: {testbed: minio, host: store, part_size: 16MiB, upload_concurrency: 1}
        network:
          links:
            wan: {rate: 100Mbit}
        clients:
          far: {count: 1, host: far, link: wan}
        workloads:
          bw: {bandwidth: {file_size: 32MiB, transfer_size: 4MiB, phases: [write]}}
        """))
    r = storeval("run", str(study), "--results", str(tmp_path / "r"), "--json", str(tmp_path / "out.json"),
                 cwd=tmp_path, timeout=900)
    assert r.rc in (0, 1), r.err[-3000:]
    doc = load_json(tmp_path / "out.json")
    (cell,) = doc["cells"]
    assert cell["status"] == "ok"
    write = _phase(doc, cell, "write")
    assert (write["bytes"], write["ops"]) == (32 << 20, 8)  # eight writes of 4 MiB …
    assert write["latency_of"]["requests"] == 2 and write["latency_of"]["bytes"] == 32 << 20  # … two parts sent
    alone = (16 << 20) / 12.5e6  # one part at a time, each alone on the link: 1.34 s at the least
    assert write["latency_us"]["p50"] >= 0.97 * alone * 1e6, write["latency_us"]  # ±0.4 % histogram, a link's ticks
    assert write["seconds"] >= 2 * 0.97 * alone
    assert "p50/p99 of minio write: each upload request (UploadPart" in " ".join(r.out.split())


def test_seed003_skim_over_xrootd_slows_with_the_round_trip_and_vector_reads_matter(tmp_path, nothing_left):
    r = storeval("run", str(STUDIES / "seed003-wan.yaml"), "--results", str(tmp_path / "r"),
                 "--json", str(tmp_path / "out.json"), cwd=tmp_path, timeout=1500)
    assert r.rc in (0, 1), r.err[-3000:]
    doc = load_json(tmp_path / "out.json")
    assert len(doc["cells"]) == 6 and all(c["status"] == "ok" for c in doc["cells"])
    curves = {s["factors"]["strategy"]: s["series"] for s in doc["scaling_settings"] if s["along"] == "rtt"}
    assert set(curves) == {"ttreecache", "basket"}
    for strategy, series in curves.items():
        assert [p["rtt"] for p in series] == ["0ms", "12ms", "50ms"]
        events = [p["events_per_s"] for p in series]
        efficiency = [p["cpu_efficiency"] for p in series]
        # the long round trip costs most, by far; between 0 and 12 ms the figures move less than a busy host can
        # move them (seen: a burst of other work made the 0 ms cell the slower), so there the mechanism is checked
        assert events[0] > events[2] and events[1] > events[2], (strategy, events)
        assert efficiency[0] > efficiency[2] and efficiency[1] > efficiency[2], (strategy, efficiency)
        # ... the time the skim waited on its requests: every request waits one round trip at least (a floor no
        # load lowers), and it grows with the round trip (a busy host only adds a little to a 0 ms wait)
        phases = {c["factors"]["rtt"]: c["phases"][0] for c in doc["cells"] if c["factors"]["strategy"] == strategy}
        waits = [phases[rtt]["io_wait_seconds"] for rtt in sorted(phases)]
        assert waits[0] < waits[1] < waits[2], (strategy, waits)
        for rtt, ph in phases.items():
            assert ph["requests"] > 0 and ph["io_wait_seconds"] >= ph["requests"] * rtt, (strategy, rtt, ph)
    for i in (1, 2):  # 12 ms and 50 ms: one vector read per cluster beats one read per basket
        assert curves["ttreecache"][i]["events_per_s"] > curves["basket"][i]["events_per_s"]
    # the round trip measured over the path (TCP connects from the client's host to the server) is the one asked
    for c in doc["cells"]:
        measured = c["rtt"]["remote"]
        requested = c["factors"]["rtt"]
        assert measured["requested_s"] == requested
        if requested:
            assert abs(measured["median_s"] - requested) <= 0.1 * requested, measured
        else:
            assert measured["median_s"] < 0.002
        assert measured["off"] is False
    assert "Aggregate vs rtt" in r.out and "requested vs measured RTT" in r.out


def test_seed000_onboard_and_external_clients_side_by_side(tmp_path, nothing_left):
    r = storeval("run", str(STUDIES / "seed000-placement.yaml"), "--set", "file_size=16MiB",
                 "--results", str(tmp_path / "r"), "--json", str(tmp_path / "out.json"), cwd=tmp_path, timeout=900)
    assert r.rc in (0, 1), r.err[-3000:]
    doc = load_json(tmp_path / "out.json")
    assert [c["factors"]["clients.onboard"] * 10 + c["factors"]["clients.external"] for c in doc["cells"]] == [
        11, 12, 21, 22]
    used = {"server1": 0.0, "client-net": 0.0}  # what ran on each host, its control group's CPU (the link probe)
    for c in doc["cells"]:
        assert c["status"] == "ok"
        on, ext = c["factors"]["clients.onboard"], c["factors"]["clients.external"]
        for p in c["phases"]:
            assert p["bytes"] == (on + ext) * (16 << 20)
            # every client carries its group, ranks group by group; each group's own figures beside the total
            assert [s["rank"] for s in p["client_stats"]] == list(range(on + ext))
            assert p["groups"]["onboard"]["ranks"] == list(range(on))
            assert p["groups"]["external"]["ranks"] == list(range(on, on + ext))
            assert p["groups"]["onboard"]["bytes"] == on * (16 << 20)
            assert p["groups"]["external"]["bytes"] == ext * (16 << 20)
            # fairness: every client against the fastest of all, and each group among its own
            f = p["fairness"]
            assert [row["group"] for row in sorted(f["sorted"], key=lambda row: row["rank"])] == (
                ["onboard"] * on + ["external"] * ext)
            assert set(f["groups"]) == {"onboard", "external"}
            # only the external clients cross the 1 Gbit/s link: their own aggregate stays under it
            assert p["groups"]["external"]["bandwidth_MiBps"] * (1 << 20) <= 125e6
            for host in used:  # a phase shorter than the first samples' spacing may have no reading of it
                used[host] += p["links"].get(host, {}).get("cpu_seconds", 0.0)
    # the external clients joined their host's group (nothing else runs there); MinIO and the on-board ones server1's
    assert used["client-net"] > 0 and used["server1"] > 0, used
    table = {row.get("group"): row for row in doc["table"]}
    assert set(table) == {None, "onboard", "external"}
    assert "Fairness per client group" in r.out


def _sending(namespaces: list[str]) -> bool:
    """Whether a host of those namespaces has sent more than 8 MiB through its eth0: its client's timed write has
    begun (the setup before it sends a few KiB), so the coordinator is inside the phase, not still starting the
    cell. Counted by the kernel's interface, whichever system calls the client sends with (send(2) is not in
    /proc/PID/io)."""
    for ns in namespaces:
        out = subprocess.run(["ip", "-n", ns, "-j", "-s", "link", "show", "eth0"], capture_output=True, text=True)
        try:
            (link,) = json.loads(out.stdout or "[]")
            if link["stats64"]["tx"]["bytes"] > 8 << 20:
                return True
        except (ValueError, KeyError, TypeError):
            continue
    return False


LONG = """\
    targets:
      minio: {testbed: minio, host: store}
    network:
      links:
        wan: {rate: 100Mbit, rtt: 2ms}
    clients:
      far: {count: 1, host: far, link: wan}
    workloads:
      bw: {bandwidth: {file_size: 1GiB, transfer_size: 1MiB, phases: [write], deadline: 10m}}
    """


def _long_run(tmp_path: Path, before: dict[str, list[str]],
              env: dict[str, str] | None = None) -> tuple[subprocess.Popen, int, str]:
    """A run whose client writes through a 100 Mbit/s link for minutes, once the client on its emulated host is
    writing (progress, not a guess at time): the process, its link's relay and its network's token."""
    study = tmp_path / "long.yaml"
    study.write_text(textwrap.dedent(LONG))
    proc = subprocess.Popen([sys.executable, "-m", "storeval", "run", str(study), "--results", str(tmp_path / "r"),
                             "--json", str(tmp_path / "out.json")], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    while proc.poll() is None:
        now = _ours()
        relays = sorted(set(now["relays"]) - set(before["relays"]))
        if relays and _sending(sorted(set(now["namespaces"]) - set(before["namespaces"]))):
            args = " ".join(psutil.Process(int(relays[0])).cmdline())
            return proc, int(relays[0]), args.split("/run/storeval-net-", 1)[1].split("/", 1)[0]
        time.sleep(0.2)
    raise AssertionError(proc.communicate()[1][-2000:])


def test_a_killed_run_leaves_no_host_link_relay_or_server(tmp_path):
    before = _ours()
    own = tempfile.mkdtemp(prefix="svt-", dir="/tmp")  # the run's own TMPDIR: what stays there is this run's
    try:
        _killed_run_leaves_nothing(tmp_path, before, own)
        # (a killed Python leaves its multiprocessing directory, pymp-*: the interpreter's, not storeval's)
        assert [n for n in os.listdir(own) if n.startswith("storeval-systems-")] == []
    finally:
        shutil.rmtree(own, ignore_errors=True)


def _killed_run_leaves_nothing(tmp_path: Path, before: dict[str, list[str]], own: str) -> None:
    proc, _, token = _long_run(tmp_path, before, env={**os.environ, "TMPDIR": own})
    try:
        proc.kill()
        _, err = proc.communicate(timeout=600)  # the watchdog holds stderr until it has undone everything
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "the storeval coordinator was killed during write" in err
    assert "stopped the minio testbed, removed the emulated network" in err
    assert _left_of(token) == {"namespaces": [], "links": [], "relays": []}


def test_a_relay_that_dies_fails_its_cell_at_once_and_says_so(tmp_path):
    before = _ours()
    proc, relay, token = _long_run(tmp_path, before)
    try:
        os.kill(relay, 9)
        out, err = proc.communicate(timeout=600)  # not the phase timeout (1 h): the cell fails as the relay ends
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err[-2000:]
    doc = load_json(tmp_path / "out.json")
    (cell,) = doc["cells"]
    assert cell["status"] == "failed"
    assert cell["error"] == (f"the relay of emulated host far's link (pid {relay}) ended: the cell's clients lost "
                             "their path to the target")
    assert _left_of(token) == {"namespaces": [], "links": [], "relays": []}
