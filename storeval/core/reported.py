"""What a target's server reports of itself, in general: a :class:`CounterSource` is one kind of report (a
server's metrics endpoint, its JMX), found by the target option that says where it is. Each driver names the
sources its targets' servers have (``Driver.counter_sources``, e.g. MinIO's metrics for ``s3``, the datanodes'
JMX for ``hdfs``, in the driver's own package); ``probes/server.py`` reads every source a target names and knows
none of them. A source's ``probe`` key is what the analysis reads (``analysis/sanity.py``), so a stored run
keeps its meaning.

XRootD's own summary statistics (``kXR_query stats``, the ``link`` section of ``xrd.report``) were tried and
left out: XRootD 5.5.3 adds a connection's bytes to them only when the connection closes, so they cannot be
read at a phase's barriers (measured: 8 MB written on an open connection left ``<in>``/``<out>`` unchanged).
"""

from __future__ import annotations

import http.client
import importlib
from abc import ABC, abstractmethod
from typing import Any, ClassVar
from urllib.parse import urlsplit

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

    def pending(self) -> bool:
        """True while the source itself knows its counters are not final yet (a record written only when the
        server lets a file go): a reading waits for it to end, as for ``still``."""
        return False

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




def source_class(path: str) -> type[CounterSource]:
    """The source a driver names as ``module:Class``, imported when a probe needs it."""
    module, _, attr = path.partition(":")
    cls = getattr(importlib.import_module(module), attr)
    if not (isinstance(cls, type) and issubclass(cls, CounterSource)):
        raise TypeError(f"{path} is not a CounterSource")
    return cls


__all__ = ["CounterSource", "Counters", "SETTLE_INTERVAL", "http_get", "source_class"]
