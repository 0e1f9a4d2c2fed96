"""Emulated hosts and links on this one machine: network namespaces, veth pairs, a bridge, tbf and a relay.

A :class:`Network` (token ``T``, six hex digits) is:

* a switch namespace ``svn-T-sw`` holding a bridge ``br0`` (no address);
* per emulated host ``i`` a namespace ``svn-T-<i>`` with ``lo`` and ``eth0`` (a veth) carrying the host's
  address; the other end, ``h<i>``, sits in the switch namespace. Host names are the user's: they never appear
  in an interface or namespace name;
* the controller: a veth ``svTc`` from the root namespace to the bridge with the subnet's ``.1``, so that
  storeval's coordinator, probes and cleanup reach every host's servers, unshaped.

A host without a link has ``h<i>`` on the bridge. A host with a link has ``h<i>`` off the bridge; a second veth
pair ``r<i>``↔``p<i>`` has ``p<i>`` on the bridge, and a relay process (:mod:`.relay`) in the switch namespace
carries frames between ``h<i>`` and ``r<i>`` after the link's delay, with its jitter and loss. The rate is a
``tbf`` on the host's ``eth0`` (what it sends) and on ``h<i>`` (what it receives): both directions shaped. The
path between two hosts crosses both hosts' links (their delays add); the controller is "no host" (no link).

The subnet is a free /24 of 10.0.0.0/8 (nothing on this machine uses it); there is no default route and no
forwarding anywhere, so nothing leaves the machine through it and nothing outside reaches it.

Everything is recorded before it is made: :meth:`Network.plan` chooses names and addresses, the caller saves
``to_json()``, then :meth:`Network.create` makes them (and :meth:`Network.add_hosts` records new hosts through
``on_change`` before making them). :meth:`Network.remove` stops the relays by PID (and start time), deletes the
namespaces (their veths and qdiscs go with them), the controller's veth if it outlived them, the relays' files
and the ``/run/netns`` mount when storeval made it and nothing is left in it; it is safe to repeat and after a
create that was killed half-way. Names carry the random token and ``ip`` refuses names that exist, so what a
removal deletes is what this plan made. Root is needed.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import psutil

from ..core import process
from ..units import format_bitrate
from . import cgroups
from .base import Proc, TestbedError, spawn, terminate, wait_until
from .mpilaunch import WRAPPER, removable_names, write_launchers
from .netns import (GONE_WAIT, Taken, _ip, add_netns, free_subnet, link_exists, netns_exists, run_tool,
                    netns_pids, release_run_netns, used_networks)

NET_PREFIX = 24
CONTROLLER = "controller"
MIN_RATE = 1e3  # bytes/s (8 kbit/s): tbf's rate table cannot go below; a typo (1bit) is refused, not sent to tc
MAX_RATE = 1.25e11  # bytes/s (1 Tbit/s): beyond what a veth moves
RUN_DIR = "/run"  # where each network's relay files live (/run/storeval-net-<token>)
TBF_LATENCY_MIN = 0.01  # seconds of queue a tbf holds at least (it holds one round trip at most beyond that)
TBF_BURST_MIN = 128 << 10  # bytes: below the GSO frame size TCP stalls (TESTBED-NOTES)
TCP_MEM_MAX = 64 << 20  # each host's TCP buffers may grow this far (a WAN-tuned host: 1 Gbit/s × 50 ms fits)
RELAY_READY = 15.0


@dataclass
class LinkSettings:
    """One link's properties now."""

    rate: float | None = None  # bytes/s, None = unlimited
    rtt: float = 0.0  # seconds (one-way delay each way = rtt/2)
    jitter: float = 0.0  # seconds (± per direction, order kept)
    loss: float = 0.0  # fraction 0..1 per direction

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any] | None) -> LinkSettings:
        d = d or {}
        return cls(rate=d.get("rate"), rtt=float(d.get("rtt", 0.0)), jitter=float(d.get("jitter", 0.0)),
                   loss=float(d.get("loss", 0.0)))

    def check(self, what: str = "link") -> LinkSettings:
        """Itself, or a one-line TestbedError naming the value out of range."""
        if self.rate is not None and not MIN_RATE <= self.rate <= MAX_RATE:
            raise TestbedError(f"{what}: rate must be between 8kbit and 1tbit (e.g. 1gbit, 125MB/s), or none for "
                               "unlimited")
        if not 0 <= self.rtt <= 10:
            raise TestbedError(f"{what}: rtt must be between 0 and 10 s (write milliseconds: 12ms)")
        if not 0 <= self.jitter <= self.rtt / 2 + 1e-12:
            raise TestbedError(f"{what}: jitter must be between 0 and half the rtt (each way's delay)")
        if not 0 <= self.loss < 1:
            raise TestbedError(f"{what}: loss must be between 0 and 100 % (e.g. 0.1%)")
        return self

    def describe(self) -> str:
        rate = format_bitrate(self.rate) if self.rate else "unlimited"
        out = f"rate {rate}, rtt {self.rtt * 1e3:g} ms"
        if self.jitter:
            out += f" ±{self.jitter * 1e3:g} ms"
        if self.loss:
            out += f", loss {self.loss * 100:g} %"
        return out


