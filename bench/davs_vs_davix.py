"""storeval's davs:// driver vs davix-get (the grid's HTTP client) against the same XRootD over HTTPS, in one run.

Equal work: ``--files`` files of ``--size`` bytes on the testbed's XRootD (XrdHttp, its certificate checked
against the testbed's CA by both), each read whole, one at a time, by one client: storeval's metadata workload
``file-read`` phase (one GET per file, received into a preallocated buffer) against ``davix-get URL /dev/null``
run once per file (a process per file, as a site's scripts run it; its start-up is in its time and CPU, which
``--size`` large enough makes small). Figures: MiB/s over the files' bytes and the whole sequence of reads, and
each tool's client CPU seconds per GiB (storeval: its clients' timed phase; davix: its processes' rusage).
Both read files laid out just before, untimed, and served from the server's page cache alike.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import tempfile
import time
from pathlib import Path

import yaml
from common import Case, Sample, need, storeval_phase

from storeval.drivers import make_driver
from storeval.testbed.xrootd import XrootdServer
from storeval.units import parse_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--size", default=os.environ.get("FILE_SIZE", "64MiB"))
    ap.add_argument("--files", type=int, default=int(os.environ.get("FILES", 8)))
    ap.add_argument("--reps", type=int, default=int(os.environ.get("REPS", 3)))
    a = ap.parse_args()
    davix = need("davix-get", "davix")
    work = Path(tempfile.mkdtemp(prefix="storeval-davs-bench-"))
    server = XrootdServer(work / "xrootd")
    print("starting the testbed's XRootD (HTTPS through XrdHttp)…", flush=True)
    server.install()
    server.start()
    try:
        server.wait_ready()
        entry = dict(server.targets()["xrootd-davs"])
        url = entry.pop("url")
        study = work / "study.yaml"
        study.write_text(yaml.safe_dump({"targets": {"davs": {"url": url, **entry}}}))
        size = parse_size(a.size)
        driver = make_driver(url, entry)
        driver.connect()
        names = [f"bench/f{i:03d}" for i in range(a.files)]
        driver.ensure_dir("bench")
        block = os.urandom(size)
        for name in names:
            driver.put(name, block)
        driver.shutdown()

        def sv() -> Sample:
            ph = storeval_phase(str(study), "file-read", [
                "--workload", "metadata", "--clients", "1", "--set", f"items={a.files}", "--set", f"file_size={a.size}",
                "--set", "files_only=true", "--set", "phases=file-create,file-read"], study_file=True)
            return Sample(ph["bytes"] / 2**20 / ph["seconds"], cpu_per_gib=ph["cpu_seconds"] / (ph["bytes"] / 2**30))

        def ref() -> Sample:
            env = {**os.environ, "X509_CERT_DIR": entry["ca_dir"]}
            ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            for name in names:
                subprocess.run([davix, "--capath", entry["ca_dir"], f"{url}/{name}", "/dev/null"], env=env, check=True,
                               capture_output=True)
            seconds = time.perf_counter() - t0
            ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
            moved = size * len(names)
            return Sample(moved / 2**20 / seconds, cpu_per_gib=cpu / (moved / 2**30))

        case = Case(f"HTTPS GET of whole {a.size} files, 1 client", "MiB/s", sv, ref, before_each=lambda: None)
        case.run(a.reps)
    finally:
        server.stop()
    said = subprocess.run([davix, "--version"], capture_output=True, text=True).stdout.split()
    version = f"davix-get {said[-1]}" if said else "davix-get"
    print(f"\nstoreval (davs:// driver) vs {version} on the testbed's XRootD over "
          f"HTTPS: median of {a.reps} alternating runs after a warm-up, [min–max]")
    print(case.line("davix"))


if __name__ == "__main__":
    main()
