"""Before anything runs: a study the host cannot hold is refused with one line naming the numbers and the fix."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from storeval.errors import InputError
from storeval.plan import plan
from storeval.preflight import Host, Space, preflight
from storeval.spec import load_study

from .helpers import storeval

GiB = 1 << 30
TiB = 1 << 40


def host(**kw) -> Host:
    """A host with plenty of everything, but what a test says."""
    base = dict(mem_available=22 * GiB, mem_total=200 * GiB, swap_total=0, tasks=300, pid_max=4_194_304,
                threads_max=1_000_000, nproc_limit=None, user_tasks=0, nofile_hard=1 << 20)
    return Host(**{**base, **kw})


def disk(free: int = TiB, total: int = 4 * TiB, free_entries: int = 10**9, total_entries: int = 10**9, device: int = 1):
    return lambda path: Space(path=path, device=device, free=free, total=total, free_entries=free_entries,
                              total_entries=total_entries)


def check(tmp_path: Path, *sets: str, clients: str = "1", workload: str = "bandwidth", url: str | None = None,
          force: bool = False, engine=None, **kw) -> list[str]:
    target = url or f"file://{tmp_path}"
    study = load_study(None, targets=[target], workloads=[workload], sets=list(sets), clients=clients)
    results = str(tmp_path / "results")
    space = kw.pop("space", disk())
    return preflight(study, plan(study), results, engine=engine, force=force, host=host(**kw), space=space)


def refusal(tmp_path: Path, *args, **kw) -> str:
    with pytest.raises(InputError) as e:
        check(tmp_path, *args, **kw)
    return str(e.value)


def test_thousands_of_client_processes_are_refused_by_memory_with_the_numbers_and_the_fix(tmp_path):
    msg = refusal(tmp_path, "file_size=1MiB", "transfer_size=1MiB", clients="5000")
    assert msg == (f"cell 0 ({tmp_path} · bandwidth · 5000 clients) needs 5,000 client processes, about 92.8 GiB of "
                   "memory (5,000 × 19 MiB); this host has 22 GiB available (lower --clients or run under mpiexec "
                   "across hosts, or --force to run it anyway)")


def test_force_runs_what_may_fit_and_says_so_but_never_what_cannot(tmp_path):
    warnings = check(tmp_path, "file_size=1MiB", "transfer_size=1MiB", clients="5000", force=True)
    assert warnings == [f"cell 0 ({tmp_path} · bandwidth · 5000 clients) needs 5,000 client processes, about 92.8 GiB "
                        "of memory (5,000 × 19 MiB); this host has 22 GiB available (--force: running it anyway)"]
    # more than the host has at all: --force cannot help, and does not offer itself
    with pytest.raises(InputError) as e:
        check(tmp_path, "file_size=1MiB", "transfer_size=1MiB", clients="5000", force=True, mem_total=64 * GiB)
    assert str(e.value).endswith("this host has 64 GiB of memory in all (lower --clients or run under mpiexec across "
                                 "hosts)")


def test_huge_buffers_name_the_parameters_that_make_them(tmp_path):
    msg = refusal(tmp_path, "file_size=4GiB", "transfer_size=4GiB", "iodepth=64", mem_total=24 * GiB)
    assert msg == (f"cell 0 ({tmp_path} · bandwidth · 1 client) needs 1 client process, about 516 GiB of memory "
                   "(1 × 516 GiB, mostly 129 buffers of transfer_size 4 GiB (iodepth 64)); this host has 24 GiB of "
                   "memory in all (lower transfer_size or iodepth)")
    msg = refusal(tmp_path, "file_size=64GiB", "transfer_size=64GiB", mem_total=24 * GiB)
    assert msg == (f"cell 0 ({tmp_path} · bandwidth · 1 client) needs single buffers of 64 GiB, more than this host's "
                   "24 GiB of memory (lower transfer_size)")


def test_random_phases_count_their_offset_tables(tmp_path):
    msg = refusal(tmp_path, "file_size=1TiB", "transfer_size=4KiB", "phases=randwrite", url="null://",
                  mem_available=4 * GiB)
    assert msg == ("cell 0 (null:// · bandwidth · 1 client) needs 1 client process, about 8.02 GiB of memory (1 × 8.02 "
                   "GiB, mostly the shuffled offsets of 268,435,456 transfers per random phase); this host has 4 GiB "
                   "available (raise transfer_size or lower file_size, or --force to run it anyway)")


def test_more_processes_than_the_kernel_allows_cannot_be_forced(tmp_path):
    msg = refusal(tmp_path, "file_size=4KiB", "transfer_size=4KiB", clients="20000", force=True, pid_max=32768,
                  mem_available=1 << 50, mem_total=1 << 50)
    assert msg == (f"cell 0 ({tmp_path} · bandwidth · 20000 clients) needs 20,000 client processes (40,004 tasks with "
                   "their threads); this system runs at most 32,768 tasks at once (kernel.pid_max) and 300 are running "
                   "(lower --clients or run under mpiexec across hosts)")
    msg = refusal(tmp_path, "file_size=4KiB", "transfer_size=4KiB", "iodepth=8", clients="100", nproc_limit=1000,
                  user_tasks=150)
    assert msg == (f"cell 0 ({tmp_path} · bandwidth · 100 clients) needs 100 client processes (1,004 tasks with their "
                   "threads); your limit is 1,000 processes and threads (ulimit -u) and 150 are running (lower "
                   "--clients or run under mpiexec across hosts, or raise ulimit -u)")
    msg = refusal(tmp_path, "file_size=4KiB", "transfer_size=4KiB", clients="1000", nofile_hard=1024)
    assert msg == (f"cell 0 ({tmp_path} · bandwidth · 1000 clients) needs about 2,064 open files in storeval's "
                   "coordinator (2 per client process); the limit is 1,024 (ulimit -Hn) (lower --clients or run under "
                   "mpiexec across hosts)")


def test_scratch_beyond_the_free_space_of_a_local_target_is_refused_and_beyond_its_size_cannot_be_forced(tmp_path):
    space = disk(free=100 * GiB, total=500 * GiB)
    msg = refusal(tmp_path, "file_size=64GiB", clients="1,2", space=space)
    assert msg == (f"cell 1 ({tmp_path} · bandwidth · 2 clients) needs about 128 GiB on the file system of {tmp_path} "
                   "(2 × file_size 64 GiB + the results store, about 56 KiB); it has 100 GiB free (lower file_size or "
                   "--clients, or free space there, or --force to run it anyway)")
    assert check(tmp_path, "file_size=64GiB", clients="1,2", space=space, force=True) == [
        f"cell 1 ({tmp_path} · bandwidth · 2 clients) needs about 128 GiB on the file system of {tmp_path} (2 × "
        "file_size 64 GiB + the results store, about 56 KiB); it has 100 GiB free (--force: running it anyway)"]
    msg = refusal(tmp_path, "file_size=512GiB", clients="2", space=space, force=True)
    assert msg.endswith("it holds 500 GiB in all (lower file_size or --clients)")
    # a remote target cannot say how much room it has: nothing is claimed about it
    assert check(tmp_path, "file_size=512GiB", clients="2", url="null://", space=space) == []


def test_metadata_counts_inodes_and_names(tmp_path):
    msg = refusal(tmp_path, "items=1000000", clients="4", workload="metadata",
                  space=disk(free_entries=5_000_000, total_entries=8_000_000))
    assert msg == (f"cell 0 ({tmp_path} · metadata · 4 clients) creates 8,000,004 files and directories on the file "
                   f"system of {tmp_path}; it has 5,000,000 free inodes of 8,000,000 (lower items, depth or branching, "
                   "or --clients, or --force to run it anyway)")
    msg = refusal(tmp_path, "items=1000000000", workload="metadata", url="null://")
    assert msg == ("cell 0 (null:// · metadata · 1 client) needs 1 client process, about 298 GiB of memory (1 × 298 "
                   "GiB, mostly the names of 1,000,000,000 items); this host has 200 GiB of memory in all (lower items "
                   "or items_per_dir)")
    msg = refusal(tmp_path, "items=10000000", "mode=shared", clients="8", workload="metadata", url="null://")
    # in shared mode client 0 also holds everyone's names: 8 × 3 GiB + 21 GiB
    assert msg == ("cell 0 (null:// · metadata · 8 clients) needs 8 client processes, about 44.8 GiB of memory (8 × 3 "
                   "GiB, mostly the names of 10,000,000 items); this host has 22 GiB available (lower items or "
                   "items_per_dir, or --force to run it anyway)")


def test_the_skims_kept_event_files_count_only_what_is_not_there_yet(tmp_path):
    space = disk(free=1 * GiB)
    msg = refusal(tmp_path, "files=3", "file_size=512MiB", workload="skim", space=space)
    data = f"{tmp_path}/storeval-data/skim-"
    assert re.fullmatch(rf"this study needs about 1\.5 GiB on the file system of {re.escape(data)}[0-9a-f]{{12}} "
                        rf"\(3 event files of file_size 512 MiB, kept in {re.escape(data)}[0-9a-f]{{12}} \+ the results "
                        r"store, about 20 KiB\); it has 1 GiB free \(lower files or file_size, or free space there, or "
                        r"--force to run it anyway\)", msg)
    kept = Path(re.search(rf"kept in ({re.escape(data)}[0-9a-f]{{12}})", msg).group(1))
    kept.mkdir(parents=True)
    for i in range(3):  # already laid out by an earlier run: reused, nothing more to write
        with open(kept / f"events-{i:03d}.root", "wb") as f:
            f.truncate(512 << 20)
    assert check(tmp_path, "files=3", "file_size=512MiB", workload="skim", space=space) == []


def test_the_results_store_counts_where_it_lives(tmp_path):
    msg = refusal(tmp_path, "file_size=4KiB", "transfer_size=4KiB", clients="100000", url="null://",
                  mem_available=1 << 50, mem_total=1 << 50, space=disk(free=100 << 20))
    assert msg == (f"this study's results need about 781 MiB on the file system of {tmp_path}/results (the results "
                   "store, about 781 MiB); it has 100 MiB free (choose another --results, or free space there, or "
                   "--force to run it anyway)")


def test_offsets_beyond_64_bits_are_refused(tmp_path):
    msg = refusal(tmp_path, "file_size=1EiB", "transfer_size=1MiB", "layout=shared-file", clients="16", url="null://",
                  force=True)
    assert msg == ("cell 0 (null:// · bandwidth · 16 clients) needs offsets up to 16 EiB, beyond the 8 EiB of the "
                   "64-bit offsets every file system and storage API takes (lower file_size or --clients)")


class FakeMpi:
    """An MPI engine's view: 4 hosts with 4 ranks each, spread placement."""

    def __init__(self) -> None:
        self.hosts = [f"node{r % 4}" for r in range(16)]
        self.order = list(range(16))


