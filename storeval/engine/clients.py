"""The per-client loop, the same for local processes and MPI ranks.

Given a job (target, workload, cell directory, phases) and a Comm, a client
connects, prepares (untimed), then for every phase waits at a barrier, runs
its share timed, waits at the closing barrier and sends its record. Whatever
happens, it removes what it created. Messages go out through ``send``:

``("record", rank, wire)``   one finished phase
``("partial", rank, wire)``  the record of a phase that failed part-way
``("error", rank, phase, iteration, message, kind)``
``("stopped", rank, phase)`` the engine stopped this client
``("done", rank)``
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ..drivers import make_driver
from ..drivers.recording import RecordingDriver, recorded_note
from ..errors import error_kind, one_line
from ..probes.counters import read_netdev, read_process_io, snapshot
from ..probes.server import ServerProbe, server_delta, server_spec
from ..workloads.loaded import make_workload  # loads every workload: the fork server preloads them
from ..workloads.base import ClientContext
from ..core.comm import Comm
from ..core.job import Job
from ..core.network import rank_groups
from ..core.process import enter_netns, join_groups
from ..core.oplog import PhaseRecorder
from ..core.stop import ClientStopped

Send = Callable[[tuple], None]


def make_job(*, url: str, options: dict, kind: str, params: Any, cell_dir: str, steps: list[tuple[str, int]],
             seed: int, keep_cache: bool = False, probe_interval: float = 1.0, target: str | None = None,
             faulted: tuple[str, ...] = (), groups: tuple[dict, ...] = (), netns: tuple[str | None, ...] = (),
             host_groups: tuple[tuple[str, ...], ...] = (), links: dict | None = None, peers: dict | None = None,
             parts: tuple[tuple[str, int], ...] = (), hold: bool = False) -> Job:
    """The job every client of a cell receives, with where the target's server counters are found. ``parts``:
    (name, clients) of each part of a workload made of parts (Workload.client_parts): each client's group is
    then its part. ``hold``: the clients keep the cell's data after its last phase until the coordinator
    releases them (a fault plan that waits for the system to heal)."""
    from ..drivers import driver_class

    server = server_spec(options, driver_class(url).counter_sources)
    return Job(url=url, options=options, kind=kind, params=params, cell_dir=cell_dir,
               steps=tuple((str(p), int(i)) for p, i in steps), seed=seed, keep_cache=keep_cache,
               probe_interval=probe_interval, target=target, server=server,
               server_pids=tuple(server.get("pids", ())), faulted=tuple(faulted), groups=tuple(groups),
               members=(tuple(g["name"] for g in rank_groups(tuple(groups))) if groups
                        else tuple(name for name, n in parts for _ in range(n))), netns=tuple(netns),
               host_groups=tuple(tuple(g) for g in host_groups),
               links=dict(links or {}), peers=dict(peers or {}), parts=tuple(n for _, n in parts), hold=hold)


# How a read phase started, as workloads say it (ClientContext.clear_cache and the workloads' own states) → the
# client half of ``rec.extra["cache"]``.
CLIENT_CACHE = {"dropped": "dropped", "invalidated": "fadvise", "kept": "kept", "direct": "direct", "none": "none",
                "warm": "kept", "not-cleared": "kept"}


def cache_record(state: Any, ctx: ClientContext) -> dict[str, str]:
    """``{"client": ..., "server": ...}``: what was done to each page cache before a read phase."""
    if isinstance(state, dict):
        return state
    server = ctx.server_cache  # set by clear_cache in this phase's before_phase
    if server is None:  # not cleared: a server on this host keeps what it cached; a local file system has none
        server = "kept" if ctx.server_pids else ("none" if ctx.driver.caps.client_page_cache else "unknown")
    return {"client": CLIENT_CACHE.get(str(state), "kept"), "server": server}


def record_trace(rec: PhaseRecorder, taken: dict[str, Any]) -> None:
    """The phase's recorded operations into its record: ``extra["trace"]`` (times from the client's start of the
    phase, so the coordinator can put them on the record's clock — an MPI rank's is shifted; the runner takes it
    out and writes it into the results) and ``extra["recorded"]`` (what stays in the store: counts, bound)."""
    rows = taken["rows"]
    rows["t_ns"] -= rec.start_ns
    rec.extra["trace"] = {"rows": rows, "files": taken["files"]}
    rec.extra["recorded"] = {"ops": int(len(rows)), "dropped": int(taken["dropped"]), "bound": int(taken["bound"])}
    rec.extra.setdefault("warnings", []).append({"code": "recorded", "message": recorded_note(taken)})


class HostProbe:
    """The host leader's snapshots: the host's counters and its target's server counters, taken together."""

    def __init__(self, job: Job) -> None:
        self.server = ServerProbe(job.server)

    def snapshot(self) -> dict[str, Any]:
        snap: dict[str, Any] = snapshot()
        snap.update(self.server.snapshot())
        return snap


def _own_io() -> dict[str, float]:
    """This process's /proc/self/io counters (bytes through syscalls, and from/to storage)."""
    return read_process_io({"self": os.getpid()}).get("self", {})


