"""MPI engine: clients are MPI ranks, on as many hosts as ``mpiexec`` was given (IOR, mdtest and IO500's way).

``mpiexec -n 64 -hostfile hosts storeval run study.yaml`` starts the same command on every rank. Rank 0
plans, stores and reports, and is client 0 of every cell; for each cell it broadcasts the job and the
ranks that take part (the first k in ``placement`` order: ``spread`` round-robin across hosts, ``pack``
host after host, at most ``clients_per_host`` per host); the others wait for the next cell. Participants
run the very same client loop as local processes (engine/clients.py) over a sub-communicator.

* Timestamps: every cell starts with a ping-pong between rank 0 and each participant that measures the
  offset of its monotonic clock (and of its wall clock); records are shifted onto rank 0's clock before they
  are gathered. The ping-pong is repeated at the cell's end: each record carries the offset, its error (half
  the round trip) and the drift over the cell, and analysis/clocks.py flags ``clock-skew``.
* Failures: a rank that raises tells all participants (tag ABORT); they leave their barrier or hot loop,
  clean up and report, and the cell fails with that rank's reason. A rank that shows no progress for the
  phase timeout (each rank reports its signs of progress to rank 0, tag BEAT, a few times a second at most)
  is named (rank, host, phase) and the job is aborted (``MPI_Abort``) after rank 0 has removed the cell's
  files. If ``mpiexec`` itself kills the job (a rank died), the watchdog rank 0 started cleans up and says
  which rank died.
* A lost node: a rank that sends no word for SILENCE seconds (its host down, its network dead: nothing tells
  the launcher) fails its cell naming it and its host; the cell's other participants are stopped and what they
  measured is kept; then the ranks that still answer make a communicator of their own (``Create_group``, a
  collective among them alone) and the run goes on over it, without every rank of the lost hosts. Rank 0 calls
  that roll before every cell: a host lost while no cell used it is found there. MPICH has no fault tolerance:
  the job ends with ``MPI_Abort`` after rank 0 has stored and reported everything (a lost rank's connections
  could hang ``MPI_Finalize``).
* Stop signals: ``mpiexec`` forwards SIGINT and SIGTERM to every rank. Rank 0 stops the cell (ABORT to every
  participant), waits while they clean up and stores it as interrupted; a rank that gets one on its own
  aborts its peers and reports it, and the cell is interrupted the same way.
"""

from __future__ import annotations

import dataclasses

import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from .. import interrupts
from ..probes.sampler import Sampler, start_sampler
from ..probes.server import pids_here
from .clients import run_client
from .forkserver import client_context, start_fork_server
from .watch import GRACE_SECONDS, HangClock, Watch
from ..core.job import Job
from ..core.oplog import P_BEAT, P_BYTES, P_DONE, P_ERRS, P_OPS, P_WAIT, PROGRESS_SLOTS
from ..core.outcome import CellOutcome, PhaseWatcher
from ..core.process import host_facts, process_view, set_process_name
from ..core.stop import STOP, ClientStopped

TAG_ABORT, TAG_DONE, TAG_RESULT, TAG_CLOCK, TAG_BEAT, TAG_REGROUP = 101, 102, 103, 104, 105, 106
TAG_RELEASE = 107  # rank 0 to a cell's first participant, when rank 0 is none: the held clients may clean up
RELEASED = threading.Event()  # rank 0's own client, held after a cell's last phase (Job.hold), waits for it
POLL = 0.001
# seconds between two looks at a pending barrier at most, once a wait has grown long, when this kernel runs more
# ranks than this process may use CPUs (emulated nodes, an oversubscribed node): a look every POLL by hundreds of
# ranks is the CPU they wait for (measured: 128 ranks on 2 CPUs, each switching ~2,300 times a second)
CROWDED_POLL = 0.02
CLOCK_PATIENCE = 2.0  # seconds rank 0 waits for the end-of-cell clock answers of all participants together
BEAT_EVERY = 0.2  # seconds between two progress reports of a rank, at most
ALIVE_EVERY = 1.0  # seconds between two reports of a rank that made no progress: it still answers
SILENCE = 30.0  # seconds without a word from a working rank before it is taken for lost (its host down or gone)
# a rank's state in its progress report (0: working); DONE: its client finished the cell, its clocks and results
# follow (not timed like work, and a peer still waiting at a barrier then waits for nothing)
WAITING, FINISHED, DONE = 1, 2, 3
MPI_ENV = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS", "HYDRA_CONTROL_FD")


def launched_by_mpiexec() -> bool:
    """Whether this process was started by an MPI launcher (checked without initialising MPI)."""
    return any(k in os.environ for k in MPI_ENV)


def world() -> Any:
    """Every rank the job started: point-to-point messages use it (ranks are world ranks everywhere)."""
    from mpi4py import MPI

    return MPI.COMM_WORLD


# the communicator of the ranks that still answer, for collectives (barriers, broadcasts, each cell's split): the
# world until a host is lost, then one made by the ranks left (see MpiEngine.roll_call); () until then
_LIVE: list[Any] = []
# requests of collectives a lost rank will never join: kept (MPI forbids freeing a pending collective's request,
# and mpi4py would free it with the object), never waited on again
_ABANDONED: list[Any] = []


def live() -> Any:
    return _LIVE[-1] if _LIVE else world()


def _make_live(ranks: list[int], epoch: int) -> None:
    """Make the communicator of world ranks ``ranks`` (rank 0 first; every one of them calls this with the same
    list): ``Create_group`` is collective among the group's members alone, so lost ranks take no part."""
    now = live()
    where = world().Get_group().Translate_ranks(ranks, now.Get_group())
    _LIVE.append(now.Create_group(now.Get_group().Incl(where), tag=epoch))


