"""Bring testbed systems up with the settings the command line gave: each setting goes to the systems that take
it, every system's own check refuses the rest in one line, and ``--host`` places them on an emulated host."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from . import Say

DEFAULT_SYSTEMS = ("minio", "xrootd", "hdfs")


@dataclass
class UpRequest:
    kinds: list[str]
    count: int | None = None  # --servers: storage servers of each system
    volume_type: str | None = None  # --type (GlusterFS)
    hdfs_datanodes: int | None = None
    host: str | None = None
    directory: str = "storeval-testbed"
    origin_host: str | None = None  # --origin-host (XCache's origin)
    peer_host: str | None = None  # --peer-host: the second host of a system on two (Server.peer_setting)
    disk_rate: str | None = None  # --disk-rate: the servers' disk emulated at this rate (Server DISK_OPTIONS)
    disk_iops: int | None = None  # --disk-iops


def system_options(request: UpRequest) -> dict[str, dict[str, Any]]:
    """Each named system's checked options (one line naming the system and setting when it does not fit)."""
    from ..spec import host_name
    from ..testbed import SERVERS, server_class

    kinds = request.kinds or list(DEFAULT_SYSTEMS)
    for kind in kinds:
        if kind not in SERVERS:
            why = getattr(SERVERS, "refused", {}).get(kind)  # an installed system that could not be used
            raise InputError(f"testbed up {kind}: " + (f"cannot be used: {why}" if why else
                             f"unknown system (choose from {', '.join(SERVERS)})"))
    host = request.host
    if host is not None:
        host = host_name(host, "testbed up --host")
        placeable = [k for k in SERVERS if server_class(k).host_setting in server_class(k).options_help]
        for kind in kinds:
            if kind not in placeable:
                raise InputError(f"testbed up {kind} --host: {kind} cannot run on an emulated host (those that can: "
                                 f"{', '.join(placeable) or 'none yet'})")
    given = {k: v for k, v in (("servers", request.count), ("type", request.volume_type),
                               ("origin_host", request.origin_host), ("disk_rate", request.disk_rate),
                               ("disk_iops", request.disk_iops)) if v is not None}
    options: dict[str, dict[str, Any]] = {}
    for kind in kinds:
        takes = server_class(kind).options_help
        # each setting goes to the systems that take it (`up minio hdfs --servers 3`: HDFS's datanodes); one
        # that none of them takes is refused by the first one's check
        mine = {k: v for k, v in given.items() if k in takes or len(kinds) == 1
                or not any(k in server_class(other).options_help for other in kinds)}
        if kind == "hdfs" and request.hdfs_datanodes is not None:
            mine["servers"] = request.hdfs_datanodes
        if host is not None:
            mine[server_class(kind).host_setting] = host  # every kind named runs on that host
        if request.peer_host is not None:
            peer = server_class(kind).peer_setting
            if peer is None:
                two = [k for k in SERVERS if server_class(k).peer_setting]
                raise InputError(f"testbed up {kind} --peer-host: {kind} does not run on two hosts (those that do: "
                                 f"{', '.join(two)})")
            mine[peer] = host_name(request.peer_host, "testbed up --peer-host")
        options[kind] = server_class(kind).check_options(mine)
    return options


def testbed_up(request: UpRequest, say: Say) -> Any:
    """Install (first time) and start the systems; the testbed (its ``targets_record``/``targets_file`` say
    where the targets were written)."""
    from ..testbed import Testbed

    options = system_options(request)
    bed = Testbed(request.directory)
    bed.up(list(options), options, log=say.info)
    return bed


def link_settings(values: dict[str, str | None], command: str, where: str, base: Any = None) -> Any:
    """A link's settings from the command line's texts (``rate``, ``rtt``, ``jitter``, ``loss``; None: as
    ``base``), read and checked as a study's ``network: links:`` values are."""
    from ..spec import link_value
    from ..testbed import TestbedError
    from ..testbed.network import LinkSettings

    settings = base if base is not None else LinkSettings()
    for key, text in values.items():
        if text is not None:
            setattr(settings, key, link_value(key, text, f"{command} --{key}"))
    try:
        settings.check(where)
    except TestbedError as e:
        raise InputError(str(e)) from None
    return settings


def set_link(host: str, values: dict[str, str | None], directory: str, say: Say) -> tuple[Any, str, Any]:
    """Change one emulated host's link now (made with a link if absent); (network, host, its settings)."""
    from ..spec import host_name
    from ..testbed import Testbed
    from ..testbed.network import LinkSettings

    host = host_name(host, "testbed link HOST")
    bed = Testbed(directory)
    net = bed.network()
    now = net.link_settings(host) if net is not None and host in net.hosts else LinkSettings()
    settings = link_settings(values, "testbed link", f"testbed link {host}", now)
    return bed.set_link(host, settings, log=say.info), host, settings


