"""Degraded mode (issue 15): ``on_error`` fail, retry (until ``retry_for``) or continue, in the kernel's
Python loop and its native loop, with every error counted by kind and second."""

from __future__ import annotations

import os
import time

import pytest

from storeval.core.oplog import OpLog, PhaseRecorder
from storeval.workloads import kernel
from storeval.workloads.bandwidth import BandwidthParams
from storeval.workloads.toolkit import IOFailure, run_ops
from storeval.workloads.degraded import Degraded, PhaseErrors

SIZE = 10


def recorder() -> PhaseRecorder:
    rec = PhaseRecorder(0, "read")
    rec.begin()
    return rec


class Flaky:
    """A transfer that fails ``times`` times at each offset of ``bad`` (an EIO, as a disk would give), then works."""

    def __init__(self, bad: set[int], times: int = 10**9, exc: BaseException | None = None) -> None:
        self.left = {off: times for off in bad}
        self.exc = exc or OSError(5, "Input/output error")
        self.calls = 0

    def __call__(self, bufs, off: int) -> int:
        self.calls += 1
        if self.left.get(off, 0) > 0:
            self.left[off] -= 1
            raise self.exc
        return SIZE


def test_continue_skips_the_failed_operations_and_counts_them():
    rec, log = recorder(), OpLog(0, 4)
    errors = PhaseErrors(rec)
    io = Flaky({30, 70})
    done = run_ops(io, [bytearray(SIZE)], range(0, 100, SIZE), log, SIZE,
                   recover=Degraded("continue", 120, errors))
    assert done == 8 and log.ops == 8 and log.bytes == 80 and io.calls == 10
    assert rec.errors == {"EIO": 2}
    assert rec.extra["degraded"] == {"retried": 0, "lost": 2}
    assert sum(rec.extra["error_timeline"]["EIO"]) == 2
    assert rec.extra["error_samples"]["EIO"] == "Input/output error"


def test_retry_tries_the_same_operation_again_until_it_works():
    rec, log = recorder(), OpLog(0, 4)
    io = Flaky({40}, times=3, exc=ConnectionRefusedError(111, "Connection refused"))
    done = run_ops(io, [bytearray(SIZE)], range(0, 100, SIZE), log, SIZE,
                   recover=Degraded("retry", 120, PhaseErrors(rec)))
    assert done == 10 and log.ops == 10 and io.calls == 13
    assert rec.errors == {"ECONNREFUSED": 3} and rec.extra["degraded"] == {"retried": 3, "lost": 0}


def test_retry_gives_up_when_the_window_has_passed():
    rec, log = recorder(), OpLog(0, 4)
    io = Flaky({20})
    t0 = time.monotonic()
    with pytest.raises(IOFailure, match="at offset 20") as e:
        run_ops(io, [bytearray(SIZE)], range(0, 100, SIZE), log, SIZE,
                recover=Degraded("retry", 0.3, PhaseErrors(rec)))
    assert time.monotonic() - t0 >= 0.3  # it tried for the whole window
    assert e.value.kind == "EIO" and log.ops == 2
    assert rec.extra["degraded"]["retried"] >= 2 and rec.errors["EIO"] == rec.extra["degraded"]["retried"] + 1


def test_a_reopened_handle_is_the_operation_that_goes_on():
    rec, log = recorder(), OpLog(0, 4)
    broken = Flaky(set(range(0, 100, SIZE)))  # a handle that broke: every call fails
    fresh = Flaky(set())
    reopened = []

    def reopen():
        reopened.append(True)
        return (lambda off: fresh(None, off)), None

    done = kernel.measure(log, SIZE, range(0, 100, SIZE), lambda off: broken(None, off), expect=SIZE,
                          fail=IOFailure, recover=Degraded("retry", 120, PhaseErrors(rec), reopen=reopen))
    assert done == 10 and broken.calls == 1 and fresh.calls == 10 and reopened == [True]


