"""MinIO on 127.0.0.1: a real S3 server built from source through the Go module proxy.

``MinioServer`` is one MinIO process on one data directory; ``MinioECServer`` is four MinIO processes on
four ports, one drive each, forming one erasure-coded cluster (any one node can be stopped and restarted
with :meth:`MinioECServer.stop_node` / :meth:`MinioECServer.start_node` while objects stay readable).
Either can run on an emulated host (:meth:`Server.place`, the ``host`` setting): then every node runs inside the
host's network namespace and listens on the host's address (API and console; MinIO also opens the API port on
the namespace's own loopback, which nothing outside the namespace reaches), and the endpoint, the erasure set's
drive URLs, the health checks and the metrics URLs use that address.
Both create the bucket ``storeval`` once ready and describe a target ``s3://storeval/testbed`` whose
credentials live in an AWS shared-credentials file under the server's root (never in the target itself).

The binary is built once by :mod:`storeval.testbed.gobuild` and reused afterwards.
"""

from __future__ import annotations

import configparser
import datetime
import hashlib
import http.client
import os
import re
import secrets
import stat
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from ..drivers.sigv4 import authorization, signing_key
from .base import (
    HOST_HELP,
    LOCALHOST,
    READY_QUIET,
    RESPAWN_WAIT,
    FaultNode,
    Proc,
    Server,
    TestbedError,
    TestbedOptionError,
    port_open,
    wait_progressing,
    wait_until,
)
from .gobuild import MINIO_VERSION, WARP_VERSION, install_minio, install_warp

BUCKET = "storeval"
REGION = "us-east-1"
DRIVE = "minio-drive"  # the ledger rule of a directory MinIO uses as a drive (see MinioServer.claims)
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


# ------------------------------------------------------------------------------------------------ S3 bits
def _s3_put(endpoint: str, access_key: str, secret_key: str, path: str, body: bytes = b"", region: str = REGION,
            timeout: float = 10.0) -> tuple[int, str, str]:
    """A path-style, AWS SigV4-signed ``PUT <path>``; returns (HTTP status, S3 error code, message).

    ``path`` is already URI-encoded (``/bucket`` or ``/bucket/key``); connection errors raise OSError."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise OSError(f"endpoint {endpoint!r} is not an http(s) URL")
    path = parts.path.rstrip("/") + path
    payload_hash = hashlib.sha256(body).hexdigest()
    amz_date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    headers = {"host": parts.netloc, "x-amz-content-sha256": payload_hash, "x-amz-date": amz_date}
    headers["authorization"] = authorization("PUT", path, headers, payload_hash, access_key, region,
                                             signing_key(secret_key, amz_date[:8], region), amz_date)
    conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = conn_cls(parts.netloc, timeout=timeout)
    try:
        conn.request("PUT", path, body=body, headers={**headers, "content-length": str(len(body))})
        resp = conn.getresponse()
        status, text = resp.status, resp.read().decode(errors="replace")
    finally:
        conn.close()
    if status == 200:
        return status, "", ""
    try:
        root = ET.fromstring(text)
        return status, root.findtext("Code") or "", root.findtext("Message") or ""
    except ET.ParseError:
        return status, "", text.strip()[:200]


def create_bucket(endpoint: str, access_key: str, secret_key: str, bucket: str, region: str = REGION,
                  timeout: float = 10.0) -> None:
    """Create ``bucket`` with an AWS SigV4-signed path-style ``PUT /<bucket>``; an existing own bucket is fine."""
    body = b"" if region == "us-east-1" else (
        "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        f"<LocationConstraint>{region}</LocationConstraint></CreateBucketConfiguration>").encode()
    try:
        status, code, message = _s3_put(endpoint, access_key, secret_key, "/" + quote(bucket, safe=""), body,
                                        region, timeout)
    except OSError as e:
        raise TestbedError(f"creating bucket {bucket} at {endpoint} failed: {e}") from None
    if status == 200 or code == "BucketAlreadyOwnedByYou":
        return
    raise TestbedError(f"creating bucket {bucket} at {endpoint} failed: HTTP {status} {code}: {message}".rstrip(": "))


def new_credentials(server: Server, path: Path) -> tuple[str, str]:
    """A fresh S3 key pair written to ``path`` (an AWS-style credentials file, 0600, through the server's
    ledger); targets refer to the file, never to the keys."""
    access, secret = "sv" + secrets.token_hex(9), secrets.token_urlsafe(30)
    server.write_file(path, f"[default]\naws_access_key_id = {access}\naws_secret_access_key = {secret}\n", 0o600)
    os.chmod(path, 0o600)
    return access, secret


def read_credentials(path: Path, kind: str) -> tuple[str, str]:
    """(access key, secret key) from a credentials file :func:`new_credentials` wrote."""
    cp = configparser.ConfigParser()
    if not cp.read(path):
        raise TestbedError(f"{kind}: no credentials file {path} (is the server started?)")
    return cp["default"]["aws_access_key_id"], cp["default"]["aws_secret_access_key"]


def _http_status(port: int, path: str, timeout: float = 2.0, host: str = LOCALHOST) -> int:
    """Status of ``GET http://HOST:port/path`` (0 if nothing answers); no proxies involved."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    except OSError:
        return 0
    finally:
        conn.close()


