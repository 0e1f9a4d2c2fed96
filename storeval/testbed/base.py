"""Real storage servers on 127.0.0.1 (or on an emulated host): the building blocks every testbed server uses.

A :class:`Server` installs what it needs (once, into the user's cache directory), starts its processes in
their own session so they outlive ``storeval testbed up``, waits until they answer, describes the storeval
targets that reach it, and stops exactly the processes it started — identified by PID *and* start time,
so a recycled PID is never killed — before removing the data it created. Every directory and file it
makes goes through its :class:`~storeval.testbed.owned.Ledger`, and only what that ledger proves (or what
the server wrote where the ledger lets it, see :meth:`Server.claims`) is ever removed.

Placement: :meth:`Server.place` (before ``start``) puts a server on an emulated host — a network namespace
that the testbed's network made, with the host's address on its ``eth0``. Every process the server starts
through :meth:`Server._spawn` then runs inside that namespace (``ip netns exec NS CMD``, which execs ``CMD``:
the PID recorded is the daemon's own), listens on the host's address, and everything that talks to it from
here — readiness, health, status, targets, metrics URLs, fault starts — uses that address, which the root
namespace reaches through the network's controller. ``state.info["placement"]`` records ``{host, netns,
address}``, so a rebuilt server (``testbed down``, a fault handle) finds it again. The namespace belongs to the
network, never to the server: stopping a server leaves it. Kinds that can be placed list ``host`` in their
``options_help``; the others refuse it in :meth:`Server.check_options`, naming the kinds that can.
"""

from __future__ import annotations

import ctypes
import ipaddress
import json
import os
import random
import re
import secrets
import signal
import socket
import subprocess
import threading
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import psutil

from ..errors import InputError, StorevalError, one_line
from ..units import UnitError, parse_rate
from . import cgroups
from .owned import Ledger, Left

LOCALHOST = "127.0.0.1"
RUN_NETNS = "/run/netns"  # where `ip netns add` puts a namespace's file
HOST_OPTION = "host"  # the setting that places a server on an emulated host
# every storing kind's settings that emulate a slower disk for its servers (a blkio limit: testbed/cgroups.py)
DISK_OPTIONS = {"disk_rate": "its servers' disk emulated at this rate each way (e.g. 20MB/s): what its processes "
                             "read and write on the disk holding its data is limited there (a blkio control group; "
                             "what a page cache absorbs, and writes the kernel flushes later, are not)",
                "disk_iops": "the same in operations per second each way (e.g. 500)"}
HOST_HELP = "the emulated host (network namespace) it runs on, by name (default: none: 127.0.0.1 of this machine)"
MAX_HOST_NAME = 64
_NETNS_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
CLONE_NEWNET = 0x40000000


class TestbedError(StorevalError):
    """A testbed server could not be installed, started or stopped; the message says why and what to do."""

    __test__ = False  # not a pytest test class


class TestbedOptionError(TestbedError, InputError):
    """A setting a testbed system does not take, or a value out of its range: the user's input (exit 2)."""


