"""A real GlusterFS volume (Debian ``glusterfs-server`` 10) over N bricks, FUSE-mounted for the posix driver.

Design, and why:

* **Its own glusterd, in its own network namespace.** Bricks, the self-heal daemon and the FUSE client fetch
  their volume files from glusterd at ``<brick host>:24007`` — a port glusterd tells none of them (there is
  no ``--volfile-server-port`` in the brick command line it builds), so a glusterd on another port starts no
  brick. Rather than take 24007 of the host (where a system glusterd or a second testbed may sit), glusterd
  runs under ``unshare --net`` with only ``lo`` up: 24007 and the brick ports (49152–60999) are private to
  that namespace, and everything it spawns inherits it. Inside it everything is also bound to 127.0.0.1
  (``transport.socket.bind-address``). The namespace is held by the processes alone (nothing in
  /run/netns): it vanishes when the last of them exits. The mount is made with ``nsenter --net`` of that
  namespace, so the FUSE client joins it while the mount itself appears in the host's mount table.
* **The CLI talks to this glusterd only**, through its own socket file
  (``option glusterd-sockfile``, ``gluster --glusterd-sock``): never a system glusterd, never another testbed. The
  socket lives in the server's short home under /var/tmp (``Server.short_home``: a socket path holds 108 bytes,
  and glusterd refused one of 107 under a deep ``--dir``).
* **State stays under the server's root**: ``working-directory`` (volume definitions, hooks: the system's
  samba/ganesha hooks in /var/lib/glusterd/hooks never run), ``run-directory`` (pid files),
  ``logging-directory`` (brick, self-heal and CLI logs), the mount's ``log-file``. What glusterd still makes
  outside — /var/lib/glusterd/geo-replication (+ gsyncd_template.conf), /var/lib/glusterd/ss_brick,
  /var/run/gluster/snaps, and one socket per brick / self-heal daemon in /var/run/gluster — is removed on
  stop only if it did not exist before this server started (recorded in ``state.info`` first); the sockets
  are the ones named on the recorded processes' command lines.
* **Processes are recorded by PID and start time**: glusterd (spawned here), each brick (``glusterfsd``,
  spawned by glusterd: ``gluster volume status --xml`` names its PID), the self-heal daemon, the FUSE
  client. Brick ``i`` is ``state.procs[i]``, so the fault handle ``glusterfs.brick<i>`` signals exactly it;
  ``start`` is ``gluster volume start VOL force`` and the new brick takes the same slot. ``down`` after a
  killed ``up`` also adopts what lives in the recorded namespace (while a recorded process still holds it,
  which proves the namespace is this server's) before stopping everything.
* **Bricks and glusterd's directories are the server's**: their ledger rules claim everything inside
  (``.glusterfs`` hard links, xattr-laden files, sockets), while a file a user puts anywhere else under the
  root stays.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import signal
import socket
import stat
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import psutil

from ..probes.server import read_server_processes
from .base import (RESPAWN_WAIT, FaultNode, Proc, Server, TestbedError, TestbedOptionError, apt_install, mounted,
                   wait_until)

PACKAGES = ("glusterfs-server", "glusterfs-client")
TOOLS = ("glusterd", "gluster", "glusterfsd", "mount.glusterfs")
VOLUME = "storeval"
EXPORT = "storeval"  # the directory on the volume the target points at
TYPES = ("distribute", "replicate", "disperse")
MAX_BRICKS = 8
GLUSTERD_STATE, BRICK = "glusterd-state", "glusterfs-brick"  # ledger rules, see GlusterServer.claims
# what glusterd makes outside its directories even so: removed on stop only if absent before start (children
# first: a directory is removed only when empty)
SYSTEM_PATHS = ("/var/lib/glusterd/geo-replication/gsyncd_template.conf", "/var/lib/glusterd/geo-replication",
                "/var/lib/glusterd/ss_brick", "/var/run/gluster/snaps", "/var/lib/glusterd", "/var/run/gluster",
                f"/var/log/glusterfs/glfsheal-{VOLUME}.log", "/var/log/glusterfs")
SOCKET_DIRS = ("/var/run/gluster", "/run/gluster")
START_TIMEOUT = 120.0  # glusterd answering, bricks online, the mount: generous, the machine may be busy
CLI_TIMEOUT = 180.0
HEAL_INFO_TIMEOUT = 60.0  # one `heal info summary`: it connects to every brick
GLFSHEAL = ("/usr/lib/x86_64-linux-gnu/glusterfs/glfsheal", "/usr/libexec/glusterfs/glfsheal", "/usr/sbin/glfsheal")




def parse_heal_summary(text: str) -> dict[str, dict[str, Any]]:
    """``heal info summary --xml``: brick name -> {entries (all its heal index holds), heal_pending, split_brain,
    healing, connected}; TestbedError (one line, glfsheal's own words) when it says it failed."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError:
        raise TestbedError(f"glusterfs: heal info gave no XML: {' '.join(text.split())[:200] or 'nothing'}") from None
    if (root.findtext("opRet") or "0").strip() not in ("0", ""):
        raise TestbedError(f"glusterfs: heal info failed: {root.findtext('opErrstr') or 'no reason given'}")

    def number(node: ET.Element, tag: str) -> int:
        text = (node.findtext(tag) or "").strip()
        return int(text) if text.isdigit() else 0

    out: dict[str, dict[str, Any]] = {}
    for brick in root.iter("brick"):
        name = (brick.findtext("name") or "").strip()
        out[name] = {"entries": number(brick, "totalNumberOfEntries"),
                     "heal_pending": number(brick, "numberOfEntriesInHealPending"),
                     "split_brain": number(brick, "numberOfEntriesInSplitBrain"),
                     "healing": number(brick, "numberOfEntriesPossiblyHealing"),
                     "connected": (brick.findtext("status") or "").strip() == "Connected"}
    return out


def brick_host() -> str:
    """The machine's host name, which must resolve to a loopback address: glusterd refuses ``localhost`` and
    ``127.0.0.1`` as brick hosts, and a name resolving elsewhere would point bricks off this machine."""
    name = socket.gethostname()
    fix = f"map it in /etc/hosts (a line `127.0.0.1 {name}`) or give the machine such a name"
    if not name or name == "localhost":
        raise TestbedError(f"glusterfs: the host name is '{name}', which glusterd refuses as a brick host; give the "
                           "machine a host name that resolves to 127.0.0.1")
    try:
        address = socket.gethostbyname(name)
    except OSError:
        raise TestbedError(f"glusterfs: the host name '{name}' does not resolve; GlusterFS bricks need it to "
                           f"resolve to 127.0.0.1: {fix}") from None
    if not ipaddress.ip_address(address).is_loopback:
        raise TestbedError(f"glusterfs: the host name '{name}' resolves to {address}, not a loopback address; "
                           f"GlusterFS bricks need it to resolve to 127.0.0.1: {fix}")
    return name


def _netns(pid: int) -> int | None:
    """The network namespace (inode of /proc/PID/ns/net) of a process, None when it cannot be read."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def _cmdline(pid: int) -> list[str]:
    try:
        return psutil.Process(pid).cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return []


def _absent(path: str) -> bool:
    return not os.path.lexists(path)


class GlusterServer(Server):
    """A GlusterFS volume ``storeval`` of ``servers`` bricks under ``<root>/bricks``, mounted at ``<root>/mnt``."""

    kind = "glusterfs"
    summary = "GlusterFS 10 volume (distribute, replicate or disperse) over N bricks, FUSE-mounted"
    target_schemes = {"glusterfs": "file"}
    options_help = {
        "servers": f"bricks of the volume, 1-{MAX_BRICKS} (default 3)",
        "type": "distribute (default), replicate (a copy per brick: 2 or 3 servers) or disperse (3 or more servers)",
        "redundancy": "disperse only: bricks that may fail, at least 1 and under half the servers (default 1)",
    }

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        out = super().check_options(options)
        n = out.setdefault("servers", 3)
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_BRICKS:
            raise TestbedOptionError(f"testbed glusterfs: servers (bricks) must be a whole number from 1 to "
                                     f"{MAX_BRICKS}, not {n!r}")
        kind = out.setdefault("type", "distribute")
        if kind not in TYPES:
            raise TestbedOptionError(f"testbed glusterfs: no volume type {kind!r} (choose {', '.join(TYPES)})")
        if kind == "replicate" and n not in (2, 3):
            raise TestbedOptionError(f"testbed glusterfs: a replicate volume keeps a copy on every brick and takes 2 "
                                     f"or 3 servers, not {n} (--servers 3, or --type distribute or disperse)")
        if kind != "disperse":
            if "redundancy" in out:
                raise TestbedOptionError(f"testbed glusterfs: redundancy is a setting of disperse volumes, not of "
                                         f"{kind} (drop it, or --type disperse)")
            return out
        if n < 3:
            raise TestbedOptionError(f"testbed glusterfs: a disperse volume takes 3 or more servers, not {n} "
                                     "(--servers 3)")
        r = out.setdefault("redundancy", 1)
        if not isinstance(r, int) or isinstance(r, bool) or r < 1 or 2 * r >= n:
            raise TestbedOptionError(f"testbed glusterfs: redundancy of a disperse volume of {n} servers must be a "
                                     f"whole number from 1 to {(n - 1) // 2}, not {r!r}")
        return out

    # -- paths ------------------------------------------------------------------------------------------
    @property
    def vol_file(self) -> Path:
        return self.root / "glusterd.vol"

    @property
    def work_dir(self) -> Path:
        return self.root / "work"

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    @property
    def log_dir(self) -> Path:
        return self.root / "log"

    @property
    def sock_dir(self) -> Path:
        """glusterd's CLI socket's directory: in the server's short home (a socket path holds 108 bytes)."""
        return self.short_home() / "run"

    @property
    def sock_file(self) -> Path:
        return self.sock_dir / "glusterd.socket"

    @property
    def mountpoint(self) -> Path:
        return self.root / "mnt"

    def _brick_path(self, i: int) -> Path:
        return self.root / "bricks" / f"brick{i}"

    def _bricks(self) -> list[dict[str, Any]]:
        return self.state.info.get("bricks", [])

    # -- install ----------------------------------------------------------------------------------------
    def install(self) -> None:
        deadline = time.monotonic() + 600
        while True:
            try:
                apt_install(*PACKAGES)
                break
            except TestbedError as e:  # another apt-get holds the dpkg lock: wait for it (bounded)
                if "lock" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(5)
        missing = [t for t in TOOLS if not shutil.which(t)]
        if missing:
            raise TestbedError(f"glusterfs: {', '.join(missing)} missing although {' '.join(PACKAGES)} are installed; "
                               f"run apt-get install --reinstall {' '.join(PACKAGES)}")

    # -- the CLI, always this glusterd's ------------------------------------------------------------------
    def _cli(self, *args: str, timeout: float = CLI_TIMEOUT, check: bool = True) -> subprocess.CompletedProcess:
        cmd = ["gluster", "--mode=script", f"--glusterd-sock={self.sock_file}", f"--log-file={self.log_dir / 'cli.log'}",
               *args]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise TestbedError(f"glusterfs: `gluster {' '.join(args)}` did not answer within {timeout:g} s; see "
                               f"{self.log_dir / 'glusterd.log'}") from None
        if check and proc.returncode:
            why = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-2:]) or f"exit {proc.returncode}"
            raise TestbedError(f"glusterfs: `gluster {' '.join(args)}` failed: {why}; see {self.log_dir / 'glusterd.log'}")
        return proc

    def volume_status(self, timeout: float = 60.0) -> dict[str, dict[str, Any]]:
        """What glusterd says of the volume's processes now: ``brick path`` or ``"shd"`` -> {online, pid, port};
        empty when glusterd does not answer or the volume is not started."""
        try:
            proc = self._cli("volume", "status", self.state.info.get("volume", VOLUME), "--xml", timeout=timeout,
                             check=False)
            root = ET.fromstring(proc.stdout)
        except (TestbedError, ET.ParseError):
            return {}
        out: dict[str, dict[str, Any]] = {}
        for node in root.iter("node"):
            host, path = node.findtext("hostname", ""), node.findtext("path", "")
            key = "shd" if host == "Self-heal Daemon" else path
            pid, port = node.findtext("pid", ""), node.findtext("port", "")
            out[key] = {"online": node.findtext("status") == "1", "pid": int(pid) if pid.isdigit() else None,
                        "port": int(port) if port.isdigit() else None}
        return out

    # -- start ------------------------------------------------------------------------------------------
    def _note_system_paths(self) -> None:
        """Before glusterd can make anything outside the root: which of its usual paths are absent now (those
        alone are removed on stop), and what /var/run/gluster held (a socket named there is removed only if new)."""
        if "system_absent" in self.state.info:
            return
        before: list[str] = []
        for d in SOCKET_DIRS:
            try:
                before += [os.path.join(d, n) for n in os.listdir(d)]
            except OSError:
                pass
        self.state.info["sockets_before"] = sorted(set(before))
        self.state.info["system_absent"] = [p for p in SYSTEM_PATHS if _absent(p)]
        self.state.info.setdefault("sockets", [])
        self._journal()

    def _vol_file_text(self) -> str:
        return "\n".join([
            "# written by storeval testbed: this glusterd keeps its state, pid files, logs and CLI socket here",
            "volume management",
            "    type mgmt/glusterd",
            f"    option working-directory {self.work_dir}",
            f"    option run-directory {self.run_dir}",
            f"    option logging-directory {self.log_dir}",
            f"    option glusterd-sockfile {self.sock_file}",
            "    option transport-type socket",
            "    option transport.socket.bind-address 127.0.0.1",
            "    option transport.socket.keepalive-time 10",
            "    option transport.socket.keepalive-interval 2",
            "    option transport.socket.read-fail-log off",
            "    option ping-timeout 0",
            "    option event-threads 1",
            "    option max-port 60999",
            "end-volume",
            "",
        ])

    def start(self) -> None:
        opts = self.check_options(dict(self.options))
        if os.geteuid() != 0:
            raise TestbedError("glusterfs: needs root (a FUSE mount and a network namespace of its own): run "
                               "`storeval testbed up glusterfs` as root")
        missing = [t for t in (*TOOLS, "unshare", "nsenter", "ip", "mount") if not shutil.which(t)]
        if missing:
            raise TestbedError(f"glusterfs: {', '.join(missing)} not installed (apt-get install "
                               f"{' '.join(PACKAGES)} util-linux iproute2)")
        host = brick_host()
        root = str(self.root.absolute())
        if any(c.isspace() or c in ":,;\"'#" for c in root):
            raise TestbedError(f"glusterfs: {root} holds a space or one of :,;\"'# which glusterd's volume files and "
                               "brick names cannot carry; choose a --dir without them")
        n, kind = opts["servers"], opts["type"]
        self.state.info.update({"volume": VOLUME, "type": kind, "host": host, "mountpoint": str(self.mountpoint),
                                "replica": n if kind == "replicate" else 1})
        if kind == "disperse":
            self.state.info.update({"disperse": n, "redundancy": opts["redundancy"]})
        self._note_system_paths()
        self.make_root()
        for d in (self.work_dir, self.run_dir, self.log_dir, self.sock_dir):
            self.mkdir(d, rule=GLUSTERD_STATE)
        self.mkdir(self.root / "bricks")
        for i in range(1, n + 1):
            self.mkdir(self._brick_path(i), rule=BRICK)
        self.mkdir(self.mountpoint)
        self.write_file(self.vol_file, self._vol_file_text())
        self._start_glusterd()
        self._create_volume(host, n, opts)
        self._adopt_volume(n)
        self._mount(host)

    def _start_glusterd(self) -> None:
        # unshare execs sh in place, which execs glusterd: the PID recorded is glusterd's own
        cmd = ["unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$0" "$@"',
               "glusterd", "-N", "-f", str(self.vol_file), f"--pid-file={self.run_dir / 'glusterd.pid'}",
               f"--log-file={self.log_dir / 'glusterd.log'}"]
        proc = self._spawn(cmd, name="glusterd", log=self.root / "glusterd.out", cwd=self.root)
        mine = _netns(os.getpid())

        def answers() -> bool:
            if not proc.alive():
                raise TestbedError(f"glusterfs: glusterd exited while starting; see {self.root / 'glusterd.out'} and "
                                   f"{self.log_dir / 'glusterd.log'}")
            return self.sock_file.exists() and self._cli("pool", "list", timeout=30, check=False).returncode == 0

        wait_until(answers, START_TIMEOUT, "glusterfs: glusterd", log=self.log_dir / "glusterd.log", interval=0.3)
        netns = _netns(proc.pid)
        if netns is None or netns == mine:
            raise TestbedError(f"glusterfs: glusterd (pid {proc.pid}) is not in a network namespace of its own")
        self.state.info["netns"] = netns
        self._journal()

    def _create_volume(self, host: str, n: int, opts: dict[str, Any]) -> None:
        bricks = [f"{host}:{self._brick_path(i)}" for i in range(1, n + 1)]
        layout: list[str] = []
        if opts["type"] == "replicate":
            layout = ["replica", str(n)]
        elif opts["type"] == "disperse":
            layout = ["disperse", str(n), "redundancy", str(opts["redundancy"])]
        # force: every brick is a directory of the root file system, on one host (glusterd refuses both otherwise)
        self._cli("volume", "create", VOLUME, *layout, *bricks, "force")
        self._cli("volume", "start", VOLUME)

    def _adopt_volume(self, n: int) -> None:
        """Record every brick (slot ``i`` of ``state.procs`` for brick ``i``) and the self-heal daemon, once glusterd
        says each is online."""
        paths = [str(self._brick_path(i)) for i in range(1, n + 1)]
        seen: dict[str, dict[str, Any]] = {}

        def online() -> bool:
            seen.clear()
            seen.update(self.volume_status())
            return all(seen.get(p, {}).get("online") and seen[p].get("pid") for p in paths)

        wait_until(online, START_TIMEOUT, "glusterfs: the bricks", log=self.log_dir / "glusterd.log", interval=0.3)
        bricks = []
        for i, path in enumerate(paths, start=1):
            proc = self._adopt(seen[path]["pid"], f"brick{i}", self.log_dir / "bricks" / f"{path.strip('/').replace('/', '-')}.log")
            self.state.procs.append(proc)
            bricks.append({"name": f"brick{i}", "path": path, "proc": len(self.state.procs) - 1,
                           "port": seen[path]["port"]})
            self.state.info["bricks"] = bricks
            self._journal()
        shd = seen.get("shd", {})
        if shd.get("online") and shd.get("pid"):
            self.state.procs.append(self._adopt(shd["pid"], "self-heal daemon", self.log_dir / "glustershd.log"))
            self.state.info["shd_proc"] = len(self.state.procs) - 1
            self._journal()

    def _adopt(self, pid: int, name: str, log: Path) -> Proc:
        """Record a process glusterd started, after checking it lives in this server's namespace; note the socket
        it made in /var/run/gluster (its ``-S``) so that stop removes it."""
        if _netns(pid) != self.state.info.get("netns"):
            raise TestbedError(f"glusterfs: {name} (pid {pid}) named by glusterd is not in its network namespace")
        proc = Proc.adopt(pid, name, log)
        args = _cmdline(pid)
        for flag, value in zip(args, args[1:]):
            if flag == "-S" and os.path.dirname(value) in SOCKET_DIRS and value not in self.state.info["sockets"]:
                self.state.info["sockets"].append(value)
        return proc

    def _mount(self, host: str) -> None:
        mnt = self.mountpoint
        self.record_mount(mnt)
        netns = f"/proc/{self.state.procs[0].pid}/ns/net"
        cmd = ["nsenter", f"--net={netns}", "mount", "-t", "glusterfs", "-o", f"log-file={self.log_dir / 'mount.log'}",
               f"{host}:/{VOLUME}", str(mnt)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=START_TIMEOUT, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise TestbedError(f"glusterfs: mounting the volume did not finish within {START_TIMEOUT:g} s; see "
                               f"{self.log_dir / 'mount.log'}") from None
        if proc.returncode or not mounted(mnt):
            why = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-2:]) or "not mounted"
            raise TestbedError(f"glusterfs: mount -t glusterfs {host}:/{VOLUME} {mnt} failed: {why}; see "
                               f"{self.log_dir / 'mount.log'}")
        found: list[int] = []

        def client() -> bool:
            found[:] = [p.pid for p in self._namespace_procs() if (args := _cmdline(p.pid))
                        and "fuse" in args and args[-1] == str(mnt)]
            return bool(found)

        wait_until(client, 30, "glusterfs: the FUSE client of the mount", log=self.log_dir / "mount.log")
        self.state.procs.append(Proc.adopt(found[0], "fuse client", self.log_dir / "mount.log"))
        self.state.info["fuse_proc"] = len(self.state.procs) - 1
        self._journal()
        os.makedirs(mnt / EXPORT, exist_ok=True)  # on the volume, so in the bricks: the server's data

    def _namespace_procs(self) -> list[psutil.Process]:
        """Every process in this server's network namespace — only while a recorded process still holds it (that
        proves the namespace is this server's, not a new one that reuses its inode number)."""
        netns = self.state.info.get("netns")
        if netns is None or not any(p.alive() and _netns(p.pid) == netns for p in self.state.procs):
            return []
        out = []
        for p in psutil.process_iter():
            if p.pid != os.getpid() and _netns(p.pid) == netns:
                out.append(p)
        return out

    # -- ready, targets -----------------------------------------------------------------------------------
    def ready(self) -> bool:
        return mounted(self.mountpoint) and (self.mountpoint / EXPORT).is_dir()

    def server_pids(self) -> list[int]:
        """glusterd, the bricks and the self-heal daemon: the processes that serve the volume (not the FUSE client)."""
        fuse = self.state.info.get("fuse_proc")
        return [p.pid for i, p in enumerate(self.state.procs) if i != fuse and p.alive()]

    def server_counters(self) -> dict[str, Any]:
        """The bricks, glusterd and the self-heal daemon (not the FUSE client): what the servers moved."""
        return {"server_pids": self.server_pids()}

    def targets(self) -> dict[str, dict[str, Any]]:
        return {"glusterfs": {"url": f"file://{self.mountpoint / EXPORT}", **self.server_counters()}}

    # -- faults -------------------------------------------------------------------------------------------
    def fault_nodes(self) -> list[FaultNode]:
        bricks = self._bricks()
        return [FaultNode(b["name"], f"GlusterFS brick {i} of {len(bricks)} ({self.state.info.get('type')} volume, "
                          f"{b['path']}, port {b.get('port')} inside its network namespace)", [b["proc"]])
                for i, b in enumerate(bricks, start=1)]

    def fault_names(self, exited: list[int]) -> list[str]:
        by_proc = {b["proc"]: b["name"] for b in self._bricks()}
        if not exited or any(i not in by_proc for i in exited):
            return []  # glusterd, the self-heal daemon or the client: no single brick start brings it back
        return [f"{self.kind}.{by_proc[i]}" for i in exited]

    def start_node(self, name: str, timeout: float = RESPAWN_WAIT) -> None:
        """``gluster volume start VOL force`` until glusterd says the brick is online (a killed brick may linger
        as a zombie for a moment, and glusterd takes a PID that still exists for a running brick), then record
        its new process in the brick's slot; the self-heal daemon is recorded anew if glusterd replaced it."""
        brick = next((b for b in self._bricks() if b["name"] == name), None)
        if brick is None:
            raise TestbedError(f"glusterfs: no {name} (bricks: {', '.join(b['name'] for b in self._bricks())})")
        glusterd = self.state.procs[0]
        if glusterd.condition() != "up":
            raise TestbedError(f"glusterfs: glusterd (pid {glusterd.pid}) is not running ({glusterd.condition()}), so "
                               f"it cannot start {name}: `storeval testbed down glusterfs`, then up again")
        old = self.state.procs[brick["proc"]]
        seen: dict[str, dict[str, Any]] = {}

        def online() -> bool:
            if psutil.pid_exists(old.pid) and old.process() is not None:
                return False  # not reaped yet: glusterd would take it for the running brick
            seen.clear()
            seen.update(self.volume_status())
            now = seen.get(brick["path"], {})
            if now.get("online") and now.get("pid") and now["pid"] != old.pid:
                return True
            self._cli("volume", "start", self.state.info["volume"], "force", check=False)
            return False

        wait_until(online, timeout, f"glusterfs: {name}", log=self.log_dir / "glusterd.log", interval=0.5)
        new = seen[brick["path"]]
        self.state.procs[brick["proc"]] = self._adopt(new["pid"], name, Path(old.log))
        brick["port"] = new["port"]
        shd_slot, shd = self.state.info.get("shd_proc"), seen.get("shd", {})
        if shd_slot is not None and shd.get("pid") and shd["pid"] != self.state.procs[shd_slot].pid:
            self.state.procs[shd_slot] = self._adopt(shd["pid"], "self-heal daemon", self.log_dir / "glustershd.log")
        self._journal()

    # -- healing ------------------------------------------------------------------------------------------
    def healing(self) -> dict[str, Any] | None:
        """``gluster volume heal VOL info summary`` as glusterd's CLI gets it (``glfsheal``, run in the volume's
        network namespace against this glusterd's socket; the CLI cannot pass it the socket): per brick the
        entries its self-heal index still holds, and whether the brick is connected. ``bytes``: what the self-heal
        daemon sent (``/proc/PID/io`` ``wchar``: its writes to the bricks it heals, over their sockets; a heal a
        client does in its own I/O path is not in it). None for a distribute volume
        (nothing to heal)."""
        if self.state.info.get("type") not in ("replicate", "disperse"):
            return None
        tool = next((t for t in GLFSHEAL if os.access(t, os.X_OK)), None)
        if tool is None:
            raise TestbedError(f"glusterfs: glfsheal not found (looked in {', '.join(GLFSHEAL)}); apt-get install "
                               "--reinstall glusterfs-server")
        glusterd = self.state.procs[0] if self.state.procs else None
        if glusterd is None or glusterd.condition() != "up":
            raise TestbedError("glusterfs: glusterd is not running, so nothing says what the volume has to heal")
        cmd = ["nsenter", f"--net=/proc/{glusterd.pid}/ns/net", tool, self.state.info.get("volume", VOLUME),
               "info-summary", "--xml", "--nolog", "glusterd-sock", str(self.sock_file)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=HEAL_INFO_TIMEOUT,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise TestbedError(f"glusterfs: heal info did not answer within {HEAL_INFO_TIMEOUT:g} s") from None
        bricks = parse_heal_summary(proc.stdout)
        slot = self.state.info.get("shd_proc")
        shd = self.state.procs[slot] if slot is not None else None
        io = read_server_processes([shd.pid]) if shd is not None and shd.alive() else {}
        written = {f"self-heal daemon pid {shd.pid}": row["wchar"] for row in io.values()} if shd is not None else {}
        return {"pending": sum(b["entries"] for b in bricks.values()),
                "down": sorted(name for name, b in bricks.items() if not b["connected"]),
                "unit": "entries", "bytes": written, "parts": bricks,
                "source": "gluster volume heal info summary (glfsheal); the self-heal daemon's sends"}

    # -- status -------------------------------------------------------------------------------------------
    def status(self) -> str:
        """The processes as they are, then what glusterd says of each brick, and whether the volume is mounted."""
        if not self.state.procs:
            return super().status()
        word, todo = self.health()
        names = {"up": "up", "stopped": "stopped (SIGSTOP)", "exited": "DOWN (exited)"}
        procs = ", ".join(f"{p.name} pid {p.pid} {names[p.condition()]}" for p in self.state.procs)
        info = self.state.info
        shape = {"replicate": f"replica {info.get('replica')}",
                 "disperse": f"disperse {info.get('disperse')} redundancy {info.get('redundancy')}"}.get(
                     info.get("type", ""), "distribute")
        glusterd = self.state.procs[0]
        if glusterd.condition() == "up":
            seen = self.volume_status(timeout=30)
            bricks = ", ".join(f"{b['name']} {'online' if seen.get(b['path'], {}).get('online') else 'OFFLINE'}"
                               for b in self._bricks()) if seen else "glusterd does not answer"
        else:
            bricks = f"glusterd {glusterd.condition()}: brick states unknown"
        mnt = self.mountpoint
        where = f"mounted at {mnt}" if mounted(mnt) else f"NOT mounted at {mnt}"
        line = f"{self.kind}: {word} — {procs}; volume {info.get('volume')} ({shape}): {bricks}; {where}"
        return f"{line}; {todo}" if todo else line

    # -- stop ---------------------------------------------------------------------------------------------
    def claims(self, rule: str, parts: tuple[str, ...], st: os.stat_result) -> bool:
        """glusterd's working, run and log directories and the bricks hold only what glusterd and its bricks
        wrote (volume files, pid files, sockets, logs; file data, ``.glusterfs`` links and metadata)."""
        return rule in (GLUSTERD_STATE, BRICK)

    def _adopt_stragglers(self) -> None:
        """Before stopping: record what runs for this server but is not recorded yet (an `up` killed between
        starting a process and recording it): bricks and the self-heal daemon glusterd names, then anything
        else in the namespace (the FUSE client, a mount helper)."""
        if not self.state.procs:
            return
        known = {p.pid for p in self.state.procs}
        glusterd = self.state.procs[0]
        if glusterd.condition() == "up" and self.state.info.get("netns") is not None:
            self.state.info.setdefault("sockets", [])
            for key, node in self.volume_status(timeout=30).items():
                pid = node.get("pid")
                if pid and pid not in known and _netns(pid) == self.state.info["netns"]:
                    try:
                        self.state.procs.append(self._adopt(pid, "self-heal daemon" if key == "shd" else f"brick {key}",
                                                            self.log_dir / "glusterd.log"))
                        known.add(pid)
                    except TestbedError:
                        continue
        for p in self._namespace_procs():
            if p.pid not in known:
                try:
                    self.state.procs.append(Proc.adopt(p.pid, f"{p.name()} (in glusterd's namespace)",
                                                       self.log_dir / "glusterd.log"))
                    known.add(p.pid)
                except (TestbedError, psutil.NoSuchProcess):
                    continue
        self._journal()

    def stop(self) -> list:
        # a frozen FUSE client cannot answer the unmount, nor frozen bricks `volume stop`: resume them first (they
        # are stopped next anyway; Proc.stop would send SIGCONT too, but only after the unmount)
        for p in self.state.procs:
            if p.condition() == "stopped" and (q := p.process()) is not None:
                with contextlib.suppress(psutil.NoSuchProcess):
                    q.send_signal(signal.SIGCONT)
        self.unmount_all()
        self._adopt_stragglers()
        volume = self.state.info.get("volume")
        if volume and self.state.procs and self.state.procs[0].condition() == "up":
            # bricks stopped by glusterd (flushing), the volume forgotten; a failure is no reason to stay up
            self._cli("volume", "stop", volume, timeout=120, check=False)
            self._cli("volume", "delete", volume, timeout=120, check=False)
        left = super().stop()
        self._remove_system_files()
        return left

    def _remove_system_files(self) -> None:
        """What glusterd made outside the root: the recorded sockets that were not there before, and the usual
        paths that were absent before this server started (a directory only once empty)."""
        info = self.state.info
        before = set(info.get("sockets_before", []))
        for path in list(info.get("sockets", [])):
            if path not in before:
                try:
                    if stat.S_ISSOCK(os.lstat(path).st_mode):
                        os.unlink(path)
                except FileNotFoundError:
                    pass
                except OSError:
                    continue
            info["sockets"].remove(path)
        for path in [p for p in SYSTEM_PATHS if p in info.get("system_absent", [])]:
            try:
                st = os.lstat(path)
                if stat.S_ISDIR(st.st_mode):
                    os.rmdir(path)
                elif stat.S_ISREG(st.st_mode) and path.endswith(("gsyncd_template.conf", ".log")):
                    os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError:
                continue  # not empty: something else uses it now
            info["system_absent"].remove(path)
        self._journal()


__all__ = ["GlusterServer", "brick_host", "VOLUME", "EXPORT"]
