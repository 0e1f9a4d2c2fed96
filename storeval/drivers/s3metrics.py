"""MinIO's own report of what it moved, for ``s3`` targets (``S3Driver.counter_sources``).

MinIO's Prometheus metrics (``metrics_urls``: each node's ``http://HOST:9000/minio/metrics/v3/api/requests``):
the cumulative S3 bytes each node sent and received (``minio_api_requests_traffic_sent_bytes`` /
``..._received_bytes``, ``type="s3"``), summed over the nodes. Metrics v3, because v2's ``minio_s3_traffic_*``
(``/minio/v2/metrics/node`` and ``/cluster``) are served from a cache refreshed every few seconds (measured: a
1 MB PUT unseen there 2 s later, seen at once in v3), so they cannot be read at a phase's barriers; v3 reports
only the node asked, hence one URL per node. The request carries a bearer token signed with the target's own
keys, as ``mc admin prometheus generate`` makes it (HS512, issuer ``prometheus``), so it works against any
MinIO whose keys may read metrics.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any

from ..core.reported import CounterSource, Counters, http_get


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
        from .s3 import S3Options, credentials  # the one place S3 keys are read

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


__all__ = ["MinioMetrics", "minio_token", "parse_minio_metrics"]
