"""MPI engine: clients are MPI ranks, on as many hosts as ``mpiexec`` was given (IOR, mdtest and IO500's way).

``mpiexec -n 64 -hostfile hosts storeval run study.yaml`` starts the same command on every rank. Rank 0
plans, stores and reports, and is client 0 of every cell; for each cell it broadcasts the job and the
ranks that take part (the first k in ``placement`` order: ``spread`` round-robin across hosts, ``pack``
host after host, at most ``clients_per_host`` per host); the others wait for the next cell. Participants
run the very same client loop as local processes (engine/clients.py) over a sub-communicator.

* Timestamps: every cell starts with a ping-pong between rank 0 and each participant that measures the
  offset of its monotonic clock; records are shifted onto rank 0's clock before they are gathered.
* Failures: a rank that raises tells all participants (tag ABORT); they leave their barrier or hot loop,
  clean up and report, and the cell fails with that rank's reason. A rank that does not finish its phase
  within the phase timeout is named (rank, host, phase) and the job is aborted (``MPI_Abort``) after
  rank 0 has removed the cell's files. If ``mpiexec`` itself kills the job (a rank died), the watchdog
  rank 0 started cleans up and says which rank died.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any

from .clients import run_client
from .local import CellOutcome, _context, _Watch, start_sampler, stop_sampler
from .records import STOP, ClientStopped, set_process_name

TAG_ABORT, TAG_DONE, TAG_RESULT, TAG_CLOCK = 101, 102, 103, 104
POLL = 0.001
MPI_ENV = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS", "HYDRA_CONTROL_FD")


def launched_by_mpiexec() -> bool:
    """Whether this process was started by an MPI launcher (checked without initialising MPI)."""
    return any(k in os.environ for k in MPI_ENV)


def world() -> Any:
    from mpi4py import MPI

    return MPI.COMM_WORLD


class MpiComm:
    """The Comm protocol over a sub-communicator of the cell's participants, abortable by any of them."""

    def __init__(self, sub: Any, world_comm: Any, world_ranks: list[int], host_leader: bool, cell: int) -> None:
        self.sub, self.world, self.world_ranks, self.cell = sub, world_comm, world_ranks, cell
        self.rank, self.size = sub.Get_rank(), sub.Get_size()
        self.host_leader = host_leader
        self.aborted = threading.Event()

    def _wait(self, request: Any) -> Any:
        while True:
            done, value = request.test()
            if done:
                return value
            if self.aborted.is_set() or STOP.is_set():
                raise ClientStopped("stopped: another client failed")
            time.sleep(POLL)

    def barrier(self) -> None:
        self._wait(self.sub.Ibarrier())

    def _allreduce(self, value: int, op: Any) -> int:
        import array

        send, recv = array.array("q", [value]), array.array("q", [0])
        self._wait(self.sub.Iallreduce(send, recv, op=op))
        return int(recv[0])

    def allreduce_max(self, value: int) -> int:
        from mpi4py import MPI

        return self._allreduce(value, MPI.MAX)

    def allreduce_min(self, value: int) -> int:
        from mpi4py import MPI

        return self._allreduce(value, MPI.MIN)

    def phase_done(self, steps: int) -> None:
        self.world.send((self.cell, steps), dest=0, tag=TAG_DONE)

    def abort(self) -> None:
        """Tell every other participant to stop (they notice in their next barrier or fold)."""
        me = self.world.Get_rank()
        for r in self.world_ranks:
            if r != me:
                self.world.send(self.cell, dest=r, tag=TAG_ABORT)
        self.aborted.set()


def placement_order(hosts: list[str], placement: str, per_host: int | None) -> list[int]:
    """World ranks in the order cells take them: rank 0 first, then ``spread`` or ``pack`` across hosts."""
    by_host: dict[str, list[int]] = {}
    for rank, host in enumerate(hosts):
        by_host.setdefault(host, []).append(rank)
    groups = list(by_host.values())  # rank 0's host first: ranks are in order
    if per_host is not None:
        groups = [g[:per_host] for g in groups]
    if placement == "pack":
        return [r for g in groups for r in g]
    order, depth = [], max(len(g) for g in groups)
    for i in range(depth):
        order += [g[i] for g in groups if i < len(g)]
    return order


def _listen_for_abort(comm: MpiComm, stop: threading.Event) -> None:
    """Background watch for an ABORT from another participant: stops this rank's hot loops and barriers."""
    from mpi4py import MPI

    while not stop.is_set():
        while comm.world.Iprobe(source=MPI.ANY_SOURCE, tag=TAG_ABORT):
            if comm.world.recv(source=MPI.ANY_SOURCE, tag=TAG_ABORT) == comm.cell:  # older cells' aborts are stale
                comm.aborted.set()
                STOP.set()
                return
        time.sleep(0.01)


