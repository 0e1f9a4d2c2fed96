"""The measured-operation kernel: the one timed loop every workload runs (data and metadata).

:func:`measure` runs operations ``lo`` … ``hi`` of a sequence of items (offsets or paths), times each into an
:class:`~storeval.core.oplog.OpLog` (its preallocated ``ends``/``lats`` arrays, folded every ``cap``
operations) and returns how many it did. What differs between workloads are parameters, not copies of the
loop:

* ``stamp`` — the (add, tags, view) triple of a write buffer: every sector's tag is set to tag + offset before
  the operation (outside its timing), so no two blocks are alike;
* ``check`` — ``check(item)`` after each operation, raising :class:`VerifyError` on a block that is not what
  its writer wrote;
* ``expect`` — the count the operation must return (a short transfer is an error);
* ``deadline_ns`` — the stonewall: stop after the first operation that ends at or past it;
* ``native`` — a job of the native engine (:mod:`storeval._native`, see docs/kernel.md): the same loop runs
  there, a batch of up to ``cap`` operations at a time outside the GIL; between batches this module folds
  the log (which updates the progress slot and honours STOP), exactly as the Python loop does.

The Python loop is the reference implementation and the fallback where the native engine is missing or the
driver has no raw file descriptor or local paths to give it.
"""

from __future__ import annotations

import os
import threading
import time
from array import array
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from ..core.oplog import OpLog
from ..core.stop import STOP, ClientStopped, PhaseEnded
from .payload import verify_failed

try:  # built by setuptools-rust; optional: without a Rust toolchain storeval runs the Python loop
    from .. import _native
except ImportError:  # pragma: no cover - depends on the install
    _native = None

NEVER = 1 << 62
NO_ARG = object()  # measure's ``arg`` when none is given: op(item) rather than op(item, arg)
PAST_END = object()  # a recover's ``restart`` when the reopened storage already holds every item: nothing is left
Engine = Literal["auto", "python", "psync", "io_uring"]  # the workloads' engine option (auto: native where possible)
# What the native batch returns besides the count done (codes shared with native/src/lib.rs).
OK, DEADLINE, ERRNO, SHORT, VERIFY = range(5)


class ShortTransfer(OSError):
    def __init__(self, got: int, wanted: int) -> None:
        super().__init__(f"short transfer: {got} of {wanted} bytes")
        self.got, self.wanted = got, wanted


def measure(log: OpLog, size: int, items: Sequence, op: Callable | None = None, *, lo: int = 0,
            hi: int | None = None, arg: Any = NO_ARG, expect: int | None = None, stamp: tuple | None = None,
            check: Callable | None = None, deadline_ns: int = NEVER, native: Any = None,
            fail: Callable[[Any, BaseException], BaseException], recover: Callable | None = None) -> int:
    """Time ``op(item)`` (``op(item, arg)`` with ``arg``) for ``items[lo:hi]`` into ``log``, ``size`` bytes each;
    return how many ran. A failure folds what was done; then ``recover(item, exc)`` (degraded mode,
    :mod:`.degraded`) says how to go on: ``(again, op, restart)`` — try the item again (``again``) or go on
    without it, with a new ``op`` (or None: the same), from the item ``restart`` when the storage kept less
    than was acknowledged (a reopened append-only file; None: from the failed item) — or, returning None (and
    without ``recover``), raises ``fail(item, exc)``."""
    hi = len(items) if hi is None else hi
    if native is not None:
        return _native_loop(log, size, items, native, lo, hi, deadline_ns, fail, recover)
    if lo or hi != len(items):
        items = items[lo:hi]
    clock = time.perf_counter_ns
    ends, lats, cap, fold = log.ends, log.lats, log.cap, log.fold
    due = log.due  # fold by then however few operations are buffered (OpLog.due)
    add, tags, view = stamp if stamp is not None else (None, None, None)
    bare = arg is NO_ARG
    i = done = 0
    item = None
    rest = iter(items)
    start = counted = 0  # where the current pass began: its index in items, and the operations done by then
    while True:
        try:
            for item in rest:
                if add is not None:
                    add(tags, item, out=view)
                t0 = clock()
                n = op(item) if bare else op(item, arg)
                t1 = clock()
                if expect is not None and n != expect:
                    raise ShortTransfer(n, expect)
                if check is not None:
                    check(item)
                ends[i] = t1
                lats[i] = t1 - t0
                i += 1
                if i == cap or t1 >= due:
                    fold(i, size)
                    done += i
                    i = 0
                    due = log.due
                if t1 >= deadline_ns:
                    break
            break
        except PhaseEnded:  # a background client's phase ended by its foreground: as at a deadline, all folded
            return done + i
        except ClientStopped:
            raise
        except Exception as e:
            fold(i, size)
            done += i
            i = 0
            decision = recover(item, e) if recover is not None else None
            if decision is None:
                raise fail(item, e) from e
            again, new_op, restart = decision
            if new_op is not None:
                op = new_op
            at = start + (done - counted)  # every item of this pass before the failed one went through
            if restart is PAST_END:
                start = len(items)
            elif restart is not None and restart not in items:  # not an item's start: nothing to go on from
                raise fail(item, e) from e
            else:
                start = items.index(restart) if restart is not None else (at if again else at + 1)
            counted = done
            rest = iter(items[start:])
    log.settle(i, size)
    return done + i


