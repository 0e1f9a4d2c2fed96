"""storeval vs fio on the same file system with equal settings; prints medians, spreads and ratios.

Equal settings: same transfer size, bytes per client and number of clients; both tools use page-aligned
mmap buffers (fio --iomem=mmap), neither preallocates (fio --fallocate=none), both fsync before the end of a
write, both drop the file's cached pages before a read (storeval's invalidate, fio's invalidate=1 default),
and a read reads a file that was just written and flushed. Random reads touch every block once in both.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess

from common import OUT, Case, Sample, need, storeval_phase

GiB = float(1 << 30)


def fio(directory: str, args: list[str], first: list[str] | None = None) -> Sample:
    """Run a fio job (after an untimed ``first`` job in the same invocation) and return the job's figures."""
    out = os.path.join(OUT, "fio.json")
    pre = ["--name=first", *first, "--name=bench", "--stonewall"] if first else ["--name=bench"]
    subprocess.run(["fio", "--output-format=json", f"--output={out}", "--group_reporting", f"--directory={directory}",
                    "--filename_format=bench.$jobnum.$filenum", *pre, *args], check=True, capture_output=True)
    with open(out) as f:
        job = json.load(f)["jobs"][-1]
    clear(directory)  # like storeval, leave nothing behind: the next run must not find the other's pages
    side = job["write"] if job["write"]["io_bytes"] else job["read"]
    cpu = (job["usr_cpu"] + job["sys_cpu"]) / 100 * job["job_runtime"] / 1000
    is_iops = any(a.startswith("--bs=4k") for a in args)
    return Sample(side["iops"] if is_iops else side["bw_bytes"] / 2**20, cpu / (side["io_bytes"] / GiB))


def sv(directory: str, phase: str, args: list[str], iops: bool = False) -> Sample:
    ph = storeval_phase(f"file://{directory}", phase, ["--workload", "bandwidth", *args])
    cpu = sum(c["cpu_seconds"] for c in ph["client_stats"])
    return Sample(ph["ops_per_s"] if iops else ph["bandwidth_MiBps"], cpu / (ph["bytes"] / GiB))


def clear(directory: str) -> None:
    for name in os.listdir(directory):
        if name.startswith("bench."):
            os.unlink(os.path.join(directory, name))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("directory", nargs="?", default=os.path.join(OUT, "scratch"))
    ap.add_argument("--reps", type=int, default=int(os.environ.get("REPS", 5)))
    ap.add_argument("--seq-size", default=os.environ.get("SEQ_SIZE", "2GiB"))
    ap.add_argument("--rand-size", default=os.environ.get("RAND_SIZE", "256MiB"))
    a = ap.parse_args()
    need("fio", "fio")
    d = os.path.abspath(a.directory)
    os.makedirs(d, exist_ok=True)
    from storeval.units import parse_size

    seq_mib = parse_size(a.seq_size) >> 20
    rand_mib = parse_size(a.rand_size) >> 20
    cases: list[Case] = []

    for direct in (False, True):
        mode = "O_DIRECT" if direct else "buffered"
        for n in (1, 2):
            common = ["--bs=1M", f"--size={seq_mib}M", f"--numjobs={n}", f"--direct={int(direct)}", "--ioengine=psync",
                      "--fallocate=none", "--iomem=mmap"]
            sv_common = ["--clients", str(n), "--set", f"file_size={seq_mib}MiB", "--set", "transfer_size=1MiB",
                         "--set", f"direct={str(direct).lower()}", "--set", "fsync=true"]

            def fio_write(common=common) -> Sample:
                clear(d)
                return fio(d, [*common, "--rw=write", "--end_fsync=1"])

            def fio_read(common=common) -> Sample:
                clear(d)  # like storeval's write,read phases: write and flush, then read (one invocation)
                return fio(d, [*common, "--rw=read"], first=[*common, "--rw=write", "--end_fsync=1"])

            cases.append(Case(f"seq write 1MiB, {n} client(s), {mode}, fsync", "MiB/s",
                              lambda sv_common=sv_common: sv(d, "write", [*sv_common, "--set", "phases=write"]),
                              fio_write))
            cases.append(Case(f"seq read 1MiB, {n} client(s), {mode}", "MiB/s",
                              lambda sv_common=sv_common: sv(d, "read", [*sv_common, "--set", "phases=write,read"]),
                              fio_read))

    for depth, engine in ((1, "psync"), (32, "libaio")):
        def fio_rand(depth=depth, engine=engine) -> Sample:
            clear(d)  # like storeval: lay the file out (O_DIRECT, 4 MiB, flushed), then read it at random
            return fio(d, ["--bs=4k", f"--size={rand_mib}M", "--direct=1", "--rw=randread", f"--ioengine={engine}",
                           f"--iodepth={depth}", "--iomem=mmap"],
                       first=["--bs=4M", f"--size={rand_mib}M", "--direct=1", "--rw=write", "--end_fsync=1",
                              "--fallocate=none"])

        cases.append(Case(f"4KiB randread O_DIRECT qd{depth} ({engine} in fio)", "IOPS",
                          lambda depth=depth: sv(d, "randread", ["--set", f"file_size={rand_mib}MiB", "--set",
                                                                 "transfer_size=4KiB", "--set", "direct=true", "--set",
                                                                 f"iodepth={depth}", "--set", "phases=randread"], iops=True),
                          fio_rand))

    for case in cases:
        case.run(a.reps)
    clear(d)
    null = storeval_phase("null://", "randread", ["--workload", "bandwidth", "--set", "file_size=1GiB", "--set",
                                                 "transfer_size=4KiB", "--set", "phases=randread"])
    if a.directory == os.path.join(OUT, "scratch"):
        shutil.rmtree(d, ignore_errors=True)
    version = subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout.strip()
    print(f"\nstoreval vs {version} on {d}: median of {a.reps} alternating runs after a warm-up, [min–max];"
          f" {a.seq_size} per client (sequential), {a.rand_size} per client (random). cpu = client CPU s per GiB moved.")
    for case in cases:
        print(case.line("fio"))
    print(f"storeval ceiling on null:// (4 KiB random reads, no I/O at all): {null['ops_per_s']:,.0f} ops/s per client")


if __name__ == "__main__":
    main()
