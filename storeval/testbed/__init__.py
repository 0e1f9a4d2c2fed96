"""`storeval testbed`: real MinIO, XRootD and HDFS servers on 127.0.0.1, for tests, demos and trials.

``Testbed(directory).up(["minio", "xrootd", "hdfs"])`` installs what is missing, starts each server with
its data under ``directory/<kind>``, waits until it answers, saves the processes in ``directory/state.json``
and writes ``storeval-testbed.yaml`` with a ready target per server. ``down()`` stops exactly those
processes and removes their data. Tests use the same class through pytest fixtures.

The testbed deletes only what it made. ``directory`` must be new, empty, or a testbed directory already
(its state names it, and its marker holds the state's token); every directory and file made in it is
recorded in a ledger (:mod:`.owned`) the moment it exists, so even an interrupted ``up`` leaves a state
that ``down`` can act on. ``storeval-testbed.yaml`` is replaced or removed only while it is still the file
storeval wrote (device, inode and SHA-256 in the state). What ``down`` cannot prove is its own (a user's
file inside a server's directory) stays, with the directories leading to it, and is named in one line;
the state keeps the rest recorded so that ``down`` again finishes once it is moved away.

The testbed may also hold an emulated network (:mod:`.network`: hosts as network namespaces on a bridge, links
with rate, delay and loss), recorded in the state as ``"network"`` before anything of it is made. A server whose
options carry ``host`` runs on that emulated host (made, without a link, if absent) through ``Server.place``.
The network goes with the last server (``down`` of every kind, or of the last one running), with
``network_down``, and after a killed ``up`` with the next ``down``, from what the state recorded.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from ..plugins import Plugin, PluginError, Registry
from .base import Server, ServerState, TestbedError, save_json, use_registry
from .netns import Taken
from .network import LinkSettings, Network
from .owned import FOREIGN, Ledger, Left, NotOwned, describe

# storeval's own systems in the order every list names them (the entry points' metadata is sorted by name);
# tests/test_registry.py holds it equal to the storeval.testbed entry points of pyproject.toml
LISTED = ("minio", "minio-ec", "xrootd", "xcache", "xrootd-tpc", "hdfs", "glusterfs", "ceph", "nfs", "slurm")


def _check_server(cls: object, plugin: Plugin) -> None:
    if not (isinstance(cls, type) and issubclass(cls, Server)):
        raise PluginError(f"testbed system '{plugin.name}' of package {plugin.package} is not a "
                          "storeval.testbed.base.Server subclass; it is left out")


# kind -> Server class: storeval's own and every installed package's, through the storeval.testbed entry points
# only (storeval/plugins.py), imported on first use; one that fails to load is left out with one warning line
SERVERS: Registry = Registry("testbed", _check_server, first=LISTED, warn_refused=True)
use_registry(lambda: SERVERS.values())  # base.placeable_kinds reads the classes through this

DEFAULT_DIR = "storeval-testbed"
TARGETS_FILE = "storeval-testbed.yaml"
STATE_FILE = "state.json"
STATE_FORMAT = "storeval-testbed/2"
STATE_RULE = "testbed-state"  # ledger rule of the testbed directory: its state file and that file's temporaries
_STATE_NAMES = re.compile(rf"{re.escape(STATE_FILE)}|\.{re.escape(STATE_FILE)}\.[0-9a-f]{{12}}\.tmp")
_MAX_STATE = 64 << 20
_TARGETS_HEADER = "# Written by `storeval testbed up`:"


def _settings(options: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(options.items())) or "its default settings"


def server_class(kind: str) -> type[Server]:
    if kind not in SERVERS:
        why = SERVERS.refused.get(kind)
        raise TestbedError(f"testbed system '{kind}' cannot be used: {why}" if why else
                           f"unknown testbed server '{kind}' (known: {', '.join(SERVERS)})")
    return SERVERS[kind]


def _claims_state(rule: str, parts: tuple[str, ...], st: os.stat_result) -> bool:
    return rule == STATE_RULE and len(parts) == 1 and stat.S_ISREG(st.st_mode) and bool(_STATE_NAMES.fullmatch(parts[0]))


class Testbed:
    __test__ = False  # not a pytest test class

    def __init__(self, directory: str | Path = DEFAULT_DIR, targets_file: str | Path | None = None) -> None:
        self._given_targets = Path(os.path.normpath(Path(targets_file).absolute())) if targets_file else None
        self._at(Path(os.path.normpath(Path(directory).absolute())))
        self.ledger: Ledger | None = None  # the testbed directory's own ledger, once loaded or made
        self.targets_record: dict[str, Any] | None = None  # what storeval wrote as the targets file
        self._servers: dict[str, Server] = {}
        self._net: Network | None = None  # the emulated hosts and links, once planned (state "network")

    def _at(self, directory: Path) -> None:
        self.dir = directory
        self.targets_file = self._given_targets or self.dir.parent / TARGETS_FILE
        self.state_file = self.dir / STATE_FILE

    # -- state ------------------------------------------------------------------------------------
    def _refuse(self, why: str) -> NotOwned:
        return NotOwned(f"{self.dir} is not a storeval testbed directory ({why}): nothing was stopped, started or "
                        "removed; choose another --dir")

    def _read_state(self) -> dict[str, Any] | None:
        """The state file's content; None when there is no testbed here. Raises NotOwned when the directory
        or the state file is not a storeval testbed's (or the state was copied from elsewhere or damaged)."""
        try:
            st = os.lstat(self.dir)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(st.st_mode):
            raise self._refuse("it is a symbolic link; give the directory it points to")
        if not stat.S_ISDIR(st.st_mode):
            raise self._refuse("it is a file")
        try:
            fd = os.open(self.state_file, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise self._refuse(f"{self.state_file.name} is a symbolic link" if e.errno == errno.ELOOP else
                               f"{self.state_file.name}: {e.strerror}") from None
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise self._refuse(f"{self.state_file.name} is not a file")
            raw = f.read(_MAX_STATE + 1)
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):
            data = None
        if not isinstance(data, dict) or data.get("format") != STATE_FORMAT:
            raise self._refuse(f"{self.state_file.name} was not written by storeval testbed, or is damaged")
        ledger = Ledger.from_json(data.get("testbed"))
        if not ledger.anchors:
            raise self._refuse(f"{self.state_file.name} is damaged")
        recorded = ledger.anchors[0]["path"]
        if recorded != str(self.dir) and os.path.exists(recorded) and os.path.samefile(recorded, self.dir):
            self._at(Path(recorded))  # the same directory reached through another path (a link above it)
        if recorded != str(self.dir):
            raise self._refuse(f"{self.state_file.name} was made for {ledger.anchors[0]['path']}: moved, copied or "
                               "edited; move the directory back there")
        why = ledger.check_anchor(0)
        if why:
            raise self._refuse(why)
        if not isinstance(data.get("servers", {}), dict):
            raise self._refuse(f"{self.state_file.name} is damaged")
        self._net = None
        if data.get("network") is not None:
            try:
                self._net = Network.from_json(data["network"])
            except TestbedError:
                raise self._refuse(f"{self.state_file.name}: the record of the network is damaged") from None
            self._net.on_change = self._journal
        self.ledger = ledger
        self.targets_record = data.get("targets_file") if isinstance(data.get("targets_file"), dict) else None
        return data

    def load(self) -> dict[str, Server]:
        """The servers this testbed directory's state records (empty if there is no testbed here)."""
        data = self._read_state()
        if data is None:
            return {}
        out = {}
        for kind, st in data.get("servers", {}).items():
            if kind not in SERVERS:
                raise self._refuse(f"{self.state_file.name} names an unknown server '{kind}' (edited?)")
            try:
                state = ServerState.from_json(st)
            except (KeyError, TypeError, AttributeError):
                raise self._refuse(f"{self.state_file.name}: the record of {kind} is damaged") from None
            if os.path.normpath(state.root) != str(self.dir / kind) or state.kind != kind:
                raise self._refuse(f"{self.state_file.name} puts {kind} outside {self.dir} (edited?)")
            server = server_class(kind)(self.dir / kind, state.info.get("options", {}), state)
            server.on_change = self._journal
            out[kind] = server
        self._servers = out
        return out

    def _save(self, servers: dict[str, Server]) -> None:
        assert self.ledger is not None
        save_json(self.state_file, {"format": STATE_FORMAT, "testbed": self.ledger.to_json(),
                                    "targets_file": self.targets_record,
                                    "servers": {k: s.state.to_json() for k, s in servers.items()},
                                    "network": self._net.to_json() if self._net is not None else None})

    def _journal(self) -> None:
        """Save the state now: called whenever a server recorded a new directory, file or process."""
        if self.ledger is not None and self.ledger.anchors:
            self._save(self._servers)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[bool]:
        """One `up` or `down` at a time per testbed directory (an advisory lock on the directory itself);
        yields whether the lock is held (False while the directory does not exist yet)."""
        try:
            fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:  # not there yet (or refused later with a reason)
            yield False
            return
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise TestbedError(f"another `storeval testbed` command is working on {self.dir}; wait for it") from None
            yield True
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def _anchored(self) -> Iterator[None]:
        """Locked, with the state loaded and the directory made (and locked once it exists)."""
        with contextlib.ExitStack() as stack:
            locked = stack.enter_context(self._locked())
            self._servers = self.load()
            self._anchor()
            if not locked:
                stack.enter_context(self._locked())
            yield

    def targets(self, servers: dict[str, Server] | None = None) -> dict[str, dict[str, Any]]:
        servers = self.load() if servers is None else servers
        out: dict[str, dict[str, Any]] = {}
        for server in servers.values():
            out.update(server.targets())
        return out

    # -- the targets file: replaced or removed only while it is what storeval wrote ------------------------
    def _targets_foreign(self) -> str | None:
        """None if the targets file is absent or still byte for byte the one storeval wrote; else why not."""
        try:
            fd = os.open(self.targets_file, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as e:
            return "it is a symbolic link" if e.errno == errno.ELOOP else e.strerror or str(e)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            rec = self.targets_record
            if not (rec and rec.get("path") == str(self.targets_file) and stat.S_ISREG(st.st_mode)
                    and [st.st_dev, st.st_ino] == [rec.get("dev"), rec.get("ino")]):
                head = f.read(len(_TARGETS_HEADER))
                return ("another testbed wrote it" if head == _TARGETS_HEADER.encode() and stat.S_ISREG(st.st_mode)
                        else "storeval did not write it")
            if st.st_size > _MAX_STATE or hashlib.sha256(f.read()).hexdigest() != rec.get("sha256"):
                return "changed since storeval wrote it"
        return None

    def _update_targets(self, servers: dict[str, Server], log) -> Left | None:
        """Rewrite the targets file for the servers that run, or remove it when none does — only while it is
        the file storeval wrote. A file storeval did not write, or one changed since, stays as it is (once
        changed it is no longer storeval's: forgotten). Returns what stayed, if anything."""
        running = {k: s for k, s in servers.items() if s.state.procs and s.targets()}  # storage: a batch system has none
        why = self._targets_foreign()
        if why:
            if self.targets_record is None and not running:
                return None  # not ours, and nothing to say in it
            self.targets_record = None
            self._save(servers)
            log(f"left {self.targets_file} as it is ({why})")
            return Left(str(self.targets_file), why)
        if not running:
            with contextlib.suppress(FileNotFoundError):
                if self.targets_record is not None:
                    os.unlink(self.targets_file)
            self.targets_record = None
            self._save(servers)
            return None
        header = (f"{_TARGETS_HEADER} one target per running testbed server.\n"
                  "# `storeval run storeval-testbed.yaml --workload bandwidth` measures them;"
                  " `storeval testbed down` stops them.\n")
        body = yaml.safe_dump({"targets": self.targets(running)}, sort_keys=False, default_flow_style=False)
        data = (header + body).encode()
        tmp = self.targets_file.with_name(f".{self.targets_file.name}.{secrets.token_hex(6)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                st = os.fstat(f.fileno())
            os.replace(tmp, self.targets_file)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        self.targets_record = {"path": str(self.targets_file), "dev": st.st_dev, "ino": st.st_ino,
                               "sha256": hashlib.sha256(data).hexdigest()}
        self._save(servers)
        return None

    # -- commands ---------------------------------------------------------------------------------------
    def up(self, kinds: list[str], options: dict[str, dict[str, Any]] | None = None, *, log=print) -> dict[str, Server]:
        """Start the servers of ``kinds`` that are not running yet; return every running server."""
        options = options or {}
        for kind in kinds:
            server_class(kind)  # unknown kinds fail before anything starts
        with contextlib.ExitStack() as stack:
            locked = stack.enter_context(self._locked())
            servers = self.load()
            why = self._targets_foreign()
            if why:
                raise NotOwned(f"{self.targets_file} exists and {why}: storeval replaces only its own targets file; "
                               "move it away (or choose another --dir)")
            self._anchor()
            if not locked:
                stack.enter_context(self._locked())
            return self._up(servers, kinds, options, log)

    def _anchor(self) -> None:
        """The testbed directory's ledger: made (the directory new or empty) when there is no testbed here yet."""
        if self.ledger is None:
            self.ledger = Ledger()
            self.ledger.on_change = self._journal
            self.ledger.anchor(self.dir, rule=STATE_RULE, intent_first=False)  # the state file lives inside
        self.ledger.on_change = self._journal

    def _up(self, servers: dict[str, Server], kinds: list[str], options: dict[str, dict[str, Any]], log) -> dict[str, Server]:
        self._servers = servers
        try:
            for kind in kinds:
                if kind in servers:
                    word, todo = servers[kind].health()
                    had = servers[kind].state.info.get("options", {})
                    if word == "running" and options.get(kind) and options[kind] != had:
                        raise TestbedError(f"{kind}: already running with {_settings(had)}, not "
                                           f"{_settings(options[kind])}: `storeval testbed down {kind}` first")
                    if word == "running":
                        log(f"{kind}: already running")
                        continue
                    if word in ("FROZEN", "NOT ANSWERING"):
                        raise TestbedError(f"{kind}: started earlier but {word.lower()}: {todo}, or "
                                           f"`storeval testbed down {kind}` and up again")
                    left = servers[kind].stop()  # a dead one from an earlier session: clean it away first
                    self._save(servers)
                    if left:
                        raise NotOwned(f"{kind}: cannot start afresh, storeval left {describe(left)}; move them "
                                       f"away, then `storeval testbed up {kind}` again")
                    del servers[kind]
                    self._save(servers)
                host = options.get(kind, {}).get("host")
                place = getattr(server_class(kind), "place", None)
                if host is not None and place is None:
                    raise TestbedError(f"{kind}: cannot run on an emulated host (--host) yet; start it without one")
                if host is not None:
                    self._network_up({host: None}, {}, log, keep_links=True)
                hosts = server_class(kind).hosts_needed(options.get(kind, {}))  # a system of several hosts (slurm)
                if hosts:
                    self._network_up({h: None for h in hosts}, {}, log, keep_links=True)
                server = server_class(kind)(self.dir / kind, options.get(kind, {}))
                server.on_change = self._journal
                server.state.info["options"] = options.get(kind, {})
                servers[kind] = server  # from here on its ledger and processes are saved as they grow
                try:
                    log(f"{kind}: installing (first use can take minutes)…")
                    server.install()
                    if hosts:
                        server.use_network(self._net)
                    if host is not None:
                        assert self._net is not None
                        server.place(self._net.netns(host), self._net.address(host))
                        log(f"{kind}: on emulated host {host} ({self._net.address(host)})")
                    log(f"{kind}: starting")
                    server.start()
                    self._save(servers)
                    server.wait_ready()
                except BaseException:
                    if not server.state.procs and not server.ledger and not server.has_cgroups:
                        del servers[kind]  # it made nothing: nothing to remember
                    raise
                self._save(servers)
                log(server.status())
        finally:
            self._save(servers)
            self._update_targets(servers, log)
        return servers

    def down(self, kinds: list[str] | None = None, *, log=print) -> list[Left]:
        """Stop the servers (all, or ``kinds``) and remove what they made; return what was left and why."""
        with self._locked():
            servers = self.load()
            if self.ledger is None:
                log(f"no testbed in {self.dir}: nothing to stop or remove")
                return []
            self.ledger.on_change = self._journal
            left_all: list[Left] = []
            for kind in kinds or []:
                if kind not in servers:
                    log(f"{kind}: not in this testbed")
            for kind in list(servers):
                if kinds and kind not in kinds:
                    continue
                server = servers[kind]
                word, _ = server.health()
                left = server.stop()
                done = {"running": "stopped", "stopped": "nothing was running",
                        "DOWN": "its processes had exited"}.get(word, f"stopped (it was {word.lower()})")
                if left:
                    left_all += left
                    log(f"{kind}: {done}; left {describe(left)}: they stay, with the directories holding them "
                        "(move them away, then `storeval testbed down` again)")
                else:
                    del servers[kind]
                    log(f"{kind}: {done}, data removed")
                self._save(servers)
            stayed = self._update_targets(servers, log)
            left_all += [stayed] if stayed else []
            if self._net is not None and (not kinds or not any(s.state.procs for s in servers.values())):
                self._network_down(log)  # the last server (or everything) goes: the emulated network with it
            return self._finish(servers, left_all, log)

    def _finish(self, servers: dict[str, Server], left_all: list[Left], log) -> list[Left]:
        """With no server and no network left: the state, the marker and the directory itself."""
        assert self.ledger is not None
        if servers or self._net is not None:
            return left_all
        inside = self.ledger.remove(_claims_state, dry_run=True)
        if inside:
            left_all += inside
            log(f"left {describe(inside)}: {self.dir} stays with them and its state "
                "(move them away, then `storeval testbed down` again)")
            return left_all
        left_all += self.ledger.remove(_claims_state)
        return left_all

    # -- the emulated network ------------------------------------------------------------------------------
    def network(self) -> Network | None:
        """The emulated network this testbed directory records now (None: none)."""
        self.load()
        return self._net

    @property
    def loaded_network(self) -> Network | None:
        """The emulated network as the last :meth:`load` read it, without reading the state again (which would
        make new server objects and lose what was done with the loaded ones)."""
        return self._net

    def network_down(self, *, log=print) -> list[Left]:
        """Remove the emulated network (its servers keep running where they are, if any: stop them first); with
        no server left, the testbed directory goes too. TestbedError names what stays."""
        with self._locked():
            servers = self.load()
            if self.ledger is None:
                log(f"no emulated network in {self.dir}: nothing to remove")
                return []
            if self._net is None:  # none (or one whose making was refused): the directory goes if nothing is left
                log(f"no emulated network in {self.dir}: nothing to remove")
                self.ledger.on_change = self._journal
                return self._finish(servers, [], log)
            self.ledger.on_change = self._journal
            placed = sorted(k for k, s in servers.items() if s.state.procs and s.state.info.get("placement"))
            if placed:
                raise TestbedError(f"{', '.join(placed)} run on the emulated network: `storeval testbed down "
                                   f"{' '.join(placed)}` first")
            self._network_down(log)
            return self._finish(servers, [], log)

    def network_up(self, hosts: dict[str, str | None], links: dict[str, LinkSettings] | None = None, *,
                   log=print) -> Network:
        """The emulated network with ``hosts`` (host -> link name or None) in it: planned (and recorded) then made,
        or grown by the hosts it lacks; each host's link then gets its settings from ``links`` (name ->
        settings, or host -> settings). A host that exists with another link is refused in one line."""
        with self._anchored():
            return self._network_up(hosts, links or {}, log)

    def _network_up(self, hosts: dict[str, str | None], links: dict[str, LinkSettings], log,
                    keep_links: bool = False) -> Network:
        for name, link in hosts.items():
            if link is not None and link not in links and name not in links and not keep_links:
                raise TestbedError(f"emulated host {name}: link '{link}' has no settings (links: "
                                   f"{', '.join(links) or 'none'})")
        for name, setting in links.items():
            setting.check(f"link {name}")
        net = self._net
        if net is not None:
            for name, link in hosts.items():
                had = net.hosts.get(name)
                if had is not None and had.link != link and not (keep_links and link is None):
                    raise TestbedError(f"emulated host {name} exists with link {had.link or 'none'}, not "
                                       f"{link or 'none'}: `storeval testbed down` first")
            missing = {k: v for k, v in hosts.items() if k not in net.hosts}
            if missing:
                log(f"network: adding hosts {', '.join(missing)}")
                net.add_hosts(missing)
        else:
            for _ in range(8):
                net = Network.plan(hosts)
                net.on_change = self._journal
                self._net = net
                self._journal()  # recorded before anything is made
                try:
                    log(f"network: making {net.subnet} with hosts {', '.join(hosts) or 'none'}")
                    net.create()
                    break
                except Taken:
                    self._net = None  # someone else's names: nothing was made; plan again
                    self._journal()
            else:
                raise TestbedError("no free names for the emulated network after 8 tries; try again")
        assert self._net is not None
        for name, link in hosts.items():
            setting = links.get(link, links.get(name)) if link is not None else None  # by link name, or by host
            if setting is not None:
                self._net.set_link(name, setting)
        self._journal()
        return self._net

    def set_link(self, host: str, settings: LinkSettings, *, log=print) -> Network:
        """Change the link of emulated host ``host`` now (the host, and the network, made with a link if absent)."""
        settings.check(f"link of {host}")
        with self._anchored():
            net = self._net
            if net is None or host not in net.hosts:
                net = self._network_up({host: host}, {host: settings}, log)
            else:
                net.set_link(host, settings)
            self._journal()
            return net

    def _network_down(self, log) -> None:
        """Remove the emulated network (recorded until it is gone; TestbedError naming what stays)."""
        assert self._net is not None
        self._net.remove()
        log(f"network {self._net.subnet}: removed (hosts {', '.join(self._net.hosts) or 'none'})")
        self._net = None
        self._journal()

    def status(self) -> list[str]:
        """One line per server saying what is true now; then anything left that is not storeval's."""
        servers = self.load()
        lines = self._net.status() if self._net is not None else []
        for s in servers.values():
            left = s.ledger.remove(s.claims, dry_run=True) if not s.state.procs else []
            lines.append(f"{s.kind}: stopped; left {describe(left)}: move them away, then `storeval testbed down` "
                         "removes the rest" if left else s.status())
        if self.ledger is not None and not servers:
            left = [x for x in self.ledger.remove(_claims_state, dry_run=True) if x.why == FOREIGN]
            if left:
                lines.append(f"no testbed servers running here; left {describe(left)}")
        return lines


__all__ = ["Testbed", "Server", "TestbedError", "NotOwned", "SERVERS", "server_class"]