def _asked_to_regroup(longest: float) -> bool:
    """A rank other than 0, waiting for the next cell: rank 0 calls the roll (see :meth:`MpiEngine.roll_call`).
    Answer, then take its word: ``go`` (everyone answered: the wait goes on as it was) or the list of the ranks
    that answered, who make their own communicator; True when the wait must start again on it."""
    w = world()
    if w.Get_rank() == 0 or not w.Iprobe(source=0, tag=TAG_REGROUP):
        return False
    _, epoch = w.recv(source=0, tag=TAG_REGROUP)
    w.send(("here", epoch), dest=0, tag=TAG_REGROUP)
    pause = POLL
    while not w.Iprobe(source=0, tag=TAG_REGROUP):
        time.sleep(pause)
        pause = min(pause * 1.25, longest)
    word = w.recv(source=0, tag=TAG_REGROUP)
    if word[0] == "go":
        return False
    _, epoch, ranks = word
    if w.Get_rank() not in ranks:  # rank 0 stopped waiting for this rank's answer: the job goes on without it
        _forwarded()
        os._exit(1)
    _make_live(ranks, epoch)
    return True


class MpiComm:
    """The Comm protocol over a sub-communicator of the cell's participants, abortable by any of them."""

    def __init__(self, sub: Any, world_comm: Any, world_ranks: list[int], host_leader: bool, cell: int,
                 progress: Any = None, longest_poll: float = POLL) -> None:
        self.sub, self.world, self.world_ranks, self.cell = sub, world_comm, world_ranks, cell
        self.rank, self.size = sub.Get_rank(), sub.Get_size()
        self.host_leader = host_leader
        self.aborted = threading.Event()
        self.progress, self.base = progress, PROGRESS_SLOTS * self.rank
        self.longest_poll = longest_poll  # CROWDED_POLL when this kernel's ranks outnumber its CPUs
        self.parts: list[Any] = []  # the communicators split from this one (freed with it)

    def _wait(self, request: Any) -> Any:
        pause = POLL
        while True:
            done, value = request.test()
            if done:
                return value
            if self.aborted.is_set() or STOP.is_set():
                raise ClientStopped("stopped: another client failed")
            time.sleep(pause)
            pause = min(pause * 1.25, self.longest_poll)

    def barrier(self) -> None:
        p = self.progress
        if p is None:
            self._wait(self.sub.Ibarrier())
            return
        p[self.base + P_WAIT] = 1
        try:
            self._wait(self.sub.Ibarrier())
        finally:
            p[self.base + P_WAIT] = 0
            p[self.base + P_BEAT] = time.monotonic_ns()

    def _allreduce(self, value: int, op: Any) -> int:
        import array

        send, recv = array.array("q", [value]), array.array("q", [0])
        p = self.progress
        if p is not None:
            p[self.base + P_WAIT] = 1
        try:
            self._wait(self.sub.Iallreduce(send, recv, op=op))
        finally:
            if p is not None:
                p[self.base + P_WAIT] = 0
                p[self.base + P_BEAT] = time.monotonic_ns()
        return int(recv[0])

    def allreduce_max(self, value: int) -> int:
        from mpi4py import MPI

        return self._allreduce(value, MPI.MAX)

    def allreduce_min(self, value: int) -> int:
        from mpi4py import MPI

        return self._allreduce(value, MPI.MIN)

    def phase_done(self, steps: int) -> None:
        if self.progress is not None:
            self.progress[self.base + P_DONE] = steps
            self.progress[self.base + P_BEAT] = time.monotonic_ns()
        self.world.send((self.cell, steps), dest=0, tag=TAG_DONE)

    def split(self, color: int) -> MpiComm:
        """A part's own communicator (MPI_Comm_split): its barriers and all-reduces are its clients' alone; it
        keeps this client's progress slots, is aborted with the cell and aborts the whole cell."""
        part = MpiComm(self.sub.Split(color, key=self.rank), self.world, self.world_ranks, self.host_leader,
                       self.cell, self.progress, self.longest_poll)
        part.base, part.aborted = self.base, self.aborted
        self.parts.append(part.sub)
        return part

    def ibarrier(self) -> _MpiArrival:
        return _MpiArrival(self, self.sub.Ibarrier())

    def hold(self) -> None:
        """The cell's first participant waits for rank 0's release (rank 0's own client: :data:`RELEASED`; any
        other: a TAG_RELEASE message of this cell), counted as waiting; then every participant meets it at a
        barrier."""
        if self.rank == 0:
            p = self.progress
            if p is not None:
                p[self.base + P_WAIT] = 1
            try:
                pause = POLL
                while not self._released():
                    if self.aborted.is_set() or STOP.is_set():
                        raise ClientStopped("stopped while held for the coordinator")
                    time.sleep(pause)
                    pause = min(pause * 1.25, max(self.longest_poll, 0.05))
            finally:
                if p is not None:
                    p[self.base + P_WAIT] = 0
                    p[self.base + P_BEAT] = time.monotonic_ns()
        self.barrier()

    def _released(self) -> bool:
        if self.world.Get_rank() == 0:
            return RELEASED.is_set()
        while self.world.Iprobe(source=0, tag=TAG_RELEASE):
            if self.world.recv(source=0, tag=TAG_RELEASE) == self.cell:  # an older cell's is stale
                return True
        return False

    def abort(self) -> None:
        """Tell every other participant to stop (they notice in their next barrier or fold)."""
        me = self.world.Get_rank()
        for r in self.world_ranks:
            if r != me:
                self.world.send(self.cell, dest=r, tag=TAG_ABORT)
        self.aborted.set()


class _MpiArrival:
    """An arrival at MpiComm.ibarrier (MPI_Ibarrier): tested without blocking, waited for abortably."""

    __slots__ = ("comm", "request", "done")

    def __init__(self, comm: MpiComm, request: Any) -> None:
        self.comm, self.request, self.done = comm, request, False

    def test(self) -> bool:
        if not self.done:
            self.done = bool(self.request.Test())
        return self.done

    def wait(self) -> None:
        if not self.done:
            self.comm._wait(self.request)
            self.done = True


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


