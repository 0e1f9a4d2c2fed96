"""MinIO on 127.0.0.1: a real S3 server built from source through the Go module proxy.

``MinioServer`` is one MinIO process on one data directory; ``MinioECServer`` is four MinIO processes on
four ports, one drive each, forming one erasure-coded cluster (any one node can be stopped and restarted
with :meth:`MinioECServer.stop_node` / :meth:`MinioECServer.start_node` while objects stay readable).
Both create the bucket ``storeval`` once ready and describe a target ``s3://storeval/testbed`` whose
credentials live in an AWS shared-credentials file under the server's root (never in the target itself).

The binaries are built once into ``cache_dir()/bin`` (``go install`` of a pinned pseudo-version; MinIO
publishes no semver tags, so the proxy serves it only as ``v0.0.0-<date>-<commit>``) and reused afterwards.
"""

from __future__ import annotations

import configparser
import datetime
import fcntl
import hashlib
import hmac
import http.client
import json
import os
import random
import secrets
import shutil
import socket
import subprocess
import time
import xml.etree.ElementTree as ET
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import quote, urlsplit

from .base import LOCALHOST, Server, TestbedError, cache_dir, run, spawn, wait_until

# Pinned 2026-11-21 (when this module was written): what `go list -m github.com/minio/minio@latest` resolved to
# through the module proxy — commit 7aac2a2c5b7c of 2026-02-12, the newest one served; its go.mod needs
# go >= 1.24. It builds with the machine's Go 1.26.8 (CGO_ENABLED=0) and passes tests/test_testbed_minio.py.
# `--version` prints DEVELOPMENT.GOGET for any `go install` build, so the version lives in the file name.
MINIO_MODULE = "github.com/minio/minio"
MINIO_VERSION = "v0.0.0-20260212201848-7aac2a2c5b7c"
# warp (MinIO's S3 benchmark): the proxy refuses warp's version list (403), so `@latest` cannot be resolved;
# v1.0.0 is served (pinned 2026-11-21) and builds with `go build` in a writable copy of the module directory.
WARP_MODULE = "github.com/minio/warp"
WARP_VERSION = "v1.0.0"

BUCKET = "storeval"
REGION = "us-east-1"
BUILD_TIMEOUT = 3600.0  # a cold MinIO build (download included) took 2 min 16 s on 2 cores


# ------------------------------------------------------------------------------------------------ building
def _go_env() -> dict[str, str]:
    go = cache_dir() / "go"
    return {
        "GOMODCACHE": str(go / "mod"),
        "GOCACHE": str(go / "build"),
        "GOPATH": str(go / "path"),
        "GOTOOLCHAIN": "local",  # never download another Go toolchain
        # sum.golang.org is unreachable here; the modules themselves come from the proxy over HTTPS, and
        # every dependency is still checked against the go.sum of minio/warp.
        "GONOSUMDB": f"{MINIO_MODULE},{WARP_MODULE}",
        "GOFLAGS": "-mod=mod -modcacherw -buildvcs=false",  # -modcacherw: the module cache can be removed
        "CGO_ENABLED": "0",  # static binaries, as MinIO's own releases are built
    }


def _require_go(what: str) -> str:
    go = shutil.which("go")
    if go is None:
        raise TestbedError(f"go is not installed: install Go >= 1.24 (https://go.dev/dl) to build {what}")
    return go