def run_client(job: Job, comm: Comm, send: Send, progress: Any = None) -> None:
    rank = comm.rank
    phase, iteration = "connect", 0
    driver = wl = ctx = None
    cleaned = False
    try:
        if job.netns and job.netns[rank]:  # its group's emulated host: every socket it makes starts there
            try:
                enter_netns(job.netns[rank])
            except OSError as e:
                raise OSError(e.errno, f"client {rank} cannot enter its group's host (network namespace "
                                       f"{job.netns[rank]}): {e.strerror or e}") from None
            if job.host_groups and job.host_groups[rank]:  # counted with what else runs on that host
                join_groups(job.host_groups[rank])
        driver = make_driver(job.url, job.options, client=rank)
        driver.name = job.target
        driver.connect()
        bound = int(getattr(job.params, "record", 0) or 0)
        if bound:  # record: true — every data call of the timed regions becomes a row of the phase's trace
            driver = RecordingDriver(driver, bound)
        wl = make_workload(job.kind, job.params)
        group = job.members[rank] if job.members else None
        leader = getattr(comm, "host_leader", rank == 0)
        ctx = ClientContext(rank=rank, nclients=comm.size, driver=driver, cell_dir=job.cell_dir,
                            seed=job.seed, comm=comm, keep_cache=job.keep_cache, host_leader=leader,
                            server_pids=list(job.server_pids), faulted=frozenset(job.faulted),
                            peers=dict(job.peers))
        host = HostProbe(job) if leader else None
        # the first client on each emulated host counts that host's interface between the same barriers as the
        # leader's counters: the link's bytes of exactly the phase (the sampler's are a second apart)
        link_host = link_dev = None
        if job.netns and job.netns[rank] and job.netns.index(job.netns[rank]) == rank:
            link_host = rank_groups(job.groups)[rank].get("host")
            link_dev = (job.links.get(link_host) or {}).get("dev", "eth0")
        phase, iteration = "prepare", 0
        wl.prepare(ctx)
        comm.barrier()
        for seq, (phase, iteration) in enumerate(job.steps):
            rec = PhaseRecorder(rank, phase, progress, iteration)
            if group is not None:
                rec.extra["group"] = group
            ctx.server_cache = None
            wl.before_phase(ctx, phase)
            rec.clear_progress()
            # The phase's counters span its whole timed region on every host: the leader snapshots while every
            # client is held between two barriers, before the first starts and after the last has ended.
            comm.barrier()
            host0 = host.snapshot() if host is not None else None
            link0 = read_netdev().get(link_dev) if link_host else None
            snapped_ns = time.perf_counter_ns()
            comm.barrier()
            io0 = _own_io()
            if rank == 0:  # the coordinator's fault plan counts from here (sent before the timing starts)
                send(("start", rank, phase, iteration, time.perf_counter_ns()))
            if bound:
                driver.start_phase()
            rec.begin()
            try:
                wl.run_phase(ctx, phase, rec)
            except BaseException:
                rec.finish()
                if bound:
                    driver.take()
                send(("partial", rank, rec.record(0).to_wire()))
                raise
            rec.finish()
            for code, message in driver.take_warnings():
                ctx.warn(rec, code, message)
            if bound:
                record_trace(rec, driver.take())
            io1 = _own_io()
            rec.extra["proc_io"] = {k: io1[k] - io0.get(k, 0) for k in io1}
            if "cache" in rec.extra:
                rec.extra["cache"] = cache_record(rec.extra["cache"], ctx)
            comm.phase_done(seq + 1)
            comm.barrier()
            exit_ns = time.perf_counter_ns()
            if host0 is not None:
                snap_ns = time.perf_counter_ns()
                rec.extra["probes"] = server_delta(host0, host.snapshot())
                # where the leader's snapshots fell: before its start and after every client's end, never inside
                rec.extra["probe_window"] = {"before_start_ns": rec.start_ns - snapped_ns,
                                             "after_end_ns": snap_ns - rec.end_ns}
                rec.extra["host_ram_bytes"] = host0.get("mem", {}).get("mem", {}).get("total_bytes")
            if link0 is not None:
                link1 = read_netdev().get(link_dev) or {}
                rec.extra["link"] = {"host": link_host, **{k: link1.get(k, v) - v for k, v in link0.items()}}
            comm.barrier()  # nobody's next untimed work (set-up, clean-up) may reach the leader's counters
            send(("record", rank, rec.record(exit_ns).to_wire()))
            checked = wl.check_after(ctx, phase)
            if checked is not None:
                send(("checked", rank, phase, iteration, checked))
        if job.hold:  # the data stay while the system heals (the coordinator's fault plan watches it)
            phase, iteration = "hold", 0
            comm.hold()
        phase, iteration = "cleanup", 0
        cleaned = True
        try:
            wl.cleanup(ctx)
        except Exception as e:
            if not job.faulted:
                raise
            # a server a fault stopped may not be back yet: the coordinator cleans up again once it is
            send(("note", rank, "cleanup", f"client {rank} could not clean up while the fault plan was in force "
                                           f"({one_line(e)}); storeval cleans up again after the faults are undone"))
        send(("done", rank))
    except (ClientStopped, threading.BrokenBarrierError):
        send(("stopped", rank, phase))
    except BaseException as e:  # noqa: BLE001 - every failure is reported, then the peers are released
        send(("error", rank, phase, iteration, one_line(e), error_kind(e)))
        try:
            comm.abort()
        except Exception:  # noqa: BLE001
            pass
    finally:
        # After a failure: remove what this client made. A server that stopped answering is not waited for
        # again — the driver fails at once (Driver.check_server) — and the coordinator cleans up after the
        # cell, recording what it could not remove.
        if wl is not None and ctx is not None and not cleaned:
            try:
                wl.cleanup(ctx)
            except Exception:  # noqa: BLE001 - the coordinator cleans up again after the cell
                pass
        if ctx is not None:
            ctx.close_peers()
        if driver is not None:
            try:
                driver.shutdown()
            except Exception:  # noqa: BLE001
                pass
