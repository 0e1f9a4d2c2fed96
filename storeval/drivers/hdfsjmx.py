"""HDFS datanodes' own report of what they moved, for ``hdfs`` targets (``HdfsDriver.counter_sources``).

The datanodes' JMX (``jmx: [HOST:PORT, ...]``, their HTTP ports): ``BytesRead``/``BytesWritten`` of each
``Hadoop:service=DataNode,name=DataNodeActivity-*`` bean (a bean seen at several ports counts once). Hadoop
serves them from a cache refreshed once per metrics period (``jmx_period``, ``*.period`` of the datanodes'
hadoop-metrics2.properties, 10 s unless set), from the last periodic snapshot: a value read is up to two
periods old, so a snapshot waits until the counters have stood still for two periods. ``BytesRead`` counts the
checksums a datanode sends with the data (4 bytes per 512: reads show 1.008×).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from ..core.reported import SETTLE_INTERVAL, CounterSource, Counters, http_get


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


__all__ = ["DatanodeJmx", "parse_jmx"]