def measure_mixed(logs: tuple[OpLog, ...], sizes: tuple[int, ...], items: Sequence, kinds: Sequence, ops: tuple, *,
                  lo: int = 0, hi: int | None = None, expect: tuple[int | None, ...] | None = None,
                  stamp: tuple | None = None, stamp_kind: int = -1, check: Callable | None = None,
                  check_kind: int = -1, deadline_ns: int = NEVER, interval_ns: int = 0,
                  fail: Callable[[Any, BaseException], BaseException], late: list[int] | None = None) -> int:
    """:func:`measure` for a phase that mixes kinds of operation (reads and writes; creates, stats, reads and
    removes), or paces them (Python loop only).

    Item ``j`` is done by ``ops[kinds[j]]`` and timed into ``logs[kinds[j]]``, ``sizes[kinds[j]]`` bytes, its
    result checked against ``expect[kinds[j]]`` (None: not checked); the buffer of kind ``stamp_kind`` is
    stamped first (outside the timing), an item of kind ``check_kind`` is ``check``-ed after. With
    ``interval_ns`` the loop is open: operation ``k`` may start no sooner than ``k`` intervals after the first,
    one that is late starts at once (so the rate catches up), and the loop returns at the end of its last
    operation's interval, so a held rate is exactly one operation per interval; ``late`` counts (element 0) the
    operations that started more than an interval after their time and keeps (element 1, when there is one) the
    latest end of a paced loop (perf_counter_ns: the end of its last interval, or later). Returns how many ran."""
    hi = len(items) if hi is None else hi
    clock = time.perf_counter_ns
    sleep = time.sleep
    add, tags, view = stamp if stamp is not None else (None, None, None)
    record = tuple(log.add for log in logs)  # bound once: no attribute lookup per operation
    expect = expect if expect is not None else (None,) * len(ops)
    done = behind = 0
    begin = clock()
    item = None
    try:
        for j in range(lo, hi):
            item = items[j]
            k = kinds[j]
            if interval_ns:
                due = begin + done * interval_ns
                now = clock()
                if now < due:
                    sleep((due - now) / 1e9)
                elif now - due > interval_ns:
                    behind += 1
            if k == stamp_kind and add is not None:
                add(tags, item, out=view)
            op = ops[k]
            t0 = clock()
            n = op(item)
            t1 = clock()
            want = expect[k]
            if want is not None and n != want:
                raise ShortTransfer(n, want)
            if k == check_kind and check is not None:
                check(item)
            done += 1
            record[k](t0, t1, sizes[k])  # may end a background client's phase (PhaseEnded) once it has folded
            if t1 >= deadline_ns:
                break
    except PhaseEnded:
        pass  # as at a deadline: what ran is counted, the logs are flushed below
    except ClientStopped:
        raise
    except Exception as e:
        for log in logs:
            log.flush()
        raise fail(item, e) from e
    if interval_ns and done:
        end = begin + done * interval_ns
        now = clock()
        if now < end:
            sleep((end - now) / 1e9)
    ended = clock()
    for log in logs:
        log.flush()
    if late is not None:
        late[0] += behind
        if len(late) > 1:  # when the phase's last paced loop ended (its streams side by side or one after another)
            late[1] = max(late[1], ended)
    return done


def pace_figures(seconds: float, extra: dict[str, Any]) -> dict[str, Any]:
    """A paced client's figures from its record (``extra["pace"]``: the operations per second asked, those that
    started late, the seconds from the phase's start to the end of its paced loops; ``extra["mix"]``: its
    operations of each kind): the share of the pace it held until then (over its phase's ``seconds`` for a
    record without it), for ``client_extra``. What the phase does after its loops (a write's fsync and close,
    which its MiB/s keeps) is not a failure to keep the pace. Empty when the phase was not paced."""
    pace = extra.get("pace")
    if not pace:
        return {}
    seconds = pace.get("seconds") or seconds
    ops = sum(v for k, v in extra.get("mix", {}).items() if k.endswith("_ops"))
    return {"paced_ops_per_s": pace["ops_per_s"], "late_ops": pace["late"],
            "rate_held": ops / seconds / pace["ops_per_s"] if seconds > 0 else 0.0}


