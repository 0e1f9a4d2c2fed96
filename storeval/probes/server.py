"""What the SERVER moved: counters of a target's server, read at the instants the host counters are.

An interface counts every process's traffic (loopback above all), so a network target's "moved" bytes come,
best first, from what its server reports itself, then from its processes on this host:

* MinIO's Prometheus metrics (``metrics_urls``: each node's ``http://HOST:9000/minio/metrics/v3/api/requests``):
  the cumulative S3 bytes each node sent and received (``minio_api_requests_traffic_sent_bytes`` /
  ``..._received_bytes``, ``type="s3"``), summed over the nodes. Metrics v3, because v2's
  ``minio_s3_traffic_*`` (``/minio/v2/metrics/node`` and ``/cluster``) are served from a cache refreshed
  every few seconds (measured: a 1 MB PUT unseen there 2 s later, seen at once in v3), so they cannot be read
  at a phase's barriers; v3 reports only the node asked, hence one URL per node. The request carries a
  bearer token signed with the target's own keys, as ``mc admin prometheus generate`` makes it (HS512,
  issuer ``prometheus``), so it works against any MinIO whose keys may read metrics.
* HDFS datanodes' JMX (``jmx: [HOST:PORT, ...]``, their HTTP ports): ``BytesRead``/``BytesWritten`` of each
  ``Hadoop:service=DataNode,name=DataNodeActivity-*`` bean (a bean seen at several ports counts once). Hadoop
  serves them from a cache refreshed once per metrics period (``jmx_period``, ``*.period`` of the datanodes'
  hadoop-metrics2.properties, 10 s unless set), from the last periodic snapshot: a value read is up to two
  periods old, so a snapshot waits until the counters have stood still for two periods. ``BytesRead`` counts
  the checksums a datanode sends with the data (4 bytes per 512: reads show 1.008×).
* The server's processes on this host (``server_pids``, written by ``storeval testbed up``): CPU seconds
  (/proc/PID/stat) and, from /proc/PID/io, the bytes each moved through syscalls (``rchar``/``wchar``) and
  from/to storage (``read_bytes``/``write_bytes``: what its disk did).

Servers count a request when it completes (a datanode adds a block read's bytes when the read op ends), which
may be just after the client has its data: a reported snapshot is taken again until the counters stand still
(the clients are all held at a barrier then, so what still moves is the phase's own work), for at most the
target's timeout beyond the wait a cache needs. A fetch that fails is recorded as ``server_error`` (the failure, in the device key) and the analysis
falls back to the next source and says why.

XRootD's own summary statistics (``kXR_query stats``, the ``link`` section of ``xrd.report``) were tried and
left out: XRootD 5.5.3 adds a connection's bytes to them only when the connection closes, so they cannot be
read at a phase's barriers (measured: 8 MB written on an open connection left ``<in>``/``<out>`` unchanged).

A snapshot is ``{probe: {device: {metric: value}}}`` like ``counters.snapshot`` so ``counters.delta`` and
``counters.merge`` apply; the PIDs are read only on the host (and boot) that wrote them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import json
import os
import time
from typing import Any
from urllib.parse import quote, urlsplit

from ..errors import one_line
from .counters import Snapshot, delta

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
MINIO_SENT, MINIO_RECEIVED = "minio_api_requests_traffic_sent_bytes", "minio_api_requests_traffic_received_bytes"
JMX_QUERY = "/jmx?qry=" + quote("Hadoop:service=DataNode,name=DataNodeActivity-*", safe=":=,*")
CREDENTIAL_OPTIONS = ("access_key_env", "secret_key_env", "credentials_file", "profile")
SETTLE_INTERVAL = 0.05  # seconds between the reads of a reported counter that must agree
JMX_PERIOD = 10.0  # Hadoop's default metrics period (seconds): how often its JMX values are refreshed
TOKEN_SECONDS = 3600  # lifetime of a metrics bearer token (a new one is signed for every snapshot)


def boot_id() -> str:
    """This host's boot id: PIDs in a job mean something only on the host (and boot) that wrote them."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