def _listen(comm: MpiComm, stop: threading.Event) -> None:
    """Background watch of one participant: an ABORT from another participant stops this rank's hot loops
    and barriers; a stop signal this rank received itself stops it and aborts the others; and its signs of
    progress go to rank 0 (tag BEAT: the cell, the last progress stamp, working or waiting in a barrier)."""
    from mpi4py import MPI

    me = comm.world.Get_rank()
    p, base = comm.progress, comm.base
    sent, sent_at = None, 0.0
    while not stop.is_set():
        while comm.world.Iprobe(source=MPI.ANY_SOURCE, tag=TAG_ABORT):
            if comm.world.recv(source=MPI.ANY_SOURCE, tag=TAG_ABORT) == comm.cell:  # older cells' aborts are stale
                comm.aborted.set()
                STOP.set()
        if me != 0 and interrupts.requested() and not STOP.is_set():  # rank 0 stops its cell itself
            STOP.set()
            comm.abort()
        now = time.monotonic()
        beat = (p[base + P_BEAT], WAITING if p[base + P_WAIT] else 0)
        if (beat != sent and now - sent_at >= BEAT_EVERY) or now - sent_at >= ALIVE_EVERY:
            # the phase's bytes, operations and errors ride along, for the live view (report/live.py)
            comm.world.send((comm.cell, *beat, p[base + P_BYTES], p[base + P_OPS], p[base + P_ERRS]), dest=0,
                            tag=TAG_BEAT)
            sent, sent_at = beat, now
        time.sleep(0.01 if comm.longest_poll == POLL else 0.05)


