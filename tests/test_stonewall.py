"""The first-finisher stonewall is measured, not interpolated inside 1-second bins (issue 29.5): each client
records its progress marks (bytes done at the end of every fold), the figure reads the bytes every client had
done when the first one finished from them, and with one client it equals the aggregate."""

from __future__ import annotations

import pytest

from storeval.analysis.figures import bytes_until, phase_figures
from storeval.core.oplog import MAX_MARKS, OpLog, PhaseRecorder
from storeval.core.records import NS, PhaseRecord

from .helpers import load_json, storeval

MiB = 1 << 20


def _log(ends_ns: list[int], size: int, cap: int = 4) -> OpLog:
    """An OpLog fed operations ending at ``ends_ns`` (each ``size`` bytes), folded every ``cap``, as a loop does."""
    log = OpLog(0, cap)
    i = 0
    for t in ends_ns:
        log.ends[i], log.lats[i] = t, 1000
        i += 1
        if i == cap:
            log.fold(i, size)
            i = 0
    log.fold(i, size)
    return log


def test_every_fold_leaves_a_mark_of_the_bytes_done_by_its_last_operation():
    log = _log([10, 20, 30, 40, 50, 60], size=100, cap=4)
    assert log.marks == [(40, 400), (60, 600)]


def test_marks_stay_bounded_whatever_the_phase_length_and_evenly_spaced():
    n = 40 * MAX_MARKS + 3
    log = _log(list(range(1, 4 * n + 1)), size=1, cap=4)  # n folds of 4 operations
    assert MAX_MARKS // 2 <= len(log.marks) <= MAX_MARKS
    assert all(t == b for t, b in log.marks)  # each mark is the bytes done by its own fold's last operation
    assert 4 * n - log.marks[-1][1] < 4 * log.mark_every  # the latest is at most one spacing old
    steps = {b - a for (_, a), (_, b) in zip(log.marks, log.marks[1:])}
    assert len(steps) == 1  # evenly thinned: the same number of folds between any two marks


def test_bytes_until_reads_the_marks_and_interpolates_only_between_two_of_them():
    rec = PhaseRecord(rank=0, host="h", phase="write", bytes=1000, start_ns=NS, end_ns=NS + 1000,
                      tl_bytes=[1000], extra={"marks": [[100, 200], [300, 600], [900, 900]]})
    assert bytes_until(rec, NS + 100) == 200
    assert bytes_until(rec, NS + 200) == 400  # halfway between the marks at 100 and 300
    assert bytes_until(rec, NS + 50) == 100  # from the start (0 bytes) to the first mark
    assert bytes_until(rec, NS + 950) == 950  # after the last mark: what remained, to the phase's end
    assert bytes_until(rec, NS + 1000) == 1000
    old = PhaseRecord(rank=0, host="h", phase="write", bytes=1000, start_ns=NS, end_ns=NS + NS // 2, tl_bytes=[1000])
    assert bytes_until(old, NS + NS // 4) == 500  # a record without marks: within its one-second bin


def test_two_clients_stonewall_from_the_marks_of_the_one_still_running():
    fast = PhaseRecord(rank=0, host="h", phase="read", bytes=100 * MiB, ops=100, start_ns=0, end_ns=NS,
                       tl_bytes=[100 * MiB], tl_ops=[100], extra={"marks": [[NS, 100 * MiB]]})
    # the slow client did 16 MiB by 0.2 s and nothing more until 0.9 s: its 1-second bin would have said 40 MiB
    slow = PhaseRecord(rank=1, host="h", phase="read", bytes=80 * MiB, ops=80, start_ns=0, end_ns=2 * NS,
                       tl_bytes=[16 * MiB, 64 * MiB], tl_ops=[16, 64],
                       extra={"marks": [[NS // 5, 16 * MiB], [NS * 9 // 10, 16 * MiB], [2 * NS, 80 * MiB]]})
    fig = phase_figures("read", "ok", None, [fast, slow], 2)
    assert fig.stonewall_rule == "first-finisher"
    # at 1 s: 100 MiB + the slow one's 16 MiB at 0.9 s and 0.1 s of the 1.1 s its next 64 MiB took
    assert fig.stonewall_MiBps == pytest.approx(100 + 16 + 64 * 0.1 / 1.1)
    del slow.extra["marks"]
    fig = phase_figures("read", "ok", None, [fast, slow], 2)
    assert fig.stonewall_rule == "first-finisher, interpolated in 1 s bins" and fig.stonewall_MiBps == 116


def test_a_recorder_merges_the_marks_of_its_threads():
    rec = PhaseRecorder(0, "read")
    a, b = rec.oplog(2), rec.oplog(2)
    rec.begin()
    t0 = rec.start_ns
    for log, ends in ((a, [t0 + 10, t0 + 30]), (b, [t0 + 20, t0 + 40])):
        log.ends[0], log.ends[1] = ends
        log.fold(2, 8)
    rec.finish()
    assert rec.record(0).extra["marks"] == [[30, 16], [40, 32]]  # a's 16 bytes by 30 ns, then both threads'


def test_one_client_writing_with_fsync_has_its_aggregate_as_stonewall(tmp_path, target):
    r = storeval("run", "--target", str(target), "--workload", "bandwidth", "--clients", "1", "--set",
                 "file_size=8MiB", "--set", "transfer_size=256KiB", "--set", "phases=write,read", "--json",
                 str(tmp_path / "out.json"), "--quiet", cwd=tmp_path)
    assert r.rc in (0, 1), r.err  # 1: a figure flagged (a short phase on a fast disk)
    doc = load_json(tmp_path / "out.json")
    for ph in doc["cells"][0]["phases"]:
        assert ph["stonewall_MiBps"] == ph["bandwidth_MiBps"] and ph["stonewall_rule"] == "first-finisher"