# ------------------------------------------------------------------------------------------------ servers
class MinioServer(Server):
    """One MinIO server process on one data directory (``<root>/data``), bucket ``storeval``."""

    kind = "minio"
    summary = "MinIO S3 server, one process and one drive, bucket 'storeval'"
    target_name = "minio"
    target_schemes = {"minio": "s3"}
    options_help = {"host": HOST_HELP}
    start_attempts = 3

    # -- paths and credentials ---------------------------------------------------------------------
    @property
    def credentials_file(self) -> Path:
        return (self.root / "credentials").absolute()

    @property
    def log(self) -> Path:
        return self.root / "minio.log"

    @property
    def endpoint(self) -> str:
        return f"http://{self.address}:{self.state.ports['api']}"

    def credentials(self) -> tuple[str, str]:
        """(access key, secret key) from the credentials file."""
        return read_credentials(self.credentials_file, self.kind)

    def _write_credentials(self) -> None:
        new_credentials(self, self.credentials_file)

    def _env(self) -> dict[str, str]:
        access, secret = self.credentials()
        return {"MINIO_ROOT_USER": access, "MINIO_ROOT_PASSWORD": secret, "MINIO_UPDATE": "off",
                "MINIO_CALLHOME_ENABLE": "off"}

    def _proc_env(self, index: int) -> dict[str, str]:
        """The environment of process ``index`` (of ``self.state.procs``)."""
        return self._env()

    def _binary(self) -> str:
        binary = self.state.info.get("binary")
        if not binary or not Path(binary).is_file():
            binary = str(install_minio())
            self.state.info["binary"] = binary
        return binary

    # -- Server --------------------------------------------------------------------------------------
    def install(self) -> None:
        self.state.info["binary"] = str(install_minio())

    def _commands(self, ports: dict[str, int]) -> list[list[str]]:
        return [[self._binary(), "server", str(self.root / "data"), "--address", f"{self.address}:{ports['api']}",
                 "--console-address", f"{self.address}:{ports['console']}"]]

    def _new_ports(self) -> dict[str, int]:
        api, console = self.pick_ports(2)
        return {"api": api, "console": console}

    def _listen_ports(self) -> list[int]:
        """The API port of each process, in the order of ``self.state.procs``."""
        return [self.state.ports["api"]]

    def _names(self) -> list[str]:
        return ["minio"]

    def _logs(self) -> list[Path]:
        return [self.log]

    def _prepare(self) -> None:
        self.mkdir(self.root / "data", rule=DRIVE)

    def claims(self, rule: str, parts: tuple[str, ...], st: os.stat_result) -> bool:
        """A MinIO drive holds ``.minio.sys/`` (MinIO's own), directories (buckets, object prefixes, data
        directories) and, as files, only an object's ``xl.meta`` and the ``part.N`` files in its data
        directories (named by UUID): any other file there is not MinIO's."""
        if rule != DRIVE:
            return False
        if parts[0] == ".minio.sys" or stat.S_ISDIR(st.st_mode):
            return True
        if not stat.S_ISREG(st.st_mode) or len(parts) < 3:  # bucket/object/xl.meta at least
            return False
        name = parts[-1]
        return name in ("xl.meta", "xl.meta.bkp") or (
            len(parts) >= 4 and bool(re.fullmatch(r"part\.\d+", name)) and bool(_UUID.fullmatch(parts[-2])))

    def start(self) -> None:
        self.make_root()
        self._binary()
        self._write_credentials()
        self._prepare()
        for attempt in range(1, self.start_attempts + 1):
            self.state.ports = self._new_ports()
            self._on_ports()
            offsets = [log.stat().st_size if log.exists() else 0 for log in self._logs()]
            self.state.procs = []
            for i, (cmd, name, log) in enumerate(zip(self._commands(self.state.ports), self._names(), self._logs())):
                self._spawn(cmd, name=name, log=log, env=self._proc_env(i))
            if not self._port_clash(offsets) or attempt == self.start_attempts:
                return
            for p in self.state.procs:  # a port was taken: start all over on new ports
                p.stop()

    def _on_ports(self) -> None:
        """Hook: record what depends on the ports (the node list of the erasure-coded cluster)."""

    def _port_clash(self, offsets: list[int], timeout: float = 10.0) -> bool:
        """Wait until every process listens; True if one died because its port was in use."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc, log, offset in zip(self.state.procs, self._logs(), offsets):
                if not proc.alive():
                    with open(log, "rb") as f:
                        f.seek(offset)
                        text = f.read().decode(errors="replace").lower()
                    return "already in use" in text or "address in use" in text
            if all(_http_status(port, "/minio/health/live", 0.5, self.address) for port in self._listen_ports()):
                return False
            time.sleep(0.1)
        return False

    def ready(self) -> bool:
        return _http_status(self.state.ports["api"], "/minio/health/live", host=self.address) == 200

    def wait_ready(self, timeout: float = READY_QUIET) -> None:
        """Wait until it is ready as `status` judges it: every process answers, the bucket exists, every
        port it was given accepts connections (the console opens after the API, later still on a busy
        machine), and (erasure-coded) every node takes writes. Progress-based (``wait_progressing``):
        ``timeout`` is how long it may make no progress beyond the time it waited for a CPU; a process that
        exits fails it at once. One TestbedError line saying what it still waited for."""
        access, secret = self.credentials()
        steps = ("answers", "bucket", "ports", "writes")
        reached = [0]
        why = [""]

        def check() -> bool:
            for p in self.state.procs:
                if not p.alive():
                    raise TestbedError(f"{self.kind}: {p.name} exited while starting; see {p.log}")
            if reached[0] == 0:
                if not self.ready():
                    why[0] = "it does not answer its health check"
                    return False
                reached[0] = 1
            if reached[0] == 1:
                try:
                    create_bucket(self.endpoint, access, secret, BUCKET)
                except TestbedError as e:  # e.g. XMinioServerNotInitialized while a cluster is forming
                    why[0] = f"bucket {BUCKET}: {e}"
                    return False
                self.state.info["bucket"] = BUCKET
                reached[0] = 2
            if reached[0] == 2:
                closed = self.closed_ports()
                if closed:
                    why[0] = f"port {', '.join(closed)} accepts no connection"
                    return False
                reached[0] = 3
            if not self._takes_writes():
                why[0] = "not every node takes writes yet"
                return False
            return True

        wait_progressing(check, self.kind, self.state.procs, stage=lambda: steps[reached[0]], quiet=timeout,
                         log=self._logs()[0], interval=0.3, why=lambda: why[0])

    def _takes_writes(self) -> bool:
        """Hook: whether every node takes writes (the erasure-coded cluster; one server does once it answers)."""
        return True

    def targets(self) -> dict[str, dict[str, Any]]:
        return {self.target_name: {"url": f"s3://{BUCKET}/testbed", "endpoint": self.endpoint, "region": REGION,
                                   "credentials_file": str(self.credentials_file), **self.server_counters()}}

    def fault_server(self) -> FaultNode:
        port = int(self.state.ports.get("api", 0))
        return FaultNode(self.kind, f"MinIO server, one process (API port {port})", list(range(len(self.state.procs))),
                         [port], label=self.kind)

    def respawn(self, dead: list[int] | None = None, timeout: float = RESPAWN_WAIT) -> None:
        """Start the exited processes ``dead`` (of ``state.procs``; None: every exited one) again after a fault
        killed them: the same command, ports, drives and credentials, each recorded in its old slot. Returns when
        each answers (and, see :meth:`_after_respawn`, takes writes); a port still held by the dying server's
        connections is retried until ``timeout``. Running processes are left alone."""
        deadline = time.monotonic() + timeout
        indices = [i for i, p in enumerate(self.state.procs) if not p.alive()] if dead is None else list(dead)
        for idx in indices:
            if self.state.procs[idx].alive():
                continue
            cmd, name, log = self._commands(self.state.ports)[idx], self._names()[idx], self._logs()[idx]
            port = self._listen_ports()[idx]
            while True:
                offset = log.stat().st_size if log.exists() else 0
                proc = self._spawn(cmd, name=name, log=log, env=self._proc_env(idx), slot=idx)
                if self._respawned(proc, port, log, offset, deadline):
                    break
                if time.monotonic() >= deadline:
                    proc.stop(grace=5)
                    raise TestbedError(f"{self.kind}: {name} did not start again on port {port} within "
                                       f"{timeout:g} s; see {log}")
                time.sleep(0.5)  # the port was still in use: try again
        # `testbed status` looks at every port of the server: a console opens after its API — once the cluster
        # has its quorum, so only after every node is up again, later still on a busy machine
        for idx in indices:
            wait_until(lambda idx=idx: all(port_open(p, self.address) for p in self._ports_of(idx)),
                       max(10.0, deadline - time.monotonic()), f"{self._names()[idx]}'s ports",
                       log=self._logs()[idx])
        self._after_respawn(max(10.0, deadline - time.monotonic()))

    def _ports_of(self, idx: int) -> list[int]:
        """Every port process ``idx`` listens on (its API and its console)."""
        return list(self.state.ports.values())

    def _respawned(self, proc: Proc, port: int, log: Path, offset: int, deadline: float) -> bool:
        """Wait until a respawned process answers on ``port``: True; False if it died because the port was still
        in use; TestbedError if it died otherwise or did not answer in time."""
        while time.monotonic() < deadline:
            if not proc.alive():
                with open(log, "rb") as f:
                    f.seek(offset)
                    text = f.read().decode(errors="replace").lower()
                if "already in use" in text or "address in use" in text:
                    return False
                raise TestbedError(f"{self.kind}: {proc.name} exited while starting again; see {log}")
            if _http_status(port, "/minio/health/live", 1.0, self.address) == 200:
                return True
            time.sleep(0.1)
        proc.stop(grace=5)
        raise TestbedError(f"{self.kind}: {proc.name} did not answer on port {port} after starting again; see {log}")

    def fault_names(self, exited: list[int]) -> list[str]:
        return [self.kind] if exited else []

    def _after_respawn(self, timeout: float) -> None:
        """Hook: what must hold after a respawn before the server is usable again (one process: answering is)."""

    def server_counters(self) -> dict[str, Any]:
        """Its processes, and each node's Prometheus metrics (v3: v2 is served from a cache; read with a token
        signed by the target's keys, so nothing here is public)."""
        return {**super().server_counters(),
                "metrics_urls": [f"http://{self.address}:{port}/minio/metrics/v3/api/requests"
                                 for port in self._listen_ports()]}


