"""storeval vs fio with equal settings; prints medians, spreads, ratios and CPU seconds per GiB and per op.

Cases (each names the engine both tools use):

* ``null``: 4 KiB random reads with no I/O at all — storeval's null:// engine (native, timing only: each
  offset read, each operation timed) against fio's ``ioengine=null`` as it is (random map, latency accounting),
  with ``--norandommap`` and with ``--gtod_reduce=1``: the ceiling of what each tool can measure per client,
  with what each piece of fio's bookkeeping costs; cpu µs/op for both;
* ``shm``: 4 KiB random reads of a file on /dev/shm (tmpfs: no device, so the tool's own cost is what
  differs) at queue depth 1 (psync in both) and 32 (io_uring in both);
* ``disk``: O_DIRECT on the given directory's file system — 4 KiB random reads at QD1 (psync) and QD32
  (io_uring), sequential 1 MiB writes (fsync) and reads;
* ``rwmix`` (with ``disk``): 4 KiB random reads and writes mixed 70/30 (fio's ``--rw=randrw --rwmixread=70``,
  storeval's ``randrw`` with ``mix: {read: 70, write: 30}``), O_DIRECT at QD1, every block once in both: total
  IOPS compared, and each tool's share of reads printed beside it. storeval runs its Python loop here (mixed
  phases are not native), fio psync;
* ``buffered`` (off by default): sequential 1 MiB buffered writes and reads, 1 and 2 clients.

Tuning: the io_uring loop's completion spin (native SPIN_NS) was chosen on /dev/shm at QD32, so that case's
ratio is not evidence for it; the null, disk and QD1 cases are the held-out ones.

Equal settings: same transfer size, bytes per client and number of clients; page-aligned mmap buffers
(fio --iomem=mmap), no preallocation (fio --fallocate=none), fsync before the end of a write, cached pages
of the file dropped before a read (storeval's clearing, fio's invalidate=1) except on tmpfs, where there is
no device to read from; a read reads a file laid out just before, untimed. Random reads touch every block
once in both tools. Runs alternate between the tools after a warm-up of each; medians of ``--reps``.

CPU: storeval counts its client process (every thread, the kernel's io_uring workers included); fio counts
its job thread (RUSAGE_THREAD). Where io_uring hands reads to kernel workers (buffered reads on tmpfs), the
copy's CPU lands in storeval's figure and not in fio's: compare io_uring CPU figures with that in mind.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess

from common import OUT, Case, Sample, need, storeval_phase

GiB = float(1 << 30)


def fio(directory: str | None, args: list[str], first: list[str] | None = None) -> Sample:
    """Run a fio job (after an untimed ``first`` job in the same invocation) and return the job's figures."""
    out = os.path.join(OUT, "fio.json")
    pre = ["--name=first", *first, "--name=bench", "--stonewall"] if first else ["--name=bench"]
    where = [f"--directory={directory}", "--filename_format=bench.$jobnum.$filenum"] if directory else []
    subprocess.run(["fio", "--output-format=json", f"--output={out}", "--group_reporting", *where, *pre, *args],
                   check=True, capture_output=True)
    with open(out) as f:
        job = json.load(f)["jobs"][-1]
    if directory:
        clear(directory)  # like storeval, leave nothing behind: the next run must not find the other's pages
    side = job["write"] if job["write"]["io_bytes"] else job["read"]
    cpu = (job["usr_cpu"] + job["sys_cpu"]) / 100 * job["job_runtime"] / 1000
    is_iops = any(a.startswith("--bs=4k") for a in args)
    return Sample(side["iops"] if is_iops else side["bw_bytes"] / 2**20, cpu / (side["io_bytes"] / GiB),
                  cpu / max(1, side["total_ios"]))


def sv(target: str, phase: str, args: list[str], iops: bool = False) -> Sample:
    ph = storeval_phase(target, phase, ["--workload", "bandwidth", *args])
    cpu = sum(c["cpu_seconds"] for c in ph["client_stats"])
    return Sample(ph["ops_per_s"] if iops else ph["bandwidth_MiBps"], cpu / (ph["bytes"] / GiB), cpu / max(1, ph["ops"]))


def clear(directory: str) -> None:
    for name in os.listdir(directory):
        if name.startswith("bench."):
            os.unlink(os.path.join(directory, name))


