"""Emulated hosts as MPI nodes: hydra (MPICH's ``mpiexec``) launches onto them as it would over ssh.

``mpiexec -launcher ssh -launcher-exec LAUNCHER`` runs ``LAUNCHER [-x] HOST COMMAND…`` once per host, where ssh
would log in. The launcher written here enters the host's network namespace and a UTS namespace of its own whose
host name is the emulated host's, then runs the command through ``sh -c`` as ssh's remote shell would: every rank
on that host sees its name (``gethostname``), its address and its link — storeval's MPI engine groups and leads
ranks by host name, as it does on a real cluster. ``-iface`` names the controller's interface, so each host's
proxy reaches ``mpiexec`` (in the root namespace) over the emulated network.

The network's directory (``/run/storeval-net-T``, root's alone) holds the launcher and an ``mpiexec`` wrapper
that adds those options: ``/run/storeval-net-T/mpiexec -hosts node1,node2 -n 8 storeval run study.yaml``. Both
are rewritten when hosts are added and removed with the network.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

from .cgroups import blkio_hierarchy, hierarchy, host_group

LAUNCHER = "mpi-launch"
# Every emulated node shares this machine's CPUs, so its ranks outnumber them: MPICH's ranks then wait for a
# message by yielding the CPU instead of spinning on it (ch4's progress throttle, a sleeping yield). Measured with
# bench/mpi_scale.sh, 32 ranks on 2 CPUs: 96 s without, 56 s with. A value the user set is kept.
OVERSUBSCRIBED = {"MPIR_CVAR_CH4_PROGRESS_THROTTLE": "1", "MPIR_CVAR_ENABLE_HEAVY_YIELD": "1"}
WRAPPER = "mpiexec"
FILES = (LAUNCHER, WRAPPER)


def mpiexec_path() -> str | None:
    """The ``mpiexec`` beside this Python (the ``mpich`` wheel's hydra), else the first on PATH."""
    here = Path(sys.executable).parent / "mpiexec"
    return str(here) if os.access(here, os.X_OK) else shutil.which("mpiexec")


def launcher_text(token: str, hosts: dict[str, str], groups: tuple[str, ...] = ()) -> str:
    """The launcher for a network whose hosts are ``hosts`` (name -> network namespace); ``groups``: the cgroup
    hierarchies holding each host's groups (testbed/cgroups.py), which what is launched there joins first."""
    cases = "\n".join(f"  {shlex.quote(name)}) ns={shlex.quote(ns)} ;;" for name, ns in hosts.items())
    join = "".join(  # counted with what else runs on the host (testbed/cgroups.py)
        f'{{ echo $$ > {shlex.quote(root)}/{host_group("$ns")}/cgroup.procs; }} 2>/dev/null\n' for root in groups)
    names = ", ".join(hosts) or "none"
    return f"""#!/bin/sh
# storeval testbed, network {token}: hydra's launcher onto its emulated hosts (mpiexec -launcher ssh
# -launcher-exec THIS). Runs COMMAND in HOST's network namespace under HOST's own host name, as ssh would.
while [ "${{1#-}}" != "$1" ]; do shift; done  # ssh's options (hydra passes -x)
host=$1
shift
case $host in
{cases}
  *) echo "storeval: no emulated host '$host' in network {token} (hosts: {names})" >&2; exit 255 ;;
esac
{join}exec ip netns exec "$ns" unshare --uts /bin/sh -c 'hostname "$1" && exec /bin/sh -c "$2"' sh "$host" "$*"
"""


def wrapper_text(token: str, launcher: str, controller_if: str, mpiexec: str | None) -> str:
    if mpiexec is None:
        run = ('echo "storeval: no mpiexec (pip install \'storeval[mpi]\' installs MPICH\'s)" >&2\nexit 127')
    else:
        kept = "".join(f': "${{{k}:={v}}}"; export {k}\n' for k, v in OVERSUBSCRIBED.items())
        run = kept + (f"exec {shlex.quote(mpiexec)} -launcher ssh -launcher-exec {shlex.quote(launcher)} "
               f"-iface {shlex.quote(controller_if)} \"$@\"")
    return f"""#!/bin/sh
# storeval testbed, network {token}: mpiexec across its emulated hosts (give them with -hosts A,B or -f FILE).
{run}
"""


def write_launchers(workdir: str, token: str, hosts: dict[str, str], controller_if: str) -> None:
    """(Re)write the launcher and the wrapper of a network, each replaced whole (never half-written)."""
    launcher = os.path.join(workdir, LAUNCHER)
    roots = tuple(str(r) for r in (hierarchy(), blkio_hierarchy()) if r is not None)
    for name, text in ((LAUNCHER, launcher_text(token, hosts, roots)),
                       (WRAPPER, wrapper_text(token, launcher, controller_if, mpiexec_path()))):
        path = os.path.join(workdir, name)
        tmp = os.path.join(workdir, f".{name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o700)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)


def removable_names() -> set[str]:
    """The names :func:`write_launchers` writes in a network's directory (what its removal may delete)."""
    return {*FILES, *(f".{name}.tmp" for name in FILES)}
