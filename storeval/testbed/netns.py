"""Network namespaces for testbed servers: a private network reached from this host over one veth pair.

Some servers cannot bind one address (XRootD 5.5 always listens on 0.0.0.0): started in the host's network
namespace they would be open to the whole network. A :class:`Netns` gives them a namespace of their own,
``storeval-<token>``, with ``lo`` up and one veth pair: the host end stays in the host namespace, the other end
is moved in, and both get an address of a /30 taken from 10.0.0.0/8 where it overlaps no address or route of
this host. Clients on this host reach the servers at :attr:`Netns.ns_addr` (their connections come from
:attr:`Netns.host_addr`, the client-facing address). Nothing is routed beyond the pair: the namespace has no
default route and the host end does not forward, so a packet from elsewhere can neither reach the servers nor
get an answer. ``ip netns exec NS CMD`` (:meth:`Netns.command`) starts a process inside; it execs ``CMD``, so
the PID recorded is the server's own.

Everything is recorded before it is made: :meth:`Netns.plan` chooses the names and addresses (no side effect),
the caller saves ``to_json()`` in its state, then :meth:`Netns.create` makes them. :meth:`Netns.remove` (safe
to repeat, and after a create that was killed half-way) deletes the namespace — the veth goes with it — and the
host end if it outlived it. The names carry a random token, and ``ip netns add`` / ``ip link add`` refuse a
name that exists, so what a removal deletes is what this plan created.

The first ``ip netns add`` on a host bind-mounts ``/run/netns`` onto itself. When a storeval namespace made
that mount, it says so in ``/run/storeval-netns-mount`` (made exclusively, storeval's alone); whichever storeval
namespace is removed last, with no namespace left in ``/run/netns``, unmounts it and removes that file. A
mount someone else made stays.

Root is needed for all of it; as another user :func:`require_root` says so in one line.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import random
import re
import secrets
import subprocess
import time
from dataclasses import asdict, dataclass
from typing import Any

from .base import TestbedError, mounted

RUN_NETNS = "/run/netns"
MOUNT_MARK = "/run/storeval-netns-mount"  # exists while storeval's `ip netns add` made the /run/netns mount
MOUNT_MARK_TEXT = ("storeval made the bind mount of /run/netns (its first `ip netns add`); the last storeval "
                   "namespace removed unmounts it and removes this file\n")
POOL = ipaddress.ip_network("10.0.0.0/8")  # private (RFC 1918); one /30 per namespace, where nothing else is
PREFIX = 30
PLAN_ATTEMPTS = 64
IP_TIMEOUT = 30.0
GONE_WAIT = 10.0  # seconds for a deleted namespace's veth to disappear


def require_root(what: str) -> None:
    """One line naming why root is needed, as any other user."""
    if os.geteuid() != 0:
        raise TestbedError(f"{what} runs in a network namespace of its own, which needs root: run storeval as root")


def run_tool(cmd: list[str], what: str = "", check: bool = True) -> subprocess.CompletedProcess:
    """``cmd`` (``ip``, ``tc``, ``sysctl`` …) to its end, output captured; one TestbedError line (``what: …``)
    naming the command and its message when it fails and ``check``."""
    at = f"{what}: " if what else ""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=IP_TIMEOUT)
    except FileNotFoundError:
        raise TestbedError(f"{at}the `{cmd[0]}` command is missing: apt-get install iproute2 procps") from None
    except subprocess.TimeoutExpired:
        raise TestbedError(f"{at}`{' '.join(cmd)}` did not finish within {IP_TIMEOUT:g} s") from None
    if check and proc.returncode:
        why = " ".join((proc.stderr or proc.stdout).split()) or f"exit {proc.returncode}"
        raise TestbedError(f"{at}`{' '.join(cmd)}` failed: {why}")
    return proc


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """``ip ARGS``; one TestbedError line with its message when it fails and ``check``."""
    return run_tool(["ip", *args], check=check)


def used_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network this host's namespace has an address in or a route to (all routing tables)."""
    out = []
    text = _ip("-o", "-4", "addr", "show").stdout + _ip("-4", "route", "show", "table", "all").stdout
    for token in re.findall(r"(?<![\w.])(\d+\.\d+\.\d+\.\d+(?:/\d+)?)", text):
        with contextlib.suppress(ValueError):
            out.append(ipaddress.ip_network(token, strict=False))
    return out