@dataclass
class HostInfo:
    """One emulated host, as planned."""

    name: str  # the user's name for it
    index: int
    netns: str  # svn-T-<index>
    address: str
    link: str | None = None  # the link's name, None: on the bridge directly
    settings: dict[str, Any] = field(default_factory=dict)  # LinkSettings now (as JSON)
    relay: dict[str, Any] | None = None  # the relay's Proc (as JSON) once started

    @property
    def peer_if(self) -> str:
        """The switch namespace's end of the host's veth."""
        return f"h{self.index}"

    @property
    def relay_if(self) -> str:
        return f"r{self.index}"

    @property
    def port_if(self) -> str:
        return f"p{self.index}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> HostInfo:
        return cls(name=str(d["name"]), index=int(d["index"]), netns=str(d["netns"]), address=str(d["address"]),
                   link=d.get("link"), settings=dict(d.get("settings") or {}), relay=d.get("relay"))


def _tc(netns: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return run_tool(["tc", "-n", netns, *args], "tc", check)


def require_root() -> None:
    if os.geteuid() != 0:
        raise TestbedError("emulated hosts and links are network namespaces, which need root: run storeval as root")


class Network:
    """Emulated hosts joined by a bridge, each with an optional link (rate, delay, jitter, loss)."""

    def __init__(self, token: str, subnet: str, workdir: str, hosts: dict[str, HostInfo] | None = None) -> None:
        self.token = token
        self.subnet = subnet  # "10.a.b.0/24"
        self.workdir = workdir  # the relays' settings, statistics and logs
        self.hosts: dict[str, HostInfo] = hosts or {}
        self.on_change: Callable[[], None] | None = None  # called when the plan grew or a relay started

    # -- names ----------------------------------------------------------------------------------------------
    @property
    def switch(self) -> str:
        return f"svn-{self.token}-sw"

    @property
    def controller_if(self) -> str:
        """The root namespace's end of the controller's veth (≤ 15 characters)."""
        return f"sv{self.token}c"

    @property
    def controller_addr(self) -> str:
        return self._addr(1)

    def _addr(self, n: int) -> str:
        base = self.subnet.split("/")[0].rsplit(".", 1)[0]
        return f"{base}.{n}"

    def netns(self, host: str) -> str:
        return self._host(host).netns

    def address(self, host: str) -> str:
        return self._host(host).address

    def _host(self, host: str) -> HostInfo:
        if host not in self.hosts:
            raise TestbedError(f"no emulated host '{host}' (hosts: {', '.join(self.hosts) or 'none'})")
        return self.hosts[host]

    def _files(self, info: HostInfo) -> dict[str, Path]:
        base = Path(self.workdir) / f"relay-{info.index}"
        return {"settings": base.with_suffix(".json"), "stats": Path(f"{base}.stats.json"),
                "log": base.with_suffix(".log")}

    # -- planning --------------------------------------------------------------------------------------------
    @classmethod
    def plan(cls, hosts: dict[str, str | None], token: str | None = None) -> Network:
        """Names, a free /24 and addresses (nothing is made): record ``to_json()``, then :meth:`create`."""
        token = token or secrets.token_hex(3)
        net = free_subnet(used_networks(), prefix=NET_PREFIX)
        out = cls(token, str(net), os.path.join(RUN_DIR, f"storeval-net-{token}"))
        out._plan_hosts(hosts)
        return out

    def _plan_hosts(self, hosts: dict[str, str | None]) -> list[HostInfo]:
        new = []
        for name, link in hosts.items():
            if not isinstance(name, str) or not name or not name.isprintable() or len(name) > 64:
                raise TestbedError(f"emulated host name {name!r}: give 1-64 printable characters")
            if name == CONTROLLER:
                raise TestbedError(f"'{CONTROLLER}' names storeval's own end of the network: call the host otherwise")
            if name in self.hosts:
                continue
            index = max((h.index for h in self.hosts.values()), default=0) + 1
            if index + 1 > 254:
                raise TestbedError(f"at most 253 emulated hosts fit the network's /{NET_PREFIX}")
            info = HostInfo(name=name, index=index, netns=f"svn-{self.token}-{index}", address=self._addr(index + 1),
                            link=link, settings=LinkSettings().to_json())
            self.hosts[name] = info
            new.append(info)
        return new

    def to_json(self) -> dict[str, Any]:
        return {"token": self.token, "subnet": self.subnet, "workdir": self.workdir,
                "hosts": [h.to_json() for h in self.hosts.values()]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Network:
        try:
            token, subnet, workdir = str(d["token"]), str(d["subnet"]), str(d["workdir"])
            hosts = {h["name"]: HostInfo.from_json(h) for h in d.get("hosts", [])}
        except (KeyError, TypeError, ValueError, AttributeError):
            raise TestbedError("the recorded network is damaged (edited?)") from None
        if not (len(token) == 6 and all(c in "0123456789abcdef" for c in token)) or \
                workdir != os.path.join(RUN_DIR, f"storeval-net-{token}"):
            raise TestbedError("the recorded network is damaged (edited?)")
        return cls(token, subnet, workdir, hosts)

    def _journal(self) -> None:
        if self.on_change is not None:
            self.on_change()

    # -- making ------------------------------------------------------------------------------------------------
    def create(self) -> None:
        """Make the switch, the controller's veth and every planned host. Raises :class:`Taken` (nothing made)
        when a name exists already; TestbedError if a step fails (what was made stays for :meth:`remove`)."""
        require_root()
        if netns_exists(self.switch) or link_exists(self.controller_if) or os.path.lexists(self.workdir):
            raise Taken(f"network namespace {self.switch}, link {self.controller_if} or {self.workdir} exists already")
        os.mkdir(self.workdir, 0o700)  # refuses one that exists: ours alone
        add_netns(self.switch)
        self._sysctl(self.switch, {"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1",
                                   "net.ipv4.ip_forward": "0"})
        _ip("-n", self.switch, "link", "set", "lo", "up")
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        # the pair is made with its far end already inside the switch: never both ends in the root namespace
        _ip("link", "add", self.controller_if, "type", "veth", "peer", "name", "c0", "netns", self.switch)
        _ip("link", "set", "dev", self.controller_if, "addrgenmode", "none")
        _ip("addr", "add", f"{self.controller_addr}/{NET_PREFIX}", "dev", self.controller_if)
        with contextlib.suppress(OSError):  # nothing that arrives from the emulated hosts is routed onwards
            Path(f"/proc/sys/net/ipv4/conf/{self.controller_if}/forwarding").write_text("0")
        _ip("-n", self.switch, "link", "set", "c0", "master", "br0")
        _ip("-n", self.switch, "link", "set", "c0", "up")
        _ip("link", "set", self.controller_if, "up")
        clash = self._clash()
        if clash:
            raise TestbedError(f"emulated network {self.subnet}: {clash} took an address of it at the same time; "
                               "`storeval testbed down`, then try again")
        for info in self.hosts.values():
            self._make_host(info)
        self._write_launchers()

    @property
    def mpiexec(self) -> str:
        """The ``mpiexec`` that launches onto this network's hosts (:mod:`.mpilaunch`)."""
        return os.path.join(self.workdir, WRAPPER)

    def _write_launchers(self) -> None:
        write_launchers(self.workdir, self.token, {h.name: h.netns for h in self.hosts.values()}, self.controller_if)

    def _clash(self) -> str | None:
        """Another interface of the root namespace with an address in this subnet (a concurrent plan)."""
        net = ipaddress.ip_network(self.subnet)
        for line in _ip("-o", "-4", "addr", "show").stdout.splitlines():
            parts = line.split()
            if len(parts) > 3 and parts[1] != self.controller_if and parts[2] == "inet":
                with contextlib.suppress(ValueError):
                    if ipaddress.ip_interface(parts[3]).network.overlaps(net):
                        return parts[1]
        return None

    def add_hosts(self, hosts: dict[str, str | None]) -> None:
        """Grow a running network by the hosts not in it yet (recorded through ``on_change`` first)."""
        new = self._plan_hosts(hosts)
        if new:
            self._journal()
        for info in new:
            self._make_host(info)
        if new:
            self._write_launchers()

    def _sysctl(self, netns: str, values: dict[str, str]) -> None:
        run_tool(["ip", "netns", "exec", netns, "sysctl", "-q", "-w", *(f"{k}={v}" for k, v in values.items())],
             f"network namespace {netns}")

    def _make_host(self, info: HostInfo) -> None:
        add_netns(info.netns)
        cgroups.make_host(info.netns)  # what runs on the host is counted as a whole (testbed/cgroups.py)
        self._sysctl(info.netns, {"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1",
                                  "net.ipv4.ip_forward": "0",
                                  "net.ipv4.tcp_rmem": f"4096 131072 {TCP_MEM_MAX}",
                                  "net.ipv4.tcp_wmem": f"4096 16384 {TCP_MEM_MAX}"})
        _ip("-n", info.netns, "link", "set", "lo", "up")
        _ip("-n", self.switch, "link", "add", info.peer_if, "type", "veth", "peer", "name", "eth0", "netns", info.netns)
        _ip("-n", info.netns, "addr", "add", f"{info.address}/{NET_PREFIX}", "dev", "eth0")
        _ip("-n", info.netns, "link", "set", "eth0", "up")
        if info.link is None:
            _ip("-n", self.switch, "link", "set", info.peer_if, "master", "br0")
            _ip("-n", self.switch, "link", "set", info.peer_if, "up")
        else:
            self._make_link(info)

    def _make_link(self, info: HostInfo) -> None:
        """Take the host's veth off the bridge and put a relay between it and a new bridge port."""
        _ip("-n", self.switch, "link", "set", info.peer_if, "nomaster")
        if not link_exists(info.relay_if, self.switch):
            _ip("-n", self.switch, "link", "add", info.relay_if, "type", "veth", "peer", "name", info.port_if)
        _ip("-n", self.switch, "link", "set", info.port_if, "master", "br0")
        for name in (info.port_if, info.relay_if, info.peer_if):
            _ip("-n", self.switch, "link", "set", name, "up")
        files = self._files(info)
        self._write_settings(info)
        env = dict(os.environ)
        here = str(Path(__file__).resolve().parents[2])  # the directory storeval is imported from
        env["PYTHONPATH"] = os.pathsep.join([here, *filter(None, [env.get("PYTHONPATH")])])
        fd = os.open(files["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            proc = spawn(["ip", "netns", "exec", self.switch, sys.executable, "-m", "storeval.testbed.relay",
                          "--up-if", info.peer_if, "--down-if", info.relay_if, "--settings", str(files["settings"]),
                          "--stats", str(files["stats"])], name=f"relay {info.name}", log=files["log"], out=fd,
                         env={"PYTHONPATH": env["PYTHONPATH"]})
        finally:
            os.close(fd)
        info.relay = asdict(proc)
        self._journal()

        def ready() -> bool:
            if not proc.alive():
                tail = " | ".join(files["log"].read_text(errors="replace").strip().splitlines()[-2:])
                raise TestbedError(f"the relay of emulated host {info.name} exited: {tail or 'no output'}")
            return files["stats"].exists()

        wait_until(ready, RELAY_READY, f"the relay of emulated host {info.name}", log=files["log"])
        self._shape(info, LinkSettings.from_json(info.settings))

    def _write_settings(self, info: HostInfo) -> None:
        path = self._files(info)["settings"]
        tmp = path.with_name(f".{path.name}.tmp")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "w") as f:
            json.dump(info.settings, f)
        os.replace(tmp, path)

    def _shape(self, info: HostInfo, s: LinkSettings) -> None:
        """tbf at the link's rate on both ends of the host's veth (what it sends, what it receives), or none."""
        for netns, dev in ((info.netns, "eth0"), (self.switch, info.peer_if)):
            if s.rate:
                burst = max(TBF_BURST_MIN, int(s.rate * 0.002))
                limit = burst + int(s.rate * max(TBF_LATENCY_MIN, s.rtt))  # about one round trip of queue
                _tc(netns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{int(s.rate * 8)}bit",
                    "burst", str(burst), "limit", str(limit))
            else:
                proc = _tc(netns, "qdisc", "del", "dev", dev, "root", check=False)
                if proc.returncode and "No such file" not in proc.stderr and "Cannot delete qdisc with handle of zero" \
                        not in proc.stderr:
                    raise TestbedError(f"tc qdisc del dev {dev} root (in {netns}) failed: {' '.join(proc.stderr.split())}")

    def set_link(self, host: str, settings: LinkSettings) -> None:
        """Change a host's link now (tc qdisc replace, then the relay reads its new settings on SIGHUP). A host
        without a link gets one, named after the host."""
        settings.check(f"link of {host}")
        info = self._host(host)
        if info.link is None:
            info.settings = settings.to_json()
            info.link = host
            self._journal()
            self._make_link(info)
            return
        relay = self._relay(info)
        if relay is None:
            raise TestbedError(f"the relay of emulated host {host} is not running: `storeval testbed down` and up again")
        # the settings recorded are always those in force: a change that fails half-way is put back
        previous = info.settings
        info.settings = settings.to_json()
        try:
            self._shape(info, settings)
            self._write_settings(info)
            stats = self._files(info)["stats"]
            before = self._reloads(stats)
            os.kill(relay.pid, 1)  # SIGHUP: read the settings again
            wait_until(lambda: self._reloads(stats) > before, RELAY_READY,
                       f"the relay of {host} taking its new settings")
        except BaseException:
            info.settings = previous
            with contextlib.suppress(Exception):
                self._shape(info, LinkSettings.from_json(previous))
                self._write_settings(info)
                os.kill(relay.pid, 1)
            raise
        finally:
            self._journal()

    @staticmethod
    def _reloads(stats: Path) -> int:
        with contextlib.suppress(OSError, ValueError):
            return int(json.loads(stats.read_text()).get("reloads", 0))
        return -1

    def _relay(self, info: HostInfo) -> Proc | None:
        if not info.relay:
            return None
        proc = Proc(**info.relay)
        return proc if proc.alive() else None

    def link_settings(self, host: str) -> LinkSettings:
        return LinkSettings.from_json(self._host(host).settings)

    # -- a node's faults (handles host.NAME: testbed/faults.py) ----------------------------------------------
    def host_pids(self, host: str) -> list[int]:
        """Every process in the host's network namespace now: what runs on that node (the ranks and commands
        launched onto it, a server placed there). Its link's relay runs in the switch's namespace: not among them."""
        info = self._host(host)
        try:
            ns = os.stat(f"/run/netns/{info.netns}")
        except FileNotFoundError:
            raise TestbedError(f"emulated host {host}'s namespace {info.netns} is gone") from None
        out = []
        for pid in os.listdir("/proc"):
            if pid.isdigit() and int(pid) != os.getpid():
                try:
                    st = os.stat(f"/proc/{pid}/ns/net")
                except OSError:
                    continue
                if (st.st_ino, st.st_dev) == (ns.st_ino, ns.st_dev):
                    out.append(int(pid))
        return out

    def host_groups(self, host: str) -> tuple[str, ...]:
        """The host's control groups that are there (testbed/cgroups.py): what runs on it joins them."""
        return tuple(str(g) for g in cgroups.host_paths(self._host(host).netns))

    def host_up(self, host: str) -> bool:
        """Whether the host's own interface (eth0 in its namespace) is up."""
        out = _json(run_tool(["ip", "-n", self._host(host).netns, "-j", "link", "show", "eth0"], check=False).stdout)
        return bool(out) and "UP" in out[0].get("flags", [])

    def set_host_up(self, host: str, up: bool) -> None:
        """Take the host's own interface down (nothing reaches it or leaves it: a node gone from the network) or
        up again."""
        _ip("-n", self._host(host).netns, "link", "set", "eth0", "up" if up else "down")

    # -- looking -------------------------------------------------------------------------------------------
    def broken(self) -> list[str]:
        """What of the network is gone now (the switch, a host's namespace, a link's relay), one phrase each."""
        out = [] if netns_exists(self.switch) else [f"the switch namespace {self.switch}"]
        for h in self.hosts.values():
            if not netns_exists(h.netns):
                out.append(f"host {h.name}'s namespace {h.netns}")
            elif h.link and self._relay(h) is None:
                out.append(f"the relay of host {h.name}'s link {h.link}" + (f" (pid {h.relay['pid']})" if h.relay else ""))
        return out

    def alive(self) -> bool:
        """Whether the switch, every host and every relay are there."""
        return (netns_exists(self.switch) and all(netns_exists(h.netns) for h in self.hosts.values())
                and all(self._relay(h) is not None for h in self.hosts.values() if h.link))

    def status(self) -> list[str]:
        """One line for the network, one per host: what is there now."""
        if not netns_exists(self.switch):
            return [f"network {self.subnet}: not there (`storeval testbed down` removes what is left of it)"]
        lines = [f"network {self.subnet}: switch {self.switch}, controller {self.controller_addr} ({self.controller_if})"]
        for h in self.hosts.values():
            where = f"{h.name}: {h.address} in {h.netns}" + ("" if netns_exists(h.netns) else " (MISSING)")
            if h.link:
                relay = self._relay(h)
                where += (f", link {h.link}: {LinkSettings.from_json(h.settings).describe()}, relay "
                          + (f"pid {relay.pid} up" if relay else "DOWN"))
            else:
                where += ", no link (on the bridge)"
            lines.append(where)
        return lines

    def counters(self) -> dict[str, dict[str, float]]:
        """Per host, cumulative: what it sent and received (bytes, packets, drops of its veth), its link's tbf
        queues (``out_`` what it sends, ``in_`` what it receives: backlog, drops, overlimits) and its relay's
        statistics (``relay_up_*`` from the host, ``relay_down_*`` to it). One ``ip -s -j link`` and one ``tc -s
        -j qdisc`` in the switch namespace, one ``tc`` per host with a rate, and the relays' files."""
        out: dict[str, dict[str, float]] = {}
        if not netns_exists(self.switch):
            return out
        links = {d.get("ifname"): d.get("stats64", {}) for d in _json(_ip("-n", self.switch, "-s", "-j", "link", "show",
                                                                           check=False).stdout)}
        qdiscs = {q.get("dev"): q for q in _json(_tc(self.switch, "-s", "-j", "qdisc", "show", check=False).stdout)
                  if q.get("root")}
        for h in self.hosts.values():
            st = links.get(h.peer_if, {})
            rx, tx = st.get("rx", {}), st.get("tx", {})
            c = {"tx_bytes": rx.get("bytes", 0), "tx_packets": rx.get("packets", 0),  # the host sends what its peer
                 "rx_bytes": tx.get("bytes", 0), "rx_packets": tx.get("packets", 0),  # receives, and vice versa
                 "drops": rx.get("dropped", 0) + tx.get("dropped", 0)}
            s = LinkSettings.from_json(h.settings)
            c["rate_bytes_s"] = float(s.rate or 0.0)
            c["rtt_s"] = s.rtt
            for prefix, q in (("in_", qdiscs.get(h.peer_if)), ("out_", self._host_qdisc(h) if s.rate else None)):
                q = q if q and q.get("kind") == "tbf" else {}
                c[prefix + "backlog_bytes"] = q.get("backlog", 0)
                c[prefix + "qdisc_drops"] = q.get("drops", 0)
                c[prefix + "overlimits"] = q.get("overlimits", 0)
            if h.link:
                stats = {}
                with contextlib.suppress(OSError, ValueError):
                    stats = json.loads(self._files(h)["stats"].read_text())
                for way in ("up", "down"):
                    for k, v in (stats.get(way) or {}).items():
                        c[f"relay_{way}_{k}"] = v
            out[h.name] = {k: float(v) for k, v in c.items()}
        return out

    def probe_spec(self) -> dict[str, dict[str, Any]]:
        """Where the link probe (probes/links.py) reads each host: its namespace and interface, its link's tbf
        queues ([namespace, device] pairs: what it sends, what it receives) and its relay's statistics file."""
        out = {}
        for h in self.hosts.values():
            rate = LinkSettings.from_json(h.settings).rate
            group, blkio = cgroups.host_path(h.netns), cgroups.host_path(h.netns, blkio=True)
            out[h.name] = {"netns": h.netns, "dev": "eth0", "cgroup": f"/{group.name}" if group else None,
                           "blkio": f"/{blkio.name}" if blkio else None,
                           "tbf": [[h.netns, "eth0"], [self.switch, h.peer_if]] if h.link and rate else [],
                           "relay_stats": str(self._files(h)["stats"]) if h.link else None,
                           "relay": ({"pid": h.relay["pid"], "created": h.relay["create_time"]}
                                     if h.link and h.relay else None)}
        return out

    def _host_qdisc(self, h: HostInfo) -> dict[str, Any] | None:
        for q in _json(_tc(h.netns, "-s", "-j", "qdisc", "show", "dev", "eth0", check=False).stdout):
            if q.get("root"):
                return q
        return None

    # -- removing --------------------------------------------------------------------------------------------
    def remove(self) -> None:
        """Stop the relays, delete the namespaces (their veths and qdiscs go with them), the controller's veth if
        it outlived them, the relays' files, and ``/run/netns``'s mount when storeval made it and it is empty.
        Safe to repeat. Raises TestbedError naming what stays."""
        stays = []
        for h in self.hosts.values():
            if h.relay:
                try:
                    Proc(**h.relay).stop(grace=5)
                except TestbedError as e:
                    stays.append(str(e))
        stays += self._stop_unrecorded_relays()
        for name in [*(h.netns for h in self.hosts.values()), self.switch]:
            if netns_exists(name):
                kept = netns_pids(name)
                _ip("netns", "del", name, check=False)
                if netns_exists(name):
                    stays.append(f"network namespace {name} (`ip netns del {name}`)")
                elif kept:
                    stays.append(f"network namespace {name} lives on in processes {' '.join(map(str, kept))} "
                                 "(stop them)")
        for h in self.hosts.values():  # empty once the host's processes and servers are gone
            for group in cgroups.host_paths(h.netns):
                why = cgroups.remove(group)
                if why is not None:
                    stays.append(f"host {h.name}'s control group {group}: {why}")
        deadline = time.monotonic() + GONE_WAIT
        while link_exists(self.controller_if) and time.monotonic() < deadline:
            time.sleep(0.05)  # the kernel dismantles a namespace in the background
        if link_exists(self.controller_if):
            _ip("link", "del", self.controller_if, check=False)
            if link_exists(self.controller_if):
                stays.append(f"link {self.controller_if} (`ip link del {self.controller_if}`)")
        self._remove_files()
        release_run_netns()
        if stays:
            raise TestbedError(f"network {self.token}: left {'; '.join(stays)}")

    def _stop_unrecorded_relays(self) -> list[str]:
        """Relays a create killed between starting them and recording them: processes inside this network's
        switch namespace (its name carries the token: only this network's relays are ever put there) running the
        relay on this network's files."""
        if not netns_exists(self.switch):
            return []
        found = []
        for pid in netns_pids(self.switch):
            with contextlib.suppress(psutil.Error):
                p = psutil.Process(pid)
                args = p.cmdline()
                if "storeval.testbed.relay" in args and any(a.startswith(self.workdir + "/") for a in args):
                    found.append(p)
        try:
            terminate(found, 5)
        except psutil.AccessDenied:
            return [f"relay processes {' '.join(str(p.pid) for p in found)} (not allowed to stop them)"]
        return [f"relay pid {p.pid} (did not end after SIGKILL)" for p in found if p.is_running()
                and p.status() != psutil.STATUS_ZOMBIE]

    def _remove_files(self) -> None:
        """The relays' files (only the names storeval writes) and the directory, when nothing else is in it."""
        if not os.path.isdir(self.workdir) or os.path.islink(self.workdir):
            return
        names = removable_names()
        for h in self.hosts.values():
            for p in self._files(h).values():
                names.add(p.name)
            names.add(f".{self._files(h)['settings'].name}.tmp")
        for entry in os.listdir(self.workdir):
            path = os.path.join(self.workdir, entry)
            if entry in names or (entry.startswith("relay-") and entry.endswith(".tmp") and ".stats.json." in entry):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
        with contextlib.suppress(OSError):
            os.rmdir(self.workdir)

    def made(self) -> list[str]:
        """What of this network is there now (names), for checks after a removal."""
        out = [n for n in [self.switch, *(h.netns for h in self.hosts.values())] if netns_exists(n)]
        out += [str(g) for h in self.hosts.values() for g in cgroups.host_paths(h.netns)]
        if link_exists(self.controller_if):
            out.append(self.controller_if)
        out += [f"relay pid {h.relay['pid']}" for h in self.hosts.values() if h.relay and Proc(**h.relay).alive()]
        if os.path.exists(self.workdir):
            out.append(self.workdir)
        return out


def _json(text: str) -> list[dict[str, Any]]:
    try:
        data = json.loads(text or "[]")
    except ValueError:
        return []
    return [d for d in data if isinstance(d, dict)] if isinstance(data, list) else []


def enter_netns(name: str) -> None:
    """Move the calling thread into the network namespace ``name`` (``/run/netns/<name>``): sockets made after
    this live there (:func:`storeval.core.process.enter_netns`, which the clients use). One-line TestbedError
    when not root or the namespace is missing."""
    if os.geteuid() != 0:
        raise TestbedError(f"entering network namespace {name} needs root: run storeval as root")
    try:
        process.enter_netns(name)
    except FileNotFoundError:
        raise TestbedError(f"network namespace {name} does not exist (is the testbed network up?)") from None
    except OSError as e:
        raise TestbedError(f"cannot enter network namespace {name}: {e.strerror or e}") from None


TCPI_RTT = 68  # offset of tcpi_rtt (µs, u32) in struct tcp_info: 8 one-byte fields, then 15 u32 before it


def connect_times(address: str, port: int, count: int, pause: float = 0.01) -> list[float]:
    """The round trip of each of ``count`` TCP connects to ``address:port`` (a SYN and its SYN-ACK), in seconds:
    the kernel's own sample (``TCP_INFO``'s rtt, timed where the packets are sent and received), so a busy host
    that is slow to run this process does not lengthen it; the time ``connect`` took where that is unavailable."""
    out = []
    for _ in range(count):
        t = time.perf_counter()
        with socket.create_connection((address, port), timeout=10) as sock:
            took = time.perf_counter() - t
            try:
                info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
                kernel = int.from_bytes(info[TCPI_RTT:TCPI_RTT + 4], "little") / 1e6
            except OSError:
                kernel = 0.0
            out.append(kernel if 0 < kernel <= took else took)
        time.sleep(pause)
    return out


def measure_rtt(netns: str | None, address: str, port: int, count: int = 20) -> dict[str, float]:
    """Round trips of TCP connects from inside ``netns`` (None: this namespace) to ``address:port``
    (:func:`connect_times`): median, p90, min."""
    if netns is None:
        try:
            times = connect_times(address, port, count)
        except OSError as e:
            raise TestbedError(f"measuring the round trip to {address}:{port}: {e.strerror or e}") from None
    else:
        here = str(Path(__file__).resolve().parents[2])
        proc = subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-m", "storeval.testbed.network", "rtt",
                               address, str(port), str(count)], capture_output=True, text=True,
                              timeout=60 + 11 * count, env={**os.environ, "PYTHONPATH": here})
        if proc.returncode:
            why = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-1:]) or f"exit {proc.returncode}"
            raise TestbedError(f"measuring the round trip from {netns} to {address}:{port}: {why}")
        times = json.loads(proc.stdout)
    times.sort()
    return {"median_s": statistics.median(times), "p90_s": times[min(len(times) - 1, int(0.9 * len(times)))],
            "min_s": times[0], "count": float(len(times))}


def _main(argv: list[str]) -> None:
    if len(argv) == 4 and argv[0] == "rtt":
        try:
            print(json.dumps(connect_times(argv[1], int(argv[2]), int(argv[3]))))
        except OSError as e:
            print(f"connect to {argv[1]}:{argv[2]} failed: {e.strerror or e}", file=sys.stderr)
            sys.exit(1)
        return
    print("usage: python -m storeval.testbed.network rtt ADDRESS PORT COUNT", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
    _main(sys.argv[1:])


__all__ = ["Network", "HostInfo", "LinkSettings", "measure_rtt", "enter_netns", "connect_times", "Taken"]