def _clock_offsets(w: Any, ranks: list[int]) -> dict[int, int]:
    """Offset of each participant's perf_counter_ns from rank 0's (NTP-style ping-pong, best of 3)."""
    me = w.Get_rank()
    offsets = {0: 0}
    if me == 0:
        for r in ranks:
            if r == 0:
                continue
            best = None
            for _ in range(3):
                t0 = time.perf_counter_ns()
                w.send(t0, dest=r, tag=TAG_CLOCK)
                tr = w.recv(source=r, tag=TAG_CLOCK)
                t1 = time.perf_counter_ns()
                if best is None or t1 - t0 < best[0]:
                    best = (t1 - t0, tr - (t0 + t1) // 2)
            offsets[r] = best[1]
        for r in ranks:
            if r != 0:
                w.send(offsets[r], dest=r, tag=TAG_CLOCK)
    elif me in ranks:
        for _ in range(3):
            w.recv(source=0, tag=TAG_CLOCK)
            w.send(time.perf_counter_ns(), dest=0, tag=TAG_CLOCK)
        offsets[me] = w.recv(source=0, tag=TAG_CLOCK)
    return offsets


def _shift(msgs: list[tuple], offset: int) -> list[tuple]:
    """Move the timestamps of record messages onto rank 0's clock."""
    out = []
    for m in msgs:
        if m[0] in ("record", "partial"):
            wire = dict(m[2])
            for k in ("start_ns", "end_ns", "barrier_ns"):
                if wire.get(k):
                    wire[k] -= offset
            m = (m[0], m[1], wire)
        out.append(m)
    return out


def participate(job: dict[str, Any], ranks: list[int], leaders: set[int]) -> list[tuple] | None:
    """Every world rank calls this for every cell: participants run the client loop; returns their messages."""
    w = world()
    me = w.Get_rank()
    key = ranks.index(me) if me in ranks else 0
    sub = w.Split(color=0 if me in ranks else 1, key=key)
    offsets = _clock_offsets(w, ranks)
    if me not in ranks:
        sub.Free()
        return None
    comm = MpiComm(sub, w, ranks, me in leaders, job["seed"])
    STOP.clear()
    stop = threading.Event()
    listener = threading.Thread(target=_listen_for_abort, args=(comm, stop), daemon=True)
    listener.start()
    msgs: list[tuple] = []
    try:
        run_client(job, comm, msgs.append)
    finally:
        stop.set()
        listener.join(timeout=1)
    msgs = _shift(msgs, offsets.get(me, 0))
    sub.Free()
    return msgs


class MpiEngine:
    """Rank 0's side: runs cells over the world's ranks. Other ranks sit in :func:`serve`."""

    name = "mpi"

    def __init__(self, placement: str = "spread", clients_per_host: int | None = None) -> None:
        w = world()  # every rank builds one: the allgathers below are collective
        self.size, self.rank = w.Get_size(), w.Get_rank()
        import psutil

        self.hosts = w.allgather(socket.gethostname())
        # a pipe only this rank writes to: it reads EOF the moment the rank's files are released on exit,
        # before MPI or the launcher can react (the watchdog opens its read end through /proc)
        self._hup_read, self._hup_write = os.pipe()
        self.procs = w.allgather((os.getpid(), psutil.Process().create_time(), os.uname().nodename, self._hup_read))
        self.placement, self.per_host = placement, clients_per_host
        self.ctx: Any = None  # rank 0's multiprocessing context for the probe side process, made when needed
        self.order = placement_order(self.hosts, placement, clients_per_host)

    def processes(self) -> list[dict[str, Any]]:
        """Every rank's PID, start time and host (the watchdog follows this host's ranks from the start)."""
        return [{"rank": r, "pid": pid, "created": created, "host": host, "coordinator": r == 0, "hup": hup}
                for r, (pid, created, host, hup) in enumerate(self.procs)]

    def capacity(self) -> int:
        return len(self.order)

    def run_cell(self, job: dict, nclients: int, timeout: float, on_progress=None, on_clients=None) -> CellOutcome:
        w = world()
        ranks = self.order[:nclients]
        if on_clients is not None:
            on_clients([{"rank": r, "pid": self.procs[r][0], "created": self.procs[r][1], "host": self.procs[r][2],
                         "coordinator": r == 0} for r in ranks])
        leaders = {r for i, r in enumerate(ranks) if self.hosts[r] not in {self.hosts[x] for x in ranks[:i]}}
        w.bcast(("cell", job, ranks, leaders), root=0)
        steps = [tuple(s) for s in job["steps"]]
        watch = _MpiWatch(steps, ranks, self.hosts, timeout, job["seed"])
        result: dict[str, Any] = {}

        def client0() -> None:
            result["msgs"] = participate(job, ranks, leaders)

        here = self.procs[0][2]  # rank 0's host: the side process samples it, with its clients' /proc/<pid>/io
        pids = {f"client{i}": self.procs[r][0] for i, r in enumerate(ranks) if self.procs[r][2] == here}
        sampler = start_sampler(self._context(), pids, job.get("probe_interval", 1.0))
        t = threading.Thread(target=client0, daemon=True)
        t.start()
        try:
            watch.loop(t, on_progress)
        except RankHung as e:  # the job cannot go on: the caller cleans up, stores and aborts it
            STOP.set()
            stop_sampler(sampler)
            return CellOutcome(status="failed", error=str(e), failed_step=e.step, fatal=True,
                               events=[{"kind": "timeout", "rank": e.ranks[0], "phase": watch.label(e.step),
                                        "message": str(e)}])
        t.join()
        for m in result.get("msgs") or []:
            watch.handle(m)
        for r in ranks[1:]:
            for m in w.recv(source=r, tag=TAG_RESULT):
                watch.handle(m)
        outcome = watch.outcome()
        outcome.samples = stop_sampler(sampler)
        return outcome

    def _context(self) -> Any:
        if self.ctx is None:
            self.ctx = _context()
        return self.ctx

    def shutdown(self, code: int = 0) -> None:
        """End the other ranks' :func:`serve` with the job's exit code (every rank exits with the same one)."""
        w = world()
        w.bcast(("stop", code, None, None), root=0)
        _settle(w)

    def abort_job(self, code: int) -> None:
        """End every rank now (a rank hung): MPI_Abort, after rank 0 stored and cleaned up."""
        world().Abort(code)

    def serve(self) -> int:
        """Ranks other than 0: run the cells rank 0 broadcasts, until it says stop."""
        w = world()
        set_process_name("storeval-rank")
        while True:
            what, job, ranks, leaders = w.bcast(None, root=0)
            if what == "stop":
                _settle(w)
                return job
            msgs = participate(job, ranks, leaders)
            if msgs is not None:
                w.send(msgs, dest=0, tag=TAG_RESULT)


def _settle(w: Any) -> None:
    """Receive the messages nobody waits for any more (late aborts and phase ends), then meet: MPI_Finalize
    with unreceived messages can hang, and a launcher kills the ranks still running when one exits non-zero."""
    from mpi4py import MPI

    def drain() -> None:
        status = MPI.Status()
        while w.Iprobe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=status):
            w.recv(source=status.Get_source(), tag=status.Get_tag())

    drain()
    w.Barrier()
    drain()


