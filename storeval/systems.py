"""Configured systems: bring each combination of a target's system settings about before its cells, undo it after.

The planner (plan.py) puts the cells of one configured system together; the runner calls :meth:`Systems.enter`
before every cell and :meth:`Systems.leave` when a block ends or the run does. A testbed system (``testbed:
KIND`` with ``servers: [1, 2, 4]`` …) is started by storeval's own testbed — in the study's ``testbed:`` directory
when it names one (a system already running there with the same settings is used as it is, and left running),
otherwise in a directory of its own that is removed at the end — and the target's URL and options are the running
server's. Setup and teardown commands (a real cluster's reconfiguration) run through the shell with the settings
filled in (as environment variables the line names: core/system.py's ``command_argv``), each printed before it
runs. Everything done is returned as events (command, exit status, output tail, seconds) for the results.

A block whose setup fails fails each of its cells with that one line; the other blocks still run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from .core.cell import Cell, TargetSpec
from .core.network import describe_link
from .core.system import command_argv, fill, identity, label, system_options
from .degraded import Degraded
from . import interrupts
from .errors import StorevalError, one_line
from .redact import redact_text

COMMAND_TIMEOUT = 3600.0  # seconds a setup or teardown command may take (a reformat of a real file system)
_TAIL = 600  # characters of a failed command's output kept in its event


@dataclasses.dataclass
class _Active:
    key: tuple
    system: dict[str, Any]
    target: TargetSpec  # the first target of the block, as planned
    resolved: dict[str, TargetSpec] = dataclasses.field(default_factory=dict)  # target name -> with its URL
    error: str | None = None
    started: bool = False  # storeval started the testbed system (so it stops it)
    values: dict[str, Any] = dataclasses.field(default_factory=dict)
    setup_done: int = 0  # setup commands that succeeded: their teardown runs even if a later one failed
    state: Degraded | None = None  # the state its settings put the system in (degraded: N, healing)


class Systems:
    def __init__(self, testbed_dir: str | None, *, log: Callable[[str], None],
                 on_pending: Callable[[list[dict[str, Any]]], None]) -> None:
        self.given_dir = testbed_dir  # the study's `testbed:` directory, if any
        self.log = log
        self.on_pending = on_pending  # told the commands that stop what runs now (the watchdog's state)
        self.events: list[dict[str, Any]] = []
        self.environment: dict[str, Any] = {}
        self.active: _Active | None = None
        self._base: str | None = None  # the run's own testbed parent directory, when the study named none
        self._bed: Any = None
        self._started: set[str] = set()  # testbed kinds this run started (and so stops)
        self.net: Any = None  # the testbed network (testbed/network.py) the cells run on, once made
        self._net_key: str | None = None  # the hosts and link settings last applied
        self._net_made = False  # this run made the network (so removes it)

    # -- where testbed systems run -----------------------------------------------------------------------------
    @property
    def testbed_dir(self) -> str | None:
        """The directory whose testbed the fault plan's handles refer to while a testbed system is up."""
        if self.given_dir:
            return self.given_dir
        return str(Path(self._base) / "servers") if self._base else None

    def _testbed(self) -> Any:
        from .testbed import Testbed

        if self._bed is None:
            if self.given_dir:
                self._bed = Testbed(self.given_dir)
            else:
                self._base = self._base or tempfile.mkdtemp(prefix="storeval-systems-")
                self._bed = Testbed(Path(self._base) / "servers", targets_file=Path(self._base) / "storeval-testbed.yaml")
        return self._bed

    def _pending(self) -> None:
        """Tell the watchdog, should this process die, how to undo what runs now: the teardown commands of the
        block being measured, then the testbed systems this run started."""
        items: list[dict[str, Any]] = []
        active = self.active
        if active is not None and active.state is not None and not active.started:
            items += [{"argv": [sys.executable, "-m", "storeval", "testbed", "fault", handle, "start", "--dir",
                                str(self._testbed().dir)], "what": f"started {handle} again", "timeout": 600}
                      for handle in active.state.down]
        if active is not None and active.values:
            for command in active.system.get("teardown", []):
                text = fill(command, active.values)
                items.append({"argv": command_argv(command, active.values), "what": f"ran teardown `{redact_text(text)}`",
                              "timeout": COMMAND_TIMEOUT})
        if self._started:
            where = str(self._testbed().dir)
            items += [{"argv": [sys.executable, "-m", "storeval", "testbed", "down", kind, "--dir", where],
                       "what": f"stopped the {kind} testbed", "timeout": 600} for kind in sorted(self._started)]
        if self._net_made:
            where = str(self._testbed().dir)
            items.append({"argv": [sys.executable, "-m", "storeval", "testbed", "network", "--down", "--dir", where],
                          "what": "removed the emulated network", "timeout": 120})
        if self._base and (self._started or self._net_made):  # the run's own directory, once empty (rmdir)
            items.append({"argv": ["rmdir", self._base], "what": f"removed {self._base}", "timeout": 30})
        self.on_pending(items)

    # -- blocks ------------------------------------------------------------------------------------------------
    def enter(self, cell: Cell) -> Cell:
        """The cell with its target's URL and options once its system is configured (bringing it about if the
        previous cell's was another); StorevalError (one line) if this block's setup failed."""
        system = cell.target.system
        if not system:
            self.leave()
            self._network(cell)
            return cell
        key = identity(system)
        if self.active is None or self.active.key != key:
            self.leave()
            self.active = _Active(key, system, cell.target)
            try:
                self._network(cell)  # its servers may run on an emulated host: the hosts come first
            except StorevalError as e:
                self.active.error = str(e)
            else:
                self._bring_up(self.active, cell.target)
        else:
            self._network(cell)  # the links may change between two cells of one block (a swept rtt)
        active = self.active
        if active.error:
            raise StorevalError(active.error)
        if cell.target.name not in active.resolved:
            try:
                active.resolved[cell.target.name] = self._resolve(active, cell.target)
            except StorevalError as e:
                raise StorevalError(f"{_named(f'target {cell.target.name}', system['settings'])}: {one_line(e)}") from None
        return dataclasses.replace(cell, target=active.resolved[cell.target.name])

    def other(self, target: TargetSpec, cell: Cell, what: str) -> TargetSpec:
        """Another target a cell's workload names (tpc's source), with its URL and options: a plain target as
        it is; one on the cell's own configured system as that system's running server gives it (one line when
        it is on another system, which cannot be up at the same time)."""
        if not target.system:
            return target
        active = self.active
        if active is None or identity(target.system) != active.key:
            raise StorevalError(f"{what} {target.name} runs on another system than target {cell.target.name} "
                                f"({label(target.system.get('settings') or {}) or target.system.get('testbed')}); "
                                "both ends must be on one configured system (e.g. two `use:` of one testbed system)")
        if active.error:
            raise StorevalError(active.error)
        if target.name not in active.resolved:
            try:
                active.resolved[target.name] = self._resolve(active, target)
            except StorevalError as e:
                raise StorevalError(f"{what} {target.name}: {one_line(e)}") from None
        return active.resolved[target.name]

    # -- the state of each cell's system (degraded: N, healing) ------------------------------------------------
    def before_cell(self, driver: Any, where: str) -> list[dict[str, Any]]:
        """Right before a cell's clients start: its system put in the state its settings ask for (healing made
        anew), through the cell's own ``driver``, writing under ``where``; StorevalError (one line) if it cannot."""
        state = self.active.state if self.active is not None else None
        if state is None:
            return []
        try:
            return state.before_cell(driver, where)
        finally:
            self._pending()  # the parts down now: a death starts them again

    def after_cell(self) -> list[dict[str, Any]]:
        """After a cell: what its system said while it ran (never raises)."""
        state = self.active.state if self.active is not None else None
        return state.after_cell() if state is not None else []

    # -- the emulated network ----------------------------------------------------------------------------------
    def _network(self, cell: Cell) -> None:
        """The testbed network at this cell's hosts and link settings (made on first use, links changed in place
        between cells); StorevalError (one line) if it cannot be."""
        if not cell.network:
            return
        hosts = dict(cell.network["hosts"])
        links = cell.network["links"]
        key = json.dumps([hosts, links], sort_keys=True)
        if key == self._net_key and self.net is not None:
            broken = self.net.broken()  # a relay that died since: the path is not what the cell asks for
            if broken:
                raise StorevalError(f"the emulated network: {', '.join(broken)} died; `storeval testbed down --dir "
                                    f"{self._testbed().dir}` and run again")
            return
        from .testbed.base import TestbedError
        from .testbed.network import LinkSettings

        bed = self._testbed()
        settings = {h: LinkSettings(**links[link]) for h, link in hosts.items() if link}
        began = time.monotonic()
        try:
            existed = bed.network() is not None
            if not existed:  # before it is made: a death half-way through is undone too
                self._net_made = True
                self._pending()
            self.net = bed.network_up(hosts, settings, log=self.log)
        except TestbedError as e:
            self._net_key = None
            raise StorevalError(f"the emulated network: {one_line(e)}") from None
        self._net_key = key
        seconds = round(time.monotonic() - began, 3)
        shown = "; ".join(f"{h}: {describe_link(links[link]) if link else 'unshaped'}" for h, link in hosts.items())
        self.events.append({"kind": "network-up" if not existed else "network-set",
                            "message": f"emulated network {'made' if not existed else 'set'} in {seconds:g} s: {shown}",
                            "detail": {"hosts": hosts, "links": links, "seconds": seconds}})
        self.environment["network"] = {"hosts": {h: {"address": self.net.address(h), "link": link}
                                                 for h, link in hosts.items()},
                                       "controller": self.net.controller_addr, "token": self.net.token,
                                       "tcp_congestion_control": self._congestion_control()}

    def _congestion_control(self) -> str | None:
        """The TCP congestion control the emulated hosts use (they inherit this machine's): how TCP answers a
        link's loss depends on it (BBR barely slows on random loss, CUBIC halves its window)."""
        host = next(iter(self.net.hosts), None) if self.net is not None else None
        if host is None:
            return None
        proc = subprocess.run(["ip", "netns", "exec", self.net.netns(host), "sysctl", "-n",
                               "net.ipv4.tcp_congestion_control"], capture_output=True, text=True, timeout=30)
        return (proc.stdout.strip() or None) if proc.returncode == 0 else None

    def _network_down(self) -> None:
        """Remove the emulated network this run made (its servers are stopped first, by ``close``)."""
        if not self._net_made:
            return
        from .testbed.base import TestbedError

        try:
            self._testbed().network_down(log=lambda m: None)
            self.events.append({"kind": "network-down", "message": "emulated network removed"})
        except TestbedError as e:
            message = (f"could not remove the emulated network of {self._testbed().dir}: {one_line(e)}; "
                       f"`storeval testbed down --dir {self._testbed().dir}` removes it")
            self.events.append({"kind": "warning", "message": message})
            self.log(f"warning: {message}")
        self._net_made = False
        self.net = None
        self._net_key = None
        self._pending()

    def _bring_up(self, active: _Active, target: TargetSpec) -> None:
        system = active.system
        what = f"target {target.name} ({label(system['settings'])})" if system["settings"] else f"target {target.name}"
        began = time.monotonic()
        try:
            if system.get("testbed"):
                self._testbed_up(active)
                active.resolved[target.name] = self._resolve(active, target)
                url = active.resolved[target.name].url
                active.state = Degraded.of(system, self.testbed_dir, self.log)
                if active.state is not None:
                    self.events += active.state.enter()
                    self._pending()  # a death from here on starts the parts it killed again
            else:
                url = target.url
            active.values = {**system["settings"], "url": url, "path": _path(url), "target": target.name}
            self._pending()  # a death from here on runs the teardown commands too
            for command in system.get("setup", []):
                self._command("setup", command, active)
                active.setup_done += 1
        except Exception as e:  # noqa: BLE001 - a block that cannot be configured fails its cells, not the run
            active.error = f"{what}: {one_line(e)}"
            self.events.append({"kind": "system-failed", "message": active.error,
                                "detail": {"settings": system["settings"], "target": target.name}})
            self.log(f"warning: {active.error}; its cells fail")
            return
        seconds = round(time.monotonic() - began, 3)
        self.events.append({"kind": "system-up", "message": f"{what} configured in {seconds:g} s",
                            "detail": {"settings": system["settings"], "testbed": system.get("testbed"),
                                       "seconds": seconds, "target": target.name}})

    def _testbed_up(self, active: _Active) -> None:
        from .testbed import server_class
        from .testbed.base import TestbedError

        system = active.system
        kind = system["testbed"]
        bed = self._testbed()
        options = server_class(kind).check_options(system_options(system["settings"]))
        try:
            running = bed.load().get(kind)
            if running is not None and running.alive() and running.state.info.get("options") == options:
                self.log(f"{_named(kind, system['settings'])}: already running in {bed.dir}, used as it is")
            else:
                if running is not None:
                    if not self._ours(kind):
                        raise StorevalError(f"the {kind} testbed in {bed.dir} runs with other settings "
                                            f"({running.state.info.get('options')}); storeval stops only systems it "
                                            "started: `storeval testbed down " + kind + "` first")
                    bed.down([kind], log=lambda m: None)
                self.log(f"{_named(kind, system['settings'])}: starting in {bed.dir}")
                active.started = True
                self._started.add(kind)
                self._pending()  # before it starts: a death half-way through up is cleaned up too
                servers = bed.up([kind], {kind: options}, log=lambda m: None)
                running = servers[kind]
            self.environment[f"system:{kind} {label(system['settings'])}"] = {
                "status": running.status(), "settings": system["settings"], "options": options}
        except TestbedError as e:
            raise StorevalError(one_line(e)) from None

    def _ours(self, kind: str) -> bool:
        return kind in self._started or not self.given_dir

    def _resolve(self, active: _Active, target: TargetSpec) -> TargetSpec:
        """The target with the running system's URL and options (the study's own options on top)."""
        system = active.system
        if not system.get("testbed"):
            return target
        from .spec import make_target

        kind = system["testbed"]
        use = (target.system or system)["use"]  # the target's own pick: targets sharing a system pick apart
        servers = self._testbed().load()
        if kind not in servers:
            raise StorevalError(f"the {kind} testbed is not running in {self._testbed().dir}")
        entry = servers[kind].targets().get(use)
        if entry is None:
            raise StorevalError(f"the {kind} testbed wrote no target {use}")
        made = make_target(target.name, {**entry, **target.options, **({"limits": target.limits} if target.limits else {})},
                           f"target {target.name}")
        return dataclasses.replace(made, system=target.system)

    def _command(self, which: str, command: str, active: _Active) -> None:
        shown = redact_text(fill(command, active.values))
        origin = active.system.get("from")
        self.log(f"{which} of target {active.target.name}{f' (from {origin})' if origin else ''}: running `{shown}`")
        began = time.monotonic()
        try:
            proc = subprocess.run(command_argv(command, active.values), capture_output=True, text=True,
                                  errors="replace", timeout=COMMAND_TIMEOUT, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise StorevalError(f"{which} command `{shown}` did not end within {COMMAND_TIMEOUT:g} s") from None
        except OSError as e:
            raise StorevalError(f"{which} command `{shown}` could not start: {e.strerror or e}") from None
        seconds = round(time.monotonic() - began, 3)
        tail = redact_text((proc.stderr or proc.stdout or "").strip()[-_TAIL:])
        self.events.append({"kind": which, "message": f"{which}: `{shown}` exit {proc.returncode} in {seconds:g} s",
                            "detail": {"command": shown, "exit": proc.returncode, "seconds": seconds,
                                       "output": tail, "settings": active.system["settings"]}})
        if proc.returncode:
            last = tail.splitlines()[-1] if tail else "no output"
            raise StorevalError(f"{which} command `{shown}` failed (exit {proc.returncode}): {last}")

    def leave(self) -> None:
        """Undo the configured system of the block that ended: teardown commands, then the testbed system
        storeval started. Never raises, and a stop signal waits until it is done (a half-undone system would
        stay so): what fails is an event and a warning."""
        with interrupts.deferred():
            self._leave()

    def _leave(self) -> None:
        active = self.active
        if active is None:
            return
        system = active.system
        if active.state is not None:
            self.events += active.state.leave(stopping=active.started)
        ran_setup = active.setup_done or (active.values and not active.error)
        if ran_setup:
            for command in system.get("teardown", []):
                try:
                    self._command("teardown", command, active)
                except Exception as e:  # noqa: BLE001 - the next block and the results come first
                    self.events.append({"kind": "warning", "message": one_line(e)})
                    self.log(f"warning: {one_line(e)}")
        self.active = None
        self._pending()
        if system.get("testbed") and active.started:
            kind = system["testbed"]
            try:
                left = self._testbed().down([kind], log=lambda m: None)
                self._started.discard(kind)
                self._pending()
                self._bed = None  # down removes the testbed directory with its last system: the next up makes it anew
                self._net_key = None  # and the network with it, when nothing else runs there: made again if needed
                if left:
                    self.events.append({"kind": "warning", "message": f"{kind} testbed: left {len(left)} path(s) "
                                        f"in {self._testbed().dir}"})
                self.events.append({"kind": "system-down", "message": f"{_named(kind, system['settings'])} stopped",
                                    "detail": {"settings": system["settings"], "testbed": kind}})
            except Exception as e:  # noqa: BLE001 - the results come first; the testbed says what stays
                message = (f"could not stop the {kind} testbed in {self._testbed().dir}: {one_line(e)}; "
                           f"`storeval testbed down --dir {self._testbed().dir}` stops it")
                self.events.append({"kind": "warning", "message": message})
                self.log(f"warning: {message}")

    def close(self) -> None:
        """End of the run: the last block undone (and any testbed system this run started and still runs), the
        run's own testbed directory removed (when empty)."""
        self.leave()
        with interrupts.deferred():
            for kind in sorted(self._started):
                try:
                    self._testbed().down([kind], log=lambda m: None)
                    self._started.discard(kind)
                except Exception as e:  # noqa: BLE001
                    self.events.append({"kind": "warning", "message": f"could not stop the {kind} testbed in "
                                        f"{self._testbed().dir}: {one_line(e)}"})
            self._network_down()
            self._pending()
        if self._base:
            with contextlib.suppress(OSError):
                os.rmdir(self._base)  # empty once its last system is down; else what stays is named in an event


def _named(what: str, settings: dict[str, Any]) -> str:
    """``what (its settings)``, or ``what`` alone when the system has none."""
    return f"{what} ({label(settings)})" if settings else what


def _path(url: str) -> str:
    from urllib.parse import unquote, urlsplit

    return unquote(urlsplit(url).path) if url else ""
