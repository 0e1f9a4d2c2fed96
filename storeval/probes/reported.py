"""What a target's server reports of itself: one :class:`CounterSource` per kind of report, found by the target
option that says where it is. :mod:`.server` reads every source a target names and knows none of them.

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

XRootD's own summary statistics (``kXR_query stats``, the ``link`` section of ``xrd.report``) were tried and
left out: XRootD 5.5.3 adds a connection's bytes to them only when the connection closes, so they cannot be
read at a phase's barriers (measured: 8 MB written on an open connection left ``<in>``/``<out>`` unchanged).

A new source is a subclass added to :data:`SOURCES`; its ``probe`` key is what the analysis reads
(``analysis/sanity.py``), so a stored run keeps its meaning.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import json
import time
from abc import ABC, abstractmethod
from typing import Any, ClassVar
from urllib.parse import quote, urlsplit

SETTLE_INTERVAL = 0.05  # seconds between the reads of a reported counter that must agree
Counters = dict[str, dict[str, float]]  # per node (or bean): read_bytes / write_bytes


class CounterSource(ABC):
    """Byte counters a server reports of itself, read at a phase's barriers by the host leader."""

    option: ClassVar[str]  # the target option that says where the counters are; a target without it has none
    probe: ClassVar[str]  # the snapshot's key for what was read (stored with the records, read by the analysis)
    name: ClassVar[str]  # how a failure names the source: "<name> failed: <why>"

    @classmethod
    def spec(cls, options: dict[str, Any]) -> dict[str, Any] | None:
        """Plain data the job carries to the host leader (references to credentials only, never keys), from the
        target's options; None when they name no such source."""
        value = options.get(cls.option)
        return {"where": [str(v) for v in value]} if value else None

    def __init__(self, spec: dict[str, Any], timeout: float) -> None:
        self.where: list[str] = list(spec.get("where") or [])
        self.timeout = timeout

    @property
    def still(self) -> float:
        """Seconds the counters must stand still before a reading counts (a server that serves them from a cache)."""
        return 0.0

    @abstractmethod
    def fetch(self) -> Counters:
        """The counters now; OSError or ValueError (one line: what failed) when they cannot be read."""


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


# ------------------------------------------------------------------------------------------------ MinIO
MINIO_SENT, MINIO_RECEIVED = "minio_api_requests_traffic_sent_bytes", "minio_api_requests_traffic_received_bytes"
CREDENTIAL_OPTIONS = ("access_key_env", "secret_key_env", "credentials_file", "profile")
TOKEN_SECONDS = 3600  # lifetime of a metrics bearer token (a new one is signed for every snapshot)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def minio_token(access_key: str, secret_key: str, now: float | None = None) -> str:
    """The bearer token MinIO's metrics endpoints accept (what ``mc admin prometheus generate`` prints)."""
    now = time.time() if now is None else now
    head = _b64(json.dumps({"alg": "HS512", "typ": "JWT"}).encode())
    body = _b64(json.dumps({"exp": int(now) + TOKEN_SECONDS, "sub": access_key, "iss": "prometheus"}).encode())
    signature = hmac.new(secret_key.encode(), f"{head}.{body}".encode(), hashlib.sha512).digest()
    return f"{head}.{body}.{_b64(signature)}"


def parse_minio_metrics(text: str) -> Counters:
    """Per MinIO node (its ``server`` label): the S3 bytes it sent (``read_bytes``: what clients read) and
    received (``write_bytes``), from Prometheus text of ``/minio/metrics/v3/api/requests``."""
    out: Counters = {}
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


class MinioMetrics(CounterSource):
    """MinIO's metrics v3 of each node, with a bearer token signed by the target's own keys."""

    option, probe, name = "metrics_urls", "server_minio", "minio metrics"

    @classmethod
    def spec(cls, options: dict[str, Any]) -> dict[str, Any] | None:
        out = super().spec(options)
        if out is not None:
            out["credentials"] = {k: options[k] for k in CREDENTIAL_OPTIONS if k in options}
        return out

    def __init__(self, spec: dict[str, Any], timeout: float) -> None:
        super().__init__(spec, timeout)
        self.keys: tuple[str, str] | None = None
        self.key_error: str | None = None
        self._resolve_keys(spec.get("credentials") or {})

    def _resolve_keys(self, references: dict[str, Any]) -> None:
        """The target's keys, read the way its driver reads them (and registered as secrets by it)."""
        from ..drivers.s3 import S3Options, credentials  # the one place S3 keys are read

        try:
            key, secret, source = credentials(S3Options(**references))
        except Exception as e:  # noqa: BLE001 - a bad reference makes this source fail, never the cell
            self.key_error = f"its keys could not be read ({type(e).__name__})"
            return
        if key and secret:
            self.keys = (key, secret)
        else:
            self.key_error = f"no keys in {source}"

    def fetch(self) -> Counters:
        if self.keys is None:
            raise OSError(self.key_error or "no keys")
        headers = {"Authorization": f"Bearer {minio_token(*self.keys)}"}
        out: Counters = {}
        for url in self.where:
            out.update(parse_minio_metrics(http_get(url, self.timeout, headers)))
        return out


# ------------------------------------------------------------------------------------------------ HDFS
JMX_QUERY = "/jmx?qry=" + quote("Hadoop:service=DataNode,name=DataNodeActivity-*", safe=":=,*")
JMX_PERIOD = 10.0  # Hadoop's default metrics period (seconds): how often its JMX values are refreshed


def parse_jmx(text: str) -> Counters:
    """Per datanode (its ``DataNodeActivity-*`` bean): ``BytesRead`` and ``BytesWritten``."""
    beans = json.loads(text).get("beans") or []
    out = {b["name"]: {"read_bytes": float(b["BytesRead"]), "write_bytes": float(b["BytesWritten"])}
           for b in beans if "BytesRead" in b and "BytesWritten" in b}
    if not out:
        raise ValueError("no DataNodeActivity bean with BytesRead/BytesWritten (is it a datanode's HTTP port?)")
    return out


class DatanodeJmx(CounterSource):
    """HDFS datanodes' JMX at their HTTP ports, waited out for two of Hadoop's metrics periods."""

    option, probe, name = "jmx", "server_jmx", "datanode jmx"

    @classmethod
    def spec(cls, options: dict[str, Any]) -> dict[str, Any] | None:
        out = super().spec(options)
        if out is not None:
            out["period"] = float(options.get("jmx_period", JMX_PERIOD))
        return out

    def __init__(self, spec: dict[str, Any], timeout: float) -> None:
        super().__init__(spec, timeout)
        self.period = float(spec.get("period", JMX_PERIOD))

    @property
    def still(self) -> float:
        return 2 * self.period + SETTLE_INTERVAL

    def fetch(self) -> Counters:
        out: Counters = {}
        for address in self.where:
            out.update(parse_jmx(http_get(f"http://{address}{JMX_QUERY}", self.timeout)))
        return out


SOURCES: tuple[type[CounterSource], ...] = (MinioMetrics, DatanodeJmx)  # read in this order

__all__ = ["CounterSource", "SOURCES", "SETTLE_INTERVAL", "http_get", "minio_token", "parse_minio_metrics",
           "parse_jmx"]