def rate_held(clients: list[dict[str, Any]]) -> dict[str, Any]:
    """The phase's lowest share of the pace a client held and the late operations (from :func:`pace_figures`
    of each client), and ``rate-not-held`` when a client fell 2 % or more behind its pace."""
    held = [c["rate_held"] for c in clients if "rate_held" in c]
    if not held:
        return {}
    out: dict[str, Any] = {"rate_held": min(held), "late_ops": sum(c.get("late_ops", 0) for c in clients)}
    if min(held) < 0.98:
        asked = next(c["paced_ops_per_s"] for c in clients if "paced_ops_per_s" in c)
        out["warnings"] = [{"code": "rate-not-held", "message": (
            f"a paced client reached {min(held):.1%} of its rate ({asked:,.0f} operations/s asked); "
            f"{out['late_ops']:,} operations started more than an interval late: the storage or this host could not "
            "keep the pace")}]
    return out


def _native_loop(log: OpLog, size: int, items: Sequence, job: Any, lo: int, hi: int, deadline_ns: int,
                 fail: Callable, recover: Callable | None = None) -> int:
    """Batches of the native loop: each runs up to ``cap`` operations without the GIL, then folds here. Under
    degraded mode (``recover``) the job is one that completes in order (psync: io_uring is not chosen), so a
    failure at ``at`` means everything before it was done and counted."""
    ends, lats = log.ends.buffer_info()[0], log.lats.buffer_info()[0]
    cap, fold = log.cap, log.fold
    pos = lo
    lost = 0
    while pos < hi:
        # a batch ends at the stonewall, or once the log is due to fold (OpLog.due): a slow target's batch of
        # ``cap`` operations would otherwise hold the progress slot still for as long as they take
        until = min(deadline_ns, log.due)
        n, code, value, at = job.run(pos, min(cap, hi - pos), ends, lats, until)
        pos += n
        ended = False
        try:
            fold(n, size)  # updates the progress slot, and raises ClientStopped once STOP is set
        except PhaseEnded:  # a background client's phase ended by its foreground: as at a deadline
            ended = True
        if ended and code in (OK, DEADLINE):
            break
        if code == DEADLINE:
            if until == deadline_ns:
                break
            continue  # the batch ended to fold: go on
        if code != OK:
            item = items[at]
            if code == ERRNO:
                exc: BaseException = (OSError(value, os.strerror(value), item) if isinstance(item, str)
                                      else OSError(value, os.strerror(value)))
            elif code == SHORT:
                exc = ShortTransfer(value, size)
            else:
                exc = verify_failed(item + value)
            decision = recover(item, exc) if recover is not None else None
            if decision is None:
                raise fail(item, exc) from exc
            again, _, restart = decision
            if restart is not None and restart not in items[lo:hi]:
                raise fail(item, exc) from exc
            if restart is not None:  # the storage kept less: what follows it is done again
                pos = lo + items[lo:hi].index(restart)
            else:
                lost += 0 if again else 1
                pos = at if again else at + 1
        if ended:  # the failure above was counted (or recovered): the phase still ends here
            break
    return pos - lo - lost


