"""storeval's bandwidth workload vs IOR, same file system, same work, alternating runs.

Equal settings, as ``mpiexec -n P ior -a POSIX -F -t T -b B -w -r -C -e [--posix.odirect] -i 1``: every
process writes a file of its own front to back in transfers of T, fsyncs it before closing (-e; storeval
``fsync=true``), and after a barrier reads the file of the next process (-C; storeval ``reorder=true``), with
O_DIRECT on both sides or on neither. Both tools time from the first process's open to the last one's close, so
opening, the fsync and closing are inside both figures (IOR's bw; storeval's aggregate MiB/s), and both count
the bytes their processes moved. storeval runs its native loop (``--engine psync``, checked and printed): one
pread/pwrite at a time, as IOR's POSIX backend.

``--hard`` runs IO500's ior-hard shape instead: one shared file, 47,008-byte transfers in blocks of one transfer
(``-t 47008 -b 47008 -s SEGMENTS``, IOR's -C -Q 1 -e), so the processes' records interleave; storeval runs
``layout=shared-file block_size=47008`` with the same transfers, reorder and fsync (buffered: 47,008 bytes are not
a sector multiple).

Besides the medians, spreads and ratios, the bench prints how each tool's time split: IOR's open, transfer
and close times (its JSON), storeval's per-client seconds, and — when the ratio is outside ±5 % — the device's
own count of bytes and time for each tool's read (/proc/diskstats of the directory's device, before and after),
so a difference shows where it came from: a tool that read from a cache reads fewer bytes from the device.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess

from common import OUT, Battery, Sample, engines, peer, storeval_phase

MiB = float(1 << 20)


def device_of(path: str) -> str | None:
    """The block device (as /proc/diskstats names it) holding ``path``, or None (tmpfs, overlay...)."""
    dev = os.stat(path).st_dev
    for line in open("/proc/diskstats"):
        parts = line.split()
        if (int(parts[0]) << 8 | int(parts[1])) == ((os.major(dev) << 8) | os.minor(dev)):
            return parts[2]
    return None


def disk_counts(device: str | None) -> tuple[int, ...]:
    """(reads completed, bytes read, ms reading, writes completed, bytes written) of ``device`` since boot."""
    if device is None:
        return 0, 0, 0, 0, 0
    with open("/proc/diskstats") as f:
        for line in f:
            parts = line.split()
            if parts[2] == device:
                return int(parts[3]), int(parts[5]) * 512, int(parts[6]), int(parts[7]), int(parts[9]) * 512
    return 0, 0, 0, 0, 0


def device_note(device: str | None, before: tuple[int, ...]) -> str:
    """What the device did during a run: requests and MiB each way, the device's own ms per read request."""
    reads, rbytes, ms, writes, wbytes = (b - a for a, b in zip(before, disk_counts(device)))
    return (f"device {device}: {reads} read requests for {rbytes / MiB:,.0f} MiB ({ms / max(reads, 1):.2f} ms each), "
            f"{writes} write requests for {wbytes / MiB:,.0f} MiB" if device else "no block device")


def queue_limits(device: str | None) -> str:
    """The device's request limits: a transfer whose buffer needs more segments than max_segments (one per run
    of physically contiguous pages) reaches the device as more than one request."""
    if device is None:
        return ""
    q = f"/sys/block/{device}/queue"
    try:
        segs, kb = (open(f"{q}/{n}").read().strip() for n in ("max_segments", "max_sectors_kb"))
    except OSError:
        return ""
    return f"{device} takes at most {segs} segments and {kb} KiB a request"


def requests_per_transfer(run: dict[str, Sample]) -> float | None:
    """Read requests the device saw per transfer (from the read's device note), or None."""
    import re

    m = re.search(r"(\d+) read requests for ([\d,]+) MiB", run["read"].split)
    return int(m.group(1)) / max(1, int(m.group(2).replace(",", ""))) if m else None


HARD = 47008  # IO500's ior-hard transfer and block


