"""XCache: XRootD's proxy file cache (``libXrdPss`` + ``libXrdPfc``, Debian's xrootd-server-plugins) in front of
an XRootD origin of its own, the way WLCG sites put a cache before remote storage.

Two daemons from one configuration switched on the instance name (``-n``, :mod:`.xrootdnodes`): ``origin``, a
plain XRootD server holding the data (port 1095), and ``cache``, a proxy (``ofs.osslib libXrdPss.so``,
``pss.origin``) with a disk cache (``pss.cachelib libXrdPfc.so``, ``oss.localroot <home>/cache``) on port 1094.
Two targets: ``xcache`` (``root://`` of the cache: what a site's jobs read through) and ``xcache-origin`` (the
origin, directly). A file read through the cache is fetched from the origin in blocks (``pfc.blocksize``, 1 MiB)
on its first read and served from the cache's disk after; prefetching is off (``pfc.prefetch 0``), so the origin
moves exactly the blocks a client asked for. The cache is read-only: the ``xcache`` target writes to the origin
(``write_url``) and reads through the cache, as a site's jobs do.

Where they run: without settings, both in one network namespace of the server's own (as the XRootD testbed),
the cache at the namespace's veth address. With ``cache_host`` and ``origin_host``, each on its emulated host of
the testbed's network (two different hosts): the origin behind its host's link, so a study puts the WAN between
the cache and the origin (seed 003's 12 ms question), and clients beside the cache reach it without crossing
the link. The targets say which host each is on (``target_hosts``), so a cell's round trip is measured and
checked against the right host's link.

What the cache did is its own record: every file's ``.cinfo`` beside it in the cache directory holds one access
record per open (bytes served from the cache's disk ``B_hit``, waited for from the origin ``B_miss``, passed
through ``B_bypass``), which ``xrdpfc_print -j`` prints as JSON. The ``xcache`` target carries ``cache_dir``, and
``drivers/xcachestats.py`` sums those records into a phase's hit and miss bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .xrootd import EXPORT, XROOTD_PORT
from .xrootdnodes import XrootdNodes

CACHE, ORIGIN = "cache", "origin"  # the instance names (-n)
ORIGIN_PORT = XROOTD_PORT + 1
CACHE_RAM = "1g"  # pfc.ram: XrdPfc 5.5 refuses less than 1 GiB


class XcacheServer(XrootdNodes):
    kind = "xcache"
    summary = ("XCache (XRootD's proxy file cache) in front of an XRootD origin of its own; hit and miss bytes from "
               "the cache's own records")
    target_schemes = {"xcache": "root", "xcache-origin": "root"}
    target_hosts = {"xcache": "cache_host", "xcache-origin": "origin_host"}
    host_setting = "cache_host"
    peer_setting = "origin_host"
    options_help = {"cache_host": "the emulated host the cache runs on (with origin_host; default: both in a "
                                  "network namespace of their own)",
                    "origin_host": "the emulated host the origin runs on, behind that host's link (with cache_host)"}
    NODES = (ORIGIN, CACHE)  # the origin first: the cache connects to it on the first read
    PORTS = {CACHE: XROOTD_PORT, ORIGIN: ORIGIN_PORT}
    HOST_SETTINGS = {"cache_host": CACHE, "origin_host": ORIGIN}
    FRONT = CACHE
    DATA_NODES = (ORIGIN,)
    apart = "the cache is in front of a remote origin: put them on two hosts"

    @property
    def cache_dir(self) -> Path:
        return self.home / "cache"

    def extra_dirs(self) -> list[Path]:
        return [self.cache_dir]

    def start(self) -> None:
        self.state.info["cache_dir"] = str(self.cache_dir)
        super().start()

    def node_config(self, node: str) -> list[str]:
        port = self.state.ports[node]
        if node == ORIGIN:
            return [f"xrd.port {port}", f"oss.localroot {self.home / ORIGIN}"]
        return [f"xrd.port {port}", "ofs.osslib libXrdPss.so", "pss.cachelib libXrdPfc.so",
                f"pss.origin {self.node_address(ORIGIN)}:{self.state.ports[ORIGIN]}", f"oss.localroot {self.cache_dir}",
                f"pfc.ram {CACHE_RAM}", "pfc.blocksize 1m", "pfc.prefetch 0", "pfc.diskusage 0.98 0.99"]

    def node_what(self, node: str) -> str:
        return ("XCache's cache: the cache (XrdPss + XrdPfc)" if node == CACHE
                else "XCache's origin: the origin XRootD server")

    def targets(self) -> dict[str, dict[str, Any]]:
        origin_url = f"{self.node_url(ORIGIN)}//{EXPORT}"
        origin = self.node_pids(ORIGIN)
        return {"xcache": {"url": f"{self.node_url(CACHE)}//{EXPORT}", "server_pids": self.node_pids(CACHE),
                           "cache_dir": str(self.cache_dir), "origin_pids": origin, "write_url": origin_url},
                "xcache-origin": {"url": origin_url, "server_pids": origin}}


__all__ = ["XcacheServer"]
