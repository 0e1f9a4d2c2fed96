"""MPI clients on several hosts: each record says how well its clock was aligned to rank 0's, and a phase
whose start or end that alignment could move by more than 1 % of its length is flagged ``clock-skew``."""

from __future__ import annotations

from types import SimpleNamespace

from storeval.analysis.clocks import SKEW_FRACTION, check_clock, residual_ns
from storeval.engine.mpi import _shift
from storeval.core.records import NS, PhaseRecord

US = 1_000


def fig(seconds: float) -> SimpleNamespace:
    return SimpleNamespace(seconds=seconds, flags=[], clock=None)


def rec(rank: int, host: str, clock: dict | None) -> PhaseRecord:
    return PhaseRecord(rank=rank, host=host, phase="write", start_ns=0, end_ns=NS, extra={"clock": clock} if clock else {})


REF = {"offset_ns": 0, "error_ns": 0, "wall_offset_ns": 0, "same_clock": True}


def test_residual_is_start_error_plus_drift_plus_end_error_and_zero_on_one_clock():
    assert residual_ns({"offset_ns": 5_000_000, "error_ns": 40 * US, "drift_ns": -3_000 * US, "end_error_ns": 60 * US}) \
        == 3_100 * US
    assert residual_ns({"offset_ns": 7, "error_ns": 40 * US, "drift_ns": None, "end_error_ns": None}) == 40 * US
    assert residual_ns({**REF, "measured_offset_ns": 900, "measured_error_ns": 2_000}) == 0


def test_a_phase_shorter_than_100_times_the_skew_is_flagged_with_the_rank_and_its_offsets():
    skewed = {"offset_ns": 1_234_000 * US, "error_ns": 50 * US, "wall_offset_ns": 2_000 * US,
              "drift_ns": 11_900 * US, "end_error_ns": 50 * US}  # residual 12 ms
    records = [rec(0, "a", REF), rec(1, "b", skewed)]
    f = fig(1.0)  # 12 ms is 1.2 % of 1 s
    check_clock(f, records)
    assert f.clock["skew_ns"] == 12_000 * US and f.clock["ranks"]["1"]["host"] == "b"
    assert f.clock["ranks"]["0"]["residual_ns"] == 0
    assert f.flags == [{"code": "clock-skew", "message": (
        "client 1's clock (host b) was aligned to rank 0's within 12,000 µs only (offset +1,234,000 ± 50 µs; "
        "drifted +11,900 µs by the cell's end): 1.2% of this 1,000.0 ms phase, more than the 1% allowed — keep "
        "the hosts' clocks in step (chrony/PTP) or time longer phases")}]
    # the same clocks under a phase 100 times longer than the skew: recorded, not flagged
    long = fig(12_000 * US / NS / SKEW_FRACTION)
    check_clock(long, records)
    assert long.flags == [] and long.clock["skew_ns"] == 12_000 * US


def test_an_unmeasured_drift_is_said_and_a_local_run_has_no_clock_at_all():
    f = fig(0.5)
    check_clock(f, [rec(0, "a", REF), rec(3, "c", {"offset_ns": -9 * US, "error_ns": 6_000 * US,
                                                   "wall_offset_ns": 0, "drift_ns": None, "end_error_ns": None})])
    assert [x["code"] for x in f.flags] == ["clock-skew"]
    assert "its drift over the cell was not measured (the cell ended early)" in f.flags[0]["message"]
    local = fig(0.001)
    check_clock(local, [rec(0, "a", None), rec(1, "a", None)])
    assert local.flags == [] and local.clock is None


def test_records_are_shifted_onto_rank_0s_clock_and_carry_the_alignment():
    start = {"offset_ns": 1_000, "error_ns": 30, "wall_offset_ns": 5}
    end = {"offset_ns": 1_250, "error_ns": 40, "wall_offset_ns": 9}
    wire = {"start_ns": 10_000, "end_ns": 20_000, "barrier_ns": 0, "extra": {"warnings": []}}
    out = _shift([("record", 1, wire), ("stopped", 1, "x")], start, end)
    assert out[1] == ("stopped", 1, "x")
    shifted = out[0][2]
    assert (shifted["start_ns"], shifted["end_ns"], shifted["barrier_ns"]) == (9_000, 19_000, 0)
    assert shifted["extra"] == {"warnings": [], "clock": {**start, "drift_ns": 250, "end_error_ns": 40}}
    assert wire["start_ns"] == 10_000  # the message itself is not changed in place
    unended = _shift([("record", 1, wire)], start, None)[0][2]["extra"]["clock"]
    assert (unended["drift_ns"], unended["end_error_ns"]) == (None, None)