def _runs(binary: Path) -> bool:
    if not binary.is_file() or not os.access(binary, os.X_OK):
        return False
    try:
        return subprocess.run([str(binary), "--version"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@contextmanager
def _build_lock() -> Iterator[None]:
    """One Go build at a time per cache directory (MinIO and warp share the module and build caches)."""
    with open(cache_dir() / "go-build.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _clean_go_caches() -> None:
    """Drop the Go caches once the binary is in place: ~1–2 GB of build cache and ~1.2 GB of modules.

    The module cache is dropped too: the binary is only rebuilt when the pinned version changes, and then
    the proxy serves the modules again in about a minute — not worth keeping 1.2 GB for."""
    go = cache_dir() / "go"
    for sub in ("build", "mod", "path", "src", "gobin"):
        path = go / sub
        if path.exists():
            for d, _, _ in os.walk(path):  # module directories are read-only unless built with -modcacherw
                try:
                    os.chmod(d, 0o755)
                except OSError:
                    pass
            shutil.rmtree(path, ignore_errors=True)


def install_minio() -> Path:
    """The MinIO server binary (``cache_dir()/bin/minio-<MINIO_VERSION>``), built on first use (minutes)."""
    binary = cache_dir() / "bin" / f"minio-{MINIO_VERSION}"
    if _runs(binary):
        return binary
    _require_go("MinIO")
    with _build_lock():
        if _runs(binary):  # another process built it while we waited
            return binary
        gobin = cache_dir() / "go" / "gobin"
        try:
            shutil.rmtree(gobin, ignore_errors=True)
            gobin.mkdir(parents=True)
            run(["go", "install", f"{MINIO_MODULE}@{MINIO_VERSION}"], "building minio", timeout=BUILD_TIMEOUT,
                env={**_go_env(), "GOBIN": str(gobin)}, cwd=cache_dir())
            built = gobin / "minio"
            if not _runs(built):
                raise TestbedError(f"building minio failed: {built} was not produced or does not run")
            binary.parent.mkdir(parents=True, exist_ok=True)
            os.replace(built, binary)
        finally:
            _clean_go_caches()
    return binary


def install_warp() -> Path:
    """The warp S3 benchmark binary (``cache_dir()/bin/warp-<WARP_VERSION>``), built on first use."""
    binary = cache_dir() / "bin" / f"warp-{WARP_VERSION}"
    if _runs(binary):
        return binary
    _require_go("warp")
    with _build_lock():
        if _runs(binary):
            return binary
        env = _go_env()
        work = cache_dir() / "go" / "src"
        try:
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            proc = subprocess.run(["go", "mod", "download", "-json", f"{WARP_MODULE}@{WARP_VERSION}"],
                                  capture_output=True, text=True, timeout=BUILD_TIMEOUT, env={**os.environ, **env},
                                  cwd=work)
            try:
                info = json.loads(proc.stdout)
            except ValueError:
                info = {"Error": (proc.stderr or proc.stdout).strip().replace("\n", " | ")}
            if proc.returncode or "Dir" not in info:
                raise TestbedError(f"downloading warp failed: {' '.join(str(info.get('Error', '')).split())}")
            src = work / f"warp-{WARP_VERSION}"
            shutil.copytree(info["Dir"], src)
            for p in [src, *src.rglob("*")]:  # module cache files are read-only; go build may update go.sum
                p.chmod(0o755 if p.is_dir() else 0o644)
            built = work / "warp"
            run(["go", "build", "-o", str(built), "."], "building warp", timeout=BUILD_TIMEOUT, env=env, cwd=src)
            if not _runs(built):
                raise TestbedError(f"building warp failed: {built} was not produced or does not run")
            binary.parent.mkdir(parents=True, exist_ok=True)
            os.replace(built, binary)
        finally:
            _clean_go_caches()
    return binary


# ------------------------------------------------------------------------------------------------ S3 bits
def _sign(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def _s3_put(endpoint: str, access_key: str, secret_key: str, path: str, body: bytes = b"", region: str = REGION,
            timeout: float = 10.0) -> tuple[int, str, str]:
    """A path-style, AWS SigV4-signed ``PUT <path>``; returns (HTTP status, S3 error code, message).

    ``path`` is already URI-encoded (``/bucket`` or ``/bucket/key``); connection errors raise OSError."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise OSError(f"endpoint {endpoint!r} is not an http(s) URL")
    path = parts.path.rstrip("/") + path
    payload_hash = hashlib.sha256(body).hexdigest()
    now = datetime.datetime.now(datetime.timezone.utc)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    headers = {"host": parts.netloc, "x-amz-content-sha256": payload_hash, "x-amz-date": amz_date}
    signed = ";".join(sorted(headers))
    canonical = "\n".join(["PUT", path, "", *(f"{k}:{headers[k]}" for k in sorted(headers)), "", signed,
                           payload_hash])
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = _sign(_sign(_sign(_sign(f"AWS4{secret_key}".encode(), day), region), "s3"), "aws4_request")
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, "
                                f"SignedHeaders={signed}, Signature={signature}")
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


def _http_status(port: int, path: str, timeout: float = 2.0) -> int:
    """Status of ``GET http://127.0.0.1:port/path`` (0 if nothing answers); no proxies involved."""
    conn = http.client.HTTPConnection(LOCALHOST, port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    except OSError:
        return 0
    finally:
        conn.close()


def _bind(family: int, host: str, port: int) -> socket.socket | None:
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.bind((host, port))
        return s
    except OSError:
        s.close()
        return None


def _pick_ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 *and* ::1, below the ephemeral port range when possible.

    MinIO binds its API port on every loopback address (127.0.0.1 and [::1], see getServerListenAddrs in
    cmd/server-main.go), so a port free on 127.0.0.1 alone can still fail with "Specified port is already
    in use" — the failure seen once on a "free" port. Ports below the ephemeral range are also never taken
    as source ports by outgoing connections (the MinIO nodes dial each other) between choice and bind.
    All ``n`` ports are held at once so none is returned twice."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    lo, hi = (20000, low - 1) if low > 21000 else (1024, 65535)
    ipv6 = socket.has_ipv6 and (probe := _bind(socket.AF_INET6, "::1", 0)) is not None
    if ipv6:
        probe.close()
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        for _ in range(100 * n):
            if len(ports) == n:
                return ports
            port = random.randint(lo, hi)
            if port in ports or (s4 := _bind(socket.AF_INET, LOCALHOST, port)) is None:
                continue
            held.append(s4)
            if ipv6:
                if (s6 := _bind(socket.AF_INET6, "::1", port)) is None:
                    continue
                held.append(s6)
            ports.append(port)
        raise TestbedError(f"no {n} free ports on 127.0.0.1 between {lo} and {hi}")
    finally:
        for s in held:
            s.close()


# ------------------------------------------------------------------------------------------------ servers
class MinioServer(Server):
    """One MinIO server process on one data directory (``<root>/data``), bucket ``storeval``."""

    kind = "minio"
    summary = "MinIO S3 server, one process and one drive, bucket 'storeval'"
    target_name = "minio"
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
        return f"http://{LOCALHOST}:{self.state.ports['api']}"

    def credentials(self) -> tuple[str, str]:
        """(access key, secret key) from the credentials file."""
        cp = configparser.ConfigParser()
        if not cp.read(self.credentials_file):
            raise TestbedError(f"{self.kind}: no credentials file {self.credentials_file} (is the server started?)")
        return cp["default"]["aws_access_key_id"], cp["default"]["aws_secret_access_key"]

    def _write_credentials(self) -> None:
        access, secret = "sv" + secrets.token_hex(9), secrets.token_urlsafe(30)
        path = self.credentials_file
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"[default]\naws_access_key_id = {access}\naws_secret_access_key = {secret}\n")
        os.chmod(path, 0o600)

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
        return [[self._binary(), "server", str(self.root / "data"), "--address", f"{LOCALHOST}:{ports['api']}",
                 "--console-address", f"{LOCALHOST}:{ports['console']}"]]

    def _new_ports(self) -> dict[str, int]:
        api, console = _pick_ports(2)
        return {"api": api, "console": console}

    def _listen_ports(self) -> list[int]:
        """The API port of each process, in the order of ``self.state.procs``."""
        return [self.state.ports["api"]]

    def _names(self) -> list[str]:
        return ["minio"]

    def _logs(self) -> list[Path]:
        return [self.log]

    def _prepare(self) -> None:
        (self.root / "data").mkdir(parents=True, exist_ok=True)

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self._binary()
        self._write_credentials()
        self._prepare()
        for attempt in range(1, self.start_attempts + 1):
            self.state.ports = self._new_ports()
            self._on_ports()
            offsets = [log.stat().st_size if log.exists() else 0 for log in self._logs()]
            self.state.procs = [spawn(cmd, name=name, log=log, env=self._proc_env(i))
                                for i, (cmd, name, log) in enumerate(zip(self._commands(self.state.ports),
                                                                         self._names(), self._logs()))]
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
            if all(_http_status(port, "/minio/health/live", 0.5) for port in self._listen_ports()):
                return False
            time.sleep(0.1)
        return False

    def ready(self) -> bool:
        return _http_status(self.state.ports["api"], "/minio/health/live") == 200

    def wait_ready(self, timeout: float = 120) -> None:
        start = time.monotonic()
        super().wait_ready(timeout)
        access, secret = self.credentials()
        last: list[TestbedError] = []

        def bucket() -> bool:
            try:
                create_bucket(self.endpoint, access, secret, BUCKET)
                return True
            except TestbedError as e:  # e.g. XMinioServerNotInitialized while a cluster is forming
                last[:] = [e]
                return False

        try:
            wait_until(bucket, max(10.0, timeout - (time.monotonic() - start)), f"{self.kind}: bucket {BUCKET}",
                       log=self._logs()[0], interval=0.5)
        except TestbedError as e:
            raise TestbedError(f"{e} ({last[0]})" if last else str(e)) from None
        self.state.info["bucket"] = BUCKET

    def targets(self) -> dict[str, dict[str, Any]]:
        return {self.target_name: {"url": f"s3://{BUCKET}/testbed", "endpoint": self.endpoint, "region": REGION,
                                   "credentials_file": str(self.credentials_file)}}


class MinioECServer(MinioServer):
    """Four MinIO processes on four ports, one drive each (``<root>/d1..d4``): one erasure-coded cluster
    (EC:2 by default, so reads and writes go on with any one node stopped). Nodes are numbered 1 to 4."""

    kind = "minio-ec"
    summary = "MinIO S3 cluster, 4 processes with 1 drive each, erasure-coded, bucket 'storeval'"
    target_name = "minio-ec"
    nodes = 4

    @property
    def endpoint(self) -> str:
        return self.state.info["nodes"][0]["endpoint"]

    def _node_ids(self) -> range:
        return range(1, self.nodes + 1)

    def _new_ports(self) -> dict[str, int]:
        ports = _pick_ports(2 * self.nodes)
        out: dict[str, int] = {}
        for i in self._node_ids():
            out[f"node{i}"], out[f"console{i}"] = ports[2 * (i - 1)], ports[2 * (i - 1) + 1]
        return out

    def _on_ports(self) -> None:
        self.state.info["nodes"] = [
            {"name": f"node{i}", "endpoint": f"http://{LOCALHOST}:{self.state.ports[f'node{i}']}",
             "port": self.state.ports[f"node{i}"], "console_port": self.state.ports[f"console{i}"],
             "data": str((self.root / f"d{i}").absolute()), "log": str(self.root / f"node{i}.log"), "proc": i - 1}
            for i in self._node_ids()]

    def _prepare(self) -> None:
        for i in self._node_ids():
            (self.root / f"d{i}").mkdir(parents=True, exist_ok=True)

    def _node_command(self, node: dict[str, Any]) -> list[str]:
        drives = [f"http://{LOCALHOST}:{n['port']}{n['data']}" for n in self.state.info["nodes"]]
        return [self._binary(), "server", "--address", f"{LOCALHOST}:{node['port']}",
                "--console-address", f"{LOCALHOST}:{node['console_port']}", *drives]

    def _commands(self, ports: dict[str, int]) -> list[list[str]]:
        return [self._node_command(n) for n in self.state.info["nodes"]]

    def _listen_ports(self) -> list[int]:
        return [n["port"] for n in self.state.info["nodes"]]

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
        # deployment, waiting ...", forever). _MINIO_SERVER_LOCAL (cmd/endpoint.go, UpdateIsLocal) names the
        # endpoint host:port that is this node's own, which ends that wait; outside containers it is unused.
        node = self.state.info["nodes"][index]
        return {**self._env(), "_MINIO_SERVER_LOCAL": f"{LOCALHOST}:{node['port']}"}

    def ready(self) -> bool:
        nodes = self.state.info.get("nodes", [])
        return (bool(nodes) and all(_http_status(n["port"], "/minio/health/live") == 200 for n in nodes)
                and _http_status(nodes[0]["port"], "/minio/health/cluster") == 200)

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
        ids = [i for i in self._node_ids() if self.node_alive(i)]
        if not ids:
            raise TestbedError(f"{self.kind}: no node is running")

        def check() -> bool:
            for i in ids:
                if not self.node_alive(i):
                    raise TestbedError(f"{self.kind}: node {i} exited; see {self._node(i)['log']}")
            return all(self.writable(i) for i in ids)

        wait_until(check, timeout, f"{self.kind}: writes through nodes {', '.join(map(str, ids))}",
                   log=Path(self._node(ids[0])["log"]), interval=0.5)

    def wait_ready(self, timeout: float = 120) -> None:
        start = time.monotonic()
        super().wait_ready(timeout)
        self.wait_writable(max(10.0, timeout - (time.monotonic() - start)))

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

    def start_node(self, i: int, timeout: float = 120.0) -> None:
        """Start node ``i`` (1–4) again with the same ports, drives and credentials; wait until it answers
        and every running node accepts writes again (see :meth:`writable`)."""
        node = self._node(i)
        idx = node["proc"]
        if self.state.procs[idx].alive():
            return
        log = Path(node["log"])
        proc = spawn(self._node_command(node), name=f"minio node{i}", log=log, env=self._proc_env(idx))
        self.state.procs[idx] = proc

        def up() -> bool:
            if not proc.alive():
                raise TestbedError(f"{self.kind}: node {i} exited while restarting; see {log}")
            return _http_status(node["port"], "/minio/health/live") == 200

        start = time.monotonic()
        wait_until(up, timeout, f"{self.kind} node {i}", log=log)
        self.wait_writable(max(10.0, timeout - (time.monotonic() - start)))


__all__ = ["MINIO_VERSION", "WARP_VERSION", "BUCKET", "install_minio", "install_warp", "create_bucket",
           "MinioServer", "MinioECServer"]