def run_parallel(calls: list[Callable[[], Any]]) -> None:
    """Run ``calls`` one thread each (the calling thread when there is one); the first real failure sets STOP
    so the others end at their next fold, and is raised."""
    if len(calls) == 1:
        calls[0]()
        return
    failures: list[BaseException] = []

    def work(call: Callable[[], Any]) -> None:
        try:
            call()
        except BaseException as e:  # noqa: BLE001 - handed to the main thread
            failures.append(e)
            if not isinstance(e, PhaseEnded):  # a phase's end reaches the other threads at their own folds
                STOP.set()

    threads = [threading.Thread(target=work, args=(call,), daemon=True) for call in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    real = [e for e in failures if not isinstance(e, ClientStopped)]
    if real:
        raise real[0]
    if failures:
        raise failures[0]


# -- the native engine ------------------------------------------------------------------------------------
def address(buf: Any) -> int:
    """Address of a buffer's first byte (the caller keeps ``buf`` alive while the address is used)."""
    return int(np.frombuffer(buf, dtype=np.uint8).ctypes.data) if len(memoryview(buf)) else 0


_URING: bool | None = None


def io_uring_spin_ns() -> int:
    """How long the native io_uring loop spins on its completion queue before it sleeps (0 without the native
    module): CPU spent for IOPS, which the reports name beside the engine."""
    return int(getattr(_native, "SPIN_NS", 0)) if _native is not None else 0


def io_uring_available() -> bool:
    """Whether this process may use io_uring (a kernel without it, or seccomp/sysctl forbidding it, says no)."""
    global _URING
    if _URING is None:
        _URING = bool(_native is not None and _native.io_uring_available())
    return _URING


def choose_engine(wanted: str, native_io: Any, depth: int = 1, degraded: bool = False) -> tuple[str, str | None]:
    """The engine a phase runs (``python``, ``psync``, ``threads``, ``io_uring`` or ``null``) and, when it is
    not the one asked for, why. ``native_io`` is what the driver offers (:meth:`Driver.native_io`). In degraded
    mode (``on_error`` retry or continue) io_uring is not used: its operations complete out of order, and a
    failed one could not be retried or skipped without counting others twice. A recording driver (``record:
    true``) takes the Python loop: a native engine would do its I/O without the driver seeing it."""
    if wanted == "python":
        return "python", None
    if native_io is not None and native_io.kind == "recording":  # record: true — RecordingDriver.native_io
        return "python", (f"record: true: every operation goes through the driver to be recorded, so the python "
                          f"loop ran, not {'a native engine' if wanted == 'auto' else wanted}")
    why = None
    if native_io is None:
        why = "the target's driver has no file descriptor or local path for a native engine"
    elif _native is None:
        why = "storeval was installed without its native module (no Rust toolchain at install time)"
    if why is not None:
        return "python", (None if wanted == "auto" else f"engine {wanted} is not available ({why}); ran python")
    if native_io.kind == "null":
        return "null", None
    if wanted == "psync" or (wanted == "auto" and depth == 1):
        return ("psync" if depth == 1 else "threads"), None
    if degraded:
        note = None if wanted == "auto" else "engine io_uring does not run under on_error retry or continue; ran threads"
        return ("psync" if depth == 1 else "threads"), note
    if io_uring_available():
        return "io_uring", None
    note = None if wanted == "auto" else "engine io_uring is not available (kernel or seccomp refuses it); ran threads"
    return ("psync" if depth == 1 else "threads"), note


class DataJob:
    """A native data job on one open file: the offsets, buffers, stamp tags or verify pattern, prepared before
    the loop; :func:`measure` runs it with ``native=``. Holds every buffer the native side points into."""

    def __init__(self, engine: str, fd: int, write: bool, bufs: list, size: int, offsets: Sequence,
                 stamp: tuple | None = None, checker: Any = None) -> None:
        self.keep: list[Any] = [bufs, offsets]
        if isinstance(offsets, range):
            offs, start, step = 0, offsets.start, offsets.step
        else:
            if not isinstance(offsets, array) or offsets.typecode != "q":
                offsets = array("q", offsets)
                self.keep.append(offsets)
            offs, start, step = (offsets.buffer_info()[0] if len(offsets) else 0), 0, 0
        tags, base = 0, 0
        if stamp is not None:
            t = np.ascontiguousarray(stamp[1], dtype=np.uint64)
            tags, ntags = int(t.ctypes.data), len(t)
            self.keep.append(t)
        elif checker is not None:
            t = np.ascontiguousarray(checker.tags, dtype=np.uint64)
            tags, ntags, base = int(t.ctypes.data), len(t), address(checker.base)
            self.keep += [t, checker]
        else:
            ntags = 0
        self.job = _native.DataJob(engine, fd, write, [address(b) for b in bufs], size, offs, start, step,
                                   len(offsets), tags, ntags, base)

    def run(self, lo: int, count: int, ends: int, lats: int, deadline_ns: int):
        return self.job.run(lo, count, ends, lats, deadline_ns)


class MetaJob:
    """A native metadata job: one operation (mkdir, rmdir, stat, create, read, unlink) over native paths."""

    def __init__(self, engine: str, op: str, paths: Sequence[str], data: Any = b"", buf: Any = None,
                 expect: int = -1) -> None:
        self.keep = [data, buf]
        self.job = _native.MetaJob(engine, op, [os.fsencode(p) for p in paths], address(data) if data is not None else 0,
                                   len(data) if data is not None else 0, address(buf) if buf is not None else 0,
                                   len(buf) if buf is not None else 0, expect)

    def run(self, lo: int, count: int, ends: int, lats: int, deadline_ns: int):
        return self.job.run(lo, count, ends, lats, deadline_ns)
