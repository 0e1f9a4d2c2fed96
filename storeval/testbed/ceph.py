"""A real one-host Ceph cluster (Debian ``ceph ceph-mds ceph-fuse radosgw``, Pacific) on 127.0.0.1.

One monitor, one manager, N BlueStore OSDs (each on a 30 GiB *sparse* file in its data directory), one MDS
and one RADOS gateway (beast on 127.0.0.1), all configured from a single ``ceph.conf`` under the server's
root that every command gets with ``-c``: nothing is read from or written to ``/etc/ceph``, the daemons'
data, sockets, pid files, logs, crash reports and even the monitor's cluster log live under the root.
Authentication is off (``auth ... required = none``): the cluster is reachable from this host only.

Every daemon runs in the foreground (``-f``) of its own session under :meth:`Server._spawn`, so the PIDs we
record are the daemons themselves. So do the slow helpers (``ceph-mon --mkfs``, ``ceph-osd --mkfs``) while
they run: a ``testbed up`` killed in the middle leaves nothing running that the next ``down`` cannot find.

Start-up follows the sequence known to work on this machine (TESTBED-NOTES.md): monitor keyring and map,
``ceph-mon --mkfs``, mon, mgr, then per OSD ``ceph osd new`` + ``ceph-osd --mkfs`` (the mkfs runs in
parallel) and the OSD, the MDS; once every OSD is up ``ceph fs volume create cephfs``, the radosgw; then
storeval waits (bounded, by progress: a busy machine is slow, not stuck) for every placement group to be
``active+clean`` and the MDS active, mounts CephFS with ``ceph-fuse`` (recorded before it is mounted),
creates an RGW user with keys storeval generates (handed over in the environment, never on a command
line; kept in a 0600 credentials file under the root) and the bucket ``storeval``.

Pools have ``size = min(3, OSDs)`` and ``min_size = size - 1`` (1 for one OSD), so any one OSD of three can
be killed while reads and writes go on. Fault handles ``ceph.osd1`` … ``ceph.osdN`` act on one OSD; ``start``
spawns it again with its data and returns once the cluster map says it is up again.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psutil

from .base import (LOCALHOST, RESPAWN_WAIT, FaultNode, Proc, Server, TestbedError, TestbedOptionError, apt_install,
                   mounted, port_open, terminate)
from .minio import BUCKET, REGION, create_bucket, new_credentials, read_credentials

PACKAGES = ("ceph", "ceph-mds", "ceph-fuse", "radosgw")
DAEMON_DATA, RUN, LOGS = "ceph-daemon-data", "ceph-run", "ceph-logs"  # ledger rules, see CephServer.claims
MAX_OSDS = 8
DEFAULT_OSDS = 3
BLOCK_SIZE = 30 << 30  # each OSD's sparse BlueStore file: 10 GiB filled up after one `rados bench`
OSD_MEMORY_TARGET = 939524096  # about 0.9 GiB per OSD (Ceph's default is 4 GiB)
FS_NAME = "cephfs"
RGW_USER = "storeval"
TARGET_DIR = "storeval"  # the directory inside CephFS (and the key prefix in the bucket) targets point at
STALL = 180.0  # seconds without progress after which a wait gives up (a busy machine makes Ceph slow, not stuck)
CAP = 900.0  # seconds any one wait may take in all
STOP_GRACE = 15.0  # seconds a group of daemons has to end after SIGTERM before SIGKILL
CLI_TIMEOUT = 60.0  # seconds one `ceph` command may take
# Files the monitor writes outside the root if its cluster log is not configured away (we configure it away;
# these are removed only if they did not exist before `up`, in case a Ceph release ignores the setting)
SYSTEM_FILES = ("/var/log/ceph/ceph.log", "/var/log/ceph/ceph.audit.log")


class CephServer(Server):
    """mon + mgr + N OSDs + MDS + radosgw on one ``ceph.conf``; CephFS mounted with ceph-fuse; bucket ``storeval``."""

    kind = "ceph"
    summary = "Ceph 16 (Debian): mon, mgr, N BlueStore OSDs, MDS, radosgw; CephFS via ceph-fuse and S3, on 127.0.0.1"
    target_schemes = {"cephfs": "file", "ceph-rgw": "s3"}
    options_help = {"servers": f"OSDs of the cluster (1-{MAX_OSDS}, default {DEFAULT_OSDS}); pools keep "
                               "min(3, OSDs) copies"}

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        out = super().check_options(options)
        n = out.get("servers", DEFAULT_OSDS)
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_OSDS:
            raise TestbedOptionError(f"testbed ceph: servers must be a whole number of OSDs from 1 to {MAX_OSDS} "
                               f"(got {n!r})")
        out["servers"] = n
        return out

    # -- layout (every path derives from the root, so a server rebuilt from its state finds them) ----------
    @property
    def osd_count(self) -> int:
        return int(self.state.info.get("osd_count") or self.check_options(self.options)["servers"])

    @property
    def conf(self) -> Path:
        return self.root / "ceph.conf"

    @property
    def mountpoint(self) -> Path:
        return self.root / "mnt"

    @property
    def credentials_file(self) -> Path:
        return (self.root / "credentials").absolute()

    @property
    def endpoint(self) -> str:
        return f"http://{LOCALHOST}:{self.state.ports['rgw']}"

    def _log(self, name: str) -> Path:
        """Where the output of a process we start goes (the daemons' own logs are ``<name>.log`` beside it)."""
        return self.root / "log" / f"{name}.out"

    # -- install --------------------------------------------------------------------------------------------
    def install(self) -> None:
        apt_install(*PACKAGES)
        missing = [b for b in ("ceph", "ceph-mon", "ceph-mgr", "ceph-osd", "ceph-mds", "radosgw", "radosgw-admin",
                               "ceph-fuse", "ceph-authtool", "monmaptool") if not shutil.which(b)]
        if missing:
            raise TestbedError(f"ceph: {', '.join(missing)} missing although the packages are installed; run "
                               f"apt-get install --reinstall {' '.join(PACKAGES)}")

    # -- the ledger: what the daemons write under the root --------------------------------------------------
    def claims(self, rule: str, parts: tuple[str, ...], st: os.stat_result) -> bool:
        """Daemon data directories (mon store, OSD BlueStore files, mgr/mds/rgw data, crash reports) are written
        by Ceph alone; in the run directory Ceph makes admin sockets and pid files, in the log directory its
        ``*.log`` files. Anything else in those two is not Ceph's."""
        if rule == DAEMON_DATA:
            return True
        if rule == RUN:
            return len(parts) == 1 and (stat.S_ISSOCK(st.st_mode) or stat.S_ISREG(st.st_mode)) and (
                parts[0].endswith(".asok") or parts[0].endswith(".pid"))
        if rule == LOGS:
            return len(parts) == 1 and stat.S_ISREG(st.st_mode) and parts[0].endswith(".log")
        return False

    # -- configuration -------------------------------------------------------------------------------------
    def _write_conf(self, fsid: str, mon_port: int, rgw_port: int, osds: int) -> None:
        r = self.root.absolute()
        size = min(3, osds)
        min_size = max(1, size - 1)
        lines = [
            "# written by storeval testbed: a one-host cluster on 127.0.0.1, every path under this directory",
            "[global]",
            f"fsid = {fsid}",
            f"mon host = v2:{LOCALHOST}:{mon_port}",
            "mon initial members = a",
            "public network = 127.0.0.0/8",
            "ms bind ipv4 = true",
            "ms bind ipv6 = false",
            "auth cluster required = none",
            "auth service required = none",
            "auth client required = none",
            "auth allow insecure global id reclaim = false",
            "ms mon client mode = crc",  # radosgw hangs without it when auth is none
            f"osd pool default size = {size}",
            f"osd pool default min size = {min_size}",
            "osd pool default pg num = 8",
            "osd pool default pgp num = 8",
            "osd pool default pg autoscale mode = off",  # no PG splits while a study runs
            "osd crush chooseleaf type = 0",  # copies on different OSDs of the one host
            "mon allow pool size one = true",
            "mon warn on pool no redundancy = false",
            "mon data avail warn = 5",  # the root disk is fuller than Ceph's 30 % default likes
            "mon max pg per osd = 1000",
            "mgr initial modules = iostat",  # no dashboard, no restful: no listeners beyond the daemons' own
            f"run dir = {r}/run",
            f"admin socket = {r}/run/$name.asok",
            f"pid file = {r}/run/$name.pid",
            f"log file = {r}/log/$name.log",
            f"crash dir = {r}/crash",
            f"mon cluster log file = {r}/log/$cluster.$channel.log",
            "mon cluster log to file = false",
            f"mon data = {r}/mon/$id",
            f"mgr data = {r}/mgr/$id",
            f"mds data = {r}/mds/$id",
            f"osd data = {r}/osd/$id",
            "osd objectstore = bluestore",
            "bluestore block create = true",
            f"bluestore block size = {BLOCK_SIZE}",
            f"osd memory target = {OSD_MEMORY_TARGET}",
            "",
            "[client]",
            # the ceph CLI, radosgw-admin and ceph-fuse all run as client.admin: a socket per process
            f"admin socket = {r}/run/$name.$pid.asok",
            f"log file = {r}/log/$name.log",
            "",
            "[client.rgw.a]",
            f"rgw frontends = beast endpoint={LOCALHOST}:{rgw_port}",
            f"rgw data = {r}/rgw/a",
            f"admin socket = {r}/run/$name.asok",
            "",
        ]
        self.write_file(self.conf, "\n".join(lines))

    # -- commands ----------------------------------------------------------------------------------------------
    def ceph(self, *args: str, timeout: float = CLI_TIMEOUT, check: bool = True) -> str:
        """``ceph -c <conf> ARGS`` (its output); one-line TestbedError on failure when ``check``."""
        cmd = ["ceph", "-c", str(self.conf), "--connect-timeout", str(int(min(timeout, 30))), *args]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            if check:
                raise TestbedError(f"ceph: `ceph {' '.join(args)}` did not answer within {timeout:g} s") from None
            return ""
        if p.returncode and check:
            tail = " | ".join((p.stderr or p.stdout).strip().splitlines()[-2:])
            raise TestbedError(f"ceph: `ceph {' '.join(args)}` failed (exit {p.returncode}): {tail}")
        return p.stdout if p.returncode == 0 else ""

    def ceph_json(self, *args: str, timeout: float = CLI_TIMEOUT) -> Any:
        """The JSON answer of a ``ceph`` command, or None when the cluster did not answer."""
        out = self.ceph(*args, "--format", "json", timeout=timeout, check=False)
        try:
            return json.loads(out) if out.strip() else None
        except ValueError:
            return None

    def _run_recorded(self, procs: list[tuple[list[str], str]], timeout: float = CAP,
                      env: dict[str, str] | None = None) -> None:
        """Run helper commands (a mkfs) to completion, in parallel, recorded in the state while they run so a
        killed `up` leaves nothing the next `down` cannot stop; raise naming the log of one that failed."""
        started = [self._spawn(cmd, name=name, log=self._log(name), env=env) for cmd, name in procs]
        deadline = time.monotonic() + timeout
        failed = []
        for proc, (_cmd, name) in zip(started, procs):
            code = None
            try:
                code = psutil.Process(proc.pid).wait(timeout=max(1.0, deadline - time.monotonic()))
            except psutil.NoSuchProcess:
                pass  # already reaped elsewhere: its result is judged by what it made
            except psutil.TimeoutExpired:
                failed.append(f"{name} did not finish within {timeout:g} s")
                continue
            if code not in (0, None):
                failed.append(f"{name} failed (exit {code}); see {self._log(name)}")
        for proc in started:
            if proc.alive():
                proc.stop(grace=5)
        self.state.procs = [p for p in self.state.procs if p not in started]
        self._journal()
        if failed:
            raise TestbedError(f"ceph: {failed[0]}")

    def _daemon(self, kind: str, ident: str, slot: int | None = None) -> Proc:
        """Start one daemon in the foreground (``-f``), recorded as ``<kind>.<id>``."""
        binary = {"mon": "ceph-mon", "mgr": "ceph-mgr", "osd": "ceph-osd", "mds": "ceph-mds"}[kind]
        name = f"{kind}.{ident}"
        return self._spawn([binary, "-f", "-c", str(self.conf), "-i", ident], name=name, log=self._log(name),
                           slot=slot)

    # -- waiting: bounded by progress, not by the clock alone ---------------------------------------------------
    def _await(self, check, what: str, *, stall: float = STALL, cap: float = CAP, interval: float = 1.0,
               watch: list[Proc] | None = None) -> Any:
        """Poll ``check() -> (done, progress, detail)`` until done. Give up when ``progress`` has not changed for
        ``stall`` seconds or after ``cap`` seconds in all, or when a process of ``watch`` (default: every
        recorded one) exited."""
        start = last_change = time.monotonic()
        seen: Any = object()
        detail = ""
        while True:
            dead = [p for p in (self.state.procs if watch is None else watch) if not p.alive()]
            if dead:
                raise TestbedError(f"ceph: {dead[0].name} exited while waiting for {what}; see "
                                   f"{self.root / 'log' / (dead[0].name + '.log')}")
            done, progress, detail = check()
            if done:
                return progress
            now = time.monotonic()
            if progress != seen:
                seen, last_change = progress, now
            if now - last_change > stall or now - start > cap:
                raise TestbedError(f"ceph: {what} not reached within {now - start:.0f} s ({detail}); see "
                                   f"{self.root / 'log'}")
            time.sleep(interval)

    def _osd_map(self) -> dict[int, dict[str, Any]]:
        """OSD id -> its entry of ``ceph osd dump`` (``up``, ``in``, ``up_from`` …); empty when no answer."""
        dump = self.ceph_json("osd", "dump", timeout=30)
        if not isinstance(dump, dict):
            return {}
        return {int(o["osd"]): o for o in dump.get("osds", []) if isinstance(o, dict) and "osd" in o}

    def _wait_osds_up(self, ids: list[int], after: dict[int, int] | None = None,
                      watch: list[Proc] | None = None) -> None:
        """Until the cluster map has each OSD of ``ids`` up (with an ``up_from`` epoch above ``after[id]``:
        booted *since* we started it, not the stale entry of a killed one)."""
        after = after or {}

        def check():
            osds = self._osd_map()
            up = [i for i in ids if osds.get(i, {}).get("up") == 1 and osds[i].get("up_from", 0) > after.get(i, -1)]
            return len(up) == len(ids), len(up), f"{len(up)} of {len(ids)} OSDs up"

        self._await(check, f"OSD{'s' if len(ids) > 1 else ''} {', '.join(f'osd.{i}' for i in ids)} up", watch=watch)

    def _wait_clean(self) -> None:
        """Until every placement group is active+clean (creating and peering PGs do not take I/O yet)."""

        def check():
            st = self.ceph_json("pg", "stat", timeout=30)
            if not isinstance(st, dict):
                return False, None, "no answer"
            st = st.get("pg_summary", st)  # Pacific nests the counts
            total = int(st.get("num_pgs", 0))
            clean = sum(int(s.get("num", 0)) for s in st.get("num_pg_by_state", []) if s.get("name") == "active+clean")
            return total > 0 and clean == total, (total, clean), f"{clean} of {total} placement groups active+clean"

        self._await(check, "all placement groups active+clean")

    def _wait_mds_active(self) -> None:
        def check():
            dump = self.ceph_json("fs", "dump", timeout=30)
            states = [info.get("state") for fs in (dump or {}).get("filesystems", [])
                      for info in fs.get("mdsmap", {}).get("info", {}).values()] if isinstance(dump, dict) else []
            return "up:active" in states, tuple(states), f"MDS states {states or 'none'}"

        self._await(check, "an active MDS")

    # -- start ------------------------------------------------------------------------------------------------------
    def _prepare(self) -> None:
        self.make_root()
        for sub in ("mon", "mgr", "osd", "mds", "rgw", "crash"):
            self.mkdir(self.root / sub, rule=DAEMON_DATA)
        self.mkdir(self.root / "run", rule=RUN)
        self.mkdir(self.root / "log", rule=LOGS)
        self.mkdir(self.root / "keys")

    def start(self) -> None:
        if not shutil.which("ceph-mon"):
            raise TestbedError("ceph: not installed (run `storeval testbed up ceph` as root, or apt-get install "
                               f"{' '.join(PACKAGES)})")
        osds = self.check_options(self.options)["servers"]
        self.state.info["osd_count"] = osds
        # what exists outside the root before we start: only files that did not may be removed by stop
        self.state.info["absent_before"] = [p for p in SYSTEM_FILES if not os.path.lexists(p)]
        self._journal()
        self._prepare()
        fsid = str(uuid.uuid4())
        mon_port, rgw_port = self.pick_ports(2)
        self.state.info.update({"fsid": fsid, "conf": str(self.conf)})
        self.state.ports = {"mon": mon_port, "rgw": rgw_port}
        self._write_conf(fsid, mon_port, rgw_port, osds)
        conf = str(self.conf)

        keyring, monmap = self.root / "keys" / "mon.keyring", self.root / "keys" / "monmap"
        os.close(self.ledger.open(keyring, mode=0o600))  # recorded; ceph-authtool fills it
        self._tool(["ceph-authtool", "--create-keyring", str(keyring), "--gen-key", "-n", "mon.",
                    "--cap", "mon", "allow *"], "ceph-authtool")
        os.close(self.ledger.open(monmap))
        self._tool(["monmaptool", "--create", "--clobber", "--fsid", fsid, "--addv", "a",
                    f"[v2:{LOCALHOST}:{mon_port}]", str(monmap)], "monmaptool")
        self.mkdir(self.root / "mon" / "a")
        self._run_recorded([(["ceph-mon", "-c", conf, "--mkfs", "-i", "a", "--monmap", str(monmap),
                              "--keyring", str(keyring)], "mkfs.mon.a")])
        self._daemon("mon", "a")
        self._await(lambda: (bool(self.ceph_json("mon", "stat", timeout=20)), None, "monitor not answering"),
                    "the monitor answering", stall=120)
        self.mkdir(self.root / "mgr" / "x")
        self._daemon("mgr", "x")

        ids: list[int] = []
        for _ in range(osds):
            osd_uuid = str(uuid.uuid4())
            ident = int(self.ceph("osd", "new", osd_uuid).strip())
            self.mkdir(self.root / "osd" / str(ident))
            ids.append(ident)
            self.state.info.setdefault("osds", []).append({"id": ident, "uuid": osd_uuid})
            self._journal()
        self._run_recorded([(["ceph-osd", "-c", conf, "-i", str(i), "--mkfs", "--osd-uuid", o["uuid"]],
                             f"mkfs.osd.{i}") for i, o in zip(ids, self.state.info["osds"])])
        for i in ids:
            self._daemon("osd", str(i))
        self.mkdir(self.root / "mds" / "a")
        self._daemon("mds", "a")
        self.mkdir(self.root / "rgw" / "a")

    def _tool(self, cmd: list[str], what: str) -> None:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        if p.returncode:
            tail = " | ".join((p.stderr or p.stdout).strip().splitlines()[-2:])
            raise TestbedError(f"ceph: {what} failed (exit {p.returncode}): {tail}")

    def ready(self) -> bool:
        return bool(self.state.info.get("ready")) and mounted(self.mountpoint) and self._rgw_answers()

    def _rgw_answers(self) -> bool:
        return "rgw" in self.state.ports and port_open(self.state.ports["rgw"])

    def wait_ready(self, timeout: float = CAP) -> None:
        """The rest of the start: OSDs up, the file system, radosgw, clean PGs, the mount, user and bucket."""
        ids = [o["id"] for o in self.state.info.get("osds", [])]
        self._wait_osds_up(ids)
        self._await(self._create_fs, f"file system {FS_NAME}", stall=120)
        self._spawn(["radosgw", "-f", "-c", str(self.conf), "-n", "client.rgw.a"], name="radosgw",
                    log=self._log("client.rgw.a"))
        self._await(lambda: (self._rgw_answers(), None, f"port {self.state.ports['rgw']} closed"),
                    f"radosgw on port {self.state.ports['rgw']}")
        self._wait_mds_active()
        self._wait_clean()
        self._mount()
        self._rgw_user()
        access, secret = self.credentials()

        def bucket():
            try:
                create_bucket(self.endpoint, access, secret, BUCKET, REGION, timeout=30)
                return True, None, ""
            except TestbedError as e:  # e.g. the gateway's pools still peering
                return False, None, str(e)

        self._await(bucket, f"bucket {BUCKET}", stall=120, interval=2.0)
        self._wait_clean()  # radosgw made its pools meanwhile: their PGs too
        self.state.info["ready"] = True
        self._journal()

    def _create_fs(self):
        out = subprocess.run(["ceph", "-c", str(self.conf), "--connect-timeout", "30", "fs", "volume", "create",
                              FS_NAME], capture_output=True, text=True, timeout=CLI_TIMEOUT * 2,
                             stdin=subprocess.DEVNULL)
        if out.returncode == 0:
            return True, None, ""
        dump = self.ceph_json("fs", "ls", timeout=30)  # created by an earlier try whose answer was lost
        if isinstance(dump, list) and any(fs.get("name") == FS_NAME for fs in dump):
            return True, None, ""
        return False, None, ((out.stderr or out.stdout).strip().splitlines() or ["no answer"])[-1]

    def _mount(self) -> None:
        """ceph-fuse in the foreground (our PID), recorded as a mount before it is made."""
        self.mkdir(self.mountpoint)
        self.record_mount(self.mountpoint)
        self._spawn(["ceph-fuse", "-f", "-c", str(self.conf), "--id", "admin", str(self.mountpoint)],
                    name="ceph-fuse", log=self._log("ceph-fuse"))
        self._await(lambda: (mounted(self.mountpoint), None, "not mounted yet"), f"CephFS mounted on {self.mountpoint}",
                    stall=120, interval=0.2)
        os.makedirs(self.mountpoint / TARGET_DIR, exist_ok=True)  # inside CephFS: goes with the file system

    def credentials(self) -> tuple[str, str]:
        """(access key, secret key) of the RGW user, from the credentials file."""
        return read_credentials(self.credentials_file, self.kind)

    def _rgw_user(self) -> None:
        """An RGW user with keys storeval makes; the secret travels in radosgw-admin's environment
        (``CEPH_ARGS``), never on a command line other users can read."""
        access, secret = new_credentials(self, self.credentials_file)
        env = {**os.environ, "CEPH_ARGS": f"--access-key {access} --secret-key {secret}"}
        p = subprocess.run(["radosgw-admin", "-c", str(self.conf), "user", "create", f"--uid={RGW_USER}",
                            f"--display-name={RGW_USER}"], capture_output=True, text=True, env=env,
                           timeout=CAP, stdin=subprocess.DEVNULL)
        if p.returncode:
            tail = " | ".join((p.stderr or p.stdout).strip().splitlines()[-2:])
            raise TestbedError(f"ceph: radosgw-admin user create failed (exit {p.returncode}): {tail}")
        keys = json.loads(p.stdout).get("keys", [])
        if not any(k.get("access_key") == access and k.get("secret_key") == secret for k in keys):
            raise TestbedError("ceph: radosgw-admin did not take storeval's keys (CEPH_ARGS ignored?)")

    # -- targets, counters ---------------------------------------------------------------------------------------
    def _pids(self, *names: str) -> list[int]:
        return [p.pid for p in self.state.procs if p.alive() and (p.name in names or
                                                                 (p.name.startswith("osd.") and "osd" in names))]

    def server_counters(self) -> dict[str, Any]:
        """The OSDs (what their disks served) and the gateway (what it moved)."""
        return {"server_pids": self._pids("osd", "radosgw")}

    def targets(self) -> dict[str, dict[str, Any]]:
        cephfs: dict[str, Any] = {"url": "file://" + quote(str((self.mountpoint / TARGET_DIR).absolute())),
                                  "server_pids": self._pids("osd", "mds.a")}
        return {"ceph-rgw": {"url": f"s3://{BUCKET}/{TARGET_DIR}", "endpoint": self.endpoint, "region": REGION,
                             "credentials_file": str(self.credentials_file), **self.server_counters()},
                "cephfs": cephfs}

    # -- healing -------------------------------------------------------------------------------------------------------
    def healing(self) -> dict[str, Any] | None:
        """What the monitor says (``ceph pg dump pgs``, ``ceph osd dump``): the placement groups not
        active+clean (degraded, undersized, recovering, backfilling …) and the OSDs down; ``bytes``: each PG's
        own count of the bytes recovered (``stat_sum.num_bytes_recovered``). None with one OSD (one copy)."""
        if self.osd_count < 2:
            return None
        dump = self.ceph_json("pg", "dump", "pgs", timeout=30)
        stats = dump.get("pg_stats") if isinstance(dump, dict) else dump
        if not isinstance(stats, list):
            raise TestbedError("ceph: `ceph pg dump pgs` did not answer (is the monitor up?)")
        states: dict[str, int] = {}
        recovered: dict[str, float] = {}
        for pg in stats:
            if not isinstance(pg, dict):
                continue
            state = str(pg.get("state", "unknown"))
            states[state] = states.get(state, 0) + 1
            recovered[f"pg {pg.get('pgid')}"] = float((pg.get("stat_sum") or {}).get("num_bytes_recovered", 0))
        down = sorted(f"osd.{i}" for i, o in self._osd_map().items() if not o.get("up"))
        return {"pending": sum(n for st, n in states.items() if st != "active+clean"), "down": down,
                "unit": "placement groups", "bytes": recovered, "parts": {"pgs_by_state": states},
                "source": "ceph pg dump (states, num_bytes_recovered); ceph osd dump"}

    # -- faults: one OSD at a time ---------------------------------------------------------------------------------
    def _slot(self, name: str) -> int | None:
        for i, p in enumerate(self.state.procs):
            if p.name == name:
                return i
        return None

    def _osd_ids(self) -> list[int]:
        return [int(o["id"]) for o in self.state.info.get("osds", [])]

    def fault_nodes(self) -> list[FaultNode]:
        ids = self._osd_ids()
        nodes = []
        for n, ident in enumerate(ids, start=1):
            slot = self._slot(f"osd.{ident}")
            if slot is None:
                continue
            nodes.append(FaultNode(f"osd{n}", f"Ceph OSD {n} of {len(ids)} (osd.{ident}, BlueStore on "
                                              f"{self.root / 'osd' / str(ident) / 'block'})", [slot]))
        return nodes

    def fault_names(self, exited: list[int]) -> list[str]:
        """The OSD handles that bring the exited processes back — only when OSDs are all that exited (a dead
        monitor, MDS, gateway or ceph-fuse is not started again by a fault handle: `up` starts afresh)."""
        names = {f"osd.{i}": f"{self.kind}.osd{n}" for n, i in enumerate(self._osd_ids(), start=1)}
        dead = [self.state.procs[i].name for i in exited]
        return [names[n] for n in dead] if dead and all(n in names for n in dead) else []

    def start_node(self, name: str, timeout: float = RESPAWN_WAIT) -> None:
        ids = self._osd_ids()
        try:
            n = int(name.removeprefix("osd"))
            ident = ids[n - 1]
            if not name.startswith("osd") or n < 1:
                raise ValueError
        except (ValueError, IndexError):
            raise TestbedError(f"ceph: no node {name} (osd1..osd{len(ids)})") from None
        slot = self._slot(f"osd.{ident}")
        if slot is None or self.state.procs[slot].alive():
            raise TestbedError(f"ceph: {name} (osd.{ident}) is running: nothing to start")
        mon = self._slot("mon.a")
        condition = self.state.procs[mon].condition() if mon is not None else "exited"
        if condition != "up":
            fix = ("frozen: `storeval testbed fault ceph cont` first" if condition == "stopped"
                   else "gone: `storeval testbed up ceph` starts the cluster afresh")
            raise TestbedError(f"ceph: {name} cannot rejoin while the monitor (mon.a) is {fix}")
        before = self._osd_map().get(ident, {}).get("up_from", -1)
        proc = self._daemon("osd", str(ident), slot=slot)  # it replaces the killed one's pid file and socket
        # other faults may hold other daemons down meanwhile: only this one must stay alive
        self._wait_osds_up([ident], after={ident: int(before)}, watch=[proc])

    # -- status, stop -----------------------------------------------------------------------------------------------
    def status(self) -> str:
        """Each daemon (up, stopped, DOWN) and the ports, then what the cluster itself says of its OSDs (when the
        monitor runs) and whether CephFS is mounted; then what to do."""
        if not self.state.procs:
            return super().status()
        word, todo = self.health()
        names = {"up": "up", "stopped": "stopped (SIGSTOP)", "exited": "DOWN (exited)"}
        procs = ", ".join(f"{p.name} pid {p.pid} {names[p.condition()]}" for p in self.state.procs)
        ports = ", ".join(f"{k} {v}" for k, v in self.state.ports.items())
        mon = self._slot("mon.a")
        osds = self._osd_map() if mon is not None and self.state.procs[mon].condition() == "up" else {}
        if osds:
            up = sum(1 for o in osds.values() if o.get("up") == 1)
            inn = sum(1 for o in osds.values() if o.get("in") == 1)
            cluster = f"cluster: {up} of {len(osds)} OSDs up, {inn} in"
        else:
            cluster = "cluster: the monitor does not answer"
        fuse = self._slot("ceph-fuse")
        fuse_state = self.state.procs[fuse].condition() if fuse is not None else "exited"
        if not mounted(self.mountpoint):
            mount = f"CephFS NOT mounted on {self.mountpoint}"
        elif fuse_state == "up":
            mount = f"CephFS mounted on {self.mountpoint}"
        else:
            mount = (f"CephFS mount on {self.mountpoint} does not answer (ceph-fuse "
                     f"{'stopped' if fuse_state == 'stopped' else 'exited'})")
        line = f"{self.kind}: {word} — {procs}; ports {ports}; {cluster}; {mount}"
        return f"{line}; {todo}" if todo else line

    def stop(self) -> list:
        """Unmount, then stop the recorded processes in the order Ceph shuts down cleanly: the clients (ceph-fuse,
        which leaves once unmounted, and radosgw) while the cluster still answers them, then the MDS, the OSDs,
        the manager and the monitor — each group SIGTERMed together, SIGKILLed after ``STOP_GRACE`` seconds.
        Then what the ledger proves, and the cluster log files outside the root if they appeared during our run."""
        self.unmount_all()
        groups = [("ceph-fuse", "radosgw"), ("mds.",), ("osd.",), ("mgr.", "mon.")]
        for prefixes in groups:
            family = [p for proc in self.state.procs
                      if proc.name.startswith(prefixes) and (p := proc.process()) is not None]
            terminate(family, STOP_GRACE)
        left = super().stop()  # SIGKILL for any that stayed, then the ledger
        for path in self.state.info.get("absent_before", []):
            try:
                if stat.S_ISREG(os.lstat(path).st_mode):
                    os.unlink(path)
            except FileNotFoundError:
                pass
        return left


__all__ = ["CephServer"]
