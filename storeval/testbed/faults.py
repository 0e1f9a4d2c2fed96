"""Fault handles: make one named testbed server (or one node of it) hang, crash or come back, now.

The fault plans of issue 15 name what to hit (``hdfs.datanode1``, ``minio-ec.node2``, ``xrootd``); the scheduler
calls :func:`act` at the planned moment. A handle is the bare kind for a whole server (``minio``, ``minio-ec``,
``xrootd``, ``hdfs``) or ``<kind>.<node>`` for one node, numbered from 1:

* ``stop`` / ``cont`` — SIGSTOP / SIGCONT: a hung server (its ports accept connections, nothing answers).
* ``kill`` — SIGKILL: a crashed server or node. Its data stays.
* ``start`` — a killed one again, on the *same* ports with the *same* data, recorded in the testbed's state (new
  PID and start time, in the old slot) so ``testbed status`` and ``testbed down`` keep working on it.
* ``restart`` — ``kill`` then ``start``.

An emulated host of the testbed's network (``storeval testbed nodes up``, a server's ``--host``) is ``host.<name>``:
a whole node. ``kill`` takes its own interface down (nothing reaches it or leaves it) and SIGKILLs every process in
its network namespace — the ranks and commands launched onto it, a server placed there: a node that crashed;
``stop``/``cont`` freeze and thaw them (a node that stops answering, its link up); ``start`` brings its interface
back up (the node is reachable again, with nothing running on it). Those processes were launched onto the node,
not by the testbed, and the name of the node is the user's word for all of them.

What a server offers is its own word (the fault protocol of :class:`~.base.Server`): ``fault_server()`` the whole
server, ``fault_nodes()`` its parts (their processes, ports, actions and why an action is not offered),
``respawn``/``start_node`` to bring them back; this module knows no kind. A part that is no process of its own
(``FaultNode.inside``: HDFS's datanodes share the MiniDFSCluster's one JVM) is never signalled: the server acts on
it (``act_on_node``), while its whole server takes the signals.

Only PIDs the testbed started and still owns are signalled (:meth:`Proc.process` checks PID *and* start time),
never anything found by name. Signals change nothing in the state and act at once, without the testbed's lock
(a scheduled fault is not delayed); ``start`` and ``restart`` record new processes and hold the lock, waiting
for another command that holds it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from . import Testbed
from .base import FAULT_ACTIONS, SIGNAL_ACTIONS, FaultNode, Proc, Server, TestbedError, port_open
from .network import Network
from .owned import NotOwned

ACTIONS = FAULT_ACTIONS
LOCK_WAIT = 600.0  # seconds a start waits for another testbed command (an `up`, another start) to finish
SIGNAL_WAIT = 30.0  # seconds for a signalled process to be seen stopped or gone (a busy machine)
START_WAIT = 180.0  # seconds for a started process to answer again


@dataclass(frozen=True)
class FaultHandle:
    name: str  # e.g. "hdfs", "hdfs.datanode1", "minio-ec.node2", "minio", "xrootd"
    kind: str  # the testbed server kind it belongs to ("hdfs", "minio-ec", ...)
    actions: tuple[str, ...]  # which ACTIONS this handle supports
    description: str  # one line, e.g. "HDFS datanode 1 of 3 (transfer port 40123)"


@dataclass
class _Target:
    """What a handle acts on: processes of a server (indices of ``state.procs``), a part of a server that is no
    process of its own (``inside``: the server acts on it), or an emulated host."""

    handle: FaultHandle
    server: Server | None  # None: an emulated host (``host``)
    label: str  # for messages: "minio-ec node 2"
    procs: list[int] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)
    host: str | None = None  # an emulated host (a whole node: its namespace's processes and its interface)
    node: str | None = None  # a FaultNode of the server (start/restart through Server.start_node)
    inside: bool = False  # the node is no process of its own: every action through Server.act_on_node
    why_not: dict[str, str] = field(default_factory=dict)  # action -> why it is not supported


HOST_ACTIONS = ("stop", "cont", "kill", "start")
_HOST_NO_RESTART = "a crashed node comes back empty: `start` brings its link up, then launch onto it again"


def _target(kind: str, server: Server, part: FaultNode, node: bool) -> _Target:
    name = f"{kind}.{part.name}" if node else kind
    label = part.label or (f"{kind} {part.name}" if node else kind)
    return _Target(FaultHandle(name, kind, tuple(part.actions), part.description), server, label, list(part.procs),
                   list(part.ports), node=part.name if node else None, inside=part.inside, why_not=dict(part.why_not))


def _targets(servers: dict[str, Server], net: Network | None = None) -> dict[str, _Target]:
    out: dict[str, _Target] = {}

    def add(t: _Target) -> None:
        out[t.handle.name] = t

    for name, info in (net.hosts.items() if net is not None else ()):
        add(_Target(FaultHandle(f"host.{name}", "host", HOST_ACTIONS,
                                f"emulated host {name} ({info.address}): every process in its network namespace and "
                                "its own interface"), None, f"emulated host {name}", host=name,
                    why_not={"restart": _HOST_NO_RESTART}))

    for kind, server in servers.items():
        if not server.state.procs:
            continue  # stopped: only data a user left is there
        add(_target(kind, server, server.fault_server(), node=False))
        for part in server.fault_nodes():  # the parts it lets a fault act on alone: nodes, bricks, OSDs, datanodes
            add(_target(kind, server, part, node=True))
    return out


def _load(bed: Testbed) -> dict[str, Server]:
    try:
        servers = bed.load()
    except NotOwned as e:
        raise TestbedError(str(e)) from None
    if bed.ledger is None:
        raise TestbedError(f"no testbed in {bed.dir}: start one with `storeval testbed up --dir {bed.dir}` "
                           "(or give the --dir of a running one)")
    return servers


def fault_handles(directory: str | Path) -> dict[str, FaultHandle]:
    """Every fault handle of the running testbed in `directory` (read-only; raises TestbedError with one line
    naming the fix when there is no testbed there)."""
    bed = Testbed(directory)
    servers = _load(bed)
    return {name: t.handle for name, t in _targets(servers, bed.loaded_network).items()}


def healing(directory: str | Path, name: str) -> dict[str, Any] | None:
    """What the server that the handle ``name`` belongs to says of its own repair now (``Server.healing``),
    from the testbed's state as it is now (a part started again has new processes); None for an emulated host,
    an unknown handle, or a server that keeps no redundancy."""
    bed = Testbed(directory)
    target = _targets(_load(bed), bed.loaded_network).get(name)
    if target is None or target.server is None:
        return None
    return target.server.healing()


@contextlib.contextmanager
def _locked(bed: Testbed, timeout: float = LOCK_WAIT) -> Iterator[None]:
    """The testbed's own lock (an advisory lock on its directory, as `up` and `down` take it), waited for."""
    try:
        fd = os.open(bed.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise TestbedError(f"{bed.dir}: {e.strerror}") from None
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TestbedError(f"another `storeval testbed` command held {bed.dir} for {timeout:g} s; "
                                       "wait for it, then try again") from None
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)


