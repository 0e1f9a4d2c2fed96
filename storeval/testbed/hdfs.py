"""HDFS on 127.0.0.1: a MiniDFSCluster (one NameNode, N DataNodes in one JVM) from Maven Central.

The launcher (``java/``: a pom and ``MiniCluster.java``) is compiled once per version of its sources into
``cache_dir()/hdfs/<hash>/``; its Maven repository is ``cache_dir()/hdfs/m2`` (about 135 MB), so the whole
installation lives under the storeval cache and nothing is written into the repository or ``~/.m2``.
No jar is built: the launcher runs from its ``target/classes`` plus the dependency classpath that
``mvn dependency:build-classpath`` writes (the JVM opens those jars lazily; a shaded jar would take
longer to build, duplicate 135 MB and start no faster).

Besides the NameNode RPC port the launcher serves a line-based control port on 127.0.0.1 that stops and
restarts single datanodes (addressed by their transfer port) for fault-injection runs.

On an emulated host (:meth:`Server.place`, the ``host`` setting) the JVM runs inside the host's network
namespace and the launcher gets ``--bind <host address>``: the datanodes (transfer, HTTP, IPC) and the control
port listen on the host's address, and the datanodes register with the NameNode at that address, so the
NameNode records it as their IP and hands it out in block locations — a client on another host (or in the root
namespace, through the network's controller) reads and writes blocks there. The NameNode itself listens on
0.0.0.0 of the namespace (MiniDFSCluster pins its configured address to 127.0.0.1; the bind-host settings
override where it listens): reached at the host's address, and at the namespace's own loopback.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import stat
import time
from pathlib import Path
from typing import Any

import psutil

from .base import (
    HOST_HELP,
    FaultNode,
    LOCALHOST,
    Left,
    Server,
    TestbedError,
    TestbedOptionError,
    cache_dir,
    free_port,
    port_open,
    run,
)

JAVA_DIR = Path(__file__).with_name("java")
MAIN_CLASS = "org.storeval.testbed.MiniCluster"
HADOOP_VERSION = "3.4.1"
JMX_PERIOD = 1.0  # seconds: *.period of java/src/main/resources/hadoop-metrics2.properties
RECHECK_S = 5  # dfs.namenode.heartbeat.recheck-interval the launcher sets (MiniCluster.java), in seconds
HEARTBEAT_EXPIRY_S = 2 * RECHECK_S + 10 * 1  # the NameNode's expiry: 2 rechecks + 10 heartbeats of 1 s
TARGET_DIR = "/storeval"  # the directory the storeval target points at
START_TIMEOUT = 180.0  # seconds for one launcher start (cluster up, READY printed)
_BIND_ERRORS = ("Address already in use", "BindException", "Port in use")
BASE = "hdfs-base"  # ledger rule: the MiniDFSCluster base directory (see HdfsServer.claims)
JVM_TMP = "hdfs-jvm-tmp"  # ledger rule: the JVM's java.io.tmpdir
_STORAGE = re.compile(r"name-\d+-\d+|namesecondary\d*|checkpoint\d*|journal\w*")
_JVM_TMP_NAMES = re.compile(r"(?i)(jetty|hadoop|snappy|libleveldbjni|jna|hsperfdata|native-platform|\+~jf).*")


def _sources() -> list[Path]:
    files = [JAVA_DIR / "pom.xml", *sorted(p for p in (JAVA_DIR / "src").rglob("*") if p.is_file())]
    return [f for f in files if f.is_file()]


def launcher_hash() -> str:
    """Hash of the launcher's pom and sources: the name of its build directory in the cache."""
    h = hashlib.sha256()
    for f in _sources():
        h.update(str(f.relative_to(JAVA_DIR)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def build_dir() -> Path:
    return cache_dir() / "hdfs" / launcher_hash()


def maven_repo() -> Path:
    return cache_dir() / "hdfs" / "m2"


def _argfile_ok(argfile: Path) -> bool:
    """The build is complete and every jar on its classpath is still there (the Maven cache may be wiped)."""
    if not argfile.is_file():
        return False
    text = argfile.read_text()
    m = re.search(r'-cp\s+"([^"]*)"', text)
    return bool(m) and all(os.path.exists(p) for p in m.group(1).split(os.pathsep) if p)


_DATANODE_NO_SIGNAL = "its datanodes run inside one JVM, so one cannot be frozen alone (`hdfs` freezes the whole JVM)"


class HdfsServer(Server):
    """HDFS (MiniDFSCluster ``org.apache.hadoop:hadoop-minicluster:3.4.1``) with ``datanodes`` DataNodes.

    Options: ``datanodes`` (default 1), ``replication`` (default min(3, datanodes)), ``heap`` (JVM -Xmx,
    default "1g"). Ports in ``state.ports``: ``rpc`` (NameNode RPC: ``hdfs://127.0.0.1:<rpc>``), ``http``
    (NameNode web UI and WebHDFS), ``control`` (the launcher's control protocol).
    """

    heals_when = "lost"  # the namenode re-replicates around a dead datanode; a returning one is not healed
    kind = "hdfs"
    summary = f"HDFS {HADOOP_VERSION} MiniDFSCluster (NameNode + N DataNodes in one JVM)"
    no_respawn = ("the launcher formats a new namespace when it starts, so a killed HDFS cannot come back with its "
                  "data: `storeval testbed down hdfs`, then `storeval testbed up hdfs`")

    target_schemes = {"hdfs": "hdfs"}
    options_help = {"servers": "datanodes, 1-16 (default 1)", "datanodes": "the same as servers",
                    "replication": "block replicas, 1 to the datanodes (default: datanodes, at most 3)",
                    "heap": "the JVM's -Xmx (default 1g)", "host": HOST_HELP}

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        out = super().check_options(options)
        n = out.pop("servers", None)
        if n is not None:
            out["datanodes"] = n
        n = out.get("datanodes", 1)
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 16:
            raise TestbedOptionError(f"testbed hdfs: servers (datanodes) must be a whole number from 1 to 16, not {n!r}")
        r = out.get("replication")
        if r is not None and (not isinstance(r, int) or isinstance(r, bool) or not 1 <= r <= n):
            raise TestbedOptionError(f"testbed hdfs: replication must be a whole number from 1 to the datanodes ({n}), "
                               f"not {r!r}")
        return out

    # -- options --------------------------------------------------------------------------------------
    @property
    def n_datanodes(self) -> int:
        return int(self.state.info.get("datanodes") or self.options.get("datanodes")
                   or self.options.get("servers", 1))

    @property
    def replication(self) -> int:
        if "replication" in self.state.info:
            return int(self.state.info["replication"])
        return int(self.options.get("replication") or min(3, self.n_datanodes))

    @property
    def url(self) -> str:
        return f"hdfs://{self.address}:{self.state.ports['rpc']}"

    # -- install ----------------------------------------------------------------------------------------
    def install(self) -> None:
        """Compile the launcher and resolve its classpath into the cache (once per source version)."""
        for tool, pkg in (("java", "openjdk-17-jdk-headless"), ("mvn", "maven")):
            if not shutil.which(tool):
                raise TestbedError(f"hdfs: `{tool}` is not installed (Debian: apt-get install {pkg}); "
                                   "the HDFS testbed needs a JDK (11 or newer) and Maven")
        target = build_dir()
        argfile = target / "launcher.args"
        if _argfile_ok(argfile):
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target.parent / "build.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building the same thing
            if _argfile_ok(argfile):
                return
            work = target.parent / f"{target.name}.building"
            shutil.rmtree(work, ignore_errors=True)
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(JAVA_DIR, work, ignore=shutil.ignore_patterns("target"))
            maven_repo().mkdir(parents=True, exist_ok=True)
            try:
                run(["mvn", "-B", "-q", f"-Dmaven.repo.local={maven_repo()}", "compile", "dependency:build-classpath",
                     f"-Dmdep.outputFile={work / 'classpath.txt'}"],
                    f"hdfs: building the MiniDFSCluster launcher (Maven; downloads about 135 MB into {maven_repo()})",
                    cwd=work)
            except BaseException:
                shutil.rmtree(work, ignore_errors=True)
                raise
            classpath = os.pathsep.join([str(target / "target" / "classes"),
                                         (work / "classpath.txt").read_text().strip()])
            # A java @argfile keeps the 17 kB classpath out of the command line (and out of `ps`).
            (work / "launcher.args").write_text(f'-cp "{classpath}"\n{MAIN_CLASS}\n')
            os.replace(work, target)

    # -- start ------------------------------------------------------------------------------------------
    def _command(self, ports: dict[str, int]) -> list[str]:
        # java.io.tmpdir under root: Jetty's scratch directories go away with the data
        return ["java", f"-Xmx{self.options.get('heap', '1g')}", "-Djava.net.preferIPv4Stack=true",
                f"-Djava.io.tmpdir={self.root / 'tmp'}",
                f"@{build_dir() / 'launcher.args'}",
                "--datanodes", str(self.n_datanodes), "--replication", str(self.replication),
                "--rpc-port", str(ports["rpc"]), "--http-port", str(ports["http"]),
                "--control-port", str(ports["control"]), "--base-dir", str(self.root / "data"),
                *(["--bind", self.address] if self.address != LOCALHOST else [])]

    def _free_port(self) -> int:
        """A port free now where the launcher listens (on its emulated host's address when placed)."""
        return free_port(self.address, self.netns_name) if self.placement else free_port()

    def _log_text(self) -> str:
        log = self.root / "hdfs.log"
        try:
            with open(log, "rb") as f:
                f.seek(int(self.state.info.get("log_offset", 0)))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def _launcher_line(self, word: str) -> str | None:
        """The argument of the launcher's last ``WORD ...`` line in this start's part of the log."""
        found = re.findall(rf"^{word} (\S+)$", self._log_text(), re.M)
        return found[-1] if found else None

    def start(self) -> None:
        """Start the launcher on fresh ports and wait until it printed READY; retry when a port was taken."""
        if not _argfile_ok(build_dir() / "launcher.args"):
            self.install()
        if self.n_datanodes < 1 or not 1 <= self.replication <= self.n_datanodes:
            raise TestbedError(f"hdfs: need datanodes >= 1 and 1 <= replication <= datanodes "
                               f"(got datanodes {self.n_datanodes}, replication {self.replication})")
        self.make_root()
        self.mkdir(self.root / "tmp", rule=JVM_TMP)
        self.mkdir(self.root / "data", rule=BASE)
        log = self.root / "hdfs.log"
        self.state.info.update(datanodes=self.n_datanodes, replication=self.replication)
        for attempt in range(1, 4):
            ports: dict[str, int] = {}
            while len(set(ports.values())) < 3:
                ports = {name: self._free_port() for name in ("rpc", "http", "control")}
            self.state.info["log_offset"] = log.stat().st_size if log.exists() else 0
            self.state.procs = []
            proc = self._spawn(self._command(ports), name="hdfs-minicluster", log=log)
            self.state.ports = ports
            deadline = time.monotonic() + START_TIMEOUT
            while time.monotonic() < deadline:
                if self._launcher_line("READY"):
                    dns = self._launcher_line("DATANODES") or ""
                    self.state.info["datanode_ports"] = [int(p) for p in dns.split(",") if p]
                    return
                if not proc.alive():
                    break
                time.sleep(0.2)
            else:
                proc.stop()
                self.state.procs = []
                raise TestbedError(f"hdfs: the MiniDFSCluster did not start within {START_TIMEOUT:g} s; see {log}")
            proc.stop()
            self.state.procs = []
            text = self._log_text()
            if attempt < 3 and any(e in text for e in _BIND_ERRORS):
                continue  # a port was taken between free_port() and the bind: new ports
            tail = " | ".join(text.strip().splitlines()[-3:])
            raise TestbedError(f"hdfs: the MiniDFSCluster exited while starting: {tail} (see {log})")

    def claims(self, rule: str, parts: tuple[str, ...], st: os.stat_result) -> bool:
        """In the base directory MiniDFSCluster makes its storage directories (``name-0-1``, ``data/dataN``
        …) and everything inside them; in its java.io.tmpdir the JVM makes scratch entries of known names
        (Jetty's, native libraries). Anything else there is not the server's."""
        if rule == BASE:
            top = parts[0]
            if _STORAGE.fullmatch(top):
                return len(parts) > 1 or stat.S_ISDIR(st.st_mode)
            if top == "data":
                return (len(parts) == 1 and stat.S_ISDIR(st.st_mode)) or (len(parts) >= 2 and bool(
                    re.fullmatch(r"data\d+", parts[1])) and (len(parts) > 2 or stat.S_ISDIR(st.st_mode)))
            return False
        if rule == JVM_TMP:
            return bool(_JVM_TMP_NAMES.fullmatch(parts[0]))
        return False

    # -- readiness and targets ---------------------------------------------------------------------------
    def client(self):
        """An hdfs-native client of this cluster."""
        from hdfs_native import Client

        return Client(self.url)

    def ready(self) -> bool:
        if not self.state.ports or self._launcher_line("READY") is None:
            return False
        try:
            client = self.client()
            list(client.list_status("/"))
            if not self.state.info.get("prepared"):
                client.mkdirs(TARGET_DIR, 0o777, True)
                self.state.info["prepared"] = True
        except Exception:  # noqa: BLE001 - not answering yet
            return False
        return True

    def targets(self) -> dict[str, dict[str, Any]]:
        return {"hdfs": {"url": f"{self.url}{TARGET_DIR}", "replication": self.replication, **self.server_counters()}}

    def server_counters(self) -> dict[str, Any]:
        """Its process, and its datanodes' JMX: the MiniCluster runs every datanode in the launcher's JVM, whose
        one MBean server every HTTP server of it answers from, so the NameNode's HTTP port lists every
        ``DataNodeActivity`` bean (a real cluster lists each datanode's own HTTP port instead)."""
        return {**super().server_counters(), "jmx": [f"{self.address}:{self.state.ports['http']}"],
                "jmx_period": JMX_PERIOD}

    def status(self) -> str:
        """The JVM's line, plus the datanodes a fault stopped inside the running JVM: DOWN, though its process is up."""
        head = super().status()
        line = f"{head}; datanodes {self.n_datanodes}, replication {self.replication}"
        if not line.startswith(f"{self.kind}: running"):
            return line  # frozen, exited or stopped: the control port cannot (or need not) be asked
        try:
            listed = self.datanodes(timeout=5.0)
        except (TestbedError, ValueError):
            return f"{head}; the control port did not list the datanodes (configured: {self.n_datanodes})"
        down = [(i, d["port"]) for i, d in enumerate(listed, start=1) if not d["alive"]]
        line = (f"{head}; datanodes {len(listed) - len(down)} of {len(listed)} alive, replication {self.replication}")
        if not down:
            return line
        what = ", ".join(f"datanode{i} (transfer port {port})" for i, port in down)
        names = " ".join(f"hdfs.datanode{i}" for i, _ in down)
        return (f"{self.kind}: DOWN{line[len(self.kind) + len(': running'):]}; {what} DOWN (stopped inside the JVM): "
                f"`storeval testbed fault NAME start` starts it again (NAME: {names})")

    # -- control port ------------------------------------------------------------------------------------
    def control(self, command: str, timeout: float = 120.0) -> str:
        """Send one control command; return the reply (``OK ...`` and any following lines).

        Raises TestbedError on an ``ERR ...`` reply or when the control port does not answer.
        """
        port = self.state.ports.get("control")
        if not port:
            raise TestbedError("hdfs: not started (no control port)")
        try:
            with socket.create_connection((self.address, port), timeout=timeout) as s:
                s.sendall(command.strip().encode() + b"\n")
                s.shutdown(socket.SHUT_WR)
                chunks = []
                while data := s.recv(65536):
                    chunks.append(data)
        except OSError as e:
            raise TestbedError(f"hdfs: control port {port} did not answer '{command}': {e}") from e
        reply = b"".join(chunks).decode().strip()
        if not reply.startswith("OK"):
            raise TestbedError(f"hdfs: '{command}' failed: {reply or 'no reply'}")
        return reply

    def datanodes(self, timeout: float = 120.0) -> list[dict[str, Any]]:
        """The datanodes in start order: ``[{"index": 0, "port": <transfer port>, "alive": True}, ...]``."""
        lines = self.control("datanodes", timeout=timeout).splitlines()[1:]
        out = []
        for i, line in enumerate(lines):
            port, state = line.split()
            out.append({"index": i, "port": int(port), "alive": state == "alive"})
        return out

    def _port(self, index_or_port: int) -> int:
        ports = self.state.info.get("datanode_ports") or [d["port"] for d in self.datanodes()]
        if index_or_port in ports:
            return int(index_or_port)
        if 0 <= index_or_port < len(ports):
            return int(ports[index_or_port])
        raise TestbedError(f"hdfs: no datanode with index or transfer port {index_or_port} (ports {ports})")

    def stop_datanode(self, index_or_port: int) -> int:
        """Stop one datanode (its index in the original list, or its transfer port); return its port.

        The NameNode notices only after the heartbeat expiry (about 20–25 s here); until then it still
        hands out the stopped node as a replica location and clients fail over to the next replica.
        """
        port = self._port(index_or_port)
        self.control(f"stop-datanode {port}")
        return port

    def start_datanode(self, index_or_port: int) -> int:
        """Restart a stopped datanode on its old transfer port; returns when it is registered again."""
        port = self._port(index_or_port)
        self.control(f"start-datanode {port}")
        return port

    # -- faults: the JVM takes the signals; a datanode is shut down and started inside it ----------------------
    def fault_server(self) -> FaultNode:
        dns = [int(p) for p in self.state.info.get("datanode_ports", [])]
        rpc = int(self.state.ports.get("rpc", 0))
        node = super().fault_server()
        node.description = (f"HDFS MiniDFSCluster JVM: NameNode and {len(dns)} datanode{'s' if len(dns) != 1 else ''} "
                             f"(RPC port {rpc})")
        node.label = "the HDFS JVM"
        return node

    def fault_nodes(self) -> list[FaultNode]:
        """Each datanode, ``datanode1`` … ``datanodeN``: no process of its own (they share the JVM), so it is shut
        down and started inside the JVM through the control port (:meth:`act_on_node`), never signalled."""
        dns = [int(p) for p in self.state.info.get("datanode_ports", [])]
        return [FaultNode(f"datanode{i}", f"HDFS datanode {i} of {len(dns)} (transfer port {port}), shut down and "
                                          "started inside the JVM", [], [port], ("kill", "start", "restart"),
                          {"stop": _DATANODE_NO_SIGNAL, "cont": _DATANODE_NO_SIGNAL}, f"HDFS datanode {i}", inside=True)
                for i, port in enumerate(dns, start=1)]

    def act_on_node(self, name: str, action: str) -> str:
        """kill / start / restart one datanode through the launcher's control port (the JVM keeps running)."""
        node = next((n for n in self.fault_nodes() if n.name == name), None)
        if node is None:
            raise TestbedError(f"hdfs: no node {name} (datanode1..datanode{len(self.fault_nodes())})")
        handle, label, port = f"{self.kind}.{name}", node.label, node.ports[0]
        jvm = self.state.procs[0]
        condition = jvm.condition()
        if condition == "stopped":
            raise TestbedError(f"{handle}: the HDFS JVM (pid {jvm.pid}) is frozen (SIGSTOP), its control port cannot "
                               "answer: `storeval testbed fault hdfs cont` first")
        if condition == "exited":
            raise TestbedError(f"{handle}: the HDFS JVM (pid {jvm.pid}) is not running, its datanodes are gone with "
                               "it: `storeval testbed down hdfs`, then `storeval testbed up hdfs`")
        alive = {d["port"]: d["alive"] for d in self.datanodes(timeout=30.0)}
        if port not in alive:
            raise TestbedError(f"{handle}: the HDFS launcher knows no datanode with transfer port {port} "
                               f"(it lists {', '.join(map(str, alive))})")
        said = []
        if action in ("kill", "restart"):
            if alive[port]:
                self.stop_datanode(port)
                said.append(f"shut down {label} (transfer port {port}) inside the JVM (pid {jvm.pid})")
            elif action == "kill":
                raise TestbedError(f"{handle}: {label} is DOWN already: nothing to kill; "
                                   f"`storeval testbed fault {handle} start` starts it again")
        if action in ("start", "restart"):
            if action == "start" and alive[port]:
                raise TestbedError(f"{handle}: {label} is running: nothing to start (`storeval testbed fault {handle} "
                                   "restart` shuts it down and starts it again)")
            self.start_datanode(port)
            said.append(f"started {label} again on transfer port {port} with its data (JVM pid {jvm.pid})")
        return "; ".join(said)

    def healing(self) -> dict[str, Any] | None:
        """The NameNode's own word (its FSNamesystem bean over JMX): blocks under-replicated, missing and being
        copied (its redundancy monitor moves a block from the first count to the last at once, so the first may
        never be seen above zero), which re-replication brings to zero around a dead datanode (seed 003: < 5 min
        after a disk, < 1 h after a node; the namenode declares a datanode dead after 20 s here). ``bytes``: each datanode's ``BytesWritten`` (its DataNodeActivity bean), which the JVM refreshes
        once per metrics period. None with replication 1 (nothing to re-replicate)."""
        if self.replication < 2:
            return None
        from ..drivers.hdfs import _namenode_bean
        from ..drivers.hdfsjmx import JMX_QUERY, parse_jmx
        from ..core.reported import http_get

        address = f"{self.address}:{self.state.ports['http']}"
        bean = _namenode_bean(address, 10.0)
        if bean is None:
            raise TestbedError(f"hdfs: the NameNode's JMX at {address} did not answer")
        try:
            written = {name: c["write_bytes"] for name, c in parse_jmx(http_get(f"http://{address}{JMX_QUERY}",
                                                                                  10.0)).items()}
        except (OSError, ValueError):
            written = {}
        try:
            info = json.loads(http_get(f"http://{address}/jmx?qry=Hadoop:service=NameNode,name=NameNodeInfo", 10.0))
            dead = json.loads((info.get("beans") or [{}])[0].get("DeadNodes") or "{}")
        except (OSError, ValueError):
            dead = {}
        # counted dead once silent past the expiry, a datanode leaves the block placement only at the next
        # recheck: until then writers may still be handed it
        lost = sum(1 for d in dead.values() if int(d.get("lastContact", 0)) >= HEARTBEAT_EXPIRY_S + RECHECK_S)
        under, missing = int(bean.get("UnderReplicatedBlocks", 0)), int(bean.get("MissingBlocks", 0))
        copying = int(bean.get("PendingReconstructionBlocks", bean.get("PendingReplicationBlocks", 0)))
        return {"pending": under + missing + copying, "down": [], "lost": lost,
                "unit": "blocks", "bytes": written,
                "bytes_still_s": 2 * JMX_PERIOD + 0.1,
                "parts": {"under_replicated": under, "missing": missing, "being_copied": copying,
                          "dead_datanodes": int(bean.get("NumDeadDataNodes", 0))},
                "source": "the NameNode's FSNamesystem (JMX); the datanodes' BytesWritten"}

    def blocks(self, path: str) -> list[dict[str, Any]]:
        """Block locations of a file: ``[{"offset": .., "length": .., "ports": [transfer ports]}, ...]``."""
        if path.startswith("hdfs://"):
            path = "/" + path.split("/", 3)[3] if path.count("/") >= 3 else "/"
        out = []
        for line in self.control(f"blocks {path}").splitlines()[1:]:
            offset, length, ports = line.split(" ")
            out.append({"offset": int(offset), "length": int(length),
                        "ports": [int(p) for p in ports.split(",") if p]})
        return out

    # -- stop ------------------------------------------------------------------------------------------
    def stop(self) -> list[Left]:
        """Ask the launcher to shut the cluster down, then stop what is left and remove the data."""
        procs = [p for p in self.state.procs if p.condition() == "up"]
        if procs and self.state.ports.get("control"):
            with contextlib.suppress(TestbedError):
                self.control("shutdown", timeout=30)
            running = [q for p in procs if (q := p.process()) is not None]
            psutil.wait_procs(running, timeout=30)
        left = super().stop()  # SIGTERM (the launcher's shutdown hook), SIGKILL after 10 s; removes what is ours
        ports = [*self.state.ports.values(), *self.state.info.get("datanode_ports", [])]
        deadline = time.monotonic() + 5
        while any(port_open(p, self.address) for p in ports) and time.monotonic() < deadline:
            time.sleep(0.1)
        return left
