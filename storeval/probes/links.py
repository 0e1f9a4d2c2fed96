"""Counters of the testbed's emulated hosts and links, read by the probe side process every interval.

What one emulated host sent and received is counted at its own interface (``eth0`` inside its namespace): bytes
and packets each way and the drops the kernel counted there. Its link's rate limit is a ``tbf`` queue on each
direction (one in the host's namespace, one in the switch's): its backlog (bytes queued now), drops (what the
queue refused) and overlimits tell a saturated link from a slow server. The delay relay (testbed/relay.py) says
what it dropped for the loss setting or a full queue and the delay it really added. What ran on the host — the
servers placed there, the clients and ranks launched there — is its control groups (testbed/cgroups.py): their
CPU seconds (user and kernel), the seconds their tasks waited for I/O, a CPU and memory, and what they read and
wrote on disk. The description of where to read each (``spec``) comes from the testbed's network
(``Network.probe_spec()``): {host: {"netns", "dev", "tbf": [[netns, dev], ...], "relay_stats": path or None,
"cgroup"/"blkio": the host's groups or None}}.

Each namespace is asked once per sample (``ip -s -j link``, ``tc -s -j qdisc``); a reading that fails leaves
that host's counters out of the sample, never the sampler down.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from typing import Any

from .cgroup import read_blkio, read_groups

TIMEOUT = 5.0


def _json(argv: list[str]) -> Any:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode:
        return None
    try:
        return json.loads(proc.stdout or "null")
    except ValueError:
        return None


def _links(netns: str) -> dict[str, dict[str, Any]]:
    out = {}
    for link in _json(["ip", "-n", netns, "-s", "-j", "link", "show"]) or []:
        if isinstance(link, dict) and "ifname" in link:
            out[link["ifname"]] = link.get("stats64") or link.get("stats") or {}
    return out


def _qdiscs(netns: str) -> dict[str, dict[str, Any]]:
    out = {}
    for q in _json(["tc", "-n", netns, "-s", "-j", "qdisc", "show"]) or []:
        if isinstance(q, dict) and q.get("kind") == "tbf" and "dev" in q:
            out[q["dev"]] = q
    return out


def link_counters(spec: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """{host: {metric: cumulative value}} for the ``link`` probe of the samples table."""
    links: dict[str, dict[str, dict[str, Any]]] = {}
    qdiscs: dict[str, dict[str, dict[str, Any]]] = {}
    out: dict[str, dict[str, float]] = {}
    for host, where in spec.items():
        ns = where.get("netns")
        if not ns:
            continue
        if ns not in links:
            links[ns] = _links(ns)
        stats = links[ns].get(where.get("dev", "eth0"))
        if not stats:
            continue
        rx, tx = stats.get("rx") or {}, stats.get("tx") or {}
        row = {"rx_bytes": float(rx.get("bytes", 0)), "tx_bytes": float(tx.get("bytes", 0)),
               "rx_packets": float(rx.get("packets", 0)), "tx_packets": float(tx.get("packets", 0)),
               "drops": float(rx.get("dropped", 0)) + float(tx.get("dropped", 0))}
        backlog = drops = overlimits = 0.0
        for qns, dev in where.get("tbf") or []:
            if qns not in qdiscs:
                qdiscs[qns] = _qdiscs(qns)
            q = qdiscs[qns].get(dev)
            if q:
                backlog += float(q.get("backlog", 0))
                drops += float(q.get("drops", 0))
                overlimits += float(q.get("overlimits", 0))
        if where.get("tbf"):
            row.update({"tbf_backlog_bytes": backlog, "tbf_drops": drops, "tbf_overlimits": overlimits})
        group = where.get("cgroup")
        if group:  # what ran on the host, counted as a whole (probes/cgroup.py): its CPU and its tasks' I/O wait
            row.update(read_groups([group]).get(group, {}))
        if where.get("blkio"):  # ... and what they read and wrote on disk
            row.update(read_blkio(where["blkio"], recursive=True))
        path = where.get("relay_stats")
        if path:
            with contextlib.suppress(OSError, ValueError):
                with open(path, encoding="utf-8") as f:
                    relay = json.load(f)
                for key in ("dropped_loss", "dropped_queue", "queue_bytes", "held_mean_s"):
                    if isinstance(relay.get(key), (int, float)):
                        row[f"relay_{key}"] = float(relay[key])
        out[host] = row
    return out


__all__ = ["link_counters"]
