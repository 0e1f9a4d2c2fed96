"""The job: what every client of a cell receives — typed once, pickled across processes and MPI ranks as is."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Job:
    """One cell as its clients run it. ``params`` is the workload's validated ``Params`` (typed from the
    study to ``os.preadv``: never a dict in between); ``steps`` are (phase, iteration); ``target`` is the
    study's name of the target (errors name it); ``server`` says where the target's server counters are
    (probes/server.py) and ``server_pids`` its processes on this host (empty when unknown); ``seed`` is
    the cell's index (each client derives its random streams from it and its rank)."""

    url: str
    options: dict[str, Any]
    kind: str
    params: Any
    cell_dir: str
    steps: tuple[tuple[str, int], ...]
    seed: int
    keep_cache: bool = False
    probe_interval: float = 1.0
    target: str | None = None
    server: dict[str, Any] = field(default_factory=dict)
    server_pids: tuple[int, ...] = ()
    faulted: tuple[str, ...] = ()  # phases a fault plan strikes: their writes are read back and checked after
    groups: tuple[dict[str, Any], ...] = ()  # the cell's client groups in rank order (core/network.py), or ()
    members: tuple[str, ...] = ()  # client (rank in the cell) -> the name of its group
    netns: tuple[str | None, ...] = ()  # rank -> the network namespace (emulated host) it runs in, None: this one
    host_groups: tuple[tuple[str, ...], ...] = ()  # rank -> its emulated host's control groups (it joins them)
    links: dict[str, Any] = field(default_factory=dict)  # the emulated links the probe side process samples
    peers: dict[str, dict[str, Any]] = field(default_factory=dict)  # parameter -> {target, url, options} it names
    parts: tuple[int, ...] = ()  # the client counts of a workload's parts, in rank order (Workload.client_parts)
    hold: bool = False  # after the last phase the clients wait for the coordinator before cleaning up (Comm.hold)