def nodes_up(count: int, prefix: str, values: dict[str, str | None], directory: str, say: Say) -> tuple[Any, list[str]]:
    """N emulated nodes PREFIX1 … PREFIXN (kept if they exist), each with the link ``values`` describe (none:
    on the bridge); (network, their names)."""
    import re

    from ..spec import host_name
    from ..testbed import Testbed
    from ..testbed.network import LinkSettings

    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9-]{0,40}", prefix):
        raise InputError(f"testbed nodes up --prefix: {prefix!r} cannot begin a host name (a letter, then letters, "
                         "digits or '-'; e.g. node)")
    names = [host_name(f"{prefix}{i}", "testbed nodes up --prefix") for i in range(1, count + 1)]
    settings = link_settings(values, "testbed nodes up", "testbed nodes up")
    linked = settings != LinkSettings()
    net = Testbed(directory).network_up({n: (prefix if linked else None) for n in names},
                                        {prefix: settings} if linked else {}, log=say.info)
    return net, names


def mpiexec_command(directory: str, args: list[str]) -> list[str]:
    """The command line of mpiexec onto the testbed's emulated nodes (its wrapper, which launches into each
    node's namespace under its host name)."""
    from ..testbed import Testbed

    net = Testbed(directory).network()
    if net is None:
        raise InputError(f"no emulated network in {directory} (`storeval testbed nodes up N --dir {directory}` "
                         "makes nodes)")
    if not args:
        raise InputError("testbed mpiexec: give mpiexec's arguments, e.g. -hosts node1,node2 -n 4 storeval run STUDY")
    return [net.mpiexec, *args]


def slurm_command(directory: str, args: list[str], environ: dict[str, str], here: str) -> tuple[list[str], dict]:
    """A command against the testbed's Slurm, and its environment: the Slurm's own settings, and ``here`` (this
    storeval's bin directory, with its mpiexec) first on the PATH."""
    from ..testbed import Testbed

    slurm = Testbed(directory).load().get("slurm")
    if slurm is None or not slurm.state.procs or "network" not in slurm.state.info:
        raise InputError(f"no Slurm in {directory} (`storeval testbed up slurm --servers N --dir {directory}` "
                         "starts one)")
    if not args:
        raise InputError("testbed slurm: give the command, e.g. salloc -N 2 mpiexec -n 4 storeval run STUDY")
    env = {**environ, **slurm.environment()}
    env["PATH"] = f"{here}:{env.get('PATH', '')}"
    return args, env


# -- the testbed as data: `--json` of testbed status, faults and network ---------------------------------------


def status_document(directory: str) -> dict:
    """Every testbed server as it is now: its state and what to do, its processes and ports, its targets; and the
    emulated network's hosts (``storeval testbed status --json``)."""
    from ..testbed import Testbed

    bed = Testbed(directory)
    servers = []
    for s in bed.load().values():
        word, todo = s.health()
        servers.append({"kind": s.kind, "state": word, "to_do": todo,
                        "processes": [{"pid": p.pid, "condition": p.condition()} for p in s.state.procs],
                        "ports": dict(s.state.ports), "targets": s.targets() if s.state.procs else {}})
    net = bed.network()
    return {"directory": str(bed.dir), "servers": servers, "network": _network(net) if net is not None else None}


def faults_document(directory: str) -> dict:
    """The fault handles of the running servers and nodes, with their actions (``testbed faults --json``)."""
    from ..testbed.faults import fault_handles

    return {"handles": [{"name": h.name, "kind": h.kind, "actions": list(h.actions), "description": h.description}
                        for h in fault_handles(directory).values()]}


def network_document(directory: str) -> dict:
    """The emulated network: hosts, addresses, links and their counters (``testbed network --json``)."""
    from ..testbed import Testbed

    net = Testbed(directory).network()
    return {"network": _network(net, counters=True) if net is not None else None}


def _network(net: Any, counters: bool = False) -> dict:
    out: dict[str, Any] = {"subnet": str(net.subnet), "hosts": [
        {"name": h.name, "address": h.address, "netns": h.netns, "link": h.link,
         "settings": net.link_settings(h.name).to_json() if h.link else None} for h in net.hosts.values()]}
    if counters:
        out["counters"] = net.counters()
    return out