def server_spec(options: dict[str, Any]) -> dict[str, Any]:
    """Where a target's server counters are, from its options (``metrics_urls``, ``jmx``, ``server_pids``; only
    references to credentials, never keys); empty when unknown."""
    spec: dict[str, Any] = {}
    pids = [int(p) for p in options.get("server_pids") or []]
    if pids:
        spec.update(pids=pids, boot_id=boot_id())
    if options.get("metrics_urls"):
        spec["minio"] = {"urls": [str(u) for u in options["metrics_urls"]],
                         "credentials": {k: options[k] for k in CREDENTIAL_OPTIONS if k in options}}
    if options.get("jmx"):
        spec["jmx"] = [str(a) for a in options["jmx"]]
        spec["jmx_period"] = float(options.get("jmx_period", JMX_PERIOD))
    if spec and "timeout" in options:
        spec["timeout"] = float(options["timeout"])
    return spec


def read_server_processes(pids: list[int]) -> dict[str, dict[str, float]]:
    """Per server process (``name:pid``): CPU seconds (user + system, /proc/PID/stat) and /proc/PID/io."""
    out: dict[str, dict[str, float]] = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
            with open(f"/proc/{pid}/io", encoding="ascii") as f:
                io = dict(line.split(":", 1) for line in f)
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2:].split()
            out[f"{name}:{pid}"] = {
                "cpu_seconds": (int(fields[11]) + int(fields[12])) / TICKS,
                "rchar": float(io["rchar"]), "wchar": float(io["wchar"]),
                "read_bytes": float(io["read_bytes"]), "write_bytes": float(io["write_bytes"])}
        except (OSError, KeyError, ValueError, IndexError):
            continue
    return out


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def minio_token(access_key: str, secret_key: str, now: float | None = None) -> str:
    """The bearer token MinIO's metrics endpoints accept (what ``mc admin prometheus generate`` prints)."""
    now = time.time() if now is None else now
    head = _b64(json.dumps({"alg": "HS512", "typ": "JWT"}).encode())
    body = _b64(json.dumps({"exp": int(now) + TOKEN_SECONDS, "sub": access_key, "iss": "prometheus"}).encode())
    signature = hmac.new(secret_key.encode(), f"{head}.{body}".encode(), hashlib.sha512).digest()
    return f"{head}.{body}.{_b64(signature)}"


def http_get(url: str, timeout: float, headers: dict[str, str] | None = None) -> str:
    """``GET url`` (http or https, no proxies), its body; anything but a 200 raises OSError naming the URL."""
    parts = urlsplit(url)
    conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = conn_cls(parts.netloc, timeout=timeout)
    try:
        conn.request("GET", parts.path + (f"?{parts.query}" if parts.query else ""), headers=headers or {})
        resp = conn.getresponse()
        body = resp.read().decode("utf-8", errors="replace")
    except (OSError, http.client.HTTPException) as e:
        raise OSError(f"{url}: {getattr(e, 'strerror', None) or e or type(e).__name__}") from None
    finally:
        conn.close()
    if resp.status != 200:
        raise OSError(f"{url}: HTTP {resp.status}")
    return body


def parse_minio_metrics(text: str) -> dict[str, dict[str, float]]:
    """Per MinIO node (its ``server`` label): the S3 bytes it sent (``read_bytes``: what clients read) and
    received (``write_bytes``), from Prometheus text of ``/minio/metrics/v3/api/requests``."""
    out: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        name, _, rest = line.partition("{")
        if name not in (MINIO_SENT, MINIO_RECEIVED):
            continue
        labels, _, value = rest.rpartition("}")
        pairs = dict(lv.split("=", 1) for lv in labels.split(",") if "=" in lv)
        if pairs.get("type", '"s3"').strip('"') != "s3":
            continue
        server = pairs.get("server", '""').strip('"')
        out.setdefault(server, {})["read_bytes" if name == MINIO_SENT else "write_bytes"] = float(value.split()[0])
    if not out:
        raise ValueError(f"no {MINIO_SENT} in the metrics (give each node's MinIO metrics v3 URL, "
                         "http://HOST:PORT/minio/metrics/v3/api/requests)")
    return out


