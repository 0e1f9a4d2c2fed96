"""storeval's S3 driver vs warp (MinIO's reference S3 benchmark) against the same local MinIO, in one run.

Equal settings: objects of ``--size`` bytes, ``--concurrency`` operations in flight (warp --concurrent N;
storeval N clients, each doing one whole-object PUT or GET at a time: the metadata workload's file-create
and file-read phases with ``file_size`` = the object size), the same server, warp's credentials passed in
its environment (never on its command line). warp runs for ``--duration``; storeval moves ``--objects``
objects per client, and reads them ``--iterations`` times (warp, too, reads its objects over and over).
Figures are MiB/s over the whole operation stream, with each tool's client CPU seconds per GiB (storeval:
its clients' timed phases; warp: its whole process, set-up included, over what it moved in ``--duration``).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import tempfile
from pathlib import Path

import yaml
from common import Case, Sample, storeval_phase

from storeval.testbed.gobuild import install_warp
from storeval.testbed.minio import MinioServer
from storeval.units import parse_duration


def warp_run(warp: str, server: MinioServer, op: str, size: str, concurrency: int, duration: str, workdir: str) -> Sample:
    key, secret = server.credentials()
    env = {**os.environ, "WARP_ACCESS_KEY": key, "WARP_SECRET_KEY": secret,
           "WARP_HOST": server.endpoint.split("//", 1)[1]}
    cmd = [warp, op, "--bucket", "storeval", "--prefix", "warp", "--obj.size", size, "--concurrent", str(concurrency),
           "--duration", duration, "--no-color"]
    if op == "get":
        cmd += ["--objects", str(max(16, 4 * concurrency))]
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=workdir)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    m = re.search(r"Average:\s*([\d.]+)\s*MiB/s", proc.stdout)
    if proc.returncode or not m:
        raise SystemExit(f"warp {op} failed: {proc.stdout[-500:]} {proc.stderr[-500:]}")
    rate = float(m.group(1))
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)  # warp's whole process, set-up included
    moved_gib = rate * parse_duration(duration) / 1024
    return Sample(rate, cpu_per_gib=cpu / moved_gib if moved_gib else None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--size", default=os.environ.get("OBJ_SIZE", "16MiB"))
    ap.add_argument("--concurrency", default=os.environ.get("CONCURRENCY", "1,4"))
    ap.add_argument("--objects", type=int, default=int(os.environ.get("OBJECTS", 48)), help="per storeval client")
    ap.add_argument("--duration", default=os.environ.get("DURATION", "15s"), help="of each warp run")
    ap.add_argument("--iterations", type=int, default=int(os.environ.get("ITERATIONS", 5)), help="storeval GET passes")
    ap.add_argument("--reps", type=int, default=int(os.environ.get("REPS", 3)))
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="storeval-s3-bench-"))
    server = MinioServer(work / "minio")
    print("building/starting MinIO and warp (cached after the first time)…", flush=True)
    server.install()
    warp = str(install_warp())
    server.start()
    try:
        server.wait_ready()
        study = work / "study.yaml"
        study.write_text(yaml.safe_dump({"targets": server.targets()}))
        cases = []
        for n in [int(x) for x in a.concurrency.split(",")]:
            for op, phase in (("put", "file-create"), ("get", "file-read")):
                def sv(n=n, phase=phase) -> Sample:
                    passes = a.iterations if phase == "file-read" else 1
                    phs = storeval_phase(str(study), phase, [
                        "--workload", "metadata", "--clients", str(n), "--set", f"items={a.objects}",
                        "--set", f"file_size={a.size}", "--set", "files_only=true", "--set", f"phases={phase}",
                        "--set", f"iterations={passes}"], study_file=True, all_iterations=True)
                    nbytes = sum(p["bytes"] for p in phs)
                    return Sample(nbytes / 2**20 / sum(p["seconds"] for p in phs),
                                  cpu_per_gib=sum(p["cpu_seconds"] for p in phs) / (nbytes / 2**30) if nbytes else None)

                def ref(n=n, op=op) -> Sample:
                    return warp_run(warp, server, op, a.size, n, a.duration, str(work))

                cases.append(Case(f"S3 {op.upper()} {a.size} objects, concurrency {n}", "MiB/s", sv, ref,
                                  before_each=lambda: None))
        for case in cases:
            case.run(a.reps)
    finally:
        server.stop()
    version = "warp v1.0.0"
    print(f"\nstoreval (S3 driver) vs {version} on one local MinIO: median of {a.reps} alternating runs after a warm-up, "
          f"[min–max]")
    for case in cases:
        print(case.line("warp"))


if __name__ == "__main__":
    main()