def _resolve(targets: dict[str, _Target], bed: Testbed, name: str, action: str) -> _Target:
    target = targets.get(name)
    if target is None:
        known = ", ".join(targets) or "none: no testbed server runs there"
        raise TestbedError(f"no fault handle '{name}' in the testbed at {bed.dir} (known: {known})")
    if action not in target.handle.actions:
        why = target.why_not.get(action)
        raise TestbedError(f"{name} does not support '{action}' (supported: {', '.join(target.handle.actions)})"
                           + (f": {why}" if why else ""))
    return target


def act(directory: str | Path, name: str, action: str) -> str:
    """Do `action` to the handle `name` now; return one line saying what was done (e.g. "SIGSTOP to minio-ec
    node 2 (pid 1234)"). Raise TestbedError (one line, names the problem and the fix) for an unknown name
    (listing the known ones), an unsupported action (listing the supported ones), or a failure."""
    bed = Testbed(directory)
    servers = _load(bed)
    target = _resolve(_targets(servers, bed.loaded_network), bed, name, action)
    if target.host is not None:
        return _host(bed.loaded_network, target.host, action)
    if target.inside:
        return target.server.act_on_node(target.node, action)
    if action in SIGNAL_ACTIONS:
        return _signal(target, action)
    with _locked(bed):
        servers = _load(bed)  # the state as it is now, under the lock
        target = _resolve(_targets(servers, bed.loaded_network), bed, name, action)
        said = _signal(target, "kill") if action == "restart" and _alive(target) else None
        started = _start(target, action)
        bed._update_targets(bed._servers, lambda message: None)  # the new PIDs, in the targets file storeval wrote
    return f"{said}; {started}" if said else started


# ------------------------------------------------------------------------------------------------ processes
def _procs(target: _Target) -> list[Proc]:
    return [target.server.state.procs[i] for i in target.procs]


def _alive(target: _Target) -> list[Proc]:
    return [p for p in _procs(target) if p.alive()]


def _pids(procs: list[Proc]) -> str:
    return f"pid{'s' if len(procs) > 1 else ''} {', '.join(str(p.pid) for p in procs)}"


def _send(procs: list[Proc], sig: signal.Signals) -> list[Proc]:
    """Send ``sig`` to each process that is still the one started; return those it reached."""
    sent = []
    for proc in procs:
        p = proc.process()
        if p is None:
            continue
        try:
            p.send_signal(sig)
            sent.append(proc)
        except psutil.NoSuchProcess:
            continue
        except psutil.AccessDenied:
            raise TestbedError(f"{proc.name} (pid {proc.pid}): not allowed to send it {sig.name} "
                               "(run storeval as the user who started the testbed)") from None
    return sent