class MinioECServer(MinioServer):
    """N MinIO processes on N ports (``servers``, default 4), one drive each (``<root>/d1..dN``; with fewer than 4
    nodes each gets several, ``d1-1``…, so the erasure set has at least 4 drives): one erasure-coded cluster
    (EC:2 by default, so reads and writes go on with any one node stopped). Nodes are numbered 1 to N."""

    kind = "minio-ec"
    summary = "MinIO S3 cluster, N processes (default 4) with their own drives, erasure-coded, bucket 'storeval'"
    target_name = "minio-ec"
    target_schemes = {"minio-ec": "s3"}
    options_help = {"servers": "MinIO nodes, each its own process, 1-16 (default 4); each node gets enough drives "
                               "for the erasure set to have at least 4", "host": HOST_HELP}
    MIN_DRIVES = 4  # an erasure set of fewer drives keeps no parity worth measuring

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        out = super().check_options(options)
        n = out.get("servers", 4)
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 16:
            raise TestbedOptionError(f"testbed minio-ec: servers (nodes) must be a whole number from 1 to 16, not {n!r}")
        return out

    @property
    def nodes(self) -> int:
        return int(self.state.info.get("node_count") or self.options.get("servers", 4))

    @property
    def drives_per_node(self) -> int:
        return max(1, -(-self.MIN_DRIVES // self.nodes))

    @property
    def endpoint(self) -> str:
        return self.state.info["nodes"][0]["endpoint"]

    def _node_ids(self) -> range:
        return range(1, self.nodes + 1)

    def _new_ports(self) -> dict[str, int]:
        ports = self.pick_ports(2 * self.nodes)
        out: dict[str, int] = {}
        for i in self._node_ids():
            out[f"node{i}"], out[f"console{i}"] = ports[2 * (i - 1)], ports[2 * (i - 1) + 1]
        return out

    def _drive_dirs(self, i: int) -> list[Path]:
        per = self.drives_per_node
        return [self.root / f"d{i}"] if per == 1 else [self.root / f"d{i}-{k}" for k in range(1, per + 1)]

    def _on_ports(self) -> None:
        self.state.info["node_count"] = self.nodes
        self.state.info["nodes"] = [
            {"name": f"node{i}", "endpoint": f"http://{self.address}:{self.state.ports[f'node{i}']}",
             "port": self.state.ports[f"node{i}"], "console_port": self.state.ports[f"console{i}"],
             "data": str(self._drive_dirs(i)[0].absolute()),
             "drives": [str(d.absolute()) for d in self._drive_dirs(i)],
             "log": str(self.root / f"node{i}.log"), "proc": i - 1}
            for i in self._node_ids()]

    def _prepare(self) -> None:
        for i in self._node_ids():
            for d in self._drive_dirs(i):
                self.mkdir(d, rule=DRIVE)

    def _node_command(self, node: dict[str, Any]) -> list[str]:
        drives = [f"http://{self.address}:{n['port']}{d}" for n in self.state.info["nodes"]
                  for d in n.get("drives", [n["data"]])]
        return [self._binary(), "server", "--address", f"{self.address}:{node['port']}",
                "--console-address", f"{self.address}:{node['console_port']}", *drives]

    def _commands(self, ports: dict[str, int]) -> list[list[str]]:
        return [self._node_command(n) for n in self.state.info["nodes"]]

    def _listen_ports(self) -> list[int]:
        return [n["port"] for n in self.state.info["nodes"]]

    def _ports_of(self, idx: int) -> list[int]:
        node = self.state.info["nodes"][idx]
        return [node["port"], node["console_port"]]

    def _names(self) -> list[str]:
        return [f"minio node{i}" for i in self._node_ids()]

    def _logs(self) -> list[Path]:
        return [self.root / f"node{i}.log" for i in self._node_ids()]

    def _env(self) -> dict[str, str]:
        # all drives share the root disk: without MINIO_CI_CD MinIO refuses them and retries forever
        return {**super()._env(), "MINIO_CI_CD": "1"}

    def _proc_env(self, index: int) -> dict[str, str]:
        # Inside a container (/.dockerenv exists, or KUBERNETES_SERVICE_HOST is set) MinIO never resolves an
        # endpoint whose host is a loopback address ("127.0.0.1 resolves to localhost in a containerized
        # deployment, waiting ...", forever; a placed node's address, 10.x, is waited for alike). _MINIO_SERVER_LOCAL (cmd/endpoint.go, UpdateIsLocal) names the
        # endpoint host:port that is this node's own, which ends that wait; outside containers it is unused.
        node = self.state.info["nodes"][index]
        return {**self._env(), "_MINIO_SERVER_LOCAL": f"{self.address}:{node['port']}"}

    def ready(self) -> bool:
        nodes = self.state.info.get("nodes", [])
        return (bool(nodes) and all(_http_status(n["port"], "/minio/health/live", host=self.address) == 200
                                    for n in nodes)
                and _http_status(nodes[0]["port"], "/minio/health/cluster", host=self.address) == 200)

    def writable(self, i: int) -> bool:
        """Whether node ``i`` accepts a write now (it puts a tiny object ``.storeval-probe-node<i>`` in the bucket).

        Health endpoints are not enough: a node that was just (re)started answers /minio/health/live and
        /minio/health/cluster with 200 yet may refuse writes (503 SlowDownWrite: no write quorum from its
        point of view) until it has connected to its peers' drives. It tries once right after start-up and
        then every 15 s (defaultMonitorConnectEndpointInterval in cmd/erasure-sets.go), so this takes
        either under a second or about 16 s."""
        access, secret = self.credentials()
        try:
            status, _, _ = _s3_put(self._node(i)["endpoint"], access, secret, f"/{BUCKET}/.storeval-probe-node{i}",
                                   b"probe", timeout=5.0)
        except OSError:
            return False
        return status == 200

    def wait_writable(self, timeout: float = 120.0) -> None:
        """Wait until every node running now accepts writes; one that dies meanwhile is an error."""
        # a node frozen by SIGSTOP (a fault) answers nobody: only the nodes that run are asked
        ids = [i for i in self._node_ids() if self.state.procs[self._node(i)["proc"]].condition() == "up"]
        if not ids:
            raise TestbedError(f"{self.kind}: no node is running")

        def check() -> bool:
            for i in ids:
                if not self.node_alive(i):
                    raise TestbedError(f"{self.kind}: node {i} exited; see {self._node(i)['log']}")
            return all(self.writable(i) for i in ids)

        wait_until(check, timeout, f"{self.kind}: writes through nodes {', '.join(map(str, ids))}",
                   log=Path(self._node(ids[0])["log"]), interval=0.5)

    def _takes_writes(self) -> bool:
        return all(self.writable(i) for i in self._node_ids())

    def _node(self, i: int) -> dict[str, Any]:
        nodes = self.state.info.get("nodes", [])
        if not 1 <= i <= len(nodes):
            raise TestbedError(f"{self.kind}: no node {i} (nodes are numbered 1 to {len(nodes)})")
        return nodes[i - 1]

    def node_alive(self, i: int) -> bool:
        return self.state.procs[self._node(i)["proc"]].alive()

    def stop_node(self, i: int) -> None:
        """Stop node ``i`` (1–4): its process only; its data stays, so :meth:`start_node` brings it back."""
        self.state.procs[self._node(i)["proc"]].stop()

    def fault_server(self) -> FaultNode:
        nodes = self.state.info.get("nodes", [])
        ports = [int(n["port"]) for n in nodes]
        return FaultNode(self.kind, f"MinIO erasure-coded cluster, all {len(nodes)} nodes (API ports "
                                    f"{', '.join(map(str, ports))})", list(range(len(self.state.procs))), ports,
                         label=f"all {len(nodes)} {self.kind} nodes")

    def fault_nodes(self) -> list[FaultNode]:
        """Each node, ``node1`` … ``nodeN``: its one MinIO process."""
        nodes = self.state.info.get("nodes", [])
        return [FaultNode(f"node{i}", f"MinIO-EC node {i} of {len(nodes)} (API port {node['port']})",
                          [int(node["proc"])], [int(node["port"])], label=f"{self.kind} node {i}")
                for i, node in enumerate(nodes, start=1)]

    def _node_number(self, name: str) -> int:
        """``node3`` → 3; one TestbedError line for a name that is no node's."""
        number = name.removeprefix("node")
        if not name.startswith("node") or not number.isdigit():
            raise TestbedError(f"{self.kind}: no node {name} (node1..node{self.nodes})")
        return int(number)

    def start_node(self, name: str, timeout: float = RESPAWN_WAIT) -> None:
        """Start node ``name`` (``node1`` … ``nodeN``) again with the same ports, drives and credentials (through
        :meth:`respawn`: a port the killed node's connections still hold is tried again); wait until it answers
        and, once a write quorum runs, every running node accepts writes again (see :meth:`writable`)."""
        idx = self._node(self._node_number(name))["proc"]
        if not self.state.procs[idx].alive():
            self.respawn([idx], timeout)

    def fault_names(self, exited: list[int]) -> list[str]:
        if len(exited) == len(self.state.procs):
            return [self.kind] if exited else []
        return [f"{self.kind}.node{i + 1}" for i in exited]

    def _after_respawn(self, timeout: float) -> None:
        """Once enough nodes run for a write quorum (3 of 4), wait until every running node takes writes (a node
        just started refuses them until it has reached its peers, see :meth:`writable`); with fewer nothing can
        be written, so answering is all there is to wait for."""
        running = [p for p in self.state.procs if p.condition() == "up"]
        if len(running) >= self.nodes // 2 + 1:
            self.wait_writable(timeout)


__all__ = ["MINIO_VERSION", "WARP_VERSION", "BUCKET", "install_minio", "install_warp", "create_bucket",
           "MinioServer", "MinioECServer"]
