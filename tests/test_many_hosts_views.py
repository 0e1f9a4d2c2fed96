"""Issue 30.5: the per-host table and the fairness charts stay readable at the seeds' scale (512 clients on 64
hosts): the table lists a phase's slowest and fastest hosts and one row for the distribution between, the charts
draw the clients' distribution instead of a bar per client — with every number worked out by hand.

The run is written into a real results store the way the runner writes it (``Store.write_cell``) and read back."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from storeval.analysis.figures import analyze
from storeval.core.records import NS, PhaseRecord
from storeval.report.charts import fairness_charts
from storeval.report.terminal import network_tables
from storeval.store import Store

MiB = 1 << 20
HOSTS, PER_HOST = 64, 8
SLOW = 1  # client 1 (on host h00) reads at 10 MiB/s; every other client on host h at 100 + h/8 MiB/s


def rate(rank: int) -> float:
    return 10.0 if rank == SLOW else 100.0 + (rank // PER_HOST) / 8


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("many")
    store = Store(str(tmp / "storeval-results"))
    run_id = "20991231-000000-many"
    study = {"targets": {"t": {"url": "file:///tmp/storeval-many"}},
             "workloads": {"bw": {"bandwidth": {"file_size": "200MiB", "phases": ["read"]}}}}
    store.begin_run(run_id, study=study, study_hash="h", version="test", command_line="mpiexec -n 512 storeval run",
                    source=None, engine="mpi", environment={"targets": {}})
    records = []
    for rank in range(HOSTS * PER_HOST):  # every client reads 120 MiB (IOR's fixed work) at its rate
        nbytes, end = 120 * MiB, round(120 / rate(rank) * NS)
        records.append(PhaseRecord(rank=rank, host=f"h{rank // PER_HOST:02d}", phase="read", bytes=nbytes,
                                   ops=120, start_ns=0, end_ns=end, barrier_ns=end, tl_bytes=[nbytes], tl_ops=[120]))
    cell = SimpleNamespace(index=0, config=0, target=SimpleNamespace(name="t", url="file:///tmp/storeval-many"),
                           workload="bw", kind="bandwidth", params={}, factors={}, clients=len(records), repetition=0)
    store.write_cell(run_id, cell, status="ok", error=None, started=None, phases=[("read", 0, "ok", None)],
                     records=records, events=[])
    store.end_run(run_id, "ok")
    cells, summary = analyze(store.load_run(run_id), samples=store.load_samples(run_id))
    return cells, summary


def test_the_per_host_table_shows_the_ends_and_the_distribution_between(analysed):
    _, summary = analysed
    (table,) = [t for t in network_tables(summary) if t["id"] == "hosts-table"]
    rows = table["rows"]
    assert len(rows) == 7  # not 64
    # per client, slowest first: h00 (8 × 120 MiB in the slow client's 12 s: 80 MiB/s), then h01 (8 × 100.125)
    # … h63 (8 × 107.875): each host's aggregate is its bytes over its own span
    assert [r[3] for r in rows] == ["h00", "h01", "h02", "… 58 hosts between", "h61", "h62", "h63"]
    assert rows[0][5] == "80.0 MiB/s" and rows[1][5].startswith("801 ") and rows[-1][5].startswith("863 ")
    # the 58 hosts between (h03 … h60: 8 × (100 + h/8) = 800 + h MiB/s): 10th, 50th, 90th percentiles by rank
    assert rows[3][5] == "p10 809 · p50 831 · p90 854 MiB/s"
    assert rows[3][:3] == rows[0][:3] and rows[3][9:] == rows[0][9:]  # same configuration, spread and Jain
    assert "Beyond 8 hosts a phase shows its 3 slowest and 3 fastest" in table["caption"][0]


def test_the_fairness_charts_draw_512_clients_as_a_distribution(analysed):
    cells, _ = analysed
    (rates, times) = fairness_charts(cells)
    assert rates[0].startswith("t · bw · read · 512 clients: per-client MiB/s, distribution of 512 clients (Jain")
    curve, marked = rates[1]["data"]
    assert curve["type"] == "scatter" and len(curve["x"]) == 512  # a curve, no per-client category axis
    assert curve["x"][0] == pytest.approx(100 / 512) and curve["x"][-1] == 100.0
    assert curve["y"] == pytest.approx(sorted(rate(r) for r in range(512)))
    # the slow client is the one outlier, marked with who and where it was
    assert marked["text"] == ["client 1 · h00"] and marked["y"] == [pytest.approx(10.0)] and marked["x"] == [pytest.approx(100 / 512)]
    assert times[0].endswith("time relative to the fastest client, distribution of 512 clients")
    slowest = times[1]["data"][0]["y"][-1]
    assert slowest == pytest.approx((100 + 63 / 8) / 10.0)  # 10 MiB/s against the fastest's 107.875 MiB/s
