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

HDFS runs every datanode inside the MiniDFSCluster's one JVM: a datanode is shut down and started again through
the launcher's control port (``kill``/``start``/``restart``), never by a signal; the JVM as a whole (``hdfs``)
takes the signals. A killed JVM cannot ``start`` again with its data (the launcher formats a new namespace).

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

import psutil

from . import Testbed
from .base import Proc, Server, TestbedError, port_open
from .network import Network
from .owned import NotOwned

ACTIONS = ("stop", "cont", "kill", "start", "restart")
SIGNAL_ACTIONS = ("stop", "cont", "kill")
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
    """What a handle acts on: processes of a server (indices of ``state.procs``), or one HDFS datanode."""

    handle: FaultHandle
    server: Server | None  # None: an emulated host (``host``)
    label: str  # for messages: "minio-ec node 2"
    procs: list[int] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)
    datanode: int | None = None  # 1-based
    host: str | None = None  # an emulated host (a whole node: its namespace's processes and its interface)
    node: str | None = None  # a FaultNode of the server (start/restart through Server.start_node)
    why_not: dict[str, str] = field(default_factory=dict)  # action -> why it is not supported


_HDFS_NO_START = ("the launcher formats a new namespace when it starts, so a killed HDFS cannot come back with its "
                  "data: `storeval testbed down hdfs`, then `storeval testbed up hdfs`")
_DATANODE_NO_SIGNAL = "its datanodes run inside one JVM, so one cannot be frozen alone (`hdfs` freezes the whole JVM)"


HOST_ACTIONS = ("stop", "cont", "kill", "start")
_HOST_NO_RESTART = "a crashed node comes back empty: `start` brings its link up, then launch onto it again"


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
        state = server.state
        if not state.procs:
            continue  # stopped: only data a user left is there
        everything = list(range(len(state.procs)))
        restartable = hasattr(server, "respawn")
        whole = ACTIONS if restartable else SIGNAL_ACTIONS
        if kind == "minio-ec":
            nodes = state.info.get("nodes", [])
            ports = [int(n["port"]) for n in nodes]
            add(_Target(FaultHandle(kind, kind, ACTIONS, f"MinIO erasure-coded cluster, all {len(nodes)} nodes "
                                    f"(API ports {', '.join(map(str, ports))})"),
                        server, f"all {len(nodes)} {kind} nodes", everything, ports))
            for i, node in enumerate(nodes, start=1):
                add(_Target(FaultHandle(f"{kind}.node{i}", kind, ACTIONS,
                                        f"MinIO-EC node {i} of {len(nodes)} (API port {node['port']})"),
                            server, f"{kind} node {i}", [int(node["proc"])], [int(node["port"])]))
        elif kind == "minio":
            port = int(state.ports.get("api", 0))
            add(_Target(FaultHandle(kind, kind, whole, f"MinIO server, one process (API port {port})"),
                        server, kind, everything, [port]))
        elif kind == "xrootd":
            port = int(state.ports.get("xrootd", 0))
            add(_Target(FaultHandle(kind, kind, whole, f"XRootD server (port {port})"), server, kind, everything, [port]))
        elif kind == "hdfs":
            dns = [int(p) for p in state.info.get("datanode_ports", [])]
            rpc = int(state.ports.get("rpc", 0))
            add(_Target(FaultHandle(kind, kind, SIGNAL_ACTIONS, f"HDFS MiniDFSCluster JVM: NameNode and {len(dns)} "
                                    f"datanode{'s' if len(dns) != 1 else ''} (RPC port {rpc})"), server, "the HDFS JVM", everything,
                        [int(p) for p in state.ports.values()],
                        why_not={"start": _HDFS_NO_START, "restart": _HDFS_NO_START}))
            for i, port in enumerate(dns, start=1):
                add(_Target(FaultHandle(f"{kind}.datanode{i}", kind, ("kill", "start", "restart"),
                                        f"HDFS datanode {i} of {len(dns)} (transfer port {port}), shut down and "
                                        "started inside the JVM"),
                            server, f"HDFS datanode {i}", [], [port], datanode=i,
                            why_not={"stop": _DATANODE_NO_SIGNAL, "cont": _DATANODE_NO_SIGNAL}))
        else:  # a server kind added later: its processes take signals, and come back if it can respawn
            add(_Target(FaultHandle(kind, kind, whole, f"{kind} testbed server ({len(state.procs)} process"
                                    f"{'es' if len(state.procs) > 1 else ''})"), server, kind, everything,
                        [int(p) for p in state.ports.values()]))
        for node in server.fault_nodes():  # the parts it lets a fault act on alone: bricks, OSDs, data servers
            add(_Target(FaultHandle(f"{kind}.{node.name}", kind, node.actions, node.description), server,
                        f"{kind} {node.name}", list(node.procs), list(node.ports), why_not=dict(node.why_not),
                        node=node.name))
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
    if target.datanode is not None:
        return _datanode(target, action)
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
    elif server.kind == "xrootd":
        server.respawn(timeout=START_WAIT)  # type: ignore[attr-defined]
    else:
        server.respawn(dead, timeout=START_WAIT)  # type: ignore[attr-defined]
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
        while net.host_pids(host) and time.monotonic() < deadline:  # (a process being launched onto it now too)
            for pid in net.host_pids(host):
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


# ------------------------------------------------------------------------------------------------ datanodes
def _datanode(target: _Target, action: str) -> str:
    """kill / start / restart one datanode through the launcher's control port (the JVM keeps running)."""
    from .hdfs import HdfsServer

    server = target.server
    assert isinstance(server, HdfsServer) and target.datanode is not None
    name, label, port = target.handle.name, target.label, target.ports[0]
    jvm = server.state.procs[0]
    condition = jvm.condition()
    if condition == "stopped":
        raise TestbedError(f"{name}: the HDFS JVM (pid {jvm.pid}) is frozen (SIGSTOP), its control port cannot "
                           "answer: `storeval testbed fault hdfs cont` first")
    if condition == "exited":
        raise TestbedError(f"{name}: the HDFS JVM (pid {jvm.pid}) is not running, its datanodes are gone with it: "
                           "`storeval testbed down hdfs`, then `storeval testbed up hdfs`")
    alive = {d["port"]: d["alive"] for d in server.datanodes(timeout=30.0)}
    if port not in alive:
        raise TestbedError(f"{name}: the HDFS launcher knows no datanode with transfer port {port} "
                           f"(it lists {', '.join(map(str, alive))})")
    said = []
    if action in ("kill", "restart"):
        if alive[port]:
            server.stop_datanode(port)
            said.append(f"shut down {label} (transfer port {port}) inside the JVM (pid {jvm.pid})")
        elif action == "kill":
            raise TestbedError(f"{name}: {label} is DOWN already: nothing to kill; "
                               f"`storeval testbed fault {name} start` starts it again")
    if action in ("start", "restart"):
        if action == "start" and alive[port]:
            raise TestbedError(f"{name}: {label} is running: nothing to start (`storeval testbed fault {name} "
                               "restart` shuts it down and starts it again)")
        server.start_datanode(port)
        said.append(f"started {label} again on transfer port {port} with its data (JVM pid {jvm.pid})")
    return "; ".join(said)


__all__ = ["ACTIONS", "FaultHandle", "fault_handles", "act"]