def parse_jmx(text: str) -> dict[str, dict[str, float]]:
    """Per datanode (its ``DataNodeActivity-*`` bean): ``BytesRead`` and ``BytesWritten``."""
    beans = json.loads(text).get("beans") or []
    out = {b["name"]: {"read_bytes": float(b["BytesRead"]), "write_bytes": float(b["BytesWritten"])}
           for b in beans if "BytesRead" in b and "BytesWritten" in b}
    if not out:
        raise ValueError("no DataNodeActivity bean with BytesRead/BytesWritten (is it a datanode's HTTP port?)")
    return out


class ServerProbe:
    """The host leader's handle on its target's server counters; ``snapshot()`` reads them all (each fetch of a
    reported counter bounded by the target's timeout)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.pids = spec.get("pids", []) if spec.get("boot_id") == boot_id() else []
        self.timeout = float(spec.get("timeout", 30.0))
        self.minio = spec.get("minio")
        self.jmx = list(spec.get("jmx") or [])
        self.jmx_still = 2 * float(spec.get("jmx_period", JMX_PERIOD)) + SETTLE_INTERVAL
        self.keys: tuple[str, str] | None = None
        self.key_error: str | None = None
        if self.minio:
            self._resolve_keys()

    def _resolve_keys(self) -> None:
        """The target's keys, read the way its driver reads them (and registered as secrets by it)."""
        from ..drivers.s3 import S3Options, _credentials  # the one place S3 keys are read

        try:
            key, secret, source = _credentials(S3Options(**self.minio["credentials"]))
        except Exception as e:  # noqa: BLE001 - a bad reference makes this source fail, never the cell
            self.key_error = f"its keys could not be read ({type(e).__name__})"
            return
        if key and secret:
            self.keys = (key, secret)
        else:
            self.key_error = f"no keys in {source}"

    def _fetch_minio(self) -> dict[str, dict[str, float]]:
        if self.keys is None:
            raise OSError(self.key_error or "no keys")
        headers = {"Authorization": f"Bearer {minio_token(*self.keys)}"}
        out: dict[str, dict[str, float]] = {}
        for url in self.minio["urls"]:
            out.update(parse_minio_metrics(http_get(url, self.timeout, headers)))
        return out

    def _fetch_jmx(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for address in self.jmx:
            out.update(parse_jmx(http_get(f"http://{address}{JMX_QUERY}", self.timeout)))
        return out

    def _settled(self, probe: str, name: str, fetch: Any, snap: Snapshot, still: float = 0.0) -> None:
        """Read a reported counter until it has stood still for ``still`` seconds (and over two reads at
        least), for at most the timeout beyond that; a failure goes into ``server_error`` with what failed,
        never out of here. Counters still moving at the deadline fail too: they say nothing of the phase."""
        start = time.monotonic()
        deadline = start + still + self.timeout
        interval = max(SETTLE_INTERVAL, still / 8)
        try:
            last, since = fetch(), start
            while True:
                time.sleep(interval)
                now, t = fetch(), time.monotonic()
                if now != last:
                    last, since = now, t
                elif t - since >= still:
                    break
                if t > deadline:
                    raise OSError(f"still moving after {t - start:.1f} s")
            snap[probe] = last
        except (OSError, ValueError, KeyError, TypeError) as e:
            why = str(e) if isinstance(e, (OSError, ValueError)) and str(e) else one_line(e)
            snap.setdefault("server_error", {})[f"{name} failed: {why}"] = {"failed": 1.0}

    def snapshot(self) -> Snapshot:
        snap: Snapshot = {}
        if self.pids:
            snap["server"] = read_server_processes(self.pids)
        if self.minio:
            self._settled("server_minio", "minio metrics", self._fetch_minio, snap)
        if self.jmx:
            self._settled("server_jmx", "datanode jmx", self._fetch_jmx, snap, self.jmx_still)
        return snap


def server_delta(start: Snapshot, end: Snapshot) -> Snapshot:
    """``counters.delta`` of two snapshots, keeping a reported source's failure at either end (so the
    analysis can say why it fell back)."""
    out = delta(start, end)
    errors = {**start.get("server_error", {}), **end.get("server_error", {})}
    if errors:
        out["server_error"] = {k: {"failed": 1.0} for k in errors}
    return out