def test_under_mpiexec_the_busiest_hosts_share_counts_not_every_client(tmp_path):
    mpi = FakeMpi()
    assert check(tmp_path, "file_size=1GiB", "transfer_size=1GiB", clients="16", url="null://", engine=mpi,
                 mem_available=20 * GiB) == []  # 4 per host × 3 GiB of buffers
    msg = refusal(tmp_path, "file_size=4GiB", "transfer_size=4GiB", clients="16", url="null://", engine=mpi,
                  mem_available=20 * GiB)
    assert msg == ("cell 0 (null:// · bandwidth · 16 clients) puts 4 of its 16 clients on one host, about 48 GiB of "
                   "memory there (4 × 12 GiB, mostly 3 buffers of transfer_size 4 GiB); this host has 20 GiB available "
                   "(lower transfer_size, or --force to run it anyway)")


# -- the command line: refused before anything is created ----------------------------------------------------

def test_absurd_numbers_are_refused_at_validation(tmp_path, target):
    cases = [
        (("--clients", "100000000000"), "error: --clients: 100,000,000,000 clients is more than storeval runs (1,000,000 "
                                        "at most; lower it)"),
        (("--clients", "1,1000001"), "error: --clients: 1,000,001 clients is more than storeval runs (1,000,000 at "
                                     "most; lower it)"),
        (("--repetitions", "10001"), "error: --repetitions: 10001 is not a number of repetitions (a whole number, 1 to "
                                     "10,000)"),
        (("--set", "file_size=2EiB"), "error: --workload bandwidth.file_size: '2EiB' is more than 1 EiB, the largest "
                                      "size storeval takes (lower it)"),
    ]
    for args, line in cases:
        r = storeval("run", "--target", str(target), "--workload", "bandwidth", *args, "--quiet", cwd=tmp_path, timeout=60)
        assert (r.rc, r.err_lines) == (2, [line])
    r = storeval("run", "--target", str(target), "--workload", "metadata", "--set", "iterations=20000", "--quiet",
                 cwd=tmp_path, timeout=60)
    assert (r.rc, r.err_lines) == (2, ["error: --workload metadata.iterations: 20000 must be at most 10000"])
    assert os.listdir(target) == [] and not (tmp_path / "storeval-results").exists()