def free_subnet(used: list[ipaddress.IPv4Network], rng: random.Random | None = None,
                prefix: int = PREFIX) -> ipaddress.IPv4Network:
    """A random /``prefix`` of :data:`POOL` that overlaps none of ``used`` (a default route, 0.0.0.0/0, is no
    overlap: a more specific route wins)."""
    rng = rng or random.SystemRandom()
    taken = [n for n in used if n.prefixlen > 0]
    count = POOL.num_addresses >> (32 - prefix)
    for _ in range(PLAN_ATTEMPTS):
        net = ipaddress.ip_network((int(POOL.network_address) + (rng.randrange(1, count - 1) << (32 - prefix)), prefix))
        if not any(net.overlaps(n) for n in taken):
            return net
    raise TestbedError(f"no free /{prefix} in {POOL} for a network namespace: this host's addresses and routes "
                       "cover it; remove some")


def add_netns(name: str) -> None:
    """``ip netns add NAME`` (it refuses a name that exists: what it makes is only ever our own), noting in
    :data:`MOUNT_MARK` when this was the ``ip netns add`` that bind-mounted ``/run/netns``."""
    was_mounted = mounted(RUN_NETNS)
    _ip("netns", "add", name)
    if not was_mounted and mounted(RUN_NETNS):
        with contextlib.suppress(FileExistsError):
            fd = os.open(MOUNT_MARK, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            with os.fdopen(fd, "w") as f:
                f.write(MOUNT_MARK_TEXT)


def netns_exists(name: str) -> bool:
    return os.path.exists(os.path.join(RUN_NETNS, name))


def netns_pids(name: str) -> list[int]:
    """The processes inside the namespace ``name`` now."""
    proc = _ip("netns", "pids", name, check=False)
    return [int(p) for p in proc.stdout.split() if p.isdigit()] if proc.returncode == 0 else []


def link_exists(name: str, netns: str | None = None) -> bool:
    return _ip(*(("-n", netns) if netns else ()), "link", "show", "dev", name, check=False).returncode == 0


class Taken(TestbedError):
    """A planned name is taken already (someone else's namespace or link): plan again, and forget this plan."""


@dataclass
class Netns:
    """One namespace and its veth pair, as planned (and recorded) before anything is made."""

    name: str  # storeval-<token>
    host_if: str  # the veth end in the host namespace
    ns_if: str  # the veth end inside
    host_addr: str  # the host end's address: where clients' connections come from
    ns_addr: str  # the address inside: where the servers are reached
    prefix: int = PREFIX

    @classmethod
    def plan(cls, token: str | None = None) -> Netns:
        """Names and a free /30 (nothing is made): record ``to_json()``, then :meth:`create`."""
        token = token or secrets.token_hex(4)
        net = free_subnet(used_networks())
        host, inside = list(net.hosts())[:2]
        return cls(name=f"storeval-{token}", host_if=f"sv{token}h", ns_if=f"sv{token}n", host_addr=str(host),
                   ns_addr=str(inside), prefix=net.prefixlen)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Netns:
        return cls(**{k: d[k] for k in ("name", "host_if", "ns_if", "host_addr", "ns_addr", "prefix")})

    @property
    def subnet(self) -> ipaddress.IPv4Network:
        return ipaddress.ip_network(f"{self.host_addr}/{self.prefix}", strict=False)

    # -- making ------------------------------------------------------------------------------------------
    def create(self) -> None:
        """Make the namespace, ``lo``, the veth pair and the addresses, links up. Raises :class:`Taken` (nothing
        made: forget this plan) when a name exists already, TestbedError (one line) if a step fails or another
        interface took an address of this /30 meanwhile (what was made stays for :meth:`remove`)."""
        if self.exists() or _ip("link", "show", "dev", self.host_if, check=False).returncode == 0:
            raise Taken(f"network namespace {self.name} or link {self.host_if} exists already")
        add_netns(self.name)  # refuses a name that exists: only ever our own
        # the pair is made with its inner end already inside: never both ends in the host namespace
        _ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if, "netns", self.name)
        _ip("link", "set", "dev", self.host_if, "addrgenmode", "none")  # no IPv6 link-local address
        _ip("-n", self.name, "link", "set", "dev", self.ns_if, "addrgenmode", "none")
        _ip("addr", "add", f"{self.host_addr}/{self.prefix}", "dev", self.host_if)
        _ip("-n", self.name, "addr", "add", f"{self.ns_addr}/{self.prefix}", "dev", self.ns_if)
        with contextlib.suppress(OSError):  # nothing that arrives from the namespace is routed onwards
            with open(f"/proc/sys/net/ipv4/conf/{self.host_if}/forwarding", "w") as f:
                f.write("0")
        _ip("-n", self.name, "link", "set", "lo", "up")
        _ip("-n", self.name, "link", "set", self.ns_if, "up")
        _ip("link", "set", self.host_if, "up")
        clash = self._clash()
        if clash:
            raise TestbedError(f"network namespace {self.name}: {clash} took an address of {self.subnet} at the same "
                               "time; try again")

    def _clash(self) -> str | None:
        """Another interface of the host namespace with an address in this /30 (a concurrent plan)."""
        for line in _ip("-o", "-4", "addr", "show").stdout.splitlines():
            parts = line.split()
            if len(parts) > 3 and parts[1] != self.host_if and parts[2] == "inet":
                with contextlib.suppress(ValueError):
                    if ipaddress.ip_interface(parts[3]).network.overlaps(self.subnet):
                        return parts[1]
        return None

    # -- using -------------------------------------------------------------------------------------------
    def exists(self) -> bool:
        return netns_exists(self.name)

    def link_up(self) -> bool:
        """Whether the host end is there and up (the namespace and its pair as made)."""
        proc = _ip("-o", "link", "show", "dev", self.host_if, check=False)
        return proc.returncode == 0 and ",UP" in proc.stdout

    def command(self, cmd: list[str]) -> list[str]:
        """``cmd`` run inside the namespace (``ip netns exec`` execs it: same PID)."""
        return ["ip", "netns", "exec", self.name, *cmd]

    def run_in(self, cmd: list[str], timeout: float = 60.0) -> subprocess.CompletedProcess:
        """Run ``cmd`` inside the namespace to its end; its output captured as text."""
        return subprocess.run(self.command(cmd), capture_output=True, text=True, timeout=timeout)

    def pids(self) -> list[int]:
        """The processes inside the namespace now."""
        return netns_pids(self.name)

    # -- removing ------------------------------------------------------------------------------------------
    def remove(self) -> None:
        """Delete the namespace (its veth goes with it), the host end if it outlived it (a process still inside
        keeps a namespace alive), and the ``/run/netns`` mount when storeval made it and no namespace is left.
        Safe to repeat. Raises TestbedError naming what stays."""
        if self.exists():
            kept = self.pids()  # a process inside keeps the namespace, and its veth, alive after the delete
            _ip("netns", "del", self.name)
            deadline = time.monotonic() + (0 if kept else GONE_WAIT)
            while self._host_end() and time.monotonic() < deadline:
                time.sleep(0.05)  # the kernel dismantles a namespace in the background
        if self._host_end():
            _ip("link", "del", self.host_if, check=False)  # deleting one end of a veth pair deletes both
            if self._host_end():
                raise TestbedError(f"network namespace {self.name}: its link {self.host_if} stays; "
                                   f"`ip link del {self.host_if}` removes it")
        release_run_netns()

    def _host_end(self) -> bool:
        return _ip("link", "show", "dev", self.host_if, check=False).returncode == 0


def release_run_netns() -> None:
    """Unmount ``/run/netns`` if storeval's ``ip netns add`` made that mount and no namespace is left in it."""
    if not os.path.exists(MOUNT_MARK):
        return
    if mounted(RUN_NETNS):
        try:
            if os.listdir(RUN_NETNS):
                return  # someone's namespace is still there: the last one out unmounts
        except OSError:
            return
        # never lazily: a mount with a namespace mounted inside it refuses, and then it stays
        proc = subprocess.run(["umount", RUN_NETNS], capture_output=True, text=True, timeout=IP_TIMEOUT)
        if proc.returncode or mounted(RUN_NETNS):
            return
    with contextlib.suppress(FileNotFoundError):
        os.unlink(MOUNT_MARK)


__all__ = ["Netns", "Taken", "require_root", "release_run_netns", "free_subnet", "used_networks", "add_netns",
           "netns_exists", "netns_pids", "link_exists"]