def cache_dir() -> Path:
    """Where built servers and downloads are kept between runs (``$XDG_CACHE_HOME/storeval``)."""
    base = os.environ.get("STOREVAL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "storeval")
    path = Path(base)
    path.mkdir(parents=True, exist_ok=True)
    return path


def free_port(host: str = LOCALHOST, netns: str | None = None) -> int:
    """A TCP port on ``host`` that is free now (the server may still lose a race for it: retry on failure);
    with ``netns``, free on that address inside that network namespace."""
    return free_ports(1, host, netns)[0]


def free_ports(n: int, host: str = LOCALHOST, netns: str | None = None) -> list[int]:
    """``n`` distinct TCP ports free now on ``host`` (inside ``netns`` when given), all held at once while chosen."""

    def pick() -> list[int]:
        held: list[socket.socket] = []
        try:
            while len(held) < n:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                held.append(s)
                s.bind((host, 0))
            return [s.getsockname()[1] for s in held]
        finally:
            for s in held:
                s.close()

    return in_netns(netns, pick) if netns else pick()


def in_netns(netns: str, fn):
    """``fn()`` run in a thread that has entered network namespace ``netns`` (sockets it makes live there);
    this process and its other threads stay where they are. Root only; one TestbedError line otherwise."""
    out: list[Any] = []
    err: list[BaseException] = []

    def body() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(os.path.join(RUN_NETNS, netns), os.O_RDONLY | os.O_CLOEXEC)
            try:
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    e = ctypes.get_errno()
                    raise TestbedError(f"cannot enter network namespace {netns}: {os.strerror(e)} (run as root)")
            finally:
                os.close(fd)
            out.append(fn())
        except FileNotFoundError:
            err.append(TestbedError(f"network namespace {netns} does not exist (its emulated host is gone)"))
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            err.append(e)

    t = threading.Thread(target=body, name=f"netns-{netns}", daemon=True)
    t.start()
    t.join()
    if err:
        raise err[0]
    return out[0]


def port_open(port: int, host: str = LOCALHOST) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def check_host_name(kind: str, host: Any) -> str:
    """An emulated host's name as a setting takes it: a printable string of 1 to 64 characters."""
    if (not isinstance(host, str) or not host or len(host) > MAX_HOST_NAME or not host.isprintable()
            or host.strip() != host):
        raise TestbedOptionError(f"testbed {kind}: host must be an emulated host's name, 1-{MAX_HOST_NAME} printable "
                                 f"characters without spaces at either end, not {host!r:.80}")
    return host


# The registered server classes, in the registry's order: the registry (the package, testbed/__init__.py) hands
# them over with use_registry when it is imported, so this module, which the package imports, never imports it.
_registered: Callable[[], Iterable[type[Server]]] = tuple


def use_registry(classes: Callable[[], Iterable[type[Server]]]) -> None:
    """Called by the registry of testbed kinds: ``classes()`` yields every registered Server class in order."""
    global _registered
    _registered = classes


def placeable_kinds() -> list[str]:
    """The testbed kinds that can run on an emulated host (``host`` in their settings)."""
    return [cls.kind for cls in _registered() if HOST_OPTION in cls.options_help]


def _bind(family: int, host: str, port: int) -> socket.socket | None:
    """A socket bound to ``host``:``port`` (held, so nothing else takes the port meanwhile), or None if taken."""
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.bind((host, port))
        return s
    except OSError:
        s.close()
        return None


def pick_ports(n: int, host: str = LOCALHOST, netns: str | None = None) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 *and* ::1 (and ``host``, inside network namespace ``netns`` when
    given: a placed server's), below the ephemeral port range when possible — for servers that bind every
    loopback address, and for several ports that must all be free at once (:func:`free_ports` takes any).

    MinIO binds its API port on every loopback address (127.0.0.1 and [::1], see getServerListenAddrs in
    cmd/server-main.go), so a port free on 127.0.0.1 alone can still fail with "Specified port is already
    in use" — the failure seen once on a "free" port. Ports below the ephemeral range are also never taken
    as source ports by outgoing connections (nodes that dial each other) between choice and bind.
    All ``n`` ports are held at once so none is returned twice."""
    if netns is not None:
        return in_netns(netns, lambda: pick_ports(n, host))
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    lo, hi = (20000, low - 1) if low > 21000 else (1024, 65535)
    ipv6 = socket.has_ipv6 and (probe := _bind(socket.AF_INET6, "::1", 0)) is not None
    if ipv6:
        probe.close()
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        for _ in range(100 * n):
            if len(ports) == n:
                return ports
            port = random.randint(lo, hi)
            if port in ports or (s4 := _bind(socket.AF_INET, LOCALHOST, port)) is None:
                continue
            held.append(s4)
            if host != LOCALHOST:
                if (sh := _bind(socket.AF_INET, host, port)) is None:
                    continue
                held.append(sh)
            if ipv6:
                if (s6 := _bind(socket.AF_INET6, "::1", port)) is None:
                    continue
                held.append(s6)
            ports.append(port)
        raise TestbedError(f"no {n} free ports on {host} between {lo} and {hi}")
    finally:
        for s in held:
            s.close()


def wait_until(check, timeout: float, what: str, *, log: Path | None = None, interval: float = 0.2) -> None:
    """Poll ``check()`` until it is true; raise TestbedError naming ``what`` (and the log) on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(interval)
    hint = f"; see {log}" if log else ""
    raise TestbedError(f"{what} did not become ready within {timeout:g} s{hint}")


READY_QUIET = 120.0  # seconds a starting server may make no progress (beyond the time it waited for a CPU)
READY_CAP = 900.0  # seconds a start may take in all, however it progresses


def cpu_waits(procs: list[Proc]) -> dict[str, int]:
    """Each thread of ``procs``: the nanoseconds it has spent runnable but waiting for a CPU (schedstat)."""
    out = {}
    for proc in procs:
        try:
            tasks = os.listdir(f"/proc/{proc.pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{proc.pid}/task/{tid}/schedstat", "rb") as f:
                    out[tid] = int(f.read().split()[1])
            except (OSError, IndexError, ValueError):
                continue
    return out


def held_back_s(before: dict[str, int], procs: list[Proc]) -> float:
    """How long a busy machine has held the server back since ``before`` (``cpu_waits``): the longest any one
    of its threads has waited for a CPU since."""
    now = cpu_waits(procs)
    return max((ns - before.get(tid, 0) for tid, ns in now.items()), default=0) / 1e9


def _log_bytes(procs: list[Proc]) -> int:
    total = 0
    for proc in procs:
        try:
            total += os.stat(proc.log).st_size
        except (OSError, TypeError, ValueError):
            pass
    return total


def wait_progressing(check, what: str, procs: list[Proc], *, stage=lambda: None, quiet: float = READY_QUIET,
                     cap: float = READY_CAP, log: Path | None = None, interval: float = 0.2, why=lambda: "") -> None:
    """Poll ``check()`` until it is true. A busy machine slows a starting server without stopping it, so the
    deadline follows progress instead of a guess about wall time: it gives up only after ``quiet`` seconds
    without progress — a step of the start reached (``stage()`` changed) or a log of ``procs`` grown — plus
    the time the server waited for a CPU meanwhile, or after ``cap`` seconds in all. TestbedError in one line
    naming ``what``, what it still waits for (``why()``) and the log."""
    start = time.monotonic()
    mark, since, waits = (stage(), _log_bytes(procs)), start, cpu_waits(procs)
    while True:
        if check():
            return
        now = time.monotonic()
        token = (stage(), _log_bytes(procs))
        if token != mark:
            mark, since, waits = token, now, cpu_waits(procs)
        if now - start >= cap or now - since >= quiet + held_back_s(waits, procs):
            break
        time.sleep(interval)
    still = why()
    hint = f"; see {log}" if log else ""
    after = f"within {cap:g} s" if now - start >= cap else f"(no progress for {now - since:.0f} s)"
    raise TestbedError(f"{what} did not become ready {after}" + (f": {still}" if still else "") + hint)


def command_netns(cmd: list[str]) -> str | None:
    """The network namespace a server's command runs in (``ip netns exec NS …``, ``nsenter --net=/run/netns/NS
    …``), or None."""
    if cmd[:3] == ["ip", "netns", "exec"] and len(cmd) > 3:
        return cmd[3]
    if cmd[:1] == ["nsenter"]:
        for arg in cmd[1:]:
            if arg.startswith(f"--net={RUN_NETNS}/"):
                return arg.rsplit("/", 1)[1]
    return None


def check_disk_limit(kind: str, key: str, value: Any) -> None:
    """A one-line TestbedOptionError for a disk limit out of range (a rate from 64KB/s to 100GB/s, operations
    per second from 10 to 10,000,000)."""
    if key == "disk_iops":
        if not isinstance(value, int) or isinstance(value, bool) or not 10 <= value <= 10_000_000:
            raise TestbedOptionError(f"testbed {kind}: disk_iops must be a whole number of operations per second "
                                     f"from 10 to 10000000, not {value!r}")
        return
    try:
        rate = parse_rate(value)
    except UnitError as e:
        raise TestbedOptionError(f"testbed {kind}: disk_rate {value!r} {e}") from None
    if not 64e3 <= rate <= 100e9:
        raise TestbedOptionError(f"testbed {kind}: disk_rate must be from 64KB/s to 100GB/s, not {value!r}")


@dataclass
class Proc:
    """A process the testbed started: enough to find it again, and only it."""

    pid: int
    create_time: float
    name: str
    log: str

    def process(self) -> psutil.Process | None:
        """The process if it is still the one started (same PID *and* start time), else None."""
        try:
            p = psutil.Process(self.pid)
            return p if abs(p.create_time() - self.create_time) < 0.5 else None
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return None

    def condition(self) -> str:
        """What the process is now: ``up``, ``stopped`` (SIGSTOP: it answers nobody) or ``exited``."""
        p = self.process()
        try:
            status = p.status() if p else None
        except psutil.NoSuchProcess:
            status = None
        if status in (None, psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            return "exited"
        if status in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
            return "stopped"
        return "up"

    def alive(self) -> bool:
        return self.condition() != "exited"

    @classmethod
    def adopt(cls, pid: int, name: str, log: str | Path) -> Proc:
        """A process a server of the testbed started on our behalf (a brick glusterd spawned, a daemon that
        forked itself away): recorded by PID and start time like one started here."""
        try:
            created = psutil.Process(pid).create_time()
        except psutil.NoSuchProcess:
            raise TestbedError(f"{name} (pid {pid}) exited before it could be recorded; see {log}") from None
        return cls(pid=pid, create_time=created, name=name, log=str(log))

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM (and SIGCONT, so a frozen one hears it), wait up to ``grace`` seconds, then SIGKILL — this
        process and its children only. Raises TestbedError if it is still there afterwards."""
        p = self.process()
        if p is None or not self.alive():
            return
        try:
            family = [p, *p.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        try:
            terminate(family, grace)
        except psutil.AccessDenied:
            raise TestbedError(f"{self.name} (pid {self.pid}): not allowed to stop it (run as its user)") from None
        if self.alive():
            raise TestbedError(f"{self.name} (pid {self.pid}) did not end after SIGKILL; its data stays")


def terminate(processes: list[psutil.Process], grace: float) -> None:
    """SIGTERM and SIGCONT to every one of ``processes`` together (a frozen one hears it too), wait up to ``grace``
    seconds for all, then SIGKILL those left. psutil.AccessDenied propagates (another user's process)."""
    for sig in (signal.SIGTERM, signal.SIGCONT):
        for q in processes:
            try:
                q.send_signal(sig)
            except psutil.NoSuchProcess:
                pass
    _, alive = psutil.wait_procs(processes, timeout=grace)
    for q in alive:
        try:
            q.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)


def spawn(cmd: list[str], *, name: str, log: Path, out: int, env: dict[str, str] | None = None,
          cwd: Path | None = None, user: str | None = None, groups: list[str] | tuple[str, ...] = ()) -> Proc:
    """Start ``cmd`` in a new session (it outlives the caller), output to the open descriptor ``out`` of ``log``;
    in the control groups ``groups`` (their paths, testbed/cgroups.py) from before it runs."""
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, **(env or {})}, cwd=cwd, start_new_session=True, user=user,
                                preexec_fn=None if user else cgroups.joiner(*groups))
    except subprocess.SubprocessError as e:  # the child could not join its groups: it ran nothing
        raise TestbedError(f"cannot start {name} in control groups {', '.join(groups)}: {one_line(e)}") from e
    except OSError as e:
        raise TestbedError(f"cannot start {name} ({cmd[0]}): {e.strerror}") from e
    for group in groups if user else ():  # a child that is another user already may not move itself: moved now
        cgroups.adopt(group, proc.pid)
    try:
        created = psutil.Process(proc.pid).create_time()
    except psutil.NoSuchProcess:
        created = time.time()
    return Proc(pid=proc.pid, create_time=created, name=name, log=str(log))


def run(cmd: list[str], what: str, *, timeout: float = 1800, env: dict[str, str] | None = None,
        cwd: str | Path | None = None) -> str:
    """Run an installation step; on failure raise one line with the tail of its output."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})},
                              cwd=cwd)
    except FileNotFoundError:
        raise TestbedError(f"{what}: {cmd[0]} is not installed") from None
    except subprocess.TimeoutExpired:
        raise TestbedError(f"{what}: did not finish within {timeout:g} s") from None
    if proc.returncode:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise TestbedError(f"{what} failed (exit {proc.returncode}): {tail}")
    return proc.stdout


def apt_install(*packages: str) -> None:
    """Install Debian packages that are missing (needs root); one clear line if that is impossible."""
    missing = [p for p in packages if subprocess.run(["dpkg", "-s", p], capture_output=True).returncode]
    if not missing:
        return
    if os.geteuid() != 0:
        raise TestbedError(f"Debian packages {' '.join(missing)} are needed: run apt-get install {' '.join(missing)} as root")
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    try:
        run(["apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "--no-install-recommends", *missing],
            "apt-get install", env=env)
    except TestbedError:
        run(["apt-get", "-o", "DPkg::Lock::Timeout=600", "update"], "apt-get update", env=env)
        run(["apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "--no-install-recommends", *missing],
            "apt-get install", env=env)


FAULT_ACTIONS = ("stop", "cont", "kill", "start", "restart")  # what a fault plan may do to a server or a node
SIGNAL_ACTIONS = ("stop", "cont", "kill")  # SIGSTOP, SIGCONT, SIGKILL to the recorded processes
RESPAWN_WAIT = 120.0  # seconds a start of a killed server or node waits for it to answer again


@dataclass
class FaultNode:
    """What a fault plan can act on: the whole server (:meth:`Server.fault_server`, its handle is the kind) or one
    part of it alone — a brick, an OSD, a data server, a datanode (:meth:`Server.fault_nodes`, handle
    ``<kind>.<name>``). stop, cont and kill signal ``procs`` (indices of ``state.procs``); start and restart call
    :meth:`Server.respawn` (the whole server) or :meth:`Server.start_node`. A node that is no process of its own
    (``inside``: a datanode in its cluster's JVM) is acted on by :meth:`Server.act_on_node` instead."""

    name: str  # "brick2", "osd1", "ds2"; the kind for the whole server
    description: str  # one line: "GlusterFS brick 2 of 4 (port 49153, /…/brick2)"
    procs: list[int]
    ports: list[int] = field(default_factory=list)
    actions: tuple[str, ...] = FAULT_ACTIONS
    why_not: dict[str, str] = field(default_factory=dict)  # action -> why it is not offered
    label: str = ""  # how messages name it ("minio-ec node 2"); default: "<kind> <name>", or the kind
    inside: bool = False  # no process of its own: every action goes through Server.act_on_node


def mounted(path: str | Path) -> bool:
    """Whether ``path`` is a mount point now (``/proc/self/mountinfo``, octal escapes decoded)."""
    target = os.path.normpath(str(path))
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                fields = line.split(" ")
                if len(fields) > 4 and _unescape(fields[4]) == target:
                    return True
    except OSError:
        return False
    return False


def _unescape(field_: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field_)


@dataclass
class ServerState:
    """What `testbed down` and `testbed status` need to know about a server (saved as JSON): its processes,
    ports, facts, and ``made``, the ledger of every directory and file it created."""

    kind: str
    root: str
    procs: list[Proc] = field(default_factory=list)
    ports: dict[str, int] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    made: Ledger = field(default_factory=Ledger)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "root": self.root, "procs": [asdict(p) for p in self.procs], "ports": self.ports,
                "info": self.info, "made": self.made.to_json()}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ServerState:
        return cls(kind=d["kind"], root=d["root"], procs=[Proc(**p) for p in d["procs"]], ports=d["ports"],
                   info=d.get("info", {}), made=Ledger.from_json(d.get("made")))


class Server(ABC):
    """One kind of testbed server. Subclasses implement install, start, ready and targets."""

    kind: ClassVar[str]
    summary: ClassVar[str] = ""
    # the settings `testbed up` and a study's testbed target may give this kind: name -> one line of help
    # (e.g. "servers": "bricks of the volume (1-8)"); check_options validates their values
    options_help: ClassVar[dict[str, str]] = {}
    # the targets it writes, name -> URL scheme (a study's `testbed: KIND` target is checked before it runs)
    target_schemes: ClassVar[dict[str, str]] = {}
    # when its repair (``healing``) begins after a part is lost: "back" — once the part returns, it is given what
    # it missed (GlusterFS's self-heal, Ceph's recovery); "lost" — once the system declares the part lost, the
    # copies it held are made again on the others (HDFS re-replicates around a dead datanode)
    heals_when: ClassVar[str] = "back"
    # the setting that names the emulated host each target's server runs on (default: ``host``), for a system
    # whose parts run on several hosts (XCache and its origin): a cell's round trip is that host's link's
    target_hosts: ClassVar[dict[str, str]] = {}
    host_setting: ClassVar[str] = HOST_OPTION  # the setting `testbed up --host` gives (XCache: its cache's host)
    peer_setting: ClassVar[str | None] = None  # a system on two hosts: the setting `--peer-host` gives (its second)
    stores_data: ClassVar[bool] = True  # a storage system: its servers' disk may be limited (DISK_OPTIONS)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A storing kind takes the disk limits beside its own settings (listed with them everywhere)."""
        super().__init_subclass__(**kwargs)
        if cls.stores_data and "options_help" in cls.__dict__:
            cls.options_help = {**cls.options_help, **DISK_OPTIONS}

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        """The options, validated and completed with defaults; one-line TestbedError naming a setting this kind
        does not take (and the ones it does) or a value out of range. Subclasses check values, then call this.
        ``host`` (an emulated host's name) is checked here, for every kind: refused by one that cannot be placed."""
        if HOST_OPTION in options:
            if HOST_OPTION not in cls.options_help:
                raise TestbedOptionError(
                    f"testbed {cls.kind}: cannot run on an emulated host (host {options[HOST_OPTION]!r}); only "
                    f"{', '.join(placeable_kinds())} can: drop host, or choose one of those")
            check_host_name(cls.kind, options[HOST_OPTION])
        for key in DISK_OPTIONS:
            if options.get(key) is not None and key in cls.options_help:
                check_disk_limit(cls.kind, key, options[key])
        unknown = sorted(set(options) - set(cls.options_help))
        if unknown:
            # the settings that shape the system; host (where it runs, checked above) is not one of them
            takes = ", ".join(f"{k} ({v})" for k, v in cls.options_help.items()
                              if k != HOST_OPTION and k not in DISK_OPTIONS) or "none"
            if DISK_OPTIONS.keys() & cls.options_help.keys():  # every storing kind's, said once briefly
                takes += f" besides {' and '.join(DISK_OPTIONS)}"
            raise TestbedOptionError(f"testbed {cls.kind}: no setting '{unknown[0]}' (it takes: {takes})")
        return dict(options)

    @classmethod
    def host_of(cls, use: str | None, settings: dict[str, Any]) -> str | None:
        """The emulated host the server of target ``use`` runs on under ``settings`` (None: this machine)."""
        return settings.get(cls.target_hosts.get(use or "", HOST_OPTION))

    @classmethod
    def hosts_needed(cls, options: dict[str, Any]) -> list[str]:
        """The emulated hosts a system of several hosts runs on (made by the testbed before :meth:`start`, then
        handed over through :meth:`use_network`); none for a server on this machine or on its one ``host``."""
        return []

    def use_network(self, net: Any) -> None:
        """Learn where the hosts of :meth:`hosts_needed` are (their namespaces and addresses); called before
        :meth:`start` when there are any."""

    def __init__(self, root: Path, options: dict[str, Any] | None = None, state: ServerState | None = None) -> None:
        self.root = Path(root)
        self.options = options or {}
        self.state = state or ServerState(kind=self.kind, root=str(self.root))
        self.on_change: Any = None  # called whenever the state gained something to remember (Testbed saves it)
        self.state.made.on_change = self._journal
        self.left: list[Left] = []  # what the last stop() could not remove, and why

    # -- placement on an emulated host ------------------------------------------------------------------------
    def place(self, netns: str, address: str, host: str | None = None) -> None:
        """Run this server on an emulated host: every process inside network namespace ``netns`` (a name of
        ``/run/netns``), listening on ``address`` (the host's IPv4 address there). Call before :meth:`start`;
        ``host`` (default: the ``host`` setting, else the namespace) is the host's name for messages."""
        if self.state.procs:
            raise TestbedError(f"{self.kind}: already started; place it before it starts")
        if HOST_OPTION not in self.options_help:
            raise TestbedError(f"testbed {self.kind}: cannot run on an emulated host; only "
                               f"{', '.join(placeable_kinds())} can")
        if not isinstance(netns, str) or not _NETNS_NAME.fullmatch(netns):
            raise TestbedError(f"{self.kind}: {netns!r} is not a network namespace name")
        try:
            ip = ipaddress.IPv4Address(address)
        except (ipaddress.AddressValueError, ValueError):
            raise TestbedError(f"{self.kind}: {address!r} is not an IPv4 address for the emulated host") from None
        if ip.is_unspecified or ip.is_multicast:
            raise TestbedError(f"{self.kind}: {address} cannot be a host's address")
        if not os.path.exists(os.path.join(RUN_NETNS, netns)):
            raise TestbedError(f"{self.kind}: network namespace {netns} does not exist (its emulated host is not "
                               "made yet, or gone)")
        name = host or self.options.get(HOST_OPTION) or netns
        self.state.info["placement"] = {"host": name, "netns": netns, "address": str(ip)}
        self._journal()

    @property
    def placement(self) -> dict[str, str] | None:
        """``{host, netns, address}`` when the server runs on an emulated host, else None."""
        return self.state.info.get("placement")

    @property
    def netns_name(self) -> str | None:
        """The network namespace the server's processes run in (None: this machine's own)."""
        placed = self.placement
        return placed["netns"] if placed else None

    @property
    def address(self) -> str:
        """Where the server's ports answer: 127.0.0.1, or its emulated host's address."""
        placed = self.placement
        return placed["address"] if placed else LOCALHOST

    def in_netns_command(self, cmd: list[str]) -> list[str]:
        """``cmd`` as it runs for this server: inside its namespace (``ip netns exec`` execs it: same PID)."""
        ns = self.netns_name
        if ns is None or cmd[:3] == ["ip", "netns", "exec"]:
            return cmd
        return ["ip", "netns", "exec", ns, *cmd]

    def check_netns(self) -> None:
        """One TestbedError line when the server's namespace is gone (its host was removed under it)."""
        ns = self.netns_name
        if ns is not None and not os.path.exists(os.path.join(RUN_NETNS, ns)):
            whose = f" of its host {self.placement['host']}" if self.placement else ""
            raise TestbedError(f"{self.kind}: its network namespace {ns}{whose} is gone: "
                               f"`storeval testbed down {self.kind}`, then up again")

    def pick_port(self) -> int:
        """A TCP port free now where the server listens (its address, in its namespace)."""
        return free_port(self.address, self.netns_name)

    def pick_ports(self, n: int) -> list[int]:
        """``n`` ports free now where the server listens and on every loopback address (:func:`pick_ports`)."""
        return pick_ports(n, self.address, self.netns_name) if self.placement else pick_ports(n)

    def _journal(self) -> None:
        if self.on_change is not None:
            self.on_change()

    # -- what the server makes: through its ledger only ------------------------------------------------------
    @property
    def ledger(self) -> Ledger:
        return self.state.made

    def make_root(self) -> Path:
        """Create ``self.root`` (or take it if empty; anything else there is refused) as the server's anchor."""
        return self.ledger.anchor(self.root)

    def short_home(self) -> Path:
        """A short directory of this server's own under /var/tmp (a second anchor of its ledger, recorded in its
        state) for what needs a short path whatever ``--dir`` is: a UNIX socket's path holds 108 bytes at most, and
        a testbed directory as deep as a test's or a user's project leaves too few of them."""
        return self.home_under_var_tmp("short_home")

    def home_under_var_tmp(self, key: str) -> Path:
        """A new directory ``storeval-KIND-*`` under /var/tmp (every user can reach it), made exclusively, recorded
        in the ledger and in the state's ``info[key]``; the same one from then on."""
        if key not in self.state.info:
            base = Path("/var/tmp") if os.access("/var/tmp", os.W_OK) else Path(tempfile.gettempdir())
            home = self.ledger.new_anchor(base, f"storeval-{self.kind}-")  # an intent first, then made
            home.chmod(0o755)
            self.state.info[key] = str(home)
        return Path(self.state.info[key])

    def mkdir(self, path: Path, rule: str | None = None) -> Path:
        """Create a directory under the root; ``rule`` hands it to the server (see :meth:`claims`)."""
        return self.ledger.mkdir(path, rule)

    def write_file(self, path: Path, text: str, mode: int = 0o644) -> None:
        self.ledger.write(path, text, mode)

    def claims(self, rule: str, parts: tuple[str, ...], st: os.stat_result) -> bool:
        """Whether the server wrote ``parts`` (a path below a directory it was handed with ``rule``): what a
        server writes has a shape (names, owner) that tells it apart from a file a user put there."""
        return False

    def _spawn(self, cmd: list[str], *, name: str, log: Path, env: dict[str, str] | None = None,
               cwd: Path | None = None, user: str | None = None, slot: int | None = None) -> Proc:
        """Start a process with output appended to ``log`` (a file of the ledger) and record it at once:
        appended to ``state.procs``, or in place of ``state.procs[slot]``. A placed server's process runs inside
        its namespace (:meth:`in_netns_command`)."""
        self.check_netns()
        cmd = self.in_netns_command(cmd)
        groups = self.cgroups(command_netns(cmd))
        fd = self.ledger.open(log, append=True)
        try:
            proc = spawn(cmd, name=name, log=log, out=fd, env=env, cwd=cwd, user=user, groups=groups)
        finally:
            os.close(fd)
        if slot is None:
            self.state.procs.append(proc)
        else:
            self.state.procs[slot] = proc
        self._journal()
        return proc

    def cgroups(self, netns: str | None = None) -> list[str]:
        """The server's own control groups (testbed/cgroups.py) for its processes in network namespace ``netns``
        (None: this machine's), made on first use, each name saved in the state first, then made exclusively: its
        v2 group (its processes' CPU and I/O wait) and, where the host has the v1 blkio hierarchy, its blkio group
        (what its processes read and wrote on disk; ``disk_rate``/``disk_iops`` limit it there) — inside the
        emulated host's groups when the namespace is one's (a system on several hosts has a pair on each). None
        where this process may make none: the figures then come from its processes alone, and a disk limit is
        refused in one line."""
        host, host_blkio = (cgroups.host_path(netns), cgroups.host_path(netns, blkio=True)) if netns else (None, None)
        where = "" if netns is None or netns == self.netns_name else f"@{netns}"  # a second host's pair
        limited = [k for k in DISK_OPTIONS if self.options.get(k) is not None]
        if limited and f"blkio{where}" not in self.state.info and cgroups.blkio_hierarchy() is None:
            raise TestbedError(f"{self.kind}: {' and '.join(limited)} needs the v1 blkio control group hierarchy "
                               f"({cgroups.BLKIO}, writable by root; a v2-only host has none): run as root on a host "
                               "that has it, or drop the setting")
        made = [self._own_group(f"cgroup{where}", host or cgroups.hierarchy()),
                self._own_group(f"blkio{where}", host_blkio or cgroups.blkio_hierarchy())]
        return [g for g in made if g]

    def _own_group(self, key: str, parent: Path | None) -> str | None:
        if key not in self.state.info:
            if parent is None:
                return None
            path = parent / cgroups.new_name(self.kind)
            self.state.info[key] = str(path)
            self._journal()  # the intent: a stop after a kill here removes it, made or not
            try:
                cgroups.make(path)
            except OSError as e:
                self.state.info.pop(key)
                self._journal()
                if isinstance(e, FileExistsError):  # someone else's, by chance: never taken
                    return self._own_group(key, parent)
                return None
            if key.startswith("blkio"):
                try:
                    self._limit_disk(str(path))
                except TestbedError:  # a group without its limit is never used: gone with its record
                    if cgroups.remove(path, wait=0) is None:
                        self.state.info.pop(key)
                        self._journal()
                    raise
        return self.state.info[key]

    def _limit_disk(self, group: str) -> None:
        """Apply ``disk_rate``/``disk_iops`` to every disk holding the server's files: its root and every home of
        its own it made elsewhere (XRootD's under /var/tmp) — TestbedError in one line when none is on a disk."""
        rate, iops = self.options.get("disk_rate"), self.options.get("disk_iops")
        if rate is None and iops is None:
            return
        places = [a["path"] for a in self.ledger.anchors] or [str(self.root)]
        disks, elsewhere = cgroups.block_devices(places)
        if not disks:
            raise TestbedError(f"{self.kind}: disk_rate/disk_iops: its files ({', '.join(elsewhere)}) are on no block "
                               "device (a tmpfs, an overlay or a network file system): give --dir on a disk")
        for device in disks:
            try:
                cgroups.throttle(group, device, parse_rate(rate) if rate is not None else None,
                                 int(iops) if iops is not None else None)
            except OSError as e:
                raise TestbedError(f"{self.kind}: the kernel refused the disk limit on {device}: {e.strerror}"
                                   ) from None

    @property
    def has_cgroups(self) -> bool:
        """Whether the state names a control group of the server's (made, or about to be)."""
        return any(k.split("@")[0] in ("cgroup", "blkio") for k in self.state.info)

    def remove_cgroup(self) -> list[Left]:
        """Remove the server's control groups once its processes are gone (empty groups only: the kernel refuses
        any other); what stays is said as left, and stays recorded."""
        left = []
        for key in [k for k in self.state.info if k.split("@")[0] in ("cgroup", "blkio")]:  # see has_cgroups
            path = self.state.info.get(key)
            if not path:
                continue
            why = cgroups.remove(path)
            if why is not None:
                left.append(Left(path, why))
                continue
            self.state.info.pop(key)
            self._journal()
        return left

    @abstractmethod
    def install(self) -> None:
        """Make the server's software available (idempotent, cached); raise TestbedError if impossible."""

    @abstractmethod
    def start(self) -> None:
        """Start the processes on :attr:`address` (127.0.0.1, or the emulated host's) with data under
        ``self.root``; record them in ``self.state``."""

    @abstractmethod
    def ready(self) -> bool:
        """Whether the server answers requests now."""

    @abstractmethod
    def targets(self) -> dict[str, dict[str, Any]]:
        """storeval targets reaching this server: name -> {url: ..., options...} (no secrets, only references)."""

    def server_counters(self) -> dict[str, Any]:
        """Target options that say where this server's own counters are (probes/server.py): its processes on
        this host, so that what it moved and what its disk served are counted apart from other traffic."""
        return {"server_pids": [p.pid for p in self.state.procs if p.alive()]}

    def wait_ready(self, timeout: float = 120) -> None:
        log = Path(self.state.procs[0].log) if self.state.procs else None

        def check() -> bool:
            dead = [p for p in self.state.procs if not p.alive()]
            if dead:
                raise TestbedError(f"{self.kind}: {dead[0].name} exited while starting; see {dead[0].log}")
            return self.ready()

        wait_until(check, timeout, self.kind, log=log)

    def alive(self) -> bool:
        return bool(self.state.procs) and all(p.alive() for p in self.state.procs)

    def health(self) -> tuple[str, str]:
        """(word, what to do) from the processes and ports as they are now: ``running``, ``FROZEN`` (a
        process is stopped by SIGSTOP), ``DOWN`` (a process exited), ``NOT ANSWERING`` (a port is closed)
        or ``stopped`` (no processes: only data a user left inside is still there)."""
        if not self.state.procs:
            return "stopped", f"`storeval testbed down {self.kind}` removes what storeval left of it"
        conditions = [p.condition() for p in self.state.procs]
        if "exited" in conditions:
            names = self.fault_names([i for i, c in enumerate(conditions) if c == "exited"])
            if names:  # a fault killed it: `testbed fault NAME start` brings it back as it was
                return "DOWN", (f"`storeval testbed fault NAME start` starts it again with its data (NAME: "
                                f"{' '.join(names)}), `storeval testbed up {self.kind}` starts it afresh, "
                                f"`storeval testbed down {self.kind}` removes its data")
            return "DOWN", (f"`storeval testbed up {self.kind}` starts it again, "
                            f"`storeval testbed down {self.kind}` removes its data")
        if "stopped" in conditions:
            pids = " ".join(str(p.pid) for p, c in zip(self.state.procs, conditions) if c == "stopped")
            return "FROZEN", f"`kill -CONT {pids}` resumes it"
        closed = self.closed_ports()
        if closed:
            return "NOT ANSWERING", f"port {', '.join(closed)} accepts no connection"
        return "running", ""

    def closed_ports(self) -> list[str]:
        """``NAME PORT`` of each port the server was given that accepts no connection now (readiness waits until
        there is none, so `status` right after `up` finds it answering)."""
        return [f"{k} {v}" for k, v in self.state.ports.items() if not port_open(v, self.address)]

    # -- faults: what `storeval testbed fault` and a study's fault plan act on (testbed/faults.py) ----------------
    # The protocol: fault_server (the whole server), fault_nodes (its parts), respawn (the whole server again
    # after a kill), start_node (one part again), act_on_node (a part that is no process of its own),
    # fault_names (the handles that bring exited processes back). faults.py knows no kind: it signals the
    # processes these name, and calls these methods for the rest.
    no_respawn: ClassVar[str] = ""  # why a killed server of this kind cannot start again with its data, if known

    @property
    def respawns(self) -> bool:
        """Whether a killed server of this kind starts again with its data (it implements :meth:`respawn`)."""
        return type(self).respawn is not Server.respawn

    def fault_server(self) -> FaultNode:
        """The whole server as one fault handle, named by its kind: every process, the ports it was given; start
        and restart where it :meth:`respawns`. Kinds override it for a better description or label."""
        n = len(self.state.procs)
        why = {"start": self.no_respawn, "restart": self.no_respawn} if self.no_respawn else {}
        return FaultNode(self.kind, f"{self.kind} testbed server ({n} process{'es' if n > 1 else ''})",
                         list(range(n)), [int(p) for p in self.state.ports.values()],
                         FAULT_ACTIONS if self.respawns else SIGNAL_ACTIONS, why_not=why, label=self.kind)

    def fault_nodes(self) -> list[FaultNode]:
        """The parts of this server a fault plan can act on alone (:mod:`.faults` adds ``<kind>.<name>``
        handles for them); empty where only the whole server can be signalled."""
        return []

    def respawn(self, dead: list[int] | None = None, timeout: float = RESPAWN_WAIT) -> None:
        """Start the exited processes ``dead`` (indices of ``state.procs``; None: every exited one) again after a
        fault killed them: the same command, ports and data, each recorded in its old slot (journalled); return
        once the server answers. This kind cannot: one TestbedError line saying so and what to do instead."""
        why = self.no_respawn or (f"`storeval testbed down {self.kind}`, then `storeval testbed up {self.kind}`")
        raise TestbedError(f"{self.kind}: a killed {self.kind} cannot be started again with its data: {why}")

    def start_node(self, name: str, timeout: float = RESPAWN_WAIT) -> None:
        """Start the dead processes of the fault node ``name`` (a :meth:`fault_nodes` name: ``node2``, ``osd1``)
        again with their data (replacing their entries of ``state.procs``, journalled), and return once it
        answers; raise TestbedError otherwise."""
        raise TestbedError(f"{self.kind}: {name} cannot be started again here")

    def act_on_node(self, name: str, action: str) -> str:
        """Do ``action`` to the fault node ``name`` that is no process of its own (``FaultNode.inside``) now;
        return one line saying what was done, or raise TestbedError (one line naming the fix)."""
        raise TestbedError(f"{self.kind}: {name} has processes of its own; signal them")

    # -- mounts: recorded before they are made, so an interrupted `up` leaves nothing `down` cannot find ---------
    def record_mount(self, mountpoint: Path) -> None:
        """Remember ``mountpoint`` (a directory of the ledger) before mounting on it."""
        mounts = self.state.info.setdefault("mounts", [])
        if str(mountpoint) not in mounts:
            mounts.append(str(mountpoint))
            self._journal()

    def unmount_all(self) -> None:
        """Unmount every recorded mount point that is still mounted (a lazy unmount when the file system is
        busy or its server is gone); raise TestbedError naming the one that stays."""
        for mnt in list(self.state.info.get("mounts", [])):
            if mounted(mnt):
                for cmd in (["umount", mnt], ["umount", "-l", mnt]):
                    try:
                        if subprocess.run(cmd, capture_output=True, timeout=60).returncode == 0 and not mounted(mnt):
                            break
                    except subprocess.TimeoutExpired:  # a frozen FUSE daemon: the lazy unmount detaches it
                        continue
                if mounted(mnt):
                    raise TestbedError(f"{self.kind}: cannot unmount {mnt} (busy?): close what uses it, then "
                                       f"`storeval testbed down {self.kind}` again")
            self.state.info["mounts"].remove(mnt)
            self._journal()

    def healing(self) -> dict[str, Any] | None:
        """What the system says now of its own repair after a fault, read from the system itself: ``pending``
        (what it still has to heal, counted in ``unit``: entries, blocks, placement groups), ``down`` (its parts
        that do not serve now, so that it cannot be whole), ``bytes`` (counters of the bytes its servers wrote,
        per server process or node, or None), ``bytes_still_s`` (how long they must stand still to be final,
        for counters served from a cache), ``source`` (how it was read) and, optionally, ``parts`` (the same per
        part) and ``lost`` (how many parts it has declared lost, where it heals around them: HDFS's dead datanodes). None: the system keeps no redundancy that a fault could leave short (one copy of everything).
        TestbedError (one line) when it cannot be read."""
        return None

    def fault_names(self, exited: list[int]) -> list[str]:
        """The fault handles (:mod:`.faults`) that start the exited processes ``exited`` (indices of
        ``state.procs``) again on their ports with their data; empty where no such start exists."""
        return []

    def status(self) -> str:
        """One line that says what is true now: each process (up, stopped, DOWN), the ports, what to do."""
        word, todo = self.health()
        names = {"up": "up", "stopped": "stopped (SIGSTOP)", "exited": "DOWN (exited)"}
        procs = ", ".join(f"{p.name} pid {p.pid} {names[p.condition()]}" for p in self.state.procs)
        ports = ", ".join(f"{k} {v}" for k, v in self.state.ports.items())
        line = f"{self.kind}: {word}"
        if procs:
            line += f" — {procs}; ports {ports}{self.ports_where()}"
        return f"{line}; {todo}" if todo else line

    def ports_where(self) -> str:
        """Where the ports of :meth:`status` listen, when not on loopback (a network namespace's address)."""
        placed = self.placement
        if not placed:
            return ""
        gone = "" if os.path.exists(os.path.join(RUN_NETNS, placed["netns"])) else ", gone"
        return f" on {placed['address']} (host {placed['host']}, network namespace {placed['netns']}{gone})"

    def stop(self) -> list[Left]:
        """Stop exactly the processes this server started; then remove what its ledger proves it made and what
        the server wrote where it was allowed to. Returns what was left (a user's files inside, with the
        directories holding them): it stays recorded, so a later stop finishes once they are moved away.
        If a process cannot be stopped, nothing is removed and TestbedError says which."""
        self.unmount_all()
        failed = []
        for p in reversed(self.state.procs):
            try:
                p.stop()
            except TestbedError as e:
                failed.append(str(e))
        self.state.procs = [p for p in self.state.procs if p.alive()]
        self._journal()
        if failed:
            raise TestbedError(f"{self.kind}: {'; '.join(failed)}")
        self.left = self.remove_cgroup() + self.ledger.remove(self.claims)
        return self.left


def save_json(path: Path, data: Any, mode: int = 0o600) -> None:
    """Replace ``path`` atomically (a new file beside it, then rename); the temporary name is unique, created
    exclusively and removed on failure, so a user's file is never written through."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
