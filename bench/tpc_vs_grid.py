"""storeval's tpc workload vs the grid's own third-party-copy clients, on the testbed's two XRootD sites, in one run.

Equal work: ``--files`` files of ``--size`` random bytes on site a, each copied to site b by the sites' servers,
one copy at a time, by one client, timed from the first request to the last copy's end:

* root://: storeval's XRootD TPC against ``xrdcp --tpc only`` run once per file (a process per copy, as a
  site's scripts run it; XrdCl's TPC job notices the end of a copy at its next one-second progress tick, which
  this comparison shows);
* davs://: storeval's HTTP-TPC pull (``COPY`` with ``Source``) against gfal2's (the library FTS drives,
  through its Python binding: ``filecopy`` in "3rd pull" mode, no checksum, as storeval's timed region has
  none; one process for all the copies, its start-up outside the time).

Both sides copy the same files to fresh names; storeval's figure is its phase's aggregate (bytes copied / the
phase's span, one client), the peer's the same bytes over its own wall time. Needs root (the sites run in a
network namespace), ``xrdcp`` (xrootd-client) and ``python3-gfal2`` with ``gfal2-plugin-http`` (apt).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

import yaml
from common import Case, Sample, need, storeval_phase

from storeval.drivers import make_driver
from storeval.spec import make_target
from storeval.testbed.xrootdtpc import XrootdTpcServer
from storeval.units import parse_size

# gfal2 2.21 (Debian 12): the copy mode is the HTTP plugin's setting, and without a bearer token it asks the
# server for proxy delegation (Credential: gridsite), which XrdHttpTPC refuses; a token (this server checks none)
# makes it send Credential: none, as FTS does with tokens. No fallback to a copy through the client.
GFAL_COPY = """
import sys, time, gfal2
ctx = gfal2.creat_context()
ctx.set_opt_string("HTTP PLUGIN", "DEFAULT_COPY_MODE", "3rd pull")
ctx.set_opt_boolean("HTTP PLUGIN", "ENABLE_STREAM_COPY", False)
ctx.set_opt_string("BEARER", "TOKEN", "not-checked-by-the-testbed")
p = ctx.transfer_parameters()
p.overwrite = True
p.timeout = 600
pairs = [line.split() for line in sys.stdin.read().splitlines() if line.strip()]
t0 = time.perf_counter()
for src, dst in pairs:
    ctx.filecopy(p, src, dst)
print(time.perf_counter() - t0)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--size", default=os.environ.get("FILE_SIZE", "64MiB"))
    ap.add_argument("--files", type=int, default=int(os.environ.get("FILES", 4)))
    ap.add_argument("--reps", type=int, default=int(os.environ.get("REPS", 3)))
    a = ap.parse_args()
    xrdcp = need("xrdcp", "xrootd-client")
    if subprocess.run(["/usr/bin/python3", "-c", "import gfal2"], capture_output=True).returncode:
        raise SystemExit("gfal2's Python binding is needed (apt-get install python3-gfal2 gfal2-plugin-http)")
    work = Path(tempfile.mkdtemp(prefix="storeval-tpc-bench-"))
    server = XrootdTpcServer(work / "sites")
    print("starting the testbed's two XRootD sites…", flush=True)
    server.install()
    server.start()
    try:
        server.wait_ready()
        targets = server.targets()
        size = parse_size(a.size)
        cases = []
        for proto, (src, dst) in {"root": ("tpc-a", "tpc-b"), "davs": ("tpc-a-davs", "tpc-b-davs")}.items():
            study = work / f"{proto}.yaml"
            study.write_text(yaml.safe_dump({
                "targets": {"a": targets[src], "b": targets[dst]},
                "workloads": {"tpc": {"tpc": {"source": "a", "files": a.files, "file_size": a.size, "verify": False,
                                              "poll": 0}, "targets": ["b"]}}}))
            s, d = (make_target(n, dict(targets[n]), n) for n in (src, dst))
            source = make_driver(s.url, s.options)
            source.connect()
            source.ensure_dir("bench")
            names = [f"bench/f{i:03d}" for i in range(a.files)]
            block = os.urandom(size)
            for name in names:
                source.put(name, block)
            dest = make_driver(d.url, d.options)
            dest.connect()
            dest.ensure_dir("bench")
            runs = iter(range(10**6))

            def sv(study=study) -> Sample:
                ph = storeval_phase(str(study), "copy", ["--clients", "1"], study_file=True)
                return Sample(ph["bytes"] / 2**20 / ph["seconds"])

            def ref(proto=proto, source=source, dest=dest, names=names, runs=runs, d=d) -> Sample:
                k = next(runs)
                pairs = [(source.tpc_url(n) if proto == "davs" else source.tool_address(n),
                          dest.tpc_url(f"{n}.{k}") if proto == "davs" else dest.tool_address(f"{n}.{k}"))
                         for n in names]
                if proto == "root":
                    env = {**os.environ, "XRD_CONNECTIONRETRY": "1"}
                    t0 = time.perf_counter()
                    for src_url, dst_url in pairs:
                        subprocess.run([xrdcp, "-s", "--tpc", "only", src_url, dst_url], env=env, check=True,
                                       capture_output=True, timeout=600)
                    seconds = time.perf_counter() - t0
                else:
                    env = {**os.environ, "X509_CERT_DIR": d.options["ca_dir"]}
                    out = subprocess.run(["/usr/bin/python3", "-c", GFAL_COPY], env=env, check=True, text=True,
                                         capture_output=True, timeout=1200,
                                         input="\n".join(f"{x} {y}" for x, y in pairs))
                    seconds = float(out.stdout.split()[-1])
                for _, dst_url in pairs:  # the peer's copies, removed through the destination's own driver
                    dest.remove_quietly(dst_url.split("/storeval/", 1)[1])
                return Sample(size * len(names) / 2**20 / seconds)

            peer = "xrdcp --tpc only" if proto == "root" else "gfal2 (HTTP-TPC pull)"
            case = Case(f"{proto}:// third-party copy of {a.files} × {a.size}, 1 client, one at a time", "MiB/s", sv,
                        ref, before_each=lambda: None)
            case.run(a.reps)
            cases.append((case, peer))
            for name in names:
                source.remove_quietly(name)
            for drv in (source, dest):
                drv.rmdir_quietly("bench")
                drv.shutdown()
    finally:
        server.stop()
    print(f"\nstoreval's tpc workload vs the grid's clients on two XRootD sites ({server.state.info.get('version')}): "
          f"median of {a.reps} alternating runs after a warm-up, [min–max]")
    for case, peer in cases:
        print(case.line(peer))


if __name__ == "__main__":
    main()