def randread(directory: str, mib: int, depth: int, engine: str, direct: bool) -> tuple:
    """storeval and fio, 4 KiB random reads of a file of ``mib`` MiB laid out before (4 MiB writes, flushed)."""
    def fio_rand() -> Sample:
        clear(directory)
        return fio(directory, ["--bs=4k", f"--size={mib}M", f"--direct={int(direct)}", "--rw=randread",
                               f"--ioengine={engine}", f"--iodepth={depth}", "--iomem=mmap", *([] if direct else ["--invalidate=0"])],
                   first=["--bs=4M", f"--size={mib}M", f"--direct={int(direct)}", "--rw=write", "--end_fsync=1",
                          "--fallocate=none"])

    def sv_rand() -> Sample:
        return sv(f"file://{directory}", "randread",
                  ["--set", f"file_size={mib}MiB", "--set", "transfer_size=4KiB", "--set", f"direct={str(direct).lower()}",
                   "--set", f"iodepth={depth}", "--set", f"engine={engine}", "--set", "phases=randread",
                   *([] if direct else ["--keep-cache"])], iops=True)

    return sv_rand, fio_rand


def rwmix(directory: str, mib: int, read_pct: int) -> tuple:
    """storeval and fio: 4 KiB random reads and writes mixed read_pct/100-read_pct, O_DIRECT, QD1, of a file of
    ``mib`` MiB laid out before; the figure is reads + writes per second, the split says the share of reads."""
    def fio_mix() -> Sample:
        clear(directory)
        out = os.path.join(OUT, "fio.json")
        subprocess.run(["fio", "--output-format=json", f"--output={out}", "--group_reporting",
                        f"--directory={directory}", "--filename_format=bench.$jobnum.$filenum",
                        "--name=first", "--bs=4M", f"--size={mib}M", "--direct=1", "--rw=write", "--end_fsync=1",
                        "--fallocate=none", "--name=bench", "--stonewall", "--bs=4k", f"--size={mib}M", "--direct=1",
                        "--rw=randrw", f"--rwmixread={read_pct}", "--ioengine=psync", "--iomem=mmap"],
                       check=True, capture_output=True)
        with open(out) as f:
            job = json.load(f)["jobs"][-1]
        clear(directory)
        reads, writes = job["read"]["total_ios"], job["write"]["total_ios"]
        sample = Sample(job["read"]["iops"] + job["write"]["iops"])
        sample.split = f"reads {reads / max(reads + writes, 1):.2%} of {reads + writes:,} operations"
        return sample

    def sv_mix() -> Sample:
        ph = storeval_phase(f"file://{directory}", "randrw", [
            "--workload", "bandwidth", "--set", f"file_size={mib}MiB", "--set", "transfer_size=4KiB",
            "--set", "direct=true", "--set", "phases=randrw", "--set", f"mix={{read: {read_pct}, write: {100 - read_pct}}}"])
        sample = Sample(ph["ops_per_s"])
        sample.split = f"reads {ph['read_share']:.2%} of {ph['ops']:,} operations"
        return sample

    return sv_mix, fio_mix


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("directory", nargs="?", default=os.path.join(OUT, "scratch"), help="the disk case's directory")
    ap.add_argument("--reps", type=int, default=int(os.environ.get("REPS", 3)))
    ap.add_argument("--seq-size", default=os.environ.get("SEQ_SIZE", "1GiB"))
    ap.add_argument("--rand-size", default=os.environ.get("RAND_SIZE", "128MiB"), help="per file on disk")
    ap.add_argument("--shm-size", default=os.environ.get("SHM_SIZE", "1GiB"), help="per file on /dev/shm")
    ap.add_argument("--null-size", default=os.environ.get("NULL_SIZE", "16GiB"), help="bytes 'read' on null")
    ap.add_argument("--cases", default=os.environ.get("CASES", "null,shm,disk"),
                    help="comma-separated: null, shm, disk (= disk-rand, disk-seq and rwmix), rwmix, buffered")
    a = ap.parse_args()
    need("fio", "fio")
    d = os.path.abspath(a.directory)
    os.makedirs(d, exist_ok=True)
    from storeval.units import parse_size

    mib = {k: parse_size(v) >> 20 for k, v in (("seq", a.seq_size), ("rand", a.rand_size), ("shm", a.shm_size),
                                                ("null", a.null_size))}
    chosen = set(a.cases.split(","))
    if "disk" in chosen:
        chosen |= {"disk-rand", "disk-seq", "rwmix"}
    cases: list[Case] = []

    if "null" in chosen:
        # the same bookkeeping on both sides: each operation's offset read (storeval draws them before the timed
        # region; fio makes each in its loop and tracks it in its random map), each one timed (fio's latency
        # accounting) — and fio without the map and without timing each operation, to show what each costs it
        def sv_null() -> Sample:
            return sv("null://", "randread", ["--set", f"file_size={mib['null']}MiB", "--set", "transfer_size=4KiB",
                                              "--set", "phases=randread"], iops=True)

        fio_null = ["--ioengine=null", "--rw=randread", "--bs=4k", f"--size={mib['null']}M"]
        for label, extra in (("fio as is: random map, every op timed", []),
                             ("fio --norandommap: no map", ["--norandommap"]),
                             ("fio --gtod_reduce=1: no per-op timing", ["--gtod_reduce=1"])):
            cases.append(Case(f"null 4KiB randread vs {label}", "IOPS", sv_null,
                              lambda extra=extra: fio(None, [*fio_null, *extra])))
    if "shm" in chosen:
        shm = "/dev/shm/storeval-bench"
        os.makedirs(shm, exist_ok=True)
        for depth, engine in ((1, "psync"), (32, "io_uring")):
            cases.append(Case(f"/dev/shm 4KiB randread qd{depth} ({engine})", "IOPS",
                              *randread(shm, mib["shm"], depth, engine, direct=False)))
    if "disk-rand" in chosen:
        for depth, engine in ((1, "psync"), (32, "io_uring")):
            cases.append(Case(f"disk 4KiB randread O_DIRECT qd{depth} ({engine})", "IOPS",
                              *randread(d, mib["rand"], depth, engine, direct=True)))
    if "rwmix" in chosen:
        cases.append(Case("disk 4KiB randrw 70/30 O_DIRECT qd1 (storeval python loop, fio psync)", "IOPS",
                          *rwmix(d, mib["rand"], 70)))
    for direct in [True] * ("disk-seq" in chosen) + [False] * ("buffered" in chosen):
        mode = "O_DIRECT" if direct else "buffered"
        for n in ((1,) if direct else (1, 2)):
            common = ["--bs=1M", f"--size={mib['seq']}M", f"--numjobs={n}", f"--direct={int(direct)}",
                      "--ioengine=psync", "--fallocate=none", "--iomem=mmap"]
            sv_common = ["--clients", str(n), "--set", f"file_size={mib['seq']}MiB", "--set", "transfer_size=1MiB",
                         "--set", f"direct={str(direct).lower()}", "--set", "fsync=true", "--set", "engine=psync"]

            def fio_write(common=common) -> Sample:
                clear(d)
                return fio(d, [*common, "--rw=write", "--end_fsync=1"])

            def fio_read(common=common) -> Sample:
                clear(d)  # like storeval's write,read phases: write and flush, then read (one invocation)
                return fio(d, [*common, "--rw=read"], first=[*common, "--rw=write", "--end_fsync=1"])

            cases.append(Case(f"disk seq write 1MiB, {n} client(s), {mode}, fsync", "MiB/s",
                              lambda sv_common=sv_common: sv(f"file://{d}", "write", [*sv_common, "--set", "phases=write"]),
                              fio_write))
            cases.append(Case(f"disk seq read 1MiB, {n} client(s), {mode}", "MiB/s",
                              lambda sv_common=sv_common: sv(f"file://{d}", "read",
                                                             [*sv_common, "--set", "phases=write,read"]),
                              fio_read))

    for case in cases:
        case.run(a.reps)
    clear(d)
    if a.directory == os.path.join(OUT, "scratch"):
        shutil.rmtree(d, ignore_errors=True)
    shutil.rmtree("/dev/shm/storeval-bench", ignore_errors=True)
    version = subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout.strip()
    print(f"\nstoreval vs {version}: median of {a.reps} alternating runs after a warm-up, [min–max]; disk = {d}; "
          f"cpu = client CPU seconds per GiB moved and per operation; ratio = storeval / fio (higher is better)")
    for case in cases:
        print(case.line("fio"))
        if any(x.split for xs in case.samples.values() for x in xs):
            for tool in ("storeval", "reference"):
                print(f"  {'storeval' if tool == 'storeval' else 'fio':8}: " + "; ".join(x.split for x in case.samples[tool]))


if __name__ == "__main__":
    main()
