"""The emulated network, for real: namespaces on a bridge, tbf rate limits, the user-space delay/loss relay.

One network (hosts ``server1`` on the bridge and ``client-net`` behind the link ``wan``) is made once through
the testbed and shared; a small TCP sink/source runs in each host. Rate and delay are checked against the
tolerances the emulation promises (medians, generous counts); everything else is exact.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from storeval.probes.cgroup import BLKIO, group_of, mount, read_groups
from storeval.probes.links import link_counters
from storeval.testbed import Testbed
from storeval.testbed.base import TestbedError
from storeval.testbed.network import LinkSettings, Network, measure_rtt

from .helpers import poll, storeval

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")

MiB = 1 << 20
GBIT = 125e6  # 1 Gbit/s in bytes/s
PORT = 5001

# a threaded TCP service: "P" + data until EOF -> replies the byte count (8 bytes); "G" + 8-byte n -> sends n bytes;
# a connection that sends nothing is closed (connect-time round trips)
SERVICE = r"""
import socket, socketserver, struct, sys
class H(socketserver.BaseRequestHandler):
    def handle(self):
        s = self.request
        op = s.recv(1)
        if op == b"P":
            buf, n = bytearray(1 << 20), 0
            while True:
                k = s.recv_into(buf)
                if not k:
                    break
                n += k
            s.sendall(struct.pack("<q", n))
        elif op == b"G":
            (n,) = struct.unpack("<q", s.recv(8, socket.MSG_WAITALL))
            chunk = bytes(1 << 20)
            while n > 0:
                s.sendall(chunk[:min(n, len(chunk))])
                n -= len(chunk)
