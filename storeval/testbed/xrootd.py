"""A real XRootD (Debian's ``xrootd-server``) in a network namespace of its own, with every read and write traced:
one server, or a cluster of a redirector and N data servers.

XRootD 5.5 binds 0.0.0.0 (it has no option for one address), so a testbed server in the host's network
namespace would be open to the network. Every daemon runs instead inside a namespace of its own
(:mod:`.netns`: ``storeval-<token>``, ``lo`` and one veth pair on a private /30, nothing routed beyond it), and
the storeval target points at the namespace's end of the pair: ``root://<ns address>:<port>//storeval``. Inside
the namespace nothing else listens, so the ports are XRootD's own (1094 for the server or redirector, 3121 for
the redirector's cmsd, 1094+k for data server k; another on a lost port). The ``xrd.allow`` lines a server on
127.0.0.1 needs are gone: they would reset connections from the veth peer, the host. The namespace is recorded
in the state before it is made and deleted by :meth:`XrootdServer.stop`, after the daemons.

On an emulated host (:meth:`Server.place`, the ``host`` setting) the daemons run in that host's namespace
instead — the network's, which this server neither makes nor removes — and the host's address takes the place
of the veth end: ``all.manager <host address>:<cms port>``, so the redirector sends clients (on other hosts, or
in the root namespace through the network's controller) to data servers at the host's address. They still
listen on 0.0.0.0 *of that namespace* (XRootD cannot bind one address), where the host's ``eth0`` and the
namespace's own loopback are all there is; no ``xrd.allow`` line, as everyone on the emulated network must reach
them.

Each daemon runs in the foreground of its own session (no ``-b``; ``ip netns exec`` execs it), so the PID we
record is the daemon itself; it drops to the ``xrootd`` user (``-R xrootd``) because it refuses to run as root.

``servers`` 1 (the default) is one ``xrootd``, its data in ``<home>/data``. ``servers`` N ≥ 2 is a cluster from
one configuration switched on the instance name (``-n``): a redirector (``cmsd`` + ``xrootd``, ``all.role
manager``) and N data servers (``cmsd`` + ``xrootd``, ``all.role server``, ``oss.localroot <home>/dsK``), each
node's cmsd started before its xrootd (an xrootd that finds no cmsd retries only after 10 s). ``all.manager``
names the namespace's veth address, so the redirector sends clients to data servers at an address the host
reaches. New files land on the data servers in turn, and reads, writes, removals of a file go where the file is.
Directory creation and removal are forwarded to every data server (``ofs.forward 1way mkdir mkpath rmdir``,
which XRootD allows only with authorization on: an ``acc.authdb`` granting everyone everything under the
export), so every data server has every directory; one way means the client is told at once and the data
servers act a moment later (and a removal that fails there, a directory not empty, is not reported). ``cms.delay servers 1`` rather than N: with N, the redirector suspends
the whole cluster as soon as one data server goes (measured: a killed data server left every client waiting
until the node was dropped, 10 minutes later); ``drop 5`` forgets a dead data server after 5 s, and a started
one logs in again. The cluster is ready when a locate through the redirector finds ``/storeval`` on every data
server. A plain directory listing through a redirector fails (it lists the redirector's own disk): clients list
with ``DirListFlags.LOCATE | DirListFlags.MERGE``. ``lookup 1``: a new file (which no data server has yet) is
placed after 1 s rather than XRootD's 5.

Namespaces need root: as another user, ``start`` says so in one line and makes nothing.

``xrootd.trace fs fsio request`` makes each (data) server log one line per read, vector-read element and write
(``fsio``), each open and close (``fs``: the file a handle is on) and each request (``request``: where one
vector read ends; it also puts the client's stream id into every line): :func:`parse_trace` turns the I/O lines
into ``(op, offset, length)`` so a test can count the bytes the servers were asked for
(:meth:`XrootdServer.trace_ops`, over every data server's log), and ``storeval.traces.load_trace`` reads the
same log as a trace to replay (docs/traces.md). Logs are never rotated (``-k
fifo``: a log would only rotate when someone writes to its ``.xrootd.log``/``.cmsd.log`` fifo), so their paths
stay valid for as long as the server runs.

``-R xrootd`` makes the daemons work as the ``xrootd`` user, which must reach its files. The testbed directory
may sit where that user cannot go (a home directory, pytest's 0700 temporary directories), so the server's own
files — data, logs, configuration, admin and pid directories — live in a *home* of their own under ``/var/tmp``
(``storeval-xrootd-*``): a second anchor of the server's ledger, with its own marker. On stop only what the
ledger proves is removed, plus what the daemons wrote: everything in their admin and pid directories, their
log fifos and rotated logs, and in each data directory what belongs to the ``xrootd`` user they run as.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import psutil

from .base import (
    HOST_HELP,
    RESPAWN_WAIT,
    FaultNode,
    Proc,
    Server,
    TestbedError,
    TestbedOptionError,
    apt_install,
    port_open,
)
from ..traces.xrootd import data_ops, pgwrite_payload
from .netns import Netns, Taken, require_root

PACKAGES = ("xrootd-server", "xrootd-client")
# the grid's own clients, measured beside storeval's drivers by the command workload (studies/wlcg-clients.yaml):
# davix-get/davix-put, and gfal2 through its Python binding (Debian has no gfal2-util, so no gfal-copy)
GRID_CLIENTS = ("davix", "python3-gfal2", "gfal2-plugin-http", "gfal2-plugin-xrootd", "gfal2-plugin-file")
RUN_AS = "xrootd"  # the user Debian's package creates; the server refuses to run as root
EXPORT = "storeval"  # the directory (under each data dir) the storeval target points at
START_ATTEMPTS = 3
DATA, ADMIN, LOGS = "xrootd-data", "xrootd-admin", "xrootd-logs"  # ledger rules, see XrootdServer.claims
START_TIMEOUT = 30.0
XROOTD_PORT = 1094  # XRootD's own ports: inside the namespace nothing else listens
CMS_PORT = 3121
MAX_SERVERS = 8
REDIRECTOR = "redir"  # the redirector's instance name (-n); data servers are ds1 … dsN
NETNS_ATTEMPTS = 3
_READY = re.compile(r"------ (?:xrootd|cmsd) \S+ initialization completed")
_LOG_NAMES = re.compile(r"\.?(?:xrootd|cmsd)\.log.*")  # a daemon's log, its fifo (-k fifo), rotated copies

def http_lines(tls: Path) -> list[str]:
    """What a daemon needs to serve HTTPS and HTTP-TPC and to be either end of an XRootD third-party copy: its
    certificate (``tls``: host.pem, host.key, ca.pem — XrdHttp loads its extension handlers only with HTTPS
    configured, and XrdHttpTPC's libcurl checks the other end with the CA), the HTTP-TPC handler (``COPY`` with
    ``Source``/``Destination``), native TPC (the destination runs ``xrdcp --server`` to pull), and adler32
    checksums (``kXR_query`` and ``Want-Digest``), with which a copy is verified."""
    return [f"http.cert {tls / 'host.pem'}", f"http.key {tls / 'host.key'}", f"http.cafile {tls / 'ca.pem'}",
            "http.exthandler xrdtpc libXrdHttpTPC.so", "ofs.tpc pgm /usr/bin/xrdcp --server", "xrootd.chksum adler32"]


def parse_trace(lines: Iterable[str]) -> list[tuple[str, int, int]]:
    """``(op, offset, length)`` for every read, readV element, pgread, write and pgwrite in trace lines.

    ``op`` is the name the server logs (``read``, ``readV``, ``pgread``, ``write``, ``pgwrite``); one readV
    request gives one tuple per element. Lengths are what the client *asked* for, as the server logs them
    before doing the I/O: a read that crosses the end of the file is logged with its full length, and a
    request that fails afterwards is logged too. For ``pgwrite`` the length is the data only (the CRC32C
    bytes the server also logs are taken off). Other lines (``fs`` opens and closes, ``request`` lines) are
    ignored. The line layouts are :mod:`storeval.traces.xrootd`'s, which reads the same log as a whole trace.
    """
    return list(data_ops(lines))


def query_readv_limits(url: str, timeout: int = 10) -> tuple[int, int]:
    """``(readv_iov_max, readv_ior_max)`` of the server at ``root://host:port``: elements per kXR_readv
    request, and bytes per element. 5.5.3 answers (1024, 2097136)."""
    from XRootD import client
    from XRootD.client.flags import QueryCode

    status, answer = client.FileSystem(url).query(QueryCode.CONFIG, "readv_iov_max readv_ior_max",
                                                  timeout=timeout)
    if not status.ok or not answer:
        raise TestbedError(f"xrootd: cannot query the vector-read limits of {url}: {status.message.strip()}")
    iov, ior = (int(v) for v in answer.decode().split())
    return iov, ior


def _netns_pids(name: str) -> list[int]:
    """The processes inside network namespace ``name`` now (``ip netns pids``)."""
    try:
        proc = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    return [int(p) for p in proc.stdout.split() if p.isdigit()] if proc.returncode == 0 else []


def _can_reach(path: Path, user: str) -> bool:
    """Whether ``user`` can search (traverse) ``path``, every directory above it included."""
    proc = subprocess.run(["test", "-x", str(path)], user=user, group=user, extra_groups=[],
                          capture_output=True)
    return proc.returncode == 0


class XrootdServer(Server):
    kind = "xrootd"
    summary = ("XRootD 5 (Debian xrootd-server) in a network namespace of its own: one server, or a redirector "
               "and N data servers; every read traced")
    target_schemes = {"xrootd": "root", "xrootd-davs": "davs"}
    options_help = {"servers": f"data servers, 1-{MAX_SERVERS} (default 1: one xrootd; 2 or more: a redirector "
                               "and that many data servers)", "host": HOST_HELP}

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        out = super().check_options(options)
        n = out.get("servers", 1)
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_SERVERS:
            raise TestbedOptionError(f"testbed xrootd: servers must be a whole number from 1 to {MAX_SERVERS}, not {n!r}")
        out["servers"] = n
        return out

    # -- install ----------------------------------------------------------------------------------------
    def install(self) -> None:
        apt_install(*PACKAGES)
        for binary in ("xrootd", "cmsd"):
            if not shutil.which(binary):
                raise TestbedError(f"xrootd: the {binary} binary is missing although xrootd-server is installed; "
                                   "run apt-get install --reinstall xrootd-server")

    # -- layout (all derived from the recorded home and nodes, so a rebuilt server finds them too) ----------
    @property
    def n_servers(self) -> int:
        return int(self.state.info.get("servers") or self.options.get("servers") or 1)

    @property
    def clustered(self) -> bool:
        return self.n_servers > 1

    @property
    def home(self) -> Path:
        """Where the server's files live: a directory every user can reach (see the module docstring)."""
        return self.home_under_var_tmp("home")

    @property
    def data_dir(self) -> Path:
        """The single server's data directory (a cluster's: :meth:`data_dirs`)."""
        return self.home / "data"

    def data_dirs(self) -> dict[str, Path]:
        """Data server name -> its ``oss.localroot`` (``{"xrootd": <home>/data}`` for the single server)."""
        if not self.clustered:
            return {"xrootd": self.data_dir}
        return {f"ds{k}": self.home / f"ds{k}" for k in range(1, self.n_servers + 1)}

    @property
    def config_file(self) -> Path:
        return self.home / "xrootd.cfg"

    @property
    def log_file(self) -> Path:
        return Path(self.state.info.get("log") or self.home / "log" / "xrootd.log")

    def _node_log(self, node: str, daemon: str) -> Path:
        """Where ``daemon`` of cluster node ``node`` logs: ``-l <home>/log/<daemon>.log -n <node>`` puts it there."""
        return self.home / "log" / node / f"{daemon}.log"

    def nodes(self) -> list[str]:
        """The cluster's instance names, in the order of ``state.procs`` (cmsd, xrootd of each)."""
        return [REDIRECTOR, *(f"ds{k}" for k in range(1, self.n_servers + 1))] if self.clustered else []

    @property
    def netns(self) -> Netns | None:
        """The namespace this server made for itself (None on an emulated host: the network's is used)."""
        rec = self.state.info.get("netns")
        return Netns.from_json(rec) if rec else None

    @property
    def netns_name(self) -> str | None:
        """Where the daemons run: the emulated host's namespace, or the server's own."""
        if self.placement:
            return self.placement["netns"]
        ns = self.netns
        return ns.name if ns else None

    @property
    def address(self) -> str:
        """The servers' address: the emulated host's, or the namespace's end of the veth pair."""
        if self.placement:
            return self.placement["address"]
        ns = self.netns
        if ns is None:
            raise TestbedError("xrootd: not started (no network namespace recorded)")
        return ns.ns_addr

    @property
    def port(self) -> int:
        """The port clients connect to: the server's, or the redirector's."""
        try:
            return int(self.state.ports["xrootd"])
        except KeyError:
            raise TestbedError("xrootd: not started (no port recorded)") from None

    @property
    def url(self) -> str:
        """``root://<ns address>:PORT`` — the server (or redirector), without a path."""
        return f"root://{self.address}:{self.port}"

    # -- the trace ------------------------------------------------------------------------------------------
    def trace_logs(self) -> dict[str, Path]:
        """Data server name -> the log with its ``fsio`` trace lines (one file for the server's whole life)."""
        if not self.clustered:
            return {"xrootd": self.log_file}
        return {node: self._node_log(node, "xrootd") for node in self.nodes()[1:]}

    def trace_log(self) -> Path:
        """The single server's trace log (a cluster's first data server's: :meth:`trace_logs` has them all)."""
        return next(iter(self.trace_logs().values()))

    def trace_mark(self) -> tuple[int, ...]:
        """The current end of every trace log: pass it to :meth:`trace_ops` to see only what follows."""
        marks = []
        for log in self.trace_logs().values():
            try:
                marks.append(log.stat().st_size)
            except FileNotFoundError:
                marks.append(0)
        return tuple(marks)

    def trace_ops_by_server(self, since: Sequence[int] | int = ()) -> dict[str, list[tuple[str, int, int]]]:
        """Data server name -> :func:`parse_trace` of its log from ``since`` (a :meth:`trace_mark`) on."""
        marks = [since] if isinstance(since, int) else list(since)
        out = {}
        for i, (name, log) in enumerate(self.trace_logs().items()):
            with open(log, "rb") as f:
                f.seek(marks[i] if i < len(marks) else 0)
                text = f.read().decode("utf-8", "replace")
            out[name] = parse_trace(text.splitlines())
        return out

    def trace_ops(self, since: Sequence[int] | int = ()) -> list[tuple[str, int, int]]:
        """:func:`parse_trace` of every data server's trace log from ``since`` (a :meth:`trace_mark`) on.

        A request is logged before the server answers it, so once a synchronous client call has returned,
        its lines are in the log."""
        return [op for ops in self.trace_ops_by_server(since).values() for op in ops]

    # -- start ------------------------------------------------------------------------------------------
    def _user(self) -> str | None:
        """The user the server drops to (None when we are not root: then it simply runs as us)."""
        if os.geteuid() != 0:
            return None
        try:
            pwd.getpwnam(RUN_AS)
        except KeyError:
            raise TestbedError(f"xrootd: user '{RUN_AS}' is missing (xrootd-server creates it); "
                               "run apt-get install --reinstall xrootd-server") from None
        return RUN_AS

    def _prepare_dirs(self, user: str | None) -> None:
        for data in self.data_dirs().values():
            self.mkdir(data, rule=DATA)
            self.mkdir(data / EXPORT)
        self.mkdir(self.home / "admin", rule=ADMIN)
        self.mkdir(self.home / "run", rule=ADMIN)
        self.mkdir(self.home / "log", rule=LOGS)
        if self.clustered:
            for node in self.nodes():
                self.mkdir(self.home / "log" / node)
                for daemon in ("cmsd", "xrootd"):
                    os.close(self.ledger.open(self._node_log(node, daemon), append=True))
        else:
            os.close(self.ledger.open(self.home / "log" / "xrootd.log", append=True))
        self.state.info["user"] = user
        if user is None:
            return
        ent = pwd.getpwnam(user)
        for top, dirs, files in os.walk(self.home):
            for name in [top, *(os.path.join(top, n) for n in dirs + files)]:
                os.chown(name, ent.pw_uid, ent.pw_gid, follow_symlinks=False)
        for data in self.data_dirs().values():
            if not _can_reach(data, user):
                raise TestbedError(f"xrootd: user {user} cannot reach {data}; set TMPDIR to a directory every "
                                   "user can traverse")

    def claims(self, rule: str, parts: tuple[str, ...], st: os.stat_result) -> bool:
        """The admin and pid directories are the daemons' alone (sockets, fifos, links, pid files, one directory
        per instance); in the log directory they make each log's fifo (``.xrootd.log``, ``.cmsd.log``) and
        rotated logs, beside the logs or in an instance's directory; in a data directory, when they run as
        their own user, exactly what that user owns (as the caller, everything: see the module docstring)."""
        if rule == ADMIN:
            return True
        if rule == LOGS:
            return (len(parts) in (1, 2) and bool(_LOG_NAMES.fullmatch(parts[-1]))
                    and (len(parts) == 1 or parts[0] in self.nodes()))
        if rule == DATA:
            user = self.state.info.get("user")
            if user is None:
                return True
            try:
                return st.st_uid == pwd.getpwnam(user).pw_uid
            except KeyError:
                return False
        return False

    def _write_config(self, port: int) -> None:
        tls = self.home / "tls"
        self.write_file(self.config_file, "\n".join([
            "# written by storeval testbed: one server, alone in its network namespace",
            f"xrd.port {port}",
            "all.role server",
            "all.export /",
            f"oss.localroot {self.data_dir}",
            f"all.adminpath {self.home / 'admin'}",
            f"all.pidpath {self.home / 'run'}",
            "xrootd.trace fs fsio request",
            "# the same files over HTTPS and HTTP (WebDAV), on the same port (XrdHttp tells the protocols apart)",
            f"xrd.protocol XrdHttp:{port} libXrdHttp.so",
            *http_lines(tls),
            "",
        ]))

    @property
    def ca_file(self) -> Path:
        """The testbed's own CA certificate (under ``--dir``): what a ``davs://`` client checks the server with."""
        return self.root / "ca" / "ca.pem"

    def tls_addresses(self) -> list[str]:
        """The addresses the server's certificate names (besides 127.0.0.1 and localhost)."""
        return [self.address]

    def _make_certificates(self, user: str | None) -> None:
        """A CA of this testbed's own (its key never kept) and the server's certificate signed by it, for the
        server's addresses (:meth:`tls_addresses`), 127.0.0.1 and localhost; the server's copy readable by the user
        it runs as only."""
        names = ",".join([*(f"IP:{a}" for a in self.tls_addresses()), "IP:127.0.0.1", "DNS:localhost"])
        with tempfile.TemporaryDirectory() as tmp:
            t = Path(tmp)
            steps = [
                ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", t / "ca.key", "-out",
                 t / "ca.pem", "-days", "30", "-subj", "/CN=storeval testbed CA",
                 "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
                ["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", t / "host.key", "-out", t / "host.csr",
                 "-subj", f"/CN={self.address}"],
                ["openssl", "x509", "-req", "-in", t / "host.csr", "-CA", t / "ca.pem", "-CAkey", t / "ca.key",
                 "-CAcreateserial", "-out", t / "host.pem", "-days", "30", "-extfile", t / "ext.cnf"],
            ]
            (t / "ext.cnf").write_text(f"subjectAltName={names}\nextendedKeyUsage=serverAuth\n"
                                       "basicConstraints=CA:FALSE\n")
            for cmd in steps:
                proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=120)
                if proc.returncode != 0:
                    last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
                    raise TestbedError(f"xrootd: cannot make its TLS certificate ({cmd[0]} {cmd[1]}: {last}); "
                                       "install openssl")
            proc = subprocess.run(["openssl", "x509", "-hash", "-noout", "-in", str(t / "ca.pem")], capture_output=True,
                                  text=True, timeout=60)
            if proc.returncode != 0 or not proc.stdout.strip():
                raise TestbedError("xrootd: cannot name its CA certificate by hash (openssl x509 -hash); install openssl")
            self.mkdir(self.root / "ca")
            self.write_file(self.ca_file, (t / "ca.pem").read_text())
            # the grid's layout (X509_CERT_DIR): gfal2, davix and other tools find the CA by its subject's hash
            self.write_file(self.root / "ca" / f"{proc.stdout.strip()}.0", (t / "ca.pem").read_text())
            self.mkdir(self.home / "tls")
            self.write_file(self.home / "tls" / "ca.pem", (t / "ca.pem").read_text())
            self.write_file(self.home / "tls" / "host.pem", (t / "host.pem").read_text())
            self.write_file(self.home / "tls" / "host.key", (t / "host.key").read_text(), mode=0o600)
        if user is not None:
            ent = pwd.getpwnam(user)
            for name in ("tls", "tls/ca.pem", "tls/host.pem", "tls/host.key"):
                os.chown(self.home / name, ent.pw_uid, ent.pw_gid)

    def _write_cluster_config(self) -> None:
        auth = self.home / "auth.db"
        self.write_file(auth, f"# written by storeval testbed: everyone may do everything under /{EXPORT}\n"
                              f"u * /{EXPORT} a\n")
        ports = self.state.ports
        lines = [
            "# written by storeval testbed: a redirector and data servers, switched on the instance name (-n)",
            f"all.export /{EXPORT}",
            f"all.manager {self.address}:{ports['cms']}",
            f"all.adminpath {self.home / 'admin'}",
            f"all.pidpath {self.home / 'run'}",
            "cms.delay startup 1 servers 1 lookup 1 drop 5",
            "xrootd.trace fs fsio request",
            f"if named {REDIRECTOR}",
            "  all.role manager",
            f"  xrd.port {ports['xrootd']} if exec xrootd",
            f"  xrd.port {ports['cms']} if exec cmsd",
            "  ofs.forward 1way mkdir mkpath rmdir",
            "  ofs.authorize 1",
            f"  acc.authdb {auth}",
        ]
        for node, data in self.data_dirs().items():
            lines += [f"else if named {node}", "  all.role server", f"  xrd.port {ports[node]} if exec xrootd",
                      f"  oss.localroot {data}"]
        self.write_file(self.config_file, "\n".join([*lines, "fi", ""]))

    def _command(self, user: str | None, daemon: str = "xrootd", node: str | None = None) -> list[str]:
        """The daemon's command line (:meth:`Server._spawn` runs it inside the namespace)."""
        log = self.home / "log" / f"{daemon}.log" if node else self.log_file
        cmd = [daemon, "-c", str(self.config_file), "-l", str(log), "-k", "fifo", "-I", "v4"]
        cmd += ["-n", node] if node else []
        cmd += ["-R", user] if user else []
        assert self.netns_name is not None
        return cmd

    def _make_netns(self) -> Netns:
        """Plan the namespace, record it (so a `down` after a killed `up` finds it), then make it."""
        for _attempt in range(NETNS_ATTEMPTS):
            ns = Netns.plan()
            self.state.info["netns"] = ns.to_json()
            self._journal()
            try:
                ns.create()
                return ns
            except Taken:
                del self.state.info["netns"]  # someone else's names: never ours to remove
                self._journal()
        raise TestbedError("xrootd: no unused name for its network namespace after "
                           f"{NETNS_ATTEMPTS} tries; try again")

    def start(self) -> None:
        for binary in ("xrootd", "cmsd") if self.clustered else ("xrootd",):
            if not shutil.which(binary):
                raise TestbedError("xrootd: not installed (run `storeval testbed up xrootd` as root, "
                                   "or apt-get install xrootd-server xrootd-client)")
        require_root("xrootd: the testbed's XRootD (it cannot bind one address)")
        user = self._user()
        self.state.info["servers"] = self.n_servers
        self.make_root()
        self._prepare_dirs(user)
        self.state.info.update({"config": str(self.config_file), "export": f"/{EXPORT}",
                                "version": self._version(shutil.which("xrootd") or "xrootd")})
        if self.clustered:
            self.state.info["data_dirs"] = {k: str(v) for k, v in self.data_dirs().items()}
        else:
            self.state.info.update({"log": str(self.log_file), "data": str(self.data_dir)})
        if self.placement:
            self.check_netns()  # the emulated host's namespace: the network's, not made here
        else:
            self._make_netns()
        if self.clustered:
            self._start_cluster(user)
        else:
            self._start_single(user)

    def _start_single(self, user: str | None) -> None:
        self._make_certificates(user)
        log = self.log_file
        port = XROOTD_PORT
        last = ""
        for _attempt in range(START_ATTEMPTS):
            self._write_config(port)
            (self.home / "run" / "xrootd.pid").unlink(missing_ok=True)  # the server's, in its own directory
            mark = log.stat().st_size
            self.state.procs = []
            self.state.ports = {"xrootd": port}
            proc = self._spawn(self._command(user), name="xrootd", log=log, cwd=self.home)
            outcome, last = self._await_start(proc, log, mark)
            if outcome == "ok":
                return
            proc.stop(grace=5)
            self.state.procs = []
            if outcome != "port":
                break
            port = self.pick_port()  # someone holds XRootD's port inside the namespace: another one
        self.state.ports = {}
        raise TestbedError(f"xrootd did not start: {last or 'no message'}; see {log}")

    def _start_cluster(self, user: str | None) -> None:
        """cmsd then xrootd of the redirector, then of each data server, each started once the last answers."""
        self.state.ports = {"xrootd": XROOTD_PORT, "cms": CMS_PORT,
                            **{f"ds{k}": XROOTD_PORT + k for k in range(1, self.n_servers + 1)}}
        self._write_cluster_config()
        self.state.procs = []
        self._journal()
        for node in self.nodes():
            for daemon in ("cmsd", "xrootd"):
                self._launch(user, node, daemon, slot=None, deadline=time.monotonic())

    def _launch(self, user: str | None, node: str, daemon: str, slot: int | None, deadline: float) -> Proc:
        """Start ``daemon`` of cluster ``node`` (in ``state.procs[slot]``, or appended) and wait for its log to say
        it is initialized; a port still held (a killed daemon's connections) is retried until ``deadline``."""
        log = self._node_log(node, daemon)
        name = f"{daemon} {node}"
        while True:
            (self.home / "run" / node / f"{daemon}.pid").unlink(missing_ok=True)  # a killed one's, in its directory
            mark = log.stat().st_size if log.exists() else 0
            self.state.info.setdefault("log_marks", {})[name] = mark  # where this life of its log begins
            # a named instance makes a directory of its name in its working directory: the pid directory's
            proc = self._spawn(self._command(user, daemon, node), name=name, log=log, cwd=self.home / "run", slot=slot)
            if slot is None:
                slot = len(self.state.procs) - 1
            outcome, why = self._await_start(proc, log, mark)
            if outcome == "ok":
                return proc
            proc.stop(grace=5)
            if outcome != "port" or time.monotonic() >= deadline:
                raise TestbedError(f"xrootd: {name} did not start: {why or 'no message'}; see {log}")
            time.sleep(0.5)

    def fault_names(self, exited: list[int]) -> list[str]:
        if not exited:
            return []
        if not self.clustered:
            return [self.kind]
        nodes = self.nodes()
        names = []
        for i in sorted(exited):
            node = nodes[i // 2] if i // 2 < len(nodes) else REDIRECTOR
            name = self.kind if node == REDIRECTOR else f"{self.kind}.{node}"
            if name not in names:
                names.append(name)
        return names

    def fault_nodes(self) -> list[FaultNode]:
        """Each data server of a cluster, ``ds1`` … ``dsN``: its cmsd and xrootd together."""
        if not self.clustered:
            return []
        out = []
        for k, node in enumerate(self.nodes()[1:], start=1):
            port = int(self.state.ports.get(node, 0))
            out.append(FaultNode(node, f"XRootD data server {k} of {self.n_servers}: cmsd and xrootd (port {port} on "
                                       f"{self.address}, {self.data_dirs()[node]})", [2 * k, 2 * k + 1], [port]))
        return out

    def _check_restartable(self) -> str | None:
        ns = self.netns
        if not shutil.which("xrootd") or not self.state.ports or self.netns_name is None:
            raise TestbedError("xrootd: cannot start it again (not installed, or never started here)")
        if self.placement:
            self.check_netns()
        elif ns is None or not ns.exists() or not ns.link_up():
            raise TestbedError(f"xrootd: its network namespace {ns.name} is gone: `storeval testbed down xrootd`, "
                               "then `storeval testbed up xrootd`")
        return self.state.info.get("user")

    def fault_server(self) -> FaultNode:
        port = int(self.state.ports.get("xrootd", 0))
        return FaultNode(self.kind, f"XRootD server (port {port})", list(range(len(self.state.procs))), [port],
                         label=self.kind)

    def respawn(self, dead: list[int] | None = None, timeout: float = RESPAWN_WAIT) -> None:
        """Start the server again after a fault killed it: the same namespace, port, configuration and data,
        recorded in its old slot of ``state.procs``; a cluster's dead daemons node by node, the redirector first
        (every exited process: ``dead`` changes nothing). A port still held by the killed server's connections is
        retried until ``timeout``. Raises TestbedError if everything runs."""
        if self.state.procs and all(p.alive() for p in self.state.procs):
            raise TestbedError("xrootd: it is running; nothing to start")
        user = self._check_restartable()
        deadline = time.monotonic() + timeout
        if self.clustered:
            for node in self.nodes():
                self._restart_node(user, node, deadline)
            self.wait_ready(timeout=max(1.0, deadline - time.monotonic()))
            return
        log = self.log_file
        while True:
            (self.home / "run" / "xrootd.pid").unlink(missing_ok=True)  # the killed server's, in its own directory
            mark = log.stat().st_size if log.exists() else 0
            if self.state.procs:
                proc = self._spawn(self._command(user), name="xrootd", log=log, cwd=self.home, slot=0)
            else:
                proc = self._spawn(self._command(user), name="xrootd", log=log, cwd=self.home)
            outcome, why = self._await_start(proc, log, mark)
            if outcome == "ok":
                return
            proc.stop(grace=5)
            if outcome != "port" or time.monotonic() >= deadline:
                raise TestbedError(f"xrootd did not start again on port {self.port}: {why or 'no message'}; see {log}")
            time.sleep(0.5)

    def _restart_node(self, user: str | None, node: str, deadline: float) -> None:
        """The dead daemons of one cluster node again, cmsd before xrootd, in their slots."""
        i = self.nodes().index(node)
        for slot, daemon in ((2 * i, "cmsd"), (2 * i + 1, "xrootd")):
            if slot < len(self.state.procs) and self.state.procs[slot].alive():
                continue
            if slot > len(self.state.procs):
                raise TestbedError(f"xrootd: {node} was never started here: `storeval testbed down xrootd`, then up")
            self._launch(user, node, daemon, slot=slot if slot < len(self.state.procs) else None, deadline=deadline)

    def start_node(self, name: str, timeout: float = RESPAWN_WAIT) -> None:
        """Data server ``name`` (``ds2``) again with its data on its port, once the redirector finds it."""
        if name not in self.nodes()[1:]:
            raise TestbedError(f"xrootd: no data server {name} (it has {', '.join(self.nodes()[1:]) or 'none'})")
        user = self._check_restartable()
        deadline = time.monotonic() + timeout
        self._restart_node(user, name, deadline)
        port = int(self.state.ports[name])
        while port not in self.located():
            if time.monotonic() >= deadline:
                raise TestbedError(f"xrootd: {name} started again, but the redirector did not find it within "
                                   f"{timeout:g} s; see {self._node_log(REDIRECTOR, 'cmsd')}")
            time.sleep(0.2)

    @staticmethod
    def _version(xrootd: str) -> str:
        try:
            p = subprocess.run([xrootd, "-v"], capture_output=True, text=True, timeout=10)
            return (p.stderr or p.stdout).strip().splitlines()[-1]
        except (OSError, subprocess.SubprocessError, IndexError):
            return "unknown"

    @staticmethod
    def _await_start(proc: Proc, log: Path, mark: int) -> tuple[str, str]:
        """Watch the log of one start attempt: ("ok", ""), ("port", why) for a lost port, ("fail", why)."""
        deadline = time.monotonic() + START_TIMEOUT
        text = ""
        while time.monotonic() < deadline:
            with open(log, "rb") as f:
                f.seek(mark)
                text = f.read().decode("utf-8", "replace")
            if _READY.search(text) and proc.alive():
                return "ok", ""
            failed = "initialization failed" in text
            if failed or not proc.alive():
                if not failed:
                    time.sleep(0.2)  # let a dying server finish its last line
                    with open(log, "rb") as f:
                        f.seek(mark)
                        text = f.read().decode("utf-8", "replace")
                errors = [ln.strip() for ln in text.splitlines()
                          if any(w in ln for w in ("Unable", "rror", "nvalid", "prohibit", "failed"))]
                why = errors[0] if errors else (text.strip().splitlines() or ["exited"])[-1]
                return ("port" if "address already in use" in text else "fail"), why
            time.sleep(0.05)
        return "fail", f"no 'initialization completed' within {START_TIMEOUT:g} s"

    # -- ready, health, targets ----------------------------------------------------------------------------
    def located(self) -> set[int]:
        """The data-server ports a locate of the export through the redirector finds now (fresh, not cached)."""
        from XRootD import client
        from XRootD.client.flags import OpenFlags

        status, info = client.FileSystem(self.url).locate(f"/{EXPORT}", OpenFlags.REFRESH, timeout=5)
        if not status.ok or info is None:
            return set()
        return {int(m[1]) for loc in info for m in [re.search(r":(\d+)$", loc.address)] if m}

    def redirector_active(self) -> bool:
        """Whether the redirector's xrootd last heard its cmsd say the cluster serves (not suspended): asked while
        suspended, it tells clients to wait 10 s."""
        log = self._node_log(REDIRECTOR, "xrootd")
        try:
            with open(log, "rb") as f:
                f.seek(self.state.info.get("log_marks", {}).get(f"xrootd {REDIRECTOR}", 0))
                text = f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return False
        said = re.findall(r"cms_ClientMan: Connected to (suspended )?\S+|cms_setStatus: Manager \S+ (resumed|suspended)", text)
        return bool(said) and not said[-1][0] and said[-1][1] != "suspended"

    def ready(self) -> bool:
        if not self.state.ports or not port_open(self.port, self.address):
            return False
        if self.clustered:
            if not self.redirector_active():
                return False
            return self.located() >= {int(self.state.ports[node]) for node in self.nodes()[1:]}
        from XRootD import client

        status, info = client.FileSystem(self.url).stat(f"/{EXPORT}", timeout=5)
        return bool(status.ok and info is not None)

    def health(self) -> tuple[str, str]:
        """As :meth:`Server.health`, with the ports tried where they are: at the namespace's address."""
        if self.state.procs and self.netns_name is None:  # cannot happen through start(); a damaged state says so
            return "NOT ANSWERING", "no network namespace is recorded: `storeval testbed down xrootd` stops it"
        word, todo = super().health()
        if word not in ("running", "NOT ANSWERING"):
            return word, todo
        closed = [f"{k} {v}" for k, v in self.state.ports.items() if not port_open(v, self.address)]
        if closed:
            return "NOT ANSWERING", f"port {', '.join(closed)} on {self.address} accepts no connection"
        return "running", ""

    def ports_where(self) -> str:
        """The namespace's address the ports listen on, and the address clients connect from."""
        if self.placement:
            return super().ports_where()
        ns = self.netns
        return (f" on {ns.ns_addr} (network namespace {ns.name}{'' if ns.exists() else ', gone'}; clients "
                f"connect from {ns.host_addr})") if ns else ""

    def targets(self) -> dict[str, dict[str, Any]]:
        out = {"xrootd": {"url": f"{self.url}//{EXPORT}", **self.server_counters()}}
        if not self.clustered:  # the same files over HTTPS (a redirector's WebDAV listing shows one data server's)
            out["xrootd-davs"] = {"url": f"davs://{self.address}:{self.port}/{EXPORT}", "ca_file": str(self.ca_file),
                                  "ca_dir": str(self.ca_file.parent), **self.server_counters()}
        return out

    def readv_limits(self) -> tuple[int, int]:
        """``(readv_iov_max, readv_ior_max)`` as this server reports them."""
        return query_readv_limits(self.url)

    # -- stop ----------------------------------------------------------------------------------------------
    def stop(self):
        """Stop the daemons and remove their files (:meth:`Server.stop`), then the network namespace it made
        (an emulated host's stays: it is the network's).

        A daemon an `up` started but was killed before it could record runs inside this server's namespace
        with this server's configuration file: found by both (never by name), it is stopped with the rest."""
        for name in self.daemon_namespaces():
            if not os.path.exists(os.path.join("/run/netns", name)):
                continue
            recorded = {p.pid for p in self.state.procs}
            for pid in _netns_pids(name):
                if pid not in recorded and self._runs_our_config(pid):
                    try:
                        self.state.procs.append(Proc.adopt(pid, f"unrecorded daemon {pid}", self.home / "log"))
                    except TestbedError:
                        continue  # gone meanwhile
            self._journal()
        left = super().stop()
        ns = self.netns
        if ns is not None:
            ns.remove()
            del self.state.info["netns"]
            self._journal()
        return left

    def daemon_namespaces(self) -> list[str]:
        """The network namespaces its daemons run in (where `stop` looks for one an `up` could not record)."""
        return [self.netns_name] if self.netns_name is not None else []

    def _runs_our_config(self, pid: int) -> bool:
        try:
            return str(self.config_file) in psutil.Process(pid).cmdline()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return False


__all__ = ["XrootdServer", "parse_trace", "pgwrite_payload", "query_readv_limits"]  # pgwrite_payload: from traces