class _MpiWatch(_Watch):
    """The local engine's bookkeeping of records and failures, fed by MPI messages instead of a queue."""

    def __init__(self, steps: list[tuple[str, int]], ranks: list[int], hosts: list[str], timeout: float,
                 cell: int) -> None:
        super().__init__([], steps, len(ranks), None, timeout)
        self.ranks, self.hosts, self.cell = ranks, hosts, cell
        self.done_steps = {r: 0 for r in ranks}

    def loop(self, client0: threading.Thread, on_progress) -> None:
        from mpi4py import MPI

        w = world()
        started = time.monotonic()
        last = -1
        while client0.is_alive():
            while w.Iprobe(source=MPI.ANY_SOURCE, tag=TAG_DONE):
                status = MPI.Status()
                cell, steps = w.recv(source=MPI.ANY_SOURCE, tag=TAG_DONE, status=status)
                if cell == self.cell and status.Get_source() in self.done_steps:
                    self.done_steps[status.Get_source()] = steps
            current = min(self.done_steps.values())
            if current != last:
                last, started = current, time.monotonic()
                if on_progress is not None and current < len(self.steps):
                    on_progress(self.label(self.steps[current]), 0, 0)
            if time.monotonic() - started > self.timeout:
                late = [r for r in self.ranks if self.done_steps[r] <= current]
                step = self.steps[current] if current < len(self.steps) else None
                who = ", ".join(f"client {self.ranks.index(r)} (rank {r} on {self.hosts[r]})" for r in late)
                raise RankHung(f"{who} hung in {self.label(step)} (no end after the phase timeout of "
                               f"{self.timeout:g} s)", late, step)
            time.sleep(0.05)


class RankHung(Exception):
    """A rank did not finish its phase within the timeout: the job must be aborted."""

    def __init__(self, message: str, ranks: list[int], step: tuple[str, int] | None) -> None:
        super().__init__(message)
        self.ranks, self.step = ranks, step


__all__ = ["MpiEngine", "MpiComm", "RankHung", "launched_by_mpiexec", "placement_order"]
