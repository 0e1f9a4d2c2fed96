"""Two XRootD sites that copy files between each other without the data passing through the client: third-party
copy (TPC) as WLCG sites and FTS run it, over HTTP and over root://.

Two daemons from one configuration switched on the instance name (``-n``, :mod:`.xrootdnodes`): ``sitea`` (port
1094) and ``siteb`` (port 1095), each with data of its own, each serving the same files over ``root://`` and
``davs://`` on its port (XrdHttp), each able to be either end of a copy: native XRootD TPC (``ofs.tpc``: the
destination runs ``xrdcp --server`` to pull from the source after the client set up the rendezvous) and HTTP-TPC
(XrdHttpTPC: a ``COPY`` with ``Source`` sent to the destination — pull — or with ``Destination`` sent to the
source — push; the server streams perf markers and ends with ``success`` or ``failure``), and both answer adler32
checksums (``kXR_query``, ``Want-Digest``) with which a copy is verified.

One CA (under ``--dir``, as the single XRootD server's) signs one certificate for both sites' addresses; each
site's libcurl trusts the other through it. Where they run: without settings, both in one network namespace of
the server's own, so a copy between them never crosses the host's interface towards the namespace (the client's
side of the veth pair carries only the requests and the answers); with ``host_a`` and ``host_b``, each on its
emulated host of the testbed's network (two different hosts), a copy crossing both hosts' links: a WAN between
two sites.

Targets: ``tpc-a``, ``tpc-b`` (root://) and ``tpc-a-davs``, ``tpc-b-davs`` (davs://, with ``ca_file`` and
``ca_dir``); ``tpc-a`` and ``tpc-a-davs`` are the same files on the same daemon.
"""

from __future__ import annotations

from typing import Any

from .xrootd import EXPORT, XROOTD_PORT, http_lines
from .xrootdnodes import XrootdNodes

SITE_A, SITE_B = "sitea", "siteb"  # the instance names (-n)
SITES = {SITE_A: "a", SITE_B: "b"}  # instance -> its letter in the targets' names


class XrootdTpcServer(XrootdNodes):
    kind = "xrootd-tpc"
    summary = ("two XRootD sites for third-party copy, each over root:// and davs:// (XrdHttp, XrdHttpTPC); "
               "adler32 checksums")
    target_schemes = {f"tpc-{x}{tail}": scheme for x in SITES.values()
                      for tail, scheme in (("", "root"), ("-davs", "davs"))}
    target_hosts = {f"tpc-{x}{tail}": f"host_{x}" for x in SITES.values() for tail in ("", "-davs")}
    host_setting = "host_a"
    peer_setting = "host_b"
    options_help = {"host_a": "the emulated host site a runs on (with host_b; default: both sites in a network "
                              "namespace of their own)",
                    "host_b": "the emulated host site b runs on, behind that host's link (with host_a)"}
    NODES = (SITE_A, SITE_B)
    PORTS = {SITE_A: XROOTD_PORT, SITE_B: XROOTD_PORT + 1}
    HOST_SETTINGS = {"host_a": SITE_A, "host_b": SITE_B}
    FRONT = SITE_A
    DATA_NODES = (SITE_A, SITE_B)
    apart = "a copy between two sites crosses the network: put them on two hosts"

    def tls_addresses(self) -> list[str]:
        return sorted({self.node_address(node) for node in self.NODES})

    def before_launch(self, user: str | None) -> None:
        self._make_certificates(user)

    def common_config(self) -> list[str]:
        return [*super().common_config(), *http_lines(self.home / "tls")]

    def node_config(self, node: str) -> list[str]:
        port = self.state.ports[node]
        return [f"xrd.port {port}", f"xrd.protocol XrdHttp:{port} libXrdHttp.so", f"oss.localroot {self.home / node}"]

    def node_what(self, node: str) -> str:
        return f"TPC site {SITES[node]}: XRootD with XrdHttp and XrdHttpTPC"

    def targets(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for node, x in SITES.items():
            address, port, pids = self.node_address(node), self.state.ports[node], self.node_pids(node)
            out[f"tpc-{x}"] = {"url": f"root://{address}:{port}//{EXPORT}", "server_pids": pids}
            out[f"tpc-{x}-davs"] = {"url": f"davs://{address}:{port}/{EXPORT}", "ca_file": str(self.ca_file),
                                    "ca_dir": str(self.ca_file.parent), "server_pids": pids}
        return out


__all__ = ["XrootdTpcServer"]