def _boot_id() -> str:
    """This kernel's boot: processes under one boot share one CLOCK_MONOTONIC (perf_counter_ns)."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return f"{socket.gethostname()}-unknown"


def _recv_within(w: Any, source: int, cell: int, until: float | None, longest: float | None = None) -> Any:
    """The next clock message of this cell from ``source`` (older cells' are dropped), or None past ``until``.

    ``longest``: wait by looking, backing off to a look every ``longest`` seconds, instead of in MPI (a rank
    waiting for rank 0 to reach it: MPICH spins in a blocking receive, and a hundred spinning ranks are the CPU
    rank 0 waits for). Without it and ``until``, rank 0 waits in MPI for the fastest reply (the offset's error)."""
    while True:
        pause = POLL
        while (until is not None or longest is not None) and not w.Iprobe(source=source, tag=TAG_CLOCK):
            if until is not None and time.monotonic() > until:
                return None
            time.sleep(pause)
            pause = min(pause * 1.25, longest or POLL)
        msg = w.recv(source=source, tag=TAG_CLOCK)
        if msg[0] == cell:
            return msg[1]


def _clock_offsets(w: Any, ranks: list[int], cell: int, patience: float | None = None,
                   longest: float = POLL) -> dict[int, dict[str, Any]]:
    """Offset of each participant's perf_counter_ns (and wall clock) from rank 0's, NTP-style: three ping-pongs,
    the fastest kept; its half round trip bounds the offset's error. Every participant learns its own.

    With ``patience`` (the end of a cell, when a rank may have failed) nobody waits longer than that for a
    peer; a rank that did not answer gets no entry. ``longest``: see :func:`_recv_within` (the participants)."""
    me = w.Get_rank()
    boot = _boot_id()
    offsets: dict[int, dict[str, Any]] = {0: {"offset_ns": 0, "error_ns": 0, "wall_offset_ns": 0, "same_clock": True}}
    until = None if patience is None else time.monotonic() + patience
    if me == 0:
        for r in ranks:
            if r == 0:
                continue
            best = None
            for _ in range(3):
                t0 = time.perf_counter_ns()
                wall0 = time.time_ns()
                w.send((cell, t0), dest=r, tag=TAG_CLOCK)
                reply = _recv_within(w, r, cell, until)
                if reply is None:
                    break
                t1, wall1 = time.perf_counter_ns(), time.time_ns()
                if best is None or t1 - t0 < best["rtt"]:
                    best = {"rtt": t1 - t0, "offset_ns": reply[0] - (t0 + t1) // 2,
                            "wall_offset_ns": reply[1] - (wall0 + wall1) // 2, "boot": reply[2]}
            else:
                offsets[r] = {"offset_ns": best["offset_ns"], "error_ns": (best["rtt"] + 1) // 2,
                              "wall_offset_ns": best["wall_offset_ns"]}
                if best["boot"] == boot:  # one kernel clock: nothing to shift, the measurement shows its noise
                    offsets[r] = {"offset_ns": 0, "error_ns": 0, "wall_offset_ns": 0, "same_clock": True,
                                  "measured_offset_ns": best["offset_ns"], "measured_error_ns": offsets[r]["error_ns"]}
        for r in ranks:
            if r != 0:
                w.send((cell, offsets.get(r)), dest=r, tag=TAG_CLOCK)
    elif me in ranks:
        wait = None if until is None else until + patience  # rank 0 may spend its patience on another rank first
        for _ in range(3):
            if _recv_within(w, 0, cell, wait, longest) is None:
                return offsets
            w.send((cell, (time.perf_counter_ns(), time.time_ns(), boot)), dest=0, tag=TAG_CLOCK)
        mine = _recv_within(w, 0, cell, wait, longest)
        if mine is not None:
            offsets[me] = mine
    return offsets


def _shift(msgs: list[tuple], start: dict[str, int] | None, end: dict[str, int] | None) -> list[tuple]:
    """Move the timestamps of record messages onto rank 0's clock (the offset measured at the cell's start)
    and note in each record how well that holds: the offset's error and how far it drifted by the cell's end
    (``extra["clock"]``, read by analysis/clocks.py)."""
    if not start:
        return msgs
    offset = start["offset_ns"]
    clock = {**start, "drift_ns": None if not end else end["offset_ns"] - offset,
             "end_error_ns": None if not end else end["error_ns"]}
    out = []
    for m in msgs:
        if m[0] in ("record", "partial"):
            wire = dict(m[2])
            for k in ("start_ns", "end_ns", "barrier_ns"):
                if wire.get(k):
                    wire[k] -= offset
            wire["extra"] = {**(wire.get("extra") or {}), "clock": clock}
            m = (m[0], m[1], wire)
        out.append(m)
    return out


def _ranges(ranks: list[int]) -> str:
    """``0-3,8``: sorted ranks, runs folded."""
    out: list[str] = []
    for r in ranks:
        if out and "-" not in out[-1].split(",")[-1] and int(out[-1]) == r - 1:
            out[-1] = f"{out[-1]}-{r}"
        elif out and "-" in out[-1] and int(out[-1].split("-")[1]) == r - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{r}"
        else:
            out.append(str(r))
    return ",".join(out)


def participate(job: Job, ranks: list[int], leaders: set[int],
                on_start: Callable[[tuple], None] | None = None,
                sample: Callable[[], Sampler | None] | None = None, longest_poll: float = POLL) -> list[tuple] | None:
    """Every world rank calls this for every cell: participants run the client loop; returns their messages.
    ``longest_poll``: the longest pause between two looks at a pending barrier (MpiEngine.longest_poll).
    ``on_start`` (rank 0, in the coordinator's process) is told at once when a phase's timed region begins.
    ``sample`` (the leader of a host other than rank 0's) starts the probe side process of this host: its
    samples, moved onto rank 0's clock, go back with the messages (``("samples", rank, rows)``)."""
    import array

    w = world()
    me = w.Get_rank()
    key = ranks.index(me) if me in ranks else 0
    sub = live().Split(color=0 if me in ranks else 1, key=key)
    cell = job.seed
    offsets = _clock_offsets(w, ranks, cell, longest=longest_poll)
    if me not in ranks:
        sub.Free()
        return None
    progress = array.array("q", bytes(8 * PROGRESS_SLOTS * len(ranks)))
    comm = MpiComm(sub, w, ranks, me in leaders, job.seed, progress, longest_poll)
    progress[comm.base + P_BEAT] = time.monotonic_ns()
    STOP.clear()
    stop = threading.Event()
    listener = threading.Thread(target=_listen, args=(comm, stop), daemon=True)
    listener.start()
    msgs: list[tuple] = []
    sampler = sample() if sample is not None else None

    def send(msg: tuple) -> None:
        if msg[0] == "start":
            if on_start is not None:
                on_start(msg)
            return
        sig = interrupts.received()
        if msg[0] == "stopped" and me != 0 and sig is not None:  # this rank was stopped from outside storeval
            msg = (*msg[:3], interrupts.signal_name(sig))
        msgs.append(msg)

    rows: list[tuple] = []
    try:
        run_client(job, comm, send, progress)
    finally:
        stop.set()
        listener.join(timeout=1)
        w.send((comm.cell, progress[comm.base + P_BEAT], DONE), dest=0, tag=TAG_BEAT)
        if sampler is not None:
            rows = sampler.stop(GRACE_SECONDS if not (STOP.is_set() or comm.aborted.is_set()) else 1.0)
    # the offsets again: how far the clocks drifted over the cell (a rank that failed may not answer)
    failed = STOP.is_set() or comm.aborted.is_set()
    after = {} if failed else _clock_offsets(w, ranks, cell, patience=CLOCK_PATIENCE, longest=longest_poll)
    w.send((comm.cell, 0, FINISHED), dest=0, tag=TAG_BEAT)
    msgs = _shift(msgs, offsets.get(me), after.get(me))
    if rows:
        shift = (offsets.get(me) or {}).get("offset_ns", 0)
        msgs.append(("samples", key, [(t - shift, *rest) for t, *rest in rows]))
    for part in comm.parts:
        part.Free()
    sub.Free()
    return msgs


class MpiEngine:
    """Rank 0's side: runs cells over the world's ranks. Other ranks sit in :func:`serve`."""

    name = "mpi"

    def __init__(self, placement: str = "spread", clients_per_host: int | None = None) -> None:
        w = world()  # every rank builds one: the allgathers below are collective
        _meet(CROWDED_POLL)  # ranks still importing storeval: wait for them without spinning
        self.size, self.rank = w.Get_size(), w.Get_rank()
        import psutil

        self.hosts = w.allgather(socket.gethostname())
        facts = w.allgather(host_facts() if self.hosts.index(self.hosts[self.rank]) == self.rank else None)
        self.host_facts = [f for f in facts if f is not None]  # one per host, from its first rank
        # a pipe only this rank writes to: it reads EOF the moment the rank's files are released on exit,
        # before MPI or the launcher can react (the watchdog opens its read end through /proc)
        self._hup_read, self._hup_write = os.pipe()
        self.procs = w.allgather((os.getpid(), psutil.Process().create_time(), os.uname().nodename, self._hup_read,
                                  process_view()))
        self.placement, self.per_host = placement, clients_per_host
        boots = w.allgather(_boot_id())  # ranks under one kernel share its CPUs, whatever their host names
        crowded = boots.count(boots[self.rank]) > len(os.sched_getaffinity(0))
        self.longest_poll = CROWDED_POLL if crowded else POLL
        self.ctx: Any = None  # rank 0's multiprocessing context for the probe side process, made when needed
        self.order = placement_order(self.hosts, placement, clients_per_host)
        self.lost: list[int] = []  # ranks of the hosts lost so far (the run goes on without them)
        self.epoch = 0  # roll calls so far (each one's messages and communicator tag)

    def describe_hosts(self) -> list[dict[str, Any]]:
        """Every host the job's ranks run on (name, kernel, OS, CPU, memory), for the run's environment."""
        return self.host_facts

    def processes(self) -> list[dict[str, Any]]:
        """Every rank's PID, start time and host (the watchdog follows this host's ranks from the start)."""
        return [{"rank": r, "pid": pid, "created": created, "host": host, "coordinator": r == 0, "hup": hup,
                 "view": view} for r, (pid, created, host, hup, view) in enumerate(self.procs)]

    def capacity(self) -> int:
        return len(self.order)

    def run_cell(self, job: Job, nclients: int, timeout: float, on_progress=None, on_clients=None,
                 watcher: PhaseWatcher | None = None, feed: Any = None) -> CellOutcome:
        """Run one cell (inside the runner's ``interrupts.deferred()``: a stop signal is acted on between polls)."""
        lost = self._lost_between_cells()  # every live rank answers, or the run goes on without its host
        _meet(self.longest_poll)
        try:
            ranks, members = self.choose(job, nclients)
        except ValueError as e:
            live().bcast(("skip", None, None, None), root=0)
            return CellOutcome(status="failed", error=str(e), events=lost)
        if members:
            job = dataclasses.replace(job, members=members)
        if on_clients is not None:
            on_clients([{"rank": r, "pid": self.procs[r][0], "created": self.procs[r][1], "host": self.procs[r][2],
                         "coordinator": r == 0} for r in ranks])
        leaders = {r for i, r in enumerate(ranks) if self.hosts[r] not in {self.hosts[x] for x in ranks[:i]}}
        live().bcast(("cell", job, ranks, leaders), root=0)
        steps = [tuple(s) for s in job.steps]
        # rank 0's host: its side process samples it, with its clients' /proc/<pid>/io (every other host's
        # leader samples its own: self.host_sampler)
        here = self.procs[0][2]
        local = {r: self.procs[r][0] if self.procs[r][2] == here else None for r in ranks}
        watch = _MpiWatch(steps, ranks, self.hosts, timeout, job.seed, local, watcher)
        RELEASED.clear()
        if job.hold:
            watch.release = _releaser(ranks[0], job.seed)
        result: dict[str, Any] = {}

        def client0() -> None:
            result["msgs"] = participate(job, ranks, leaders, watch.client0_started, longest_poll=self.longest_poll)

        sampler = start_sampler(self._context(), {f"client{i}": pid for i, pid in enumerate(local.values()) if pid},
                                job.probe_interval, servers=tuple(pids_here(job.server)))
        t = threading.Thread(target=client0, daemon=True)
        t.start()
        try:
            watch.loop(t, on_progress, sampler, feed)
        except RankHung as e:  # the job cannot go on: the caller cleans up, stores and aborts it
            STOP.set()
            t.join(GRACE_SECONDS)  # rank 0's own client removes what it made: not while the caller cleans the cell
            if sampler is not None:
                sampler.stop(1.0)
            return CellOutcome(status="failed", error=str(e), failed_step=e.step, fatal=True,
                               events=[*lost, {"kind": "timeout", "rank": e.ranks[0], "phase": watch.label(e.step),
                                               "message": str(e)}])
        host_samples: list[tuple] = []
        for m in [*(result.get("msgs") or []), *(m for r in ranks[1:] for m in watch.results.get(r, []))]:
            if m[0] == "samples":  # another host's leader sampled its host
                host_samples += m[2]
            else:
                watch.handle(m)
        outcome = watch.outcome()
        outcome.events[:0] = lost
        outcome.samples = sampler.stop(GRACE_SECONDS if outcome.status == "ok" else 1.0) if sampler is not None else []
        outcome.samples += host_samples
        if watch.lost:  # hosts down: the run goes on with the ranks that still answer
            outcome.error = f"{outcome.error}; {self.roll_call(watch.lost)}"
        if watch.unanswered:  # ranks that did not stop: the job cannot go on (rank 0 cleans up, then aborts it)
            who = _ranks_named(watch.unanswered, self.hosts)
            outcome.fatal = True
            outcome.events.append({"kind": "timeout", "rank": watch.unanswered[0], "phase": None,
                                   "message": f"{who} did not stop within {GRACE_SECONDS:g} s"})
        outcome.note_late_stop()
        return outcome

    def choose(self, job: Job, nclients: int) -> tuple[list[int], tuple[str, ...]]:
        """The world ranks of a cell, in client order: the first ``nclients`` in placement order or, for a study
        with client groups, each group's count taken (in placement order) from the ranks its ``hosts`` or
        ``ranks`` rule allows, group after group, and each client's group; rank 0 (whose thread is the
        coordinator's client) first when it takes part. ValueError (one line) when a rule leaves too few ranks."""
        if not job.groups:
            if nclients > len(self.order):
                raise ValueError(f"clients {nclients}: the job has {len(self.order)} ranks left, without the lost "
                                 f"{self._lost_hosts()} (lower --clients, or run again)")
            return self.order[:nclients], ()
        chosen: list[int] = []
        names: list[str] = []
        for g in job.groups:
            hosts, allowed = set(g.get("hosts") or ()), set(g.get("ranks") or ())
            fits = [r for r in self.order if r not in chosen and (not hosts or self.hosts[r] in hosts)
                    and (not allowed or r in allowed)]
            if len(fits) < g["count"]:
                rule = (f"on {', '.join(sorted(hosts))}" if hosts else "") + (
                    f"{' and ' if hosts else ''}among ranks {_ranges(sorted(allowed))}" if allowed else "")
                raise ValueError(f"client group {g['name']} needs {g['count']} ranks{' ' + rule if rule else ''}; the "
                                 f"job has {len(fits)} left there (start more ranks with mpiexec, or lower its count)")
            chosen += fits[:g["count"]]
            names += [g["name"]] * g["count"]
        if 0 in chosen:  # rank 0 (the coordinator's own client) is always the cell's first client
            i = chosen.index(0)
            chosen.insert(0, chosen.pop(i))
            names.insert(0, names.pop(i))
        return chosen, tuple(names)

    def host_sampler(self, job: Job, ranks: list[int], leaders: set[int]) -> Sampler | None:
        """This rank's probe side process for the cell, when it leads its host there and that host is not rank
        0's (rank 0 samples its own): the host's counters and its clients' /proc/<pid>/io, in its namespaces."""
        me = self.rank
        if me not in leaders or self.procs[me][2] == self.procs[0][2]:
            return None
        pids = {f"client{i}": self.procs[r][0] for i, r in enumerate(ranks) if self.procs[r][2] == self.procs[me][2]}
        sampler = start_sampler(self._context(), pids, job.probe_interval, servers=tuple(pids_here(job.server)))
        if sampler is not None:  # sampled from the cell's start, as rank 0's host is
            sampler.wait_first(5.0)
        return sampler

    def _context(self) -> Any:
        if self.ctx is None:
            start_fork_server()
            self.ctx = client_context()
        return self.ctx

    def shutdown(self, code: int = 0) -> None:
        """End the other ranks' :func:`serve` with the job's exit code (every rank exits with the same one)."""
        self._lost_between_cells()
        _meet(self.longest_poll)
        live().bcast(("stop", code, None, None), root=0)
        _settle(self.longest_poll)
        if self.lost:  # a lost rank's connections can hang MPI_Finalize: everything is stored, end the job here
            self.abort_job(code)

    def _lost_hosts(self) -> str:
        return ", ".join(dict.fromkeys(self.hosts[r] for r in self.lost))

    def roll_call(self, silent: list[int]) -> str | None:
        """Ask every live rank but those on the hosts of the ``silent`` ones whether it still answers (it does
        from where it waits for the next cell, see :func:`_meet`), waiting while answers keep coming (SILENCE
        seconds after the last one at most). When all answer and none is silent, they are told to go on as they
        were; else those that answered and rank 0 make the communicator the run goes on with (``Create_group``,
        a collective among them alone) and the ranks left out are lost. What the run's messages say of it, or
        None when nothing changed."""
        from mpi4py import MPI

        w = world()
        down = {self.hosts[r] for r in silent}
        gone = [r for r in self.live_ranks() if self.hosts[r] in down]
        asked = [r for r in self.live_ranks() if r != 0 and r not in gone]
        self.epoch += 1
        epoch = self.epoch
        sends = [w.isend(("ask", epoch), dest=r, tag=TAG_REGROUP) for r in asked]
        answered: set[int] = set()
        last, status = time.monotonic(), MPI.Status()
        while len(answered) < len(asked) and time.monotonic() - last < SILENCE:
            while w.Iprobe(source=MPI.ANY_SOURCE, tag=TAG_REGROUP, status=status):
                source = status.Get_source()
                if w.recv(source=source, tag=TAG_REGROUP) == ("here", epoch):
                    answered.add(source)
                    last = time.monotonic()
            time.sleep(POLL)
        _ABANDONED.extend(s for s in sends if not s.Test())  # to ranks that never answered: pending for ever
        quiet = [r for r in asked if r not in answered]
        ranks = [0, *sorted(answered)]
        if not gone and not quiet:
            for r in asked:
                w.send(("go", epoch), dest=r, tag=TAG_REGROUP)
            return None
        for r in ranks[1:]:
            w.send(("live", epoch, ranks), dest=r, tag=TAG_REGROUP)
        for r in quiet:  # they may answer later, and must not wait for ever: they leave the job
            _ABANDONED.append(w.isend(("live", epoch, ranks), dest=r, tag=TAG_REGROUP))
        _make_live(ranks, epoch)
        self.lost += [r for r in (*gone, *quiet) if r not in self.lost]
        self.order = [r for r in self.order if r not in self.lost]
        hosts = ", ".join(sorted(down | {self.hosts[r] for r in quiet}))
        return (f"the run goes on without {hosts} ({len(ranks)} rank{'s' if len(ranks) > 1 else ''} left, the job "
                "ends with MPI_Abort after the last cell)")

    def _lost_between_cells(self) -> list[dict[str, Any]]:
        """The roll call before a cell (and before the job ends): a rank that does not answer is lost (its host
        went down while no cell used it); the run goes on without its host and the cell's events say so."""
        before = set(self.lost)
        said = self.roll_call([])
        gone = [r for r in self.lost if r not in before]
        if said is None or not gone:
            return []
        return [{"kind": "warning", "rank": gone[0], "phase": None,
                 "message": f"{_ranks_named(gone, self.hosts)} stopped answering between cells: {said}"}]

    def live_ranks(self) -> list[int]:
        return [r for r in range(self.size) if r not in self.lost]

    def abort_job(self, code: int) -> None:
        """End every rank now (a rank hung): MPI_Abort, after rank 0 stored and cleaned up — and after the
        launcher has read what this rank wrote (its last line says why the job ends)."""
        _forwarded()
        world().Abort(code)

    def serve(self) -> int:
        """Ranks other than 0: run the cells rank 0 broadcasts, until it says stop (with the job's exit code).
        A stop signal here stops this rank's part of the running cell (see :func:`_listen`); the job ends
        when rank 0 says so."""
        w = world()
        set_process_name("storeval-rank")
        with interrupts.deferred():
            while True:
                _meet(self.longest_poll)  # the whole of a cell this rank is not in, and rank 0's storing
                what, job, ranks, leaders = live().bcast(None, root=0)
                if what == "skip":  # a cell rank 0 could not place (too few ranks left): the next one
                    continue
                if what == "stop":
                    _settle(self.longest_poll)
                    interrupts.take()  # acted upon: this rank exits with rank 0's code
                    return job
                msgs = participate(job, ranks, leaders, sample=lambda: self.host_sampler(job, ranks, leaders),
                                   longest_poll=self.longest_poll)
                if msgs is not None:
                    w.send(msgs, dest=0, tag=TAG_RESULT)


def _forwarded(patience: float = 10.0) -> None:
    """Flush stdout and stderr and wait while the launcher has not read them: MPI_Abort tears the launcher's
    forwarding down, and what is still in the pipe then never reaches the user. Waits only while a pipe holds
    unread bytes and its reader keeps taking them (at most ``patience`` seconds without progress)."""
    import fcntl
    import stat
    import struct
    import sys
    import termios

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    for fd in (1, 2):
        try:
            if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                continue
            left, since = -1, time.monotonic()
            while time.monotonic() - since < patience:
                n = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
                if n == 0:
                    break
                if n != left:
                    left, since = n, time.monotonic()
                time.sleep(0.005)
        except OSError:
            continue


def _meet(longest: float) -> None:
    """Wait until every live rank is here (a barrier), looking every ``longest`` seconds at most instead of
    spinning in MPI: MPICH's blocking collectives poll, and ranks that wait there for a whole cell they are not
    in, or for peers still starting, take the CPUs the working ranks need when ranks outnumber CPUs. The blocking
    collective that follows finds everyone there. Ranks other than 0 answer rank 0's roll call from here; when
    it leaves a lost rank out, the barrier that rank will never reach is left and the wait goes on among the
    ranks that answered."""
    request = live().Ibarrier()
    pause = POLL
    while not request.Test():
        if _asked_to_regroup(longest):
            _ABANDONED.append(request)
            request, pause = live().Ibarrier(), POLL
            continue
        time.sleep(pause)
        pause = min(pause * 1.25, longest)


def _settle(longest: float = POLL) -> None:
    """Receive the messages nobody waits for any more (late aborts and phase ends), then meet: MPI_Finalize
    with unreceived messages can hang, and a launcher kills the ranks still running when one exits non-zero."""
    from mpi4py import MPI

    w = world()

    def drain() -> None:
        status = MPI.Status()
        while w.Iprobe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=status):
            w.recv(source=status.Get_source(), tag=status.Get_tag())

    drain()
    _meet(longest)
    drain()


def _releaser(first: int, cell: int) -> Callable[[], None]:
    """Rank 0's release of a cell's held clients (MpiComm.hold): its own client's event, or a message to the
    cell's first participant when rank 0 takes no part."""
    def release() -> None:
        if first == 0:
            RELEASED.set()
        else:
            world().send(cell, dest=first, tag=TAG_RELEASE)
    return release


class _MpiWatch(Watch):
    """The local engine's bookkeeping of records and failures, fed by MPI messages instead of a queue."""

    def __init__(self, steps: list[tuple[str, int]], ranks: list[int], hosts: list[str], timeout: float,
                 cell: int, local_pids: dict[int, int | None], watcher: PhaseWatcher | None = None) -> None:
        super().__init__([], steps, len(ranks), None, timeout, watcher)
        self.ranks, self.hosts, self.cell = ranks, hosts, cell
        self.done_steps = {r: 0 for r in ranks}
        self.beats = {r: (0, 0) for r in ranks}  # rank -> (last progress stamp, state: 0 working, 1 waiting, 2 finished)
        self.counters = {r: (0, 0, 0) for r in ranks}  # rank -> its phase's bytes, operations, errors (live view)
        self.results: dict[int, list[tuple]] = {}
        self.unanswered: list[int] = []
        self.lost: list[int] = []  # participants whose host went silent: no result will come from them
        self.local_pids = local_pids
        # when each rank's last word in this cell came; None until its first: a rank still starting its client
        # (hundreds of ranks on few CPUs take a while) is not silent, and the phase timeout bounds its start
        self.heard: dict[int, float | None] = {r: None for r in ranks}

    def step_of_rank(self, rank: int) -> tuple[str, int] | None:
        return self.step_of(self.done_steps.get(self.ranks[rank] if rank < len(self.ranks) else rank, 0))

    def _receive(self) -> bool:
        """Take the progress reports and results that arrived; True if anything did (a sign of life)."""
        from mpi4py import MPI

        w = world()
        got = False
        status = MPI.Status()
        for tag in (TAG_DONE, TAG_BEAT):
            while w.Iprobe(source=MPI.ANY_SOURCE, tag=tag, status=status):
                source = status.Get_source()
                msg = w.recv(source=source, tag=tag)
                if msg[0] != self.cell or source not in self.done_steps:  # an older cell's
                    continue
                got = True
                self.heard[source] = time.monotonic()
                if tag == TAG_DONE:
                    self.done_steps[source] = msg[1]
                else:
                    self.beats[source] = (msg[1], msg[2])
                    if len(msg) > 5:
                        self.counters[source] = (msg[3], msg[4], msg[5])
        for r in self.ranks[1:]:
            if r not in self.results and w.Iprobe(source=r, tag=TAG_RESULT):
                self.results[r] = w.recv(source=r, tag=TAG_RESULT)
                got = True
        return got

    def loop(self, client0: threading.Thread, on_progress, sampler: Sampler | None = None, feed: Any = None) -> None:
        """Until every participant has finished and sent its messages: progress, hangs, stop signals."""
        clock = HangClock(self.timeout, self.local_pids)
        stranded = HangClock(self.stranded_seconds(), self.local_pids)
        last = -1
        stopping_since: float | None = None  # a stop signal came: participants get a grace, not the timeout
        while client0.is_alive() or len(self.results) < len(self.ranks) - 1:
            got = self._receive()
            if sampler is not None:
                sampler.drain()
            self.release_when_done()
            sig = interrupts.take()
            if sig is not None and stopping_since is None:
                self.fail("interrupted", self.step_of(min(self.done_steps.values())), interrupts.reason(sig))
                self.stop_participants()
                stopping_since = time.monotonic()
            current = min(self.done_steps.values())
            if current != last:
                for ended in self.steps[max(last, 0):current]:  # every participant has finished these
                    self.step_ended(ended, time.perf_counter_ns())
                last = current
                if on_progress is not None and current < len(self.steps):
                    on_progress(self.label(self.steps[current]), 0, 0)
            if feed is not None and current < len(self.steps):
                feed.sample(self.label(self.steps[current]), [self.counters[r] for r in self.ranks])
            if stopping_since is not None:
                if got:
                    stopping_since = time.monotonic()
                elif time.monotonic() - stopping_since > GRACE_SECONDS:
                    self.unanswered = [r for r in self.ranks[1:] if r not in self.results]
                    return
            else:
                try:
                    self.check_answering()
                except RankHung as e:  # a host down: stop the others, keep what they measured, go on without it
                    if self.hosts[0] in {self.hosts[r] for r in e.ranks}:
                        raise  # a rank silent beside rank 0 is no lost host: the job cannot go on
                    self.lose(e)
                    stopping_since = time.monotonic()
                    continue
                self.check_hung(clock, stranded)
            time.sleep(0.05)

    def lose(self, e: RankHung) -> None:
        """Every participant on the silent ranks' hosts is lost (a host is down as a whole): the cell fails naming
        them, their results are not waited for, and the other participants are stopped (ABORT)."""
        down = {self.hosts[r] for r in e.ranks}
        self.lost = [r for r in self.ranks if self.hosts[r] in down]
        for r in self.lost:
            self.results.setdefault(r, [])
        self.events.append({"kind": "timeout", "rank": e.ranks[0], "phase": self.label(e.step), "message": str(e)})
        self.fail("failed", e.step, str(e))
        STOP.set()
        w = world()
        for r in self.ranks[1:]:
            if r not in self.lost:
                w.send(self.cell, dest=r, tag=TAG_ABORT)

    def check_hung(self, clock: HangClock, stranded: HangClock) -> None:
        """A working rank without progress for the phase timeout has hung (RankHung). A rank waiting at a barrier
        is excused while its peers are on their way; once a peer has finished the cell that barrier can never
        complete, and the wait is timed by ``stranded`` (STRANDED_SECONDS at most)."""
        finished = [r for r in self.ranks if self.beats[r][1] in (DONE, FINISHED) or r in self.results]
        stuck = []
        for r in self.ranks:
            state = self.beats[r][1]
            if r in self.results or state in (DONE, FINISHED) or (state == WAITING and not finished):
                clock.forget(r)
                stranded.forget(r)
                continue
            mine, other = (stranded, clock) if state == WAITING else (clock, stranded)
            other.forget(r)
            if mine.hung(r, self.beats[r][0]):
                stuck.append(r)
        if not stuck:
            return
        step = self.step_of(min(self.done_steps[r] for r in stuck))
        who = _clients_named(stuck, self.ranks, self.hosts)
        if any(self.beats[r][1] == 0 for r in stuck):
            raise RankHung(f"{who} hung in {self.label(step)} (no progress for the phase timeout of "
                           f"{self.timeout:g} s)", stuck, step)
        done = ", ".join(f"client {self.ranks.index(r)}" for r in finished)
        raise RankHung(self.stranded(who, step, done), stuck, step)

    def check_answering(self) -> None:
        """A rank that has not finished and sent no word for SILENCE seconds (its listener reports at least every
        ALIVE_EVERY, whatever its client does) is lost: its host went down, or its process is gone while the
        launcher does not know (a node whose network died takes its FIN packets with it). RankHung naming it."""
        now = time.monotonic()
        lost = [r for r in self.ranks[1:] if r not in self.results and self.beats[r][1] != FINISHED
                and self.heard[r] is not None and now - self.heard[r] > SILENCE]
        if lost:
            step = self.step_of(min(self.done_steps[r] for r in lost))
            who = _clients_named(lost, self.ranks, self.hosts)
            raise RankHung(f"{who} stopped answering in {self.label(step)}: no word from "
                           f"{'it' if len(lost) == 1 else 'them'} for {SILENCE:g} s (a host down, or a rank gone "
                           "without its launcher knowing)", lost, step)

    def client0_started(self, msg: tuple) -> None:
        """Rank 0 (a thread of this process, on this clock) began a phase's timed region."""
        self.step_started((msg[2], msg[3]), msg[4])

    def stop_participants(self) -> None:
        """Stop rank 0's own client (STOP) and tell every other participant to stop (ABORT)."""
        STOP.set()
        w = world()
        for r in self.ranks[1:]:
            w.send(self.cell, dest=r, tag=TAG_ABORT)


NAMED = 6  # ranks named one by one in a message; beyond, a count and their hosts (a line, not a page, at 512)


def _clients_named(ranks: list[int], participants: list[int], hosts: list[str]) -> str:
    """``client 3 (rank 5 on node2), …``; more than NAMED: the first ones, then how many more and on which hosts."""
    named = [f"client {participants.index(r)} (rank {r} on {hosts[r]})" for r in ranks[:NAMED]]
    return ", ".join(named) + _more(ranks, hosts, "client")


def _ranks_named(ranks: list[int], hosts: list[str]) -> str:
    return ", ".join(f"rank {r} on {hosts[r]}" for r in ranks[:NAMED]) + _more(ranks, hosts, "rank")


def _more(ranks: list[int], hosts: list[str], noun: str) -> str:
    if len(ranks) <= NAMED:
        return ""
    on = sorted({hosts[r] for r in ranks})
    where = ", ".join(on[:NAMED]) + (f" and {len(on) - NAMED} more" if len(on) > NAMED else "")
    return f" and {len(ranks) - NAMED} more {noun}s ({len(ranks)} in all, on {where})"


class RankHung(Exception):
    """A rank did not finish its phase within the timeout: the job must be aborted."""

    def __init__(self, message: str, ranks: list[int], step: tuple[str, int] | None) -> None:
        super().__init__(message)
        self.ranks, self.step = ranks, step


__all__ = ["MpiEngine", "MpiComm", "RankHung", "launched_by_mpiexec", "placement_order"]
