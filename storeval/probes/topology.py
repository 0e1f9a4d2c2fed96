"""Where a target's bytes travel on this machine: the block device or the network interface, and its speed.

A local file system moves bytes through a block device (``/proc/diskstats`` counts them); a network file
system (NFS, Lustre, CephFS, GlusterFS, BeeGFS, GPFS …) and every network target move them through the
interface that routes to the server (``/proc/net/dev``). The link speed of that interface is the physical
limit a figure cannot honestly exceed.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import socket
import subprocess
from typing import Any

NETWORK_FS = {"nfs", "nfs4", "lustre", "ceph", "fuse.ceph", "fuse.glusterfs", "glusterfs", "beegfs", "gpfs", "cifs",
              "smb3", "fuse.sshfs", "9p", "fuse.s3fs", "fuse.rclone", "afs", "orangefs", "pvfs2", "fuse.hdfs"}


def mount_of(path: str) -> dict[str, str]:
    """File system type, source, mount point and options of the mount holding ``path`` (findmnt, else /proc/self/mounts)."""
    if shutil.which("findmnt"):
        try:
            out = subprocess.run(["findmnt", "-n", "-o", "FSTYPE,SOURCE,TARGET,OPTIONS", "--target", path],
                                 capture_output=True, text=True, timeout=10, check=True).stdout.split()
            if len(out) >= 4:
                return {"fstype": out[0], "source": out[1], "mountpoint": out[2], "options": out[3]}
        except (subprocess.SubprocessError, OSError):
            pass
    best: dict[str, str] = {}
    real = os.path.realpath(path)
    try:
        with open("/proc/self/mounts", encoding="utf-8") as f:
            for line in f:
                src, mnt, fstype, opts = line.split()[:4]
                if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best.get("mountpoint", "")):
                    best = {"fstype": fstype, "source": src, "mountpoint": mnt, "options": opts}
    except OSError:
        pass
    return best


# what each parallel file system's client can tell about how a directory's data is laid out and read: the
# tunables a reader of the results needs (seed studies name stripe counts and read-ahead beside their figures)
_TUNABLES: dict[str, list[list[str]]] = {
    "lustre": [["lfs", "getstripe", "-d", "{path}"],
               ["lctl", "get_param", "llite.*.max_read_ahead_mb", "llite.*.max_read_ahead_per_file_mb",
                "llite.*.max_cached_mb", "osc.*.max_rpcs_in_flight", "osc.*.max_dirty_mb"]],
    "beegfs": [["beegfs-ctl", "--getentryinfo", "--mount={mountpoint}", "{path}"]],
    "gpfs": [["mmlsattr", "-L", "{path}"]],
    "fuse.ceph-fuse": [["getfattr", "-n", "ceph.dir.layout", "--only-values", "{path}"]],
    "ceph": [["getfattr", "-n", "ceph.dir.layout", "--only-values", "{path}"]],
    "fuse.glusterfs": [["getfattr", "-n", "trusted.glusterfs.pathinfo", "--only-values", "{path}"]],
}
_TUNABLE_CHARS = 2000


def client_tunables(path: str, mount: dict[str, str]) -> dict[str, str]:
    """The client-side settings that shape how ``path`` is read and written: the read-ahead of the device or
    file system under it (``/sys/class/bdi``) and, on Lustre, BeeGFS, GPFS, CephFS and GlusterFS, what their own
    tools say (``lfs getstripe``, ``beegfs-ctl --getentryinfo``, ``mmlsattr -L`` …), each only where the tool is
    installed; mount options are in ``mount`` already."""
    out: dict[str, str] = {}
    try:
        dev = os.stat(path).st_dev
        with open(f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb", encoding="ascii") as f:
            out["read_ahead_kb"] = f.read().strip()
    except OSError:
        pass
    for argv in _TUNABLES.get(mount.get("fstype", ""), []):
        if not shutil.which(argv[0]):
            continue
        cmd = [a.format(path=path, mountpoint=mount.get("mountpoint", "")) for a in argv]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        except (subprocess.SubprocessError, OSError):
            continue
        text = (proc.stdout if proc.returncode == 0 else proc.stderr).strip()
        out[" ".join(argv[:2] if argv[0] != "getfattr" else argv[:3])] = text[:_TUNABLE_CHARS]
    return out


def block_device(source: str) -> str | None:
    """The /proc/diskstats name of a mount source such as /dev/vda1 or /dev/mapper/vg-root."""
    if not source.startswith("/dev/"):
        return None
    name = os.path.basename(os.path.realpath(source))
    try:
        with open("/proc/diskstats", encoding="ascii") as f:
            names = {line.split()[2] for line in f if len(line.split()) > 2}
    except OSError:
        return None
    return name if name in names else None


def server_host(fstype: str, source: str) -> str | None:
    """The server of a network file system mount (``host:/export``, ``10.0.0.1@tcp:/lustre``, ``mon1,mon2:/``)."""
    if ":" not in source:
        return None
    host = source.split(":", 1)[0].split(",")[0].split("@")[0]
    return host or None


def interface_for_host(host: str) -> str | None:
    """The interface this machine uses to reach ``host``."""
    try:
        addr = socket.getaddrinfo(host, None)[0][4][0]
    except (socket.gaierror, IndexError, UnicodeError):
        return None
    try:
        if ipaddress.ip_address(addr).is_loopback:
            return "lo"
    except ValueError:
        return None
    if shutil.which("ip"):
        try:
            out = subprocess.run(["ip", "-o", "route", "get", addr], capture_output=True, text=True, timeout=5).stdout
            m = re.search(r"\bdev\s+(\S+)", out)
            if m:
                return m.group(1)
        except (OSError, subprocess.SubprocessError):
            pass
    return None


def link_speed_Bps(interface: str | None) -> float | None:
    """Bytes per second of an interface's link (``/sys/class/net/IF/speed`` in Mbit/s); None when unknown."""
    if not interface:
        return None
    try:
        with open(f"/sys/class/net/{interface}/speed", encoding="ascii") as f:
            mbit = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return mbit * 1e6 / 8 if mbit > 0 else None


def target_path(url: str, options: Any = None) -> dict[str, Any]:
    """How a target's bytes move: {"medium": "device"|"network"|"memory"|"unknown"|"none", "device", "interface",
    "link_speed_Bps", "fstype"}, from what its driver says carries them (``Driver.carrier``)."""
    from ..drivers import driver_class  # the one URL parser, through the target's driver

    carrier = driver_class(url).carrier(url, options)
    if carrier.medium == "none":
        return {"medium": "none"}
    if carrier.path is None:
        iface = interface_for_host(carrier.host) if carrier.host else None
        return {"medium": "network", "interface": iface, "link_speed_Bps": link_speed_Bps(iface)}
    mount = mount_of(carrier.path)
    fstype, source = mount.get("fstype", ""), mount.get("source", "")
    if fstype in NETWORK_FS or fstype.startswith("nfs"):
        host = server_host(fstype, source)
        iface = interface_for_host(host) if host else None
        return {"medium": "network", "fstype": fstype, "interface": iface, "link_speed_Bps": link_speed_Bps(iface)}
    if fstype in ("tmpfs", "ramfs"):
        return {"medium": "memory", "fstype": fstype}
    device = block_device(source)
    return {"medium": "device" if device else "unknown", "fstype": fstype, "device": device}
