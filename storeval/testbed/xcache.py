"""XCache: XRootD's proxy file cache (``libXrdPss`` + ``libXrdPfc``, Debian's xrootd-server-plugins) in front of
an XRootD origin of its own, the way WLCG sites put a cache before remote storage.

Two daemons from one configuration switched on the instance name (``-n``): ``origin``, a plain XRootD server
holding the data (port 1095), and ``cache``, a proxy (``ofs.osslib libXrdPss.so``, ``pss.origin``) with a disk
cache (``pss.cachelib libXrdPfc.so``, ``oss.localroot <home>/cache``) on port 1094. Two targets: ``xcache``
(``root://`` of the cache: what a site's jobs read through) and ``xcache-origin`` (the origin, directly). A file
read through the cache is fetched from the origin in blocks (``pfc.blocksize``, 1 MiB) on its first read and
served from the cache's disk after; prefetching is off (``pfc.prefetch 0``), so the origin moves exactly the
blocks a client asked for. The cache is read-only: the ``xcache`` target writes to the origin (``write_url``)
and reads through the cache, as a site's jobs do.

Where they run: without settings, both in one network namespace of the server's own (as the XRootD testbed),
the cache at the namespace's veth address. With ``cache_host`` and ``origin_host``, each on its emulated host of
the testbed's network (two different hosts): the origin behind its host's link, so a study puts the WAN between
the cache and the origin (seed 003's 12 ms question), and clients beside the cache reach it without crossing
the link. The targets say which host each is on (``target_hosts``), so a cell's round trip is measured and
checked against the right host's link.

What the cache did is its own record: every file's ``.cinfo`` beside it in the cache directory holds one access
record per open (bytes served from the cache's disk ``B_hit``, waited for from the origin ``B_miss``, passed
through ``B_bypass``), which ``xrdpfc_print -j`` prints as JSON. The ``xcache`` target carries ``cache_dir``, and
``drivers/xcachestats.py`` sums those records into a phase's hit and miss bytes.
"""

from __future__ import annotations

import os
import pwd
import shutil
import time
from pathlib import Path
from typing import Any

from .base import RESPAWN_WAIT, FaultNode, TestbedError, TestbedOptionError, check_host_name, port_open
from .netns import require_root
from .xrootd import ADMIN, DATA, EXPORT, LOGS, XROOTD_PORT, XrootdServer

CACHE, ORIGIN = "cache", "origin"  # the instance names (-n), in the order of state.procs
ORIGIN_PORT = XROOTD_PORT + 1
CACHE_RAM = "1g"  # pfc.ram: XrdPfc 5.5 refuses less than 1 GiB
HOST_SETTINGS = {"cache_host": CACHE, "origin_host": ORIGIN}


