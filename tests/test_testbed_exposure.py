"""No testbed server opens a port beyond loopback in the host's network namespace (issue 16.7): a benchmark must
not put a data server on the network. XRootD, which cannot bind one address, runs in a namespace of its own."""

from __future__ import annotations

import subprocess

from .helpers import exposed, listening_addresses


def test_every_session_testbed_process_listens_on_loopback_only(testbed):
    servers = testbed.load()
    assert set(servers) == {"minio", "xrootd", "hdfs"}
    pids = [p.pid for s in servers.values() for p in s.state.procs if p.alive()]
    assert pids
    assert exposed(pids) == []
    # MinIO and HDFS listen in the host namespace, on loopback; XRootD's daemons listen in their own namespace,
    # so the host namespace shows none of their sockets at all
    seen = listening_addresses(pids)
    for kind in ("minio", "hdfs"):
        assert any(p.pid in seen for p in servers[kind].state.procs), kind
    assert not any(p.pid in seen for p in servers["xrootd"].state.procs)
    # the same through ss, as a user would look: nothing of theirs on a non-loopback address
    out = subprocess.run(["ss", "-H", "-ltnp"], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        local = line.split()[3]
        if any(f"pid={pid}," in line for pid in pids):
            assert local.startswith(("127.", "[::ffff:127.", "[::1]")), line