@pytest.mark.skipif(kernel._native is None, reason="storeval was built without its native module")
@pytest.mark.parametrize("policy", ["continue", "fail"])
def test_the_native_loop_obeys_the_policy(tmp_path, policy):
    """Writes to a file opened read-only fail with EBADF at every offset, in the native psync loop too."""
    f = tmp_path / "x"
    f.write_bytes(bytes(64 * 1024))
    fd = os.open(f, os.O_RDONLY)
    try:
        buf = bytearray(4096)
        job = kernel.DataJob("psync", fd, True, [buf], 4096, range(0, 64 * 1024, 4096))
        rec, log = recorder(), OpLog(0, 4)
        recover = Degraded(policy, 120, PhaseErrors(rec))
        if policy == "fail":
            with pytest.raises(IOFailure, match="at offset 0"):
                run_ops(None, [buf], range(0, 64 * 1024, 4096), log, 4096, native=job, recover=recover)
        else:
            done = run_ops(None, [buf], range(0, 64 * 1024, 4096), log, 4096, native=job, recover=recover)
            assert done == 0 and log.ops == 0 and rec.extra["degraded"] == {"retried": 0, "lost": 16}
        assert rec.errors == ({"EBADF": 16} if policy == "continue" else {"EBADF": 1})
    finally:
        os.close(fd)


def test_io_uring_is_not_chosen_in_degraded_mode():
    class Fd:
        kind, fd = "fd", 0

    assert kernel.choose_engine("auto", Fd(), 32, degraded=True)[0] == "threads"
    engine, note = kernel.choose_engine("io_uring", Fd(), 32, degraded=True)
    assert engine == "threads" and note == "engine io_uring does not run under on_error retry or continue; ran threads"


def test_the_parameters_are_checked():
    assert BandwidthParams(on_error="retry", retry_for="10s").retry_for == 10.0
    with pytest.raises(ValueError, match="on_error"):
        BandwidthParams(on_error="ignore")
    with pytest.raises(ValueError, match="retry_for"):
        BandwidthParams(retry_for=0)


# -- reading back what a faulted write acknowledged (Workload.check_after) -------------------------------
def _written(tmp_path, **params):
    """A 1 MiB write in 64 KiB blocks on a real file, as a cell whose write a fault struck would run it."""
    from tests.test_kernel import _client, _phase
    from storeval.workloads.bandwidth import Bandwidth

    d = tmp_path / "t"
    d.mkdir()
    wl = Bandwidth(BandwidthParams(file_size=1 << 20, transfer_size=64 << 10, phases=["write"], **params))
    c = _client(f"file://{d}")
    c.faulted = frozenset({"write"})
    wl.prepare(c)
    _phase(wl, c, "write")
    (f,) = list(d.iterdir())
    return wl, c, f


def test_what_came_back_intact_is_counted(tmp_path):
    wl, c, _ = _written(tmp_path)
    assert wl.check_after(c, "write") == {"bytes_checked": 1 << 20, "bytes_intact": 1 << 20, "bytes_lost": 0,
                                          "bytes_corrupted": 0, "bytes_unreadable": 0, "bytes_not_acknowledged": 0}


def test_a_corrupted_and_a_truncated_file_are_found(tmp_path):
    wl, c, f = _written(tmp_path)
    with open(f, "r+b") as fh:  # a sector of the second block overwritten, then the last 64 KiB gone
        fh.seek((64 << 10) + 512)
        fh.write(b"\0" * 512)
        fh.truncate((1 << 20) - (64 << 10))
    out = wl.check_after(c, "write")
    assert out["bytes_checked"] == 1 << 20 and out["bytes_corrupted"] == 64 << 10 and out["bytes_lost"] == 64 << 10
    assert out["bytes_intact"] == (1 << 20) - (128 << 10)
    byte = int(out["first_problem"].removeprefix("byte ").removesuffix(" differs from what was written"))
    assert (64 << 10) + 512 <= byte < (64 << 10) + 1024  # inside the zeroed sector (where its data was not 0)


def test_nothing_is_checked_when_no_fault_struck_the_phase(tmp_path):
    wl, c, _ = _written(tmp_path)
    c.faulted = frozenset()
    assert wl.check_after(c, "write") is None