class XcacheServer(XrootdServer):
    kind = "xcache"
    summary = ("XCache (XRootD's proxy file cache) in front of an XRootD origin of its own; hit and miss bytes from "
               "the cache's own records")
    target_schemes = {"xcache": "root", "xcache-origin": "root"}
    target_hosts = {"xcache": "cache_host", "xcache-origin": "origin_host"}
    host_setting = "cache_host"
    options_help = {"cache_host": "the emulated host the cache runs on (with origin_host; default: both in a "
                                  "network namespace of their own)",
                    "origin_host": "the emulated host the origin runs on, behind that host's link (with cache_host)"}

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        out = super(XrootdServer, cls).check_options(options)
        given = [k for k in HOST_SETTINGS if k in out]
        if len(given) == 1:
            other = next(k for k in HOST_SETTINGS if k not in out)
            raise TestbedOptionError(f"testbed xcache: {given[0]} needs {other} too (each daemon on an emulated host, "
                                     "or both in a namespace of their own)")
        for key in given:
            check_host_name(cls.kind, out[key])
        if given and out["cache_host"] == out["origin_host"]:
            raise TestbedOptionError("testbed xcache: cache_host and origin_host are the same host; the cache is in "
                                     "front of a remote origin: put them on two hosts")
        return out

    @classmethod
    def hosts_needed(cls, options: dict[str, Any]) -> list[str]:
        return [options[k] for k in HOST_SETTINGS if k in options]

    def use_network(self, net: Any) -> None:
        self.state.info["hosts"] = {node: {"host": self.options[key], "netns": net.netns(self.options[key]),
                                           "address": net.address(self.options[key])}
                                    for key, node in HOST_SETTINGS.items()}
        self._journal()

    # -- layout ---------------------------------------------------------------------------------------------
    @property
    def n_servers(self) -> int:
        return 1

    @property
    def clustered(self) -> bool:
        return False

    def nodes(self) -> list[str]:
        return [CACHE, ORIGIN]

    def data_dirs(self) -> dict[str, Path]:
        return {ORIGIN: self.home / "origin"}

    @property
    def cache_dir(self) -> Path:
        return self.home / "cache"

    def _host(self, node: str) -> dict[str, str] | None:
        return (self.state.info.get("hosts") or {}).get(node)

    @property
    def netns_name(self) -> str | None:
        placed = self._host(CACHE)
        if placed:
            return placed["netns"]
        ns = self.netns
        return ns.name if ns else None

    def daemon_namespaces(self) -> list[str]:
        hosts = self.state.info.get("hosts")
        return [h["netns"] for h in hosts.values()] if hosts else super().daemon_namespaces()

    def node_address(self, node: str) -> str:
        placed = self._host(node)
        return placed["address"] if placed else self.address

    @property
    def address(self) -> str:
        placed = self._host(CACHE)
        if placed:
            return placed["address"]
        ns = self.netns
        if ns is None:
            raise TestbedError("xcache: not started (no network namespace recorded)")
        return ns.ns_addr

    @property
    def port(self) -> int:
        return int(self.state.ports.get(CACHE, XROOTD_PORT))

    def trace_logs(self) -> dict[str, Path]:
        return {node: self._node_log(node, "xrootd") for node in (ORIGIN, CACHE)}

    # -- start ----------------------------------------------------------------------------------------------
    def _prepare_dirs(self, user: str | None) -> None:
        self.mkdir(self.home / "origin", rule=DATA)
        self.mkdir(self.home / "origin" / EXPORT)
        self.mkdir(self.cache_dir, rule=DATA)
        self.mkdir(self.home / "admin", rule=ADMIN)
        self.mkdir(self.home / "run", rule=ADMIN)
        self.mkdir(self.home / "log", rule=LOGS)
        for node in self.nodes():
            self.mkdir(self.home / "log" / node)
            os.close(self.ledger.open(self._node_log(node, "xrootd"), append=True))
        self.state.info["user"] = user
        if user is not None:
            ent = pwd.getpwnam(user)
            for top, dirs, files in os.walk(self.home):
                for name in [top, *(os.path.join(top, n) for n in dirs + files)]:
                    os.chown(name, ent.pw_uid, ent.pw_gid, follow_symlinks=False)

    def _write_xcache_config(self) -> None:
        ports = self.state.ports
        self.write_file(self.config_file, "\n".join([
            "# written by storeval testbed: an XCache and its origin, switched on the instance name (-n)",
            "all.export /",
            "all.role server",
            f"all.adminpath {self.home / 'admin'}",
            f"all.pidpath {self.home / 'run'}",
            "xrootd.trace fs fsio request",
            f"if named {ORIGIN}",
            f"  xrd.port {ports[ORIGIN]}",
            f"  oss.localroot {self.home / 'origin'}",
            f"else if named {CACHE}",
            f"  xrd.port {ports[CACHE]}",
            "  ofs.osslib libXrdPss.so",
            "  pss.cachelib libXrdPfc.so",
            f"  pss.origin {self.node_address(ORIGIN)}:{ports[ORIGIN]}",
            f"  oss.localroot {self.cache_dir}",
            f"  pfc.ram {CACHE_RAM}",
            "  pfc.blocksize 1m",
            "  pfc.prefetch 0",
            "  pfc.diskusage 0.98 0.99",
            "fi",
            "",
        ]))

    def _command(self, user: str | None, daemon: str = "xrootd", node: str | None = None) -> list[str]:
        cmd = [daemon, "-c", str(self.config_file), "-l", str(self.home / "log" / f"{daemon}.log"), "-k", "fifo",
               "-I", "v4", "-n", node or CACHE]
        cmd += ["-R", user] if user else []
        placed = self._host(node or CACHE)
        return ["ip", "netns", "exec", placed["netns"], *cmd] if placed else cmd

    def start(self) -> None:
        if not shutil.which("xrootd"):
            raise TestbedError("xcache: not installed (run `storeval testbed up xcache` as root, or apt-get install "
                               "xrootd-server xrootd-server-plugins)")
        require_root("xcache: the testbed's XCache (XRootD cannot bind one address)")
        user = self._user()
        self.make_root()
        self._prepare_dirs(user)
        self.state.info.update({"config": str(self.config_file), "export": f"/{EXPORT}", "servers": 1,
                                "cache_dir": str(self.cache_dir),
                                "version": self._version(shutil.which("xrootd") or "xrootd")})
        if self._host(CACHE):
            for node in self.nodes():
                ns = self._host(node)["netns"]
                if not os.path.exists(f"/run/netns/{ns}"):
                    raise TestbedError(f"xcache: the network namespace {ns} of host {self._host(node)['host']} is gone")
        else:
            self._make_netns()
        self.state.ports = {CACHE: XROOTD_PORT, ORIGIN: ORIGIN_PORT}
        self._write_xcache_config()
        self.state.procs = []
        self._journal()
        for node in (ORIGIN, CACHE):  # the origin first: the cache connects to it on the first read
            self._launch(user, node, "xrootd", slot=None, deadline=time.monotonic())

    # -- ready, health, targets -----------------------------------------------------------------------------
    def ready(self) -> bool:
        from XRootD import client

        for node in (ORIGIN, CACHE):
            address, port = self.node_address(node), int(self.state.ports[node])
            status, info = client.FileSystem(f"root://{address}:{port}").stat(f"/{EXPORT}", timeout=5)
            if not (status.ok and info is not None):
                return False
        return True

    def closed_ports(self) -> list[str]:
        return [f"{node} {port}" for node, port in self.state.ports.items()
                if not port_open(int(port), self.node_address(node))]

    def health(self) -> tuple[str, str]:
        return super(XrootdServer, self).health()

    def ports_where(self) -> str:
        if self._host(CACHE):
            return "; " + ", ".join(f"{node} on host {self._host(node)['host']} ({self._host(node)['address']})"
                                    for node in (CACHE, ORIGIN))
        return super().ports_where()

    def targets(self) -> dict[str, dict[str, Any]]:
        cache = [p.pid for p in self.state.procs if p.alive() and p.name.split()[-1] == CACHE]
        origin = [p.pid for p in self.state.procs if p.alive() and p.name.split()[-1] == ORIGIN]
        origin_url = f"root://{self.node_address(ORIGIN)}:{self.state.ports[ORIGIN]}//{EXPORT}"
        return {"xcache": {"url": f"root://{self.address}:{self.port}//{EXPORT}", "server_pids": cache,
                           "cache_dir": str(self.cache_dir), "origin_pids": origin, "write_url": origin_url},
                "xcache-origin": {"url": origin_url, "server_pids": origin}}

    # -- faults ---------------------------------------------------------------------------------------------
    def fault_names(self, exited: list[int]) -> list[str]:
        names = []
        for i in sorted(exited):
            name = f"{self.kind}.{self.state.procs[i].name.split()[-1]}" if i < len(self.state.procs) else self.kind
            if name not in names:
                names.append(name)
        return names

    def fault_nodes(self) -> list[FaultNode]:
        out = []
        for i, p in enumerate(self.state.procs):
            node = p.name.split()[-1]
            port = int(self.state.ports.get(node, 0))
            what = "the cache (XrdPss + XrdPfc)" if node == CACHE else "the origin XRootD server"
            out.append(FaultNode(node, f"XCache's {node}: {what} (port {port} on {self.node_address(node)})", [i],
                                 [port]))
        return out

    def fault_server(self) -> FaultNode:
        return FaultNode(self.kind, "XCache and its origin", list(range(len(self.state.procs))),
                         [int(v) for v in self.state.ports.values()], label=self.kind)

    def _check_restartable(self) -> str | None:
        if not shutil.which("xrootd") or not self.state.ports:
            raise TestbedError("xcache: cannot start it again (not installed, or never started here)")
        return self.state.info.get("user")

    def respawn(self, dead: list[int] | None = None, timeout: float = RESPAWN_WAIT) -> None:
        if self.state.procs and all(p.alive() for p in self.state.procs):
            raise TestbedError("xcache: it is running; nothing to start")
        user = self._check_restartable()
        deadline = time.monotonic() + timeout
        for i, p in enumerate(list(self.state.procs)):
            if not p.alive():
                self._launch(user, p.name.split()[-1], "xrootd", slot=i, deadline=deadline)

    def start_node(self, name: str, timeout: float = RESPAWN_WAIT) -> None:
        user = self._check_restartable()
        slots = [i for i, p in enumerate(self.state.procs) if p.name.split()[-1] == name]
        if not slots:
            raise TestbedError(f"xcache: no part {name} (it has {', '.join(self.nodes())})")
        if self.state.procs[slots[0]].alive():
            raise TestbedError(f"xcache: {name} is running; nothing to start")
        self._launch(user, name, "xrootd", slot=slots[0], deadline=time.monotonic() + timeout)


__all__ = ["XcacheServer"]