def test_a_study_the_host_cannot_hold_is_refused_before_the_store_or_a_target_is_touched(tmp_path, target):
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({
        "targets": {"scratch": {"url": f"file://{target}"}},
        "workloads": {"bw": {"bandwidth": {"file_size": "1EiB", "transfer_size": "1EiB"}}}}))
    r = storeval("run", str(study), "--force", "--json", str(tmp_path / "out.json"), cwd=tmp_path, timeout=60)
    assert r.rc == 2, r.err
    (line,) = r.err_lines
    assert re.fullmatch(r"error: cell 0 \(scratch · bw · 1 client\) needs single buffers of 1 EiB, more than "
                        r"this host's [\d.]+ [GT]iB of memory \(lower transfer_size\)", line), line
    assert os.listdir(target) == [] and sorted(os.listdir(tmp_path)) == ["study.yaml", "target"]
    # a million clients: more than any host's processes or memory, whatever it has
    r = storeval("run", "--target", str(target), "--workload", "bandwidth", "--clients", "1000000", "--force", "--quiet",
                 cwd=tmp_path, timeout=60)
    assert r.rc == 2 and len(r.err_lines) == 1, r.err
    assert r.err_lines[0].startswith(f"error: cell 0 ({target} · bandwidth · 1000000 clients) needs ")
    assert os.listdir(target) == [] and sorted(os.listdir(tmp_path)) == ["study.yaml", "target"]


def test_the_open_files_soft_limit_is_raised_to_what_the_coordinator_needs(tmp_path):
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    try:
        assert check(tmp_path, "file_size=4KiB", "transfer_size=4KiB", clients="200", url="null://") == []
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (2 * 200 + 64, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