def _wait(procs: list[Proc], condition: str, what: str) -> None:
    deadline = time.monotonic() + SIGNAL_WAIT
    while any(p.condition() != condition for p in procs):
        if time.monotonic() >= deadline:
            late = [p for p in procs if p.condition() != condition]
            raise TestbedError(f"{', '.join(p.name for p in late)} ({_pids(late)}) not {condition} "
                               f"{SIGNAL_WAIT:g} s after {what}")
        time.sleep(0.02)


def _signal(target: _Target, action: str) -> str:
    name, label = target.handle.name, target.label
    procs = _procs(target)
    conditions = [p.condition() for p in procs]
    if action == "cont":
        frozen = [p for p, c in zip(procs, conditions) if c == "stopped"]
        if not frozen:
            return f"{label} was not stopped: nothing to continue"
        sent = _send(frozen, signal.SIGCONT)
        _wait(sent, "up", "SIGCONT")
        return f"SIGCONT to {label} ({_pids(sent)})"
    start_hint = (f"`storeval testbed fault {name} start` starts it again" if "start" in target.handle.actions
                  else f"`storeval testbed down {target.handle.kind}`, then `storeval testbed up {target.handle.kind}`")
    if all(c == "exited" for c in conditions):
        raise TestbedError(f"{name}: {label} is DOWN (not running): nothing to {action}; {start_hint}")
    if action == "stop":
        running = [p for p, c in zip(procs, conditions) if c == "up"]
        if not running:
            return f"{label} was stopped already (SIGSTOP): nothing to do"
        sent = _send(running, signal.SIGSTOP)
        _wait(sent, "stopped", "SIGSTOP")
        return f"SIGSTOP to {label} ({_pids(sent)})"
    # kill: SIGKILL reaches a stopped process too
    living = [p for p, c in zip(procs, conditions) if c != "exited"]
    sent = _send(living, signal.SIGKILL)
    _wait(sent, "exited", "SIGKILL")
    # a process is seen exited once its first thread is; its sockets close with its last thread: a moment for that
    host = target.server.address
    deadline = time.monotonic() + 5
    while any(port_open(port, host) for port in target.ports) and time.monotonic() < deadline:
        time.sleep(0.05)
    still = [port for port in target.ports if port_open(port, host)]
    ports = f"; port{'s' if len(still) > 1 else ''} {', '.join(map(str, still))} still answer (not its own?)" if still else ""
    return f"SIGKILL to {label} ({_pids(sent)}){ports}"


def _start(target: _Target, action: str) -> str:
    name, label, server = target.handle.name, target.label, target.server
    dead = [i for i in target.procs if not server.state.procs[i].alive()]
    if not dead:
        raise TestbedError(f"{name}: {label} is running: nothing to start (`storeval testbed fault {name} restart` "
                           "kills it and starts it again)")
    if target.node is not None:
        server.start_node(target.node, timeout=START_WAIT)
    else:
        server.respawn(dead, timeout=START_WAIT)
    new = [server.state.procs[i] for i in dead]
    ports = ([target.ports[target.procs.index(i)] for i in dead] if len(target.ports) == len(target.procs)
             else target.ports)
    where = f" on the same port{'s' if len(ports) > 1 else ''} {', '.join(map(str, ports))}" if ports else ""
    return f"started {label} again ({_pids(new)}){where} with its data"


# ------------------------------------------------------------------------------------------------ emulated hosts
def _host(net: Network, host: str, action: str) -> str:
    """A whole emulated node: its processes (everything in its network namespace) and its own interface."""
    if action == "start":
        if net.host_up(host):
            raise TestbedError(f"host.{host}: emulated host {host} is up: nothing to start")
        net.set_host_up(host, True)
        return f"emulated host {host}'s interface is up again (nothing runs on it: launch onto it again)"
    if action == "kill":
        net.set_host_up(host, False)  # first: nothing more leaves it, not even a dying process's last words
    pids = net.host_pids(host)
    sig = {"stop": signal.SIGSTOP, "cont": signal.SIGCONT, "kill": signal.SIGKILL}[action]
    sent = []
    for pid in pids:
        try:
            os.kill(pid, sig)
            sent.append(pid)
        except ProcessLookupError:
            continue
    if action == "kill":
        deadline = time.monotonic() + SIGNAL_WAIT
        left = net.host_pids(host)  # one scan of /proc per turn (a process being launched onto it now too)
        while left and time.monotonic() < deadline:
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)
            left = net.host_pids(host)
        if left:
            raise TestbedError(f"host.{host}: pids {', '.join(map(str, left))} still run on emulated host {host} "
                               f"{SIGNAL_WAIT:g} s after SIGKILL")
        return (f"emulated host {host} crashed: its interface is down and SIGKILL reached its "
                f"{len(sent)} process{'es' if len(sent) != 1 else ''}" + (f" (pids {', '.join(map(str, sent))})" if sent else ""))
    what = "froze" if action == "stop" else "thawed"
    return (f"{sig.name} to emulated host {host}: {what} its {len(sent)} process{'es' if len(sent) != 1 else ''}"
            + (f" (pids {', '.join(map(str, sent))})" if sent else ""))


__all__ = ["ACTIONS", "FaultHandle", "fault_handles", "act", "healing"]