class S(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True
S((sys.argv[1], int(sys.argv[2])), H).serve_forever()
"""

# from inside a namespace (entered with enter_netns): put or get n bytes; prints {"bytes", "seconds"}
CLIENT = r"""
import json, socket, struct, sys, time
from storeval.testbed.network import enter_netns
ns, addr, port, op, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
if ns != "-":
    enter_netns(ns)
s = socket.create_connection((addr, port), timeout=120)
t = time.perf_counter()
if op == "put":
    s.sendall(b"P")
    chunk, left = bytes(1 << 20), n
    while left > 0:
        s.sendall(chunk[:min(left, len(chunk))])
        left -= len(chunk)
    s.shutdown(socket.SHUT_WR)
    got = struct.unpack("<q", s.recv(8, socket.MSG_WAITALL))[0]
else:
    s.sendall(b"G" + struct.pack("<q", n))
    buf, got = bytearray(1 << 20), 0
    while got < n:
        k = s.recv_into(buf)
        if not k:
            break
        got += k
print(json.dumps({"bytes": got, "seconds": time.perf_counter() - t}))
"""


def _in_group(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``."""
    out = []
    for p in psutil.process_iter(["status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (ProcessLookupError, PermissionError):
            continue
    return out


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}


def _transfer(netns: str | None, address: str, op: str, n: int) -> dict:
    proc = subprocess.run([sys.executable, "-c", CLIENT, netns or "-", address, str(PORT), op, str(n)],
                          capture_output=True, text=True, timeout=300, env=_env())
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["bytes"] == n
    return out


def _connects(netns: str | None, address: str) -> bool:
    """Whether a TCP connect from ``netns`` to ``address:PORT`` succeeds (within a few seconds)."""
    code = (f"import socket,sys\nfrom storeval.testbed.network import enter_netns\n"
            f"{'enter_netns(%r)' % netns if netns else ''}\n"
            f"try:\n socket.create_connection(({address!r}, {PORT}), timeout=3).close()\nexcept OSError as e:\n"
            f" print(e); sys.exit(1)\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=_env()).returncode == 0


def _relay_stats(net: Network, host: str) -> dict:
    return net.counters()[host]


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    """A testbed with only a network: server1 (no link) and client-net (link wan, unlimited at first), a
    service in each host."""
    base = tmp_path_factory.mktemp("net")
    bed = Testbed(base / "tb", targets_file=base / "storeval-testbed.yaml")
    services = []
    try:
        net = bed.network_up({"server1": None, "client-net": "wan"}, {"wan": LinkSettings()}, log=lambda m: None)
        for host in ("server1", "client-net"):
            services.append(subprocess.Popen(["ip", "netns", "exec", net.netns(host), sys.executable, "-c", SERVICE,
                                              net.address(host), str(PORT)], start_new_session=True))
        for host in ("server1", "client-net"):
            poll(lambda: _connects(None, net.address(host)), f"the service in {host}")
        yield bed
    finally:
        for p in services:
            p.kill()
            p.wait()
        bed.down(log=lambda m: None)


class _Current:
    """The testbed's network as last loaded (each testbed command loads it afresh from the state)."""

    def __init__(self, bed: Testbed) -> None:
        self._bed = bed

    def __getattr__(self, name: str):
        net = self._bed.network()
        assert net is not None
        return getattr(net, name)


@pytest.fixture(scope="module")
def net(bed) -> Network:
    return _Current(bed)  # type: ignore[return-value]


def test_hosts_reach_each_other_and_the_controller(net):
    assert net.hosts["server1"].link is None and net.hosts["client-net"].link == "wan"
    assert _connects(net.netns("client-net"), net.address("server1"))
    assert _connects(net.netns("server1"), net.address("client-net"))
    assert _connects(None, net.address("server1"))  # the controller: the root namespace, unshaped
    assert _connects(net.netns("server1"), net.controller_addr) is False  # nothing listens there: refused, not lost
    # addresses: controller .1, hosts .2, .3 of one /24
    assert net.controller_addr.endswith(".1")
    assert {net.address("server1").rsplit(".", 1)[1], net.address("client-net").rsplit(".", 1)[1]} == {"2", "3"}


def test_nothing_reaches_outside(net):
    for host in ("server1", "client-net"):
        routes = subprocess.run(["ip", "-n", net.netns(host), "-4", "route", "show", "table", "all"],
                                capture_output=True, text=True, check=True).stdout
        assert "default" not in routes, routes
        assert {line.split()[0] for line in routes.splitlines() if line.split()[0] not in ("local", "broadcast")} == \
            {net.subnet}, routes
    # a root-namespace address beyond the subnet cannot be reached from a host
    root_addrs = [a.address for addrs in psutil.net_if_addrs().values() for a in addrs
                  if a.family == socket.AF_INET and not a.address.startswith("127.")
                  and a.address != net.controller_addr]
    for addr in root_addrs[:2] + ["1.1.1.1"]:
        code = (f"import socket\nfrom storeval.testbed.network import enter_netns\nenter_netns({net.netns('server1')!r})\n"
                f"s = socket.socket()\ntry:\n s.connect(({addr!r}, 80))\nexcept OSError as e:\n print(e.errno)\n")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=_env())
        assert out.stdout.strip() == "101", (addr, out)  # ENETUNREACH: no route at all
    # the service bound to a host address is not visible in the root namespace's sockets
    ss = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True, check=True).stdout
    assert net.address("server1") not in ss and net.address("client-net") not in ss
    inside = subprocess.run(["ip", "netns", "exec", net.netns("server1"), "ss", "-ltnH"], capture_output=True, text=True,
                            check=True).stdout
    assert f"{net.address('server1')}:{PORT}" in inside


def test_rate_limits_both_directions(bed, net):
    bed.set_link("client-net", LinkSettings(rate=GBIT), log=lambda m: None)
    for op in ("put", "get"):  # client-net -> server1 shaped on its eth0, server1 -> client-net on its peer
        rates = sorted(r["bytes"] / r["seconds"] for r in
                       (_transfer(net.netns("client-net"), net.address("server1"), op, 100 * MiB) for _ in range(3)))
        median = rates[1]
        assert median <= GBIT * 1.02, (op, rates)
        assert median >= GBIT * 0.8, (op, rates)
    c = net.counters()["client-net"]
    assert c["rate_bytes_s"] == GBIT and c["out_overlimits"] > 0 and c["in_overlimits"] > 0
    # the unshaped host reaches the controller beyond the rate
    fast = _transfer(None, net.address("server1"), "put", 100 * MiB)
    assert fast["bytes"] / fast["seconds"] > GBIT * 1.02


def test_rtt_and_its_live_change(bed, net):
    relay_pid = net.hosts["client-net"].relay["pid"]
    for rtt in (0.012, 0.050):
        bed.set_link("client-net", LinkSettings(rate=GBIT, rtt=rtt), log=lambda m: None)
        got = measure_rtt(net.netns("client-net"), net.address("server1"), PORT, count=30)
        assert got["count"] == 30
        assert abs(got["median_s"] - rtt) <= 0.1 * rtt, (rtt, got)
        assert got["min_s"] <= got["median_s"] <= got["p90_s"]
        # the relay says what it added: half the rtt each way
        c = poll(lambda: (lambda c: c if c["relay_up_held_p50_s"] and c["relay_down_held_p50_s"] else None)(
            net.counters()["client-net"]), "the relay's statistics under the new settings")
        assert abs(c["relay_up_held_p50_s"] - rtt / 2) <= 0.1 * rtt / 2, c
        assert abs(c["relay_down_held_p50_s"] - rtt / 2) <= 0.1 * rtt / 2, c
        assert c["rtt_s"] == rtt
    assert net.hosts["client-net"].relay["pid"] == relay_pid  # changed live: the same relay
    # a host on the bridge (or the controller) sees no delay
    direct = measure_rtt(None, net.address("server1"), PORT, count=10)
    assert direct["median_s"] < 0.005
    # state keeps the settings
    assert Testbed(bed.dir).load() is not None
    saved = json.loads(bed.state_file.read_text())["network"]
    assert [h["settings"]["rtt"] for h in saved["hosts"] if h["name"] == "client-net"] == [0.05]


def test_loss_shows_in_relay_stats_and_counters_move(bed, net):
    bed.set_link("client-net", LinkSettings(rtt=0.002, loss=0.05), log=lambda m: None)
    before = net.counters()
    _transfer(net.netns("client-net"), net.address("server1"), "put", 20 * MiB)
    _transfer(net.netns("client-net"), net.address("server1"), "get", 20 * MiB)

    def moved():
        after = net.counters()
        a, b = after["client-net"], before["client-net"]
        return after if a["relay_up_bytes"] - b["relay_up_bytes"] >= 20 * MiB and \
            a["relay_down_bytes"] - b["relay_down_bytes"] >= 20 * MiB else None

    after = poll(moved, "the relay's statistics")  # written every half second
    a, b = after["client-net"], before["client-net"]
    assert a["relay_up_dropped_loss"] > b["relay_up_dropped_loss"]
    assert a["relay_down_dropped_loss"] > b["relay_down_dropped_loss"]
    assert a["tx_bytes"] - b["tx_bytes"] >= 20 * MiB and a["rx_bytes"] - b["rx_bytes"] >= 20 * MiB
    s1a, s1b = after["server1"], before["server1"]
    assert s1a["rx_bytes"] - s1b["rx_bytes"] >= 20 * MiB and s1a["tx_bytes"] - s1b["tx_bytes"] >= 20 * MiB
    assert "relay_up_frames" not in s1a  # no link, no relay
    bed.set_link("client-net", LinkSettings(), log=lambda m: None)


def test_enter_netns_names_a_missing_namespace():
    from storeval.testbed.network import enter_netns

    with pytest.raises(TestbedError, match=r"^network namespace svn-000000-9 does not exist \(is the testbed network "
                                           r"up\?\)$"):
        enter_netns("svn-000000-9")


def test_link_on_a_host_without_one_and_refusals(bed, net):
    bed.network_up({"plain": None}, {}, log=lambda m: None)  # grows the running network
    assert net.hosts["plain"].link is None and net.hosts["plain"].index == 3
    assert _connects(net.netns("plain"), net.address("server1"))
    bed.set_link("plain", LinkSettings(rtt=0.004), log=lambda m: None)  # off the bridge, behind a relay now
    assert net.hosts["plain"].link == "plain" and psutil.pid_exists(net.hosts["plain"].relay["pid"])
    got = measure_rtt(net.netns("plain"), net.address("server1"), PORT, count=20)
    # what a connect costs over an unshaped path at the same moment: a busy host adds it to the emulated delay, and
    # wakes the relay late, so the fastest connect carries the emulated delay and the others never less than it
    unshaped = measure_rtt(None, net.address("server1"), PORT, count=20)
    assert 0.004 - 0.0004 <= got["min_s"] <= 0.004 + 0.0007 + unshaped["p90_s"], (got, unshaped)
    assert got["median_s"] >= 0.004 - 0.0004, got  # a late wake-up (a busy host) only lengthens the rest
    with pytest.raises(TestbedError, match="exists with link wan, not none"):
        bed.network_up({"client-net": None}, {}, log=lambda m: None)
    with pytest.raises(TestbedError, match="link 'lan' has no settings"):
        bed.network_up({"other": "lan"}, {}, log=lambda m: None)
    with pytest.raises(TestbedError, match="jitter must be between 0 and half the rtt"):
        bed.set_link("server1", LinkSettings(rtt=0.002, jitter=0.005), log=lambda m: None)
    with pytest.raises(TestbedError, match="controller"):
        bed.network_up({"controller": None}, {}, log=lambda m: None)


def test_cli_network_and_link(bed, net, tmp_path):
    r = storeval("testbed", "network", "--dir", str(bed.dir))
    assert r.rc == 0, r.err
    assert f"server1: {net.address('server1')} in {net.netns('server1')}, no link (on the bridge)" in r.out
    assert f"client-net: {net.address('client-net')} in {net.netns('client-net')}, link wan:" in r.out
    assert "  client-net: sent " in r.out
    for args, line in [(("--rate", "fast"), "testbed link --rate: 'fast' is not a rate (e.g. 10Gbit, 3GB/s, 800MiB/s)"),
                       (("--rate", "1bit"), "testbed link --rate: '1bit' is not a rate an emulated link can have "
                                            "(8kbit to 1tbit, e.g. 1Gbit)"),
                       (("--rtt", "-2ms"), "testbed link --rtt: '-2ms' is not a duration (e.g. 30s, 100ms, 5m)"),
                       (("--rtt", "12"), "testbed link --rtt: '12' is longer than 10 s (write milliseconds: 12ms)"),
                       (("--loss", "120%"), "testbed link --loss: '120%' is not a loss between 0 and 100 % (e.g. 0.1% "
                                            "or 0.001)"),
                       (("--rtt", "2ms", "--jitter", "3ms"),
                        "testbed link client-net: jitter must be between 0 and half the rtt (each way's delay)")]:
        r = storeval("testbed", "link", "client-net", *args, "--dir", str(bed.dir))
        assert (r.rc, r.err_lines) == (2, [f"error: {line}"]), r
    r = storeval("testbed", "link", "controller", "--rtt", "1ms", "--dir", str(bed.dir))
    assert (r.rc, r.err_lines) == (2, ["error: testbed link HOST: 'controller' names storeval's own end of the emulated "
                                       "network; call the host otherwise"]), r
    r = storeval("testbed", "network", "--dir", str(tmp_path / "none"))
    assert r.rc == 0 and r.out.startswith("no emulated network here"), r
    r = storeval("testbed", "up", "glusterfs", "--host", "server1", "--dir", str(tmp_path / "g"))
    assert r.rc == 2 and len(r.err_lines) == 1 and "glusterfs cannot run on an emulated host" in r.err, r


def test_cli_link_makes_a_network_that_down_removes(tmp_path):
    d = tmp_path / "tb"
    r = storeval("testbed", "link", "far", "--rate", "125MB/s", "--rtt", "12ms", "--jitter", "1ms", "--loss", "0.1%",
                 "--dir", str(d))
    assert r.rc == 0, r.err
    assert r.out.strip().endswith("far (" + r.out.split("(")[1].split(")")[0] + "): rate 1 Gbit/s, rtt 12 ms ±1 ms, "
                                  "loss 0.1 %")
    net = Network.from_json(json.loads((d / "state.json").read_text())["network"])
    assert net.link_settings("far") == LinkSettings(rate=125e6, rtt=0.012, jitter=0.001, loss=0.001)
    relay = net.hosts["far"].relay["pid"]
    assert net.alive() and psutil.pid_exists(relay)
    r = storeval("testbed", "down", "--dir", str(d))
    assert r.rc == 0, r.err
    _assert_gone(net)
    assert not d.exists()


def _assert_gone(net: Network) -> None:
    assert net.made() == []  # its hosts' control groups included
    for root in (mount(), BLKIO):
        assert not [g for g in os.listdir(root) if g.startswith(f"storeval-host-svn-{net.token}-")]
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert f"svn-{net.token}-" not in names
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    assert net.controller_if not in links
    for h in net.hosts.values():
        if h.relay:
            try:
                p = psutil.Process(h.relay["pid"])
                assert abs(p.create_time() - h.relay["create_time"]) >= 0.5 or p.status() == psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                pass
    assert not os.path.exists(net.workdir)


def test_remove_from_the_record_alone(tmp_path):
    """create(), the object forgotten (its creator killed), rebuilt from the JSON: remove() finds everything."""
    net = Network.plan({"a": None, "b": "wan"})
    net.create()
    net.set_link("b", LinkSettings(rate=GBIT, rtt=0.004))
    record = json.dumps(net.to_json())  # the relay's PID is recorded once started
    del net
    again = Network.from_json(json.loads(record))
    assert again.alive()
    again.remove()
    _assert_gone(again)
    again.remove()  # safe to repeat
    _assert_gone(again)


def test_remove_after_a_create_killed_half_way(tmp_path):
    """A process that records the plan, starts create() and is SIGKILLed once the switch exists: remove() from
    the record removes what it had made, whatever that was."""
    record = tmp_path / "net.json"
    code = (f"import json\nfrom storeval.testbed.network import Network\nn = Network.plan({{'a': None, 'b': 'wan', "
            f"'c': 'wan'}})\nopen({str(record)!r}, 'w').write(json.dumps(n.to_json()))\nn.create()\n")
    # a process group of its own, killed as a whole (as mpiexec, Slurm or a terminal kill a run): an `ip` command
    # the create had started would otherwise finish after the kill, on a busy machine even after remove()
    child = subprocess.Popen([sys.executable, "-c", code], env=_env(), start_new_session=True)
    try:
        poll(lambda: record.exists() and record.stat().st_size > 0, "the plan")
        net = Network.from_json(json.loads(record.read_text()))
        poll(lambda: os.path.exists(f"/run/netns/{net.switch}") or child.poll() is not None, "the switch")
        time.sleep(0.05)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    poll(lambda: not _in_group(child.pid), "the killed group's processes to end")
    net.remove()
    _assert_gone(net)
    # relays the killed create started were never recorded (nobody saved them): found in its switch, stopped
    assert not [p for p in psutil.process_iter(["cmdline"]) if net.workdir in " ".join(p.info["cmdline"] or [])]


def test_cli_network_down_removes_the_network_and_the_empty_testbed(tmp_path):
    d = tmp_path / "tb"
    r = storeval("testbed", "link", "far", "--rtt", "2ms", "--dir", str(d))
    assert r.rc == 0, r.err
    try:
        _probe_spec_then_down(d)
    finally:  # a failed check leaves no network behind
        if d.exists():
            storeval("testbed", "network", "--down", "--dir", str(d))


def _probe_spec_then_down(d: Path) -> None:
    net = Network.from_json(json.loads((d / "state.json").read_text())["network"])
    spec = net.probe_spec()
    relay = net.hosts["far"].relay
    assert spec == {"far": {"netns": net.netns("far"), "dev": "eth0", "tbf": [],
                            "cgroup": f"/storeval-host-{net.netns('far')}",
                            "blkio": f"/storeval-host-{net.netns('far')}",
                            "relay_stats": f"{net.workdir}/relay-1.stats.json",
                            "relay": {"pid": relay["pid"], "created": relay["create_time"]}}}
    r = storeval("testbed", "network", "--down", "--dir", str(d))
    assert r.rc == 0, r.err
    _assert_gone(net)
    assert not d.exists()
    r = storeval("testbed", "network", "--down", "--dir", str(d))
    assert r.rc == 0 and "no emulated network" in r.err, r


def test_a_server_on_an_emulated_host_and_down_removes_the_network(tmp_path):
    from storeval.testbed.minio import install_minio

    install_minio()  # built (or found cached) now: a build that fails is this test's failure, not a skip
    from .helpers import exposed

    d = tmp_path / "tb"
    r = storeval("testbed", "up", "minio", "--host", "server1", "--dir", str(d), timeout=600)
    assert r.rc == 0, r.err
    bed = Testbed(d, targets_file=tmp_path / "storeval-testbed.yaml")
    net = bed.network()
    assert net is not None and list(net.hosts) == ["server1"] and net.hosts["server1"].link is None
    server = bed.load()["minio"]
    address = net.address("server1")
    assert server.state.info["placement"]["netns"] == net.netns("server1")
    targets = bed.targets()
    assert targets and all(address in json.dumps(t) for t in targets.values()), targets  # URL or endpoint
    assert exposed([p.pid for p in server.state.procs]) == []  # nothing listens in the root namespace
    # what runs on the host is counted as one control group; the server's own group is inside it
    host_group = f"/storeval-host-{net.netns('server1')}"
    group = Path(server.state.info["cgroup"])
    assert group.parent.name == host_group[1:] and group.name.startswith("storeval-minio-") and group.is_dir()
    for p in server.state.procs:
        assert group_of(p.pid) == f"{host_group}/{group.name}"
    blkio = Path(server.state.info["blkio"])  # its disk's group, inside the host's too
    assert blkio.parent.name == host_group[1:] and blkio.parent.parent == Path(BLKIO)
    counted = link_counters(net.probe_spec())["server1"]
    assert counted["cpu_seconds"] > 0 and counted["cpu_seconds"] >= counted["user_seconds"]  # it started there
    assert {"disk_read_bytes", "disk_write_bytes", "disk_read_ops", "disk_write_ops"} <= set(counted)
    assert read_groups([f"{host_group}/{group.name}"])[f"{host_group}/{group.name}"]["cpu_seconds"] <= \
        counted["cpu_seconds"]  # the host's group holds the server's
    port = server.state.ports["api"] if "api" in server.state.ports else next(iter(server.state.ports.values()))
    with socket.create_connection((address, port), timeout=10):  # the controller reaches it
        pass
    # a client host behind a 4 ms link reaches it too, 4 ms away
    bed.network_up({"client-net": "wan"}, {"wan": LinkSettings(rtt=0.004)}, log=lambda m: None)
    got = measure_rtt(bed.network().netns("client-net"), address, port, count=20)
    # what a connect costs this host over an unshaped path at the same moment (a busy host wakes the server and the
    # client late): the emulated delay is the rest, never less than asked and, for the fastest connect, at most that
    # cost more
    unshaped = measure_rtt(None, address, port, count=20)
    assert 0.004 - 0.0004 <= got["min_s"] <= 0.004 + 0.0007 + unshaped["p90_s"], (got, unshaped)
    assert got["median_s"] >= 0.004 - 0.0004, got  # a late wake-up (a busy host) only lengthens the rest
    r = storeval("testbed", "network", "--down", "--dir", str(d))
    assert r.rc == 1 and "minio run on the emulated network" in r.err, r
    r = storeval("testbed", "down", "--dir", str(d))
    assert r.rc == 0, r.err
    _assert_gone(net)
    assert not d.exists() and not group.exists() and not group.parent.exists() and not blkio.parent.exists()
