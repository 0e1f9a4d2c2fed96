"""An NFS appliance on 127.0.0.1: NFS-Ganesha (Debian's ``nfs-ganesha`` with the VFS back end), NFSv4 only.

The seed's BlueArc/NFS case needs an NFS server, and this kernel has neither the NFS server nor the NFS
client: Ganesha serves NFS from user space, and storeval's ``nfs://`` driver (nfs-rs) is the client, so
nothing is mounted. One server, one export: ``<root>/export`` under the pseudo path ``/export``, and the
storeval target ``nfs://127.0.0.1:PORT/export/storeval``.

Ganesha's configuration keeps it to itself: ``Protocols = 4`` (NFSv3 would need rpcbind, and without it
Ganesha exits at start), ``Bind_addr = 127.0.0.1`` on a free port (it listens on ``[::ffff:127.0.0.1]``,
an IPv6 socket for that IPv4 address), no UDP, NLM or RQUOTA, ``Graceless`` (no grace period after a
restart), client recovery records under ``<root>/recovery``. It runs in the foreground (``-F``) of its own
session, so the PID recorded is the server itself; its log and pid file are under the root.

What Ganesha writes is told apart from what a user put there: the export squashes every client to
``nobody`` (``Squash = All_Squash``, uid/gid 65534), so everything written through NFS belongs to that user
and the rest (owned by whoever put it there) is left on ``down``. Its recovery directory holds only its own
``v4recov``/``v4old`` trees, its run directory only its pid file.

Outside the root Ganesha creates ``/run/ganesha`` at every start (the directory of its default pid file,
whatever ``-p`` says). If that directory did not exist before the first start, that is recorded in the state
before Ganesha starts, and ``down`` removes it when it is empty (never what is inside it).

On an emulated host (:meth:`Server.place`, the ``host`` setting) Ganesha runs inside the host's network
namespace and the target is ``nfs://<host address>:PORT/export/storeval``; nothing else changes (``/run/ganesha``
is the same directory: ``ip netns exec`` changes the network, not the files). ``Bind_addr`` names the host's
address, but Ganesha 4.3 honours it only as an IPv6 address: it resolves it with ``AI_ADDRCONFIG``, which gives
an IPv4 result where the namespace has no IPv6 address but its loopback's, and its IPv6 listener then binds
``[::]`` — every address *of the namespace*, which are the host's address and the namespace's own loopback.

Faults: the whole server is one handle, ``nfs`` — stop (SIGSTOP), cont, kill, and start/restart through
:meth:`NfsServer.respawn`: the same port, configuration and data.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil

from .base import HOST_HELP, RESPAWN_WAIT, Proc, Server, TestbedError, TestbedOptionError, apt_install, port_open

PACKAGES = ("nfs-ganesha", "nfs-ganesha-vfs")
PSEUDO = "/export"  # the export's NFSv4 path
TARGET_DIR = "storeval"  # the directory in the export the storeval target works in
SQUASH_ID = 65534  # nobody / nogroup: every client of the export writes as this user (see the module docstring)
RUN_DIR = Path("/run/ganesha")  # Ganesha makes it at every start
EXPORT, RECOVERY, RUN = "nfs-export", "nfs-recovery", "nfs-run"  # ledger rules, see NfsServer.claims
READY_LINE = "NFS SERVER INITIALIZED"
START_ATTEMPTS = 3
START_TIMEOUT = 60.0
IN_USE = ("Address already in use", "error 98")


class NfsServer(Server):
    kind = "nfs"
    summary = "NFS-Ganesha 4 (NFSv4.1, VFS back end) on 127.0.0.1, reached with the nfs:// driver (nfs-rs)"
    target_schemes = {"nfs": "nfs"}
    options_help = {"servers": "NFS servers, only 1: one appliance with one export", "host": HOST_HELP}

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        out = super().check_options(options)
        n = out.get("servers", 1)
        if n != 1 or isinstance(n, bool):
            raise TestbedOptionError(f"testbed nfs: one NFS server only (servers 1), not {n!r}: Ganesha stands for one "
                               "NFS appliance with one export here; use --servers with glusterfs or ceph for a "
                               "system of several servers")
        out.pop("servers", None)
        return out

    # -- install ----------------------------------------------------------------------------------------
    def install(self) -> None:
        apt_install(*PACKAGES)
        if not shutil.which("ganesha.nfsd"):
            raise TestbedError("nfs: ganesha.nfsd is missing although nfs-ganesha is installed; run "
                               "apt-get install --reinstall nfs-ganesha nfs-ganesha-vfs")
        if os.geteuid() != 0:
            raise TestbedError("nfs: Ganesha serves files as their owners and must run as root; run `storeval "
                               "testbed up nfs` as root")

    # -- paths ----------------------------------------------------------------------------------------------
    @property
    def export_dir(self) -> Path:
        return self.root / "export"

    @property
    def config_file(self) -> Path:
        return self.root / "ganesha.conf"

    @property
    def log_file(self) -> Path:
        return self.root / "log" / "ganesha.log"

    @property
    def pid_file(self) -> Path:
        return self.root / "run" / "ganesha.pid"

    @property
    def port(self) -> int:
        try:
            return int(self.state.ports["nfs"])
        except KeyError:
            raise TestbedError("nfs: not started (no port recorded)") from None

    @property
    def url(self) -> str:
        """The storeval target's URL: the export's ``storeval`` directory."""
        return f"nfs://{self.address}:{self.port}{PSEUDO}/{TARGET_DIR}"

    def claims(self, rule: str, parts: tuple[str, ...], st: os.stat_result) -> bool:
        """In the export, what NFS clients wrote (it belongs to the squash user); in the recovery directory,
        Ganesha's client records; in the run directory, its pid file."""
        if rule == EXPORT:
            return st.st_uid == SQUASH_ID
        if rule == RECOVERY:
            return parts[0] in ("v4recov", "v4old")
        if rule == RUN:
            return parts == ("ganesha.pid",)
        return False

    # -- start ------------------------------------------------------------------------------------------
    def _write_config(self, port: int) -> None:
        self.write_file(self.config_file, "\n".join([
            f"# written by storeval testbed: NFSv4 only, on {self.address}, one export",
            "NFS_CORE_PARAM {",
            f"  Bind_addr = {self.address};",
            f"  NFS_Port = {port};",
            "  Protocols = 4;",
            "  Enable_UDP = false;",
            "  Enable_NLM = false;",
            "  Enable_RQUOTA = false;",
            "}",
            "NFSv4 {",
            "  Graceless = true;",
            "  RecoveryBackend = fs;",
            f"  RecoveryRoot = {self.root / 'recovery'};",
            "}",
            "EXPORT {",
            "  Export_Id = 1;",
            f"  Path = {self.export_dir};",
            f"  Pseudo = {PSEUDO};",
            "  Access_Type = RW;",
            "  Squash = All_Squash;",
            f"  Anonymous_Uid = {SQUASH_ID};",
            f"  Anonymous_Gid = {SQUASH_ID};",
            "  SecType = sys;",
            "  Protocols = 4;",
            "  Transports = TCP;",
            "  FSAL { Name = VFS; }",
            "}",
            "",
        ]))

    def _command(self) -> list[str]:
        return ["ganesha.nfsd", "-F", "-f", str(self.config_file), "-L", str(self.log_file), "-p", str(self.pid_file),
                "-N", "NIV_EVENT"]

    def _note_run_dir(self) -> None:
        """Record, before Ganesha first starts, whether it will be the one making /run/ganesha."""
        if "run_dir_absent" not in self.state.info:
            self.state.info["run_dir_absent"] = not os.path.lexists(RUN_DIR)
            self._journal()

    def start(self) -> None:
        if not shutil.which("ganesha.nfsd"):
            raise TestbedError("nfs: not installed (run `storeval testbed up nfs` as root, or apt-get install "
                               "nfs-ganesha nfs-ganesha-vfs)")
        self.make_root()
        self.mkdir(self.root / "log")
        self.mkdir(self.root / "run", rule=RUN)
        self.mkdir(self.root / "recovery", rule=RECOVERY)
        self.mkdir(self.export_dir, rule=EXPORT)
        self.mkdir(self.export_dir / TARGET_DIR)
        for d in (self.export_dir, self.export_dir / TARGET_DIR):  # clients write as the squash user
            os.chown(d, SQUASH_ID, SQUASH_ID)
        self.state.info.update({"export": str(self.export_dir), "pseudo": PSEUDO, "config": str(self.config_file),
                                "log": str(self.log_file), "version": self._version()})
        self._note_run_dir()
        last = ""
        for _attempt in range(START_ATTEMPTS):
            port = self.pick_port()
            self._write_config(port)
            self.state.procs = []
            self.state.ports = {"nfs": port}
            outcome, last = self._launch(None)
            if outcome == "ok":
                return
            self.state.procs = []
            if outcome != "port":
                break
        self.state.ports = {}
        raise TestbedError(f"nfs: Ganesha did not start: {last or 'no message'}; see {self.log_file}")

    def _launch(self, slot: int | None) -> tuple[str, str]:
        """Start Ganesha once and watch its log: ("ok", ""), ("port", why) when the port was taken, ("fail", why)."""
        self.pid_file.unlink(missing_ok=True)  # a killed server's, in its own directory
        os.close(self.ledger.open(self.log_file, append=True))
        mark = self.log_file.stat().st_size
        proc = self._spawn(self._command(), name="ganesha.nfsd", log=self.log_file, cwd=self.root, slot=slot)
        outcome, why = self._await_start(proc, mark)
        if outcome != "ok":
            proc.stop(grace=5)
        return outcome, why

    def _await_start(self, proc: Proc, mark: int) -> tuple[str, str]:
        deadline = time.monotonic() + START_TIMEOUT
        text = ""
        while time.monotonic() < deadline:
            text = self._log_since(mark)
            if READY_LINE in text and proc.alive() and port_open(self.port, self.address):
                return "ok", ""
            if not proc.alive():
                time.sleep(0.2)  # let a dying server finish its last line
                text = self._log_since(mark)
                bad = [ln.split(" : ")[-1].strip() for ln in text.splitlines()
                       if any(w in ln for w in (":FATAL :", ":CRIT :", ":MAJ :")) and "DBUS" not in ln
                       and "krb5" not in ln and "credentials" not in ln]
                why = bad[-1] if bad else ((text.strip().splitlines() or ["exited"])[-1])
                return ("port" if any(w in text for w in IN_USE) else "fail"), why
            time.sleep(0.05)
        return "fail", f"no '{READY_LINE}' within {START_TIMEOUT:g} s"

    def _log_since(self, mark: int) -> str:
        with open(self.log_file, "rb") as f:
            f.seek(mark)
            return f.read().decode("utf-8", "replace")

    @staticmethod
    def _version() -> str:
        try:
            p = subprocess.run(["ganesha.nfsd", "-v"], capture_output=True, text=True, timeout=10)
            line = next((ln for ln in (p.stdout + p.stderr).splitlines() if "Version" in ln), "")
            return line.split("Version", 1)[1].strip(" :") if line else "unknown"
        except (OSError, subprocess.SubprocessError):
            return "unknown"

    # -- faults ---------------------------------------------------------------------------------------------
    def fault_names(self, exited: list[int]) -> list[str]:
        return [self.kind] if exited else []

    def respawn(self, dead: list[int] | None = None, timeout: float = RESPAWN_WAIT) -> None:
        """Start Ganesha again after a fault killed it: the same port, configuration, export and recovery
        records, in its old slot of ``state.procs``. A port still held by the killed server's connections is
        tried again until ``timeout``. Raises TestbedError if it is running."""
        if not self.state.procs or not self.state.ports:
            raise TestbedError("nfs: cannot start it again (never started here): `storeval testbed up nfs`")
        if self.state.procs[0].alive():
            raise TestbedError("nfs: Ganesha is running; nothing to start")
        deadline = time.monotonic() + timeout
        while True:
            outcome, why = self._launch(0)
            if outcome == "ok":
                return
            if outcome != "port" or time.monotonic() >= deadline:
                raise TestbedError(f"nfs: Ganesha did not start again on port {self.port}: {why or 'no message'}; "
                                   f"see {self.log_file}")
            time.sleep(0.5)

    # -- ready, targets, stop ---------------------------------------------------------------------------------
    def ready(self) -> bool:
        if not self.state.ports or not port_open(self.port, self.address):
            return False
        try:
            import nfs_rs
        except ImportError:  # the nfs extra is missing: the open port and the log's line must do
            return True
        try:
            client = nfs_rs.Client.connect(f"nfs://{self.address}{PSEUDO}", versions=["4.1"], uid=0, gid=0,
                                           nfs_port=self.port, connect_timeout=5, operation_timeout=5)
        except Exception:  # noqa: BLE001 - not answering yet
            return False
        try:
            return client.stat(TARGET_DIR).type == nfs_rs.FileType.DIRECTORY
        except Exception:  # noqa: BLE001
            return False
        finally:
            try:
                client.close()
            except Exception:  # noqa: BLE001
                pass

    def targets(self) -> dict[str, dict[str, Any]]:
        return {"nfs": {"url": self.url, **self.server_counters()}}

    def adopt_unrecorded(self) -> None:
        """Record a Ganesha that an interrupted `up` started but could not record (SIGKILL between starting it
        and saving the state): Ganesha wrote its PID into this server's own run directory, and it is taken only
        if that process's command line names this server's configuration and pid file."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return
        if any(p.pid == pid and p.alive() for p in self.state.procs):
            return
        try:
            proc = psutil.Process(pid)
            cmd = proc.cmdline()
        except psutil.Error:
            return
        if proc.name() != "ganesha.nfsd" or str(self.config_file) not in cmd or str(self.pid_file) not in cmd:
            return
        self.state.procs = [p for p in self.state.procs if p.alive()]
        self.state.procs.append(Proc.adopt(pid, "ganesha.nfsd", self.log_file))
        self._journal()

    def stop(self) -> list:
        """Stop Ganesha (one an interrupted `up` left unrecorded too) and remove what it made (see
        :meth:`Server.stop`); then /run/ganesha if Ganesha made it for this testbed and it is empty."""
        self.adopt_unrecorded()
        left = super().stop()
        if self.state.info.get("run_dir_absent") and not self.state.procs:
            try:
                if RUN_DIR.is_dir() and not RUN_DIR.is_symlink():
                    RUN_DIR.rmdir()  # only when empty: anything inside is someone else's
            except OSError:
                pass
            self.state.info["run_dir_absent"] = False
            self._journal()
        return left


__all__ = ["NfsServer"]
