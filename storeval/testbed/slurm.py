"""A real batch system for the emulated nodes: Slurm from Debian (slurmctld, one slurmd per node, munge).

Sites run storeval from their batch system across their worker nodes; here the worker nodes are emulated hosts
(:mod:`.network`, :mod:`.mpilaunch`): ``storeval testbed up slurm --servers N`` makes the hosts ``slurmctl`` and
``node1`` … ``nodeN`` if they are missing, and starts

* ``munged`` with a key of its own (a UNIX socket: every namespace reaches it, no port);
* ``slurmctld`` on ``slurmctl``, and ``slurmd -N nodeI`` on each node — each in its host's network namespace
  and in a UTS namespace of its own named after the host, so a job's tasks see their node's host name, address
  and link, as on a cluster. ``nsenter --net`` (not ``ip netns exec``, which mounts a fresh ``/sys`` without the
  cgroup file systems slurmd reads at start) then ``unshare --uts``: both exec, so the PID recorded is the
  daemon's own.

The configuration keeps Slurm to itself: its ``slurm.conf`` under the root (``SLURM_CONF`` names it), state,
pid and log files under the root, munge's socket and the spools (job steps' sockets) in a short directory of their
own (:attr:`SlurmServer.sockets_home`), ``proctrack/linuxproc`` and ``task/none`` (no cgroups are made),
no accounting, one partition ``storeval`` holding every node, ``OverSubscribe``. Nothing listens outside the
emulated network. A command from this machine's own namespace reaches slurmctld and the slurmds through the
controller's veth; ``SLURM_SRUN_COMM_HOST`` (the controller's address) tells the nodes where ``srun`` listens,
and ``HYDRA_IFACE`` tells MPICH's ``mpiexec`` (under ``salloc`` it launches with ``srun``) which address its
proxies call back (``eth0`` in a batch script, which runs on a node). ``storeval testbed slurm CMD…`` runs a
command with those set:
``storeval testbed slurm salloc -N 2 mpiexec -n 4 storeval run STUDY``.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

from .base import Server, TestbedError, TestbedOptionError, apt_install, free_port
from .mpilaunch import OVERSUBSCRIBED

PACKAGES = ("slurmd", "slurmctld", "slurm-client", "munge")
CONTROLLER_HOST = "slurmctl"
MUNGE, STATE, SPOOL, LOGS = "slurm-munge", "slurm-state", "slurm-spool", "slurm-logs"  # ledger rules (claims)
MAX_NODES = 16
KILL_WAIT = 30  # seconds between a job's SIGTERM and SIGKILL: storeval's ranks store what they measured first


def node_names(count: int) -> list[str]:
    return [f"node{i}" for i in range(1, count + 1)]


class SlurmServer(Server):
    kind = "slurm"
    summary = "Slurm 22 (slurmctld, a slurmd per emulated node, munge): salloc/srun/sbatch onto the emulated nodes"
    stores_data = False  # a batch system beside the storage: no disk of its own to limit
    options_help = {"servers": f"slurmd nodes, node1 … nodeN (1-{MAX_NODES}; default 2): emulated hosts, made if "
                               "missing"}

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        out = super().check_options(options)
        n = out.get("servers", 2)
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_NODES:
            raise TestbedOptionError(f"testbed slurm: servers (nodes) must be 1 to {MAX_NODES}, not {n!r}")
        out["servers"] = n
        return out

    @classmethod
    def hosts_needed(cls, options: dict[str, Any]) -> list[str]:
        """The emulated hosts it runs on: the controller's and the nodes (made before :meth:`start`)."""
        return [CONTROLLER_HOST, *node_names(cls.check_options(options)["servers"])]

    def use_network(self, net) -> None:
        """Where its hosts are: their namespaces and addresses, and the controller's end of the network."""
        hosts = {name: {"netns": net.netns(name), "address": net.address(name)}
                 for name in self.hosts_needed(self.options)}
        self.state.info["network"] = {"hosts": hosts, "controller_if": net.controller_if,
                                      "controller_addr": net.controller_addr}
        self._journal()

    @property
    def nodes(self) -> list[str]:
        return node_names(self.check_options(dict(self.options))["servers"])

    # -- paths ---------------------------------------------------------------------------------------------
    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def sockets_home(self) -> Path:
        """Where munged's socket and the slurmds' spools (which hold each job step's socket) live: the server's
        short home. slurmstepd's sockets are ``<spool>/<node>/<node>_<job>.<step>``: under a testbed directory as
        deep as a test's they passed 108 bytes, the job's launch failed and Slurm held it for ever."""
        return self.short_home()

    @property
    def socket(self) -> Path:
        return self.sockets_home / "munge" / "munge.socket"

    def environment(self) -> dict[str, str]:
        """What a command needs to use this Slurm from this machine's namespace (no secret in it)."""
        net = self.state.info["network"]
        # a batch script runs on a node, where the network's interface is eth0 (SBATCH_EXPORT: sbatch's --export)
        # its nodes share this machine's CPUs: MPI ranks yield instead of spinning (mpilaunch.OVERSUBSCRIBED)
        return {**{k: os.environ.get(k, v) for k, v in OVERSUBSCRIBED.items()},
                "SLURM_CONF": str(self.conf), "SLURM_SRUN_COMM_HOST": net["controller_addr"],
                "HYDRA_IFACE": net["controller_if"], "SBATCH_EXPORT": "ALL,HYDRA_IFACE=eth0"}

    # -- install -------------------------------------------------------------------------------------------
    def install(self) -> None:
        apt_install(*PACKAGES)
        for tool in ("munged", "slurmctld", "slurmd", "sinfo", "salloc", "nsenter", "unshare", "hostname"):
            if not shutil.which(tool):
                raise TestbedError(f"slurm: {tool} is missing although {', '.join(PACKAGES)} are installed")

    # -- start ---------------------------------------------------------------------------------------------
    def start(self) -> None:
        if "network" not in self.state.info:
            raise TestbedError("slurm: its emulated hosts are not made (start it with `storeval testbed up slurm`)")
        net = self.state.info["network"]
        hosts = net["hosts"]
        nodes = self.nodes
        self.make_root()
        munge = self.mkdir(self.sockets_home / "munge", MUNGE)
        os.chmod(munge, 0o755)  # munged wants its socket's directory searchable by all
        state = self.mkdir(self.root / "state", STATE)
        logs = self.mkdir(self.root / "log", LOGS)
        spool = self.mkdir(self.sockets_home / "spool")
        for node in nodes:
            self.mkdir(spool / node, SPOOL)
        key = munge / "munge.key"
        fd = self.ledger.open(key, mode=0o400)
        try:
            os.write(fd, os.urandom(1024))
        finally:
            os.close(fd)
        ctl = hosts[CONTROLLER_HOST]
        ctl_port = free_port(ctl["address"], ctl["netns"])
        node_port = free_port(hosts[nodes[0]]["address"], hosts[nodes[0]]["netns"])
        self.state.ports = {"slurmctld": ctl_port, "slurmd": node_port}
        self.write_file(self.conf, _conf(ctl["address"], ctl_port, node_port, self.socket, state, spool, logs,
                                         {n: hosts[n]["address"] for n in nodes}), mode=0o644)
        # --force: munged would refuse a socket whose parent directories are not searchable by everyone (a
        # test's private temporary directory); only root, the daemons' and the clients' user, talks to it
        self._spawn(["munged", "-F", "--force", f"--key-file={key}", f"--socket={self.socket}",
                     f"--pid-file={munge / 'munged.pid'}", f"--log-file={logs / 'munged.log'}",
                     f"--seed-file={munge / 'munged.seed'}"], name="munged", log=logs / "munged.out")
        self._spawn(_on_host(ctl["netns"], CONTROLLER_HOST, ["slurmctld", "-D", "-f", str(self.conf)]),
                    name="slurmctld", log=logs / "slurmctld.out")
        for node in nodes:
            self._spawn(_on_host(hosts[node]["netns"], node, ["slurmd", "-D", "-f", str(self.conf), "-N", node]),
                        name=f"slurmd {node}", log=logs / f"slurmd-{node}.out")

    def ready(self) -> bool:
        """Every node registered and usable (idle, or running a job)."""
        states = self.node_states()
        nodes = self.nodes
        return set(states) == set(nodes) and all(s.rstrip("*~#").split("+")[0] in ("idle", "mixed", "allocated",
                                                                                    "completing")
                                                 for s in states.values())

    def node_states(self) -> dict[str, str]:
        try:
            out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, timeout=20,
                                 env={**os.environ, **self.environment()})
        except (OSError, subprocess.TimeoutExpired):
            return {}
        return dict(line.split(None, 1) for line in out.stdout.splitlines() if len(line.split(None, 1)) == 2)

    def closed_ports(self) -> list[str]:
        """Nodes that slurmctld does not see as usable (the ports live on several hosts: sinfo is the check)."""
        states = self.node_states()
        if not states:
            return [f"slurmctld {self.state.ports.get('slurmctld')}"]
        return [f"slurmd {n} ({s})" for n, s in states.items() if s.rstrip("*~#") in ("down", "drained", "unknown")]

    def status(self) -> str:
        line = super().status()
        if self.state.procs and "network" in self.state.info:
            env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.environment().items())
            line += f"; use it with `storeval testbed slurm salloc -N 2 …` (or {env})"
        return line

    def targets(self) -> dict[str, dict[str, Any]]:
        return {}  # a batch system, not storage

    def claims(self, rule: str, parts: tuple[str, ...], st: os.stat_result) -> bool:
        """munged's socket, pid, seed and logs; slurmctld's state; each slurmd's spool; the daemons' logs: root-only
        directories only the daemons write in."""
        return rule in (MUNGE, STATE, SPOOL, LOGS)


