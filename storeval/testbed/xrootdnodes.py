"""XRootD systems of a few named daemons: one configuration switched on the instance name (``-n``), every daemon in
a network namespace of the server's own or each on an emulated host of its own.

XCache (a cache and its origin) and the third-party-copy sites (two endpoints) are both this shape; what differs
is each daemon's configuration, its data and its targets, which a subclass declares: ``NODES`` (the instance
names, in the order they start and ``state.procs`` holds them), ``PORTS``, ``HOST_SETTINGS`` (the setting naming
the emulated host of each daemon: given all together, on different hosts, or none), ``FRONT`` (the daemon whose
address is the system's ``address``), and :meth:`node_config` and :meth:`targets`. The rest — directories,
namespaces, start, readiness, faults one daemon at a time, restart — is here. Everything the single XRootD server
documents about its user, its home under ``/var/tmp``, its logs and its ledger holds here too.
"""

from __future__ import annotations

import os
import pwd
import shutil
import time
from abc import abstractmethod
from pathlib import Path
from typing import Any, ClassVar

from .base import RESPAWN_WAIT, FaultNode, TestbedError, TestbedOptionError, check_host_name, port_open
from .netns import require_root
from .xrootd import ADMIN, DATA, EXPORT, LOGS, XrootdServer


class XrootdNodes(XrootdServer):
    NODES: ClassVar[tuple[str, ...]]  # instance names, in start order (the order of state.procs)
    PORTS: ClassVar[dict[str, int]]  # instance name -> its port (inside the namespace nothing else listens)
    HOST_SETTINGS: ClassVar[dict[str, str]]  # setting -> the instance it places on an emulated host
    FRONT: ClassVar[str]  # the instance whose address is the system's
    DATA_NODES: ClassVar[tuple[str, ...]]  # the instances that hold data under <home>/<name>

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        out = super(XrootdServer, cls).check_options(options)
        keys = list(cls.HOST_SETTINGS)
        given = [k for k in keys if k in out]
        if given and len(given) < len(keys):
            missing = ", ".join(k for k in keys if k not in out)
            every = "both" if len(keys) == 2 else "all"
            raise TestbedOptionError(f"testbed {cls.kind}: {given[0]} needs {missing} too (each daemon on an emulated "
                                     f"host, or {every} in a namespace of their own)")
        for key in given:
            check_host_name(cls.kind, out[key])
        if given and len({out[k] for k in keys}) < len(keys):
            raise TestbedOptionError(f"testbed {cls.kind}: {' and '.join(keys)} are the same host; {cls.apart}")
        return out

    apart: ClassVar[str] = "put them on different hosts"  # why the hosts must differ, for the one-line refusal

    @classmethod
    def hosts_needed(cls, options: dict[str, Any]) -> list[str]:
        return [options[k] for k in cls.HOST_SETTINGS if k in options]

    def use_network(self, net: Any) -> None:
        self.state.info["hosts"] = {node: {"host": self.options[key], "netns": net.netns(self.options[key]),
                                           "address": net.address(self.options[key])}
                                    for key, node in self.HOST_SETTINGS.items()}
        self._journal()

    # -- layout ---------------------------------------------------------------------------------------------
    @property
    def n_servers(self) -> int:
        return 1

    @property
    def clustered(self) -> bool:
        return False

    def nodes(self) -> list[str]:
        return list(self.NODES)

    def data_dirs(self) -> dict[str, Path]:
        return {node: self.home / node for node in self.DATA_NODES}

    def extra_dirs(self) -> list[Path]:
        """Directories the daemons write besides their data (an XCache's cache), handed to them as data is."""
        return []

    def _host(self, node: str) -> dict[str, str] | None:
        return (self.state.info.get("hosts") or {}).get(node)

    @property
    def netns_name(self) -> str | None:
        placed = self._host(self.FRONT)
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

    def node_url(self, node: str) -> str:
        """``root://<address>:<port>`` of one daemon."""
        return f"root://{self.node_address(node)}:{self.state.ports[node]}"

    def node_pids(self, node: str) -> list[int]:
        return [p.pid for p in self.state.procs if p.alive() and p.name.split()[-1] == node]

    @property
    def address(self) -> str:
        placed = self._host(self.FRONT)
        if placed:
            return placed["address"]
        ns = self.netns
        if ns is None:
            raise TestbedError(f"{self.kind}: not started (no network namespace recorded)")
        return ns.ns_addr

    @property
    def port(self) -> int:
        return int(self.state.ports.get(self.FRONT, self.PORTS[self.FRONT]))

    def trace_logs(self) -> dict[str, Path]:
        return {node: self._node_log(node, "xrootd") for node in self.NODES}

    # -- start ----------------------------------------------------------------------------------------------
    def _prepare_dirs(self, user: str | None) -> None:
        for data in self.data_dirs().values():
            self.mkdir(data, rule=DATA)
            self.mkdir(data / EXPORT)
        for extra in self.extra_dirs():
            self.mkdir(extra, rule=DATA)
        self.mkdir(self.home / "admin", rule=ADMIN)
        self.mkdir(self.home / "run", rule=ADMIN)
        self.mkdir(self.home / "log", rule=LOGS)
        for node in self.NODES:
            self.mkdir(self.home / "log" / node)
            os.close(self.ledger.open(self._node_log(node, "xrootd"), append=True))
        self.state.info["user"] = user
        if user is not None:
            ent = pwd.getpwnam(user)
            for top, dirs, files in os.walk(self.home):
                for name in [top, *(os.path.join(top, n) for n in dirs + files)]:
                    os.chown(name, ent.pw_uid, ent.pw_gid, follow_symlinks=False)

    def common_config(self) -> list[str]:
        """The lines every daemon reads."""
        return ["all.export /", "all.role server", f"all.adminpath {self.home / 'admin'}",
                f"all.pidpath {self.home / 'run'}", "xrootd.trace fs fsio request"]

    @abstractmethod
    def node_config(self, node: str) -> list[str]:
        """The lines only daemon ``node`` reads (its port, its storage)."""

    def before_launch(self, user: str | None) -> None:
        """What the daemons need made before they start (certificates); once the addresses are known."""

    def _write_nodes_config(self) -> None:
        lines = [f"# written by storeval testbed: {self.kind}, switched on the instance name (-n)", *self.common_config()]
        for i, node in enumerate(self.NODES):
            lines += [f"{'if' if i == 0 else 'else if'} named {node}", *(f"  {ln}" for ln in self.node_config(node))]
        self.write_file(self.config_file, "\n".join([*lines, "fi", ""]))

    def _command(self, user: str | None, daemon: str = "xrootd", node: str | None = None) -> list[str]:
        node = node or self.FRONT
        cmd = [daemon, "-c", str(self.config_file), "-l", str(self.home / "log" / f"{daemon}.log"), "-k", "fifo",
               "-I", "v4", "-n", node]
        cmd += ["-R", user] if user else []
        placed = self._host(node)
        return ["ip", "netns", "exec", placed["netns"], *cmd] if placed else cmd

    def start(self) -> None:
        if not shutil.which("xrootd"):
            raise TestbedError(f"{self.kind}: not installed (run `storeval testbed up {self.kind}` as root, or "
                               "apt-get install xrootd-server xrootd-server-plugins)")
        require_root(f"{self.kind}: the testbed's XRootD daemons (XRootD cannot bind one address)")
        user = self._user()
        self.make_root()
        self._prepare_dirs(user)
        self.state.info.update({"config": str(self.config_file), "export": f"/{EXPORT}", "servers": 1,
                                "version": self._version(shutil.which("xrootd") or "xrootd")})
        if self._host(self.FRONT):
            for node in self.NODES:
                ns = self._host(node)["netns"]
                if not os.path.exists(f"/run/netns/{ns}"):
                    raise TestbedError(f"{self.kind}: the network namespace {ns} of host {self._host(node)['host']} "
                                       "is gone")
        else:
            self._make_netns()
        self.state.ports = dict(self.PORTS)
        self.before_launch(user)
        self._write_nodes_config()
        self.state.procs = []
        self._journal()
        for node in self.NODES:
            self._launch(user, node, "xrootd", slot=None, deadline=time.monotonic())

    # -- ready, health ----------------------------------------------------------------------------------------
    def ready(self) -> bool:
        from XRootD import client

        for node in self.NODES:
            status, info = client.FileSystem(self.node_url(node)).stat(f"/{EXPORT}", timeout=5)
            if not (status.ok and info is not None):
                return False
        return True

    def closed_ports(self) -> list[str]:
        return [f"{node} {port}" for node, port in self.state.ports.items()
                if not port_open(int(port), self.node_address(node))]

    def health(self) -> tuple[str, str]:
        return super(XrootdServer, self).health()

    def ports_where(self) -> str:
        if self._host(self.FRONT):
            return "; " + ", ".join(f"{node} on host {self._host(node)['host']} ({self._host(node)['address']})"
                                    for node in self.NODES)
        return super().ports_where()

    # -- faults: one daemon at a time ---------------------------------------------------------------------------
    def node_what(self, node: str) -> str:
        """What daemon ``node`` is, for the fault plan's listing."""
        return f"XRootD daemon {node}"

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
            out.append(FaultNode(node, f"{self.node_what(node)} (port {port} on {self.node_address(node)})", [i],
                                 [port]))
        return out

    def fault_server(self) -> FaultNode:
        return FaultNode(self.kind, self.summary.split(";")[0], list(range(len(self.state.procs))),
                         [int(v) for v in self.state.ports.values()], label=self.kind)

    def _check_restartable(self) -> str | None:
        if not shutil.which("xrootd") or not self.state.ports:
            raise TestbedError(f"{self.kind}: cannot start it again (not installed, or never started here)")
        return self.state.info.get("user")

    def respawn(self, dead: list[int] | None = None, timeout: float = RESPAWN_WAIT) -> None:
        if self.state.procs and all(p.alive() for p in self.state.procs):
            raise TestbedError(f"{self.kind}: it is running; nothing to start")
        user = self._check_restartable()
        deadline = time.monotonic() + timeout
        for i, p in enumerate(list(self.state.procs)):
            if not p.alive():
                self._launch(user, p.name.split()[-1], "xrootd", slot=i, deadline=deadline)

    def start_node(self, name: str, timeout: float = RESPAWN_WAIT) -> None:
        user = self._check_restartable()
        slots = [i for i, p in enumerate(self.state.procs) if p.name.split()[-1] == name]
        if not slots:
            raise TestbedError(f"{self.kind}: no part {name} (it has {', '.join(self.nodes())})")
        if self.state.procs[slots[0]].alive():
            raise TestbedError(f"{self.kind}: {name} is running; nothing to start")
        self._launch(user, name, "xrootd", slot=slots[0], deadline=time.monotonic() + timeout)


__all__ = ["XrootdNodes"]