def shape(size_mib: int, transfer_mib: int, hard: bool) -> tuple[list[str], list[str]]:
    """(IOR's layout options, storeval's --set options) of the same layout: a file per process of size_mib in
    transfers of transfer_mib, or ior-hard's interleaved 47,008-byte records, size_mib per process rounded down."""
    if not hard:
        return (["-F", "-t", f"{transfer_mib}m", "-b", f"{size_mib}m"],
                ["file_size=" f"{size_mib}MiB", f"transfer_size={transfer_mib}MiB"])
    segments = (size_mib << 20) // HARD
    return (["-t", str(HARD), "-b", str(HARD), "-s", str(segments), "-Q", "1"],
            [f"file_size={segments * HARD}", f"transfer_size={HARD}", "layout=shared-file", f"block_size={HARD}"])


def forget_cached(where: str) -> None:
    """Drop the page cache's copy of every file under ``where`` (posix_fadvise DONTNEED after fsync), as
    storeval does to its own files before a read phase: a buffered read then comes from the device."""
    for root, _, files in os.walk(where):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def ior(directory: str, procs: int, size_mib: int, transfer_mib: int, direct: bool,
        hard: bool = False) -> dict[str, Sample]:
    """IOR's write and read. Buffered, they are two IOR runs (-w -k, then -r) with the file's cached pages
    dropped between them, so IOR's read comes from the device as storeval's does (one IOR run reads back
    what its write left in the page cache)."""
    where = os.path.join(directory, "ior")
    shutil.rmtree(where, ignore_errors=True)
    os.makedirs(where)
    base = [peer("mpiexec"), "-n", str(procs), peer("ior"), "-a", "POSIX", *shape(size_mib, transfer_mib, hard)[0],
            "-C", "-e", *(["--posix.odirect"] if direct else []), "-i", "1", "-k",
            "-O", "summaryFormat=JSON", "-o", os.path.join(where, "testfile")]
    out, before = {}, None
    for access in (["-w", "-r"],) if direct else (["-w"], ["-r"]):
        if access == ["-r"]:
            forget_cached(where)
        if "-r" in access:
            before = disk_counts(device_of(directory))
        cmd = base + access
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            shutil.rmtree(where, ignore_errors=True)
            raise SystemExit(f"IOR failed: {' '.join(cmd)}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        doc = json.loads(proc.stdout[proc.stdout.index("{"):])
        for r in doc["tests"][0]["Results"]:
            out[r["access"]] = Sample(r["bwMiB"])
            out[r["access"]].split = (f"open {r['openTime']:.3f}s transfer {r['wrRdTime']:.3f}s "
                                      f"close {r['closeTime']:.3f}s")
    shutil.rmtree(where, ignore_errors=True)
    out["read"].split += "; " + device_note(device_of(directory), before)
    return out


def storeval(directory: str, procs: int, size_mib: int, transfer_mib: int, direct: bool, engine: str,
             device: str | None, hard: bool = False) -> dict[str, Sample]:
    target = os.path.join(directory, "storeval")
    os.makedirs(target, exist_ok=True)
    before = disk_counts(device)
    layout = [x for kv in shape(size_mib, transfer_mib, hard)[1] for x in ("--set", kv)]
    records = storeval_phase(f"file://{target}", "*", [
        "--workload", "bandwidth", "--clients", str(procs), *layout,
        "--set", f"direct={str(direct).lower()}", "--set", "fsync=true",
        "--set", "reorder=true", "--set", "phases=write,read", "--set", f"engine={engine}"], all_phases=True)
    shutil.rmtree(target, ignore_errors=True)
    out = {}
    for ph in records:
        ran = engines(ph)
        if ran != [engine]:
            raise SystemExit(f"storeval ran {ph['phase']} with engine {ran}, not {engine}: the bench would compare "
                             "another loop (build the native extension: STOREVAL_NATIVE=required pip install -e .)")
        out[ph["phase"]] = Sample(ph["bandwidth_MiBps"])
        out[ph["phase"]].split = "clients " + " ".join(f"{c['seconds']:.3f}s" for c in ph["client_stats"])
        flags = [f["code"] for f in ph["flags"]]
        if flags:
            out[ph["phase"]].split += f" flags {','.join(flags)}"
    out["read"].split += "; " + device_note(device, before)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("directory", nargs="?", default=os.path.join(OUT, "ior-scratch"), help="a directory on a disk")
    ap.add_argument("--size", type=int, default=int(os.environ.get("SIZE_MIB", 2048)), help="MiB per process (-b)")
    ap.add_argument("--transfer", type=int, default=1, help="MiB per transfer (-t)")
    ap.add_argument("--procs", type=int, default=int(os.environ.get("PROCS", 2)))
    ap.add_argument("--reps", type=int, default=int(os.environ.get("REPS", 3)))
    ap.add_argument("--engine", default=os.environ.get("ENGINE", "psync"))
    ap.add_argument("--direct", action=argparse.BooleanOptionalAction, default=None,
                    help="O_DIRECT on both sides (default: on, off with --hard)")
    ap.add_argument("--hard", action="store_true", help="IO500's ior-hard shape: one shared file, interleaved "
                                                        "47,008-byte records")
    a = ap.parse_args()
    if a.direct is None:
        a.direct = not a.hard
    if a.hard and a.direct:
        raise SystemExit("--hard moves 47,008-byte transfers, which O_DIRECT refuses (not a multiple of 512): "
                         "leave --direct out")
    d = os.path.abspath(a.directory)
    os.makedirs(d, exist_ok=True)
    device = device_of(d)
    what = "ior-hard (shared file, 47,008-byte interleaved records)" if a.hard else f"{a.transfer} MiB transfers"
    b = Battery(f"{a.procs} proc x {a.size} MiB, {what}, {'O_DIRECT' if a.direct else 'buffered'}",
                "MiB/s",
                lambda: storeval(d, a.procs, a.size, a.transfer, a.direct, a.engine, device, a.hard),
                lambda: ior(d, a.procs, a.size, a.transfer, a.direct, a.hard))
    b.run(a.reps)
    print(f"\nstoreval bandwidth ({a.engine}) vs IOR -a POSIX {' '.join(shape(a.size, a.transfer, a.hard)[0])} -C -e{' --posix.odirect' if a.direct else ''}: median of "
          f"{a.reps} alternating runs after a warm-up, [min–max]; {d} on device {device or 'none'}; ratio = storeval / IOR")
    for line in b.lines("IOR"):
        print(line)
    per = {t: [requests_per_transfer(r) for r in b.samples[t]] for t in b.samples}
    sv_req, ior_req = (sorted(x for x in per[t] if x is not None) for t in ("storeval", "reference"))
    if a.transfer == 1 and not a.hard and sv_req and ior_req:
        print(f"device read requests per MiB read: storeval {sv_req[len(sv_req) // 2]:.2f}, IOR "
              f"{ior_req[len(ior_req) // 2]:.2f} ({queue_limits(device)}).")
        if abs(sv_req[len(sv_req) // 2] - ior_req[len(ior_req) // 2]) >= 0.3:
            print("  reason: the same 1 MiB transfer reaches the device as a different number of requests. A 1 MiB "
                  "buffer of 4 KiB pages needs one segment per run of physically contiguous pages; past the "
                  "device's max_segments the block layer splits the request. Which tool's buffer happens to be "
                  "contiguous is the allocator's doing, not the storage's: compare the ms each request took.")
    print("how each run's time split (storeval: each client's open-to-close seconds; IOR: its JSON's times):")
    for tool in ("storeval", "reference"):
        for i, run in enumerate(b.samples[tool]):
            print(f"  {'storeval' if tool == 'storeval' else 'IOR':8} run {i}: " +
                  "; ".join(f"{k} {s.value:,.0f} MiB/s ({s.split})" for k, s in run.items()))


if __name__ == "__main__":
    main()