def _on_host(netns: str, host: str, cmd: list[str]) -> list[str]:
    """``cmd`` in ``netns`` under the host name ``host`` (nsenter and unshare exec: the PID stays the daemon's)."""
    return ["nsenter", f"--net=/run/netns/{netns}", "unshare", "--uts", "/bin/sh", "-c",
            'hostname "$1" && shift && exec "$@"', "sh", host, *cmd]


def _conf(ctl_addr: str, ctl_port: int, node_port: int, socket: Path, state: Path, spool: Path, logs: Path,
          nodes: dict[str, str]) -> str:
    lines = [
        "# written by `storeval testbed up slurm`: its own cluster on the emulated nodes",
        "ClusterName=storeval",
        f"SlurmctldHost={CONTROLLER_HOST}({ctl_addr})",
        f"SlurmctldPort={ctl_port}",
        f"SlurmdPort={node_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={socket}",
        f"StateSaveLocation={state}",
        f"SlurmdSpoolDir={spool}/%n",
        f"SlurmctldPidFile={state}/slurmctld.pid",
        f"SlurmdPidFile={spool}/%n/slurmd.pid",
        f"SlurmctldLogFile={logs}/slurmctld.log",
        f"SlurmdLogFile={logs}/slurmd-%n.log",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "SchedulerType=sched/builtin",
        "SelectType=select/linear",
        "MpiDefault=none",
        "ReturnToService=2",
        "SlurmdParameters=config_overrides",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=30",
        "InactiveLimit=0",
        f"KillWait={KILL_WAIT}",
        *(f"NodeName={n} NodeAddr={a} CPUs=2 State=UNKNOWN" for n, a in nodes.items()),
        f"PartitionName=storeval Nodes={','.join(nodes)} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES",
    ]
    return "\n".join(lines) + "\n"
