"""``storeval testbed``: real storage systems, emulated hosts, links and nodes on this machine, MPI and Slurm
across those nodes, and faults on the servers."""

from __future__ import annotations

import os
import sys
from typing import Optional

import typer

from ..errors import InputError
from ..app.results import write_listing
from .common import JSON_LISTING_HELP, PASS_THROUGH, App, TESTBED_DIR_HELP, safe as _safe, say as _say

testbed_app = App(no_args_is_help=True,
                  help="Real storage systems on this machine, on loopback or in a private network namespace: "
                       "MinIO (S3), XRootD, HDFS, GlusterFS, Ceph, NFS.")


@testbed_app.command("up")
def testbed_up(
    systems: Optional[list[str]] = typer.Argument(
        None, metavar="SYSTEM", help="Systems to start: minio, minio-ec, xrootd, xcache, xrootd-tpc, hdfs, glusterfs, "
                                     "ceph, nfs; slurm (a batch system on emulated nodes) (default: minio xrootd "
                                     "hdfs)."),
    count: Optional[int] = typer.Option(None, "--servers", metavar="N", min=1, max=16,
                                        help="Storage servers of each SYSTEM, 1 to 16: bricks, OSDs, data servers, "
                                             "MinIO nodes, datanodes (default: each system's own)."),
    kind_of: Optional[str] = typer.Option(None, "--type", metavar="TYPE",
                                          help="GlusterFS volume type: distribute, replicate, disperse."),
    hdfs_datanodes: Optional[int] = typer.Option(None, "--hdfs-datanodes", metavar="N", min=1, max=16,
                                                 help="Datanodes of the HDFS mini-cluster, 1 to 16 (as --servers)."),
    host: Optional[str] = typer.Option(None, "--host", metavar="HOST",
                                       help="Emulated host (a network namespace of the testbed's network) the "
                                            "servers run on; made if absent."),
    origin_host: Optional[str] = typer.Option(None, "--origin-host", metavar="HOST",
                                              help="XCache: the emulated host its origin runs on, behind that "
                                                   "host's link (with --host, the cache's host)."),
    peer_host: Optional[str] = typer.Option(None, "--peer-host", metavar="HOST",
                                            help="A system on two hosts (xcache, xrootd-tpc): the emulated host its "
                                                 "second part runs on (XCache's origin, TPC site b); --host the "
                                                 "first's."),
    disk_rate: Optional[str] = typer.Option(None, "--disk-rate", metavar="RATE",
                                            help="Emulate a slower disk for the servers: what their processes read "
                                                 "and write on the disk holding their data, limited to RATE each way "
                                                 "(e.g. 20MB/s; root, a blkio control group)."),
    disk_iops: Optional[int] = typer.Option(None, "--disk-iops", metavar="N",
                                            help="The same, in operations per second each way."),
    directory: str = typer.Option("storeval-testbed", "--dir", metavar="DIR", help=TESTBED_DIR_HELP),
) -> None:
    """Install (first time) and start testbed servers; write storeval-testbed.yaml with a target for each."""
    from ..app.testbed import UpRequest, testbed_up as up

    bed = up(UpRequest(systems or [], count, kind_of, hdfs_datanodes, host, directory, origin_host, peer_host,
                       disk_rate, disk_iops), _say())
    if bed.targets_record:
        print(f"targets written to {bed.targets_file}: storeval run {bed.targets_file.name} --workload bandwidth")


@testbed_app.command("status")
def testbed_status(
    directory: str = typer.Option("storeval-testbed", "--dir", metavar="DIR", help=TESTBED_DIR_HELP),
    json_out: Optional[str] = typer.Option(None, "--json", metavar="FILE|-", help=JSON_LISTING_HELP),
) -> None:
    """Show the testbed servers as they are now: processes up, frozen or dead, ports, and what to do."""
    from ..testbed import Testbed

    if json_out is not None:
        from ..app.testbed import status_document

        write_listing(json_out, status_document(directory))
        return
    lines = Testbed(directory).status()
    print("\n".join(lines) if lines else "no testbed servers running here")


@testbed_app.command("down")
def testbed_down(
    systems: Optional[list[str]] = typer.Argument(None, metavar="SYSTEM", help="Systems to stop (default: all)."),
    directory: str = typer.Option("storeval-testbed", "--dir", metavar="DIR", help=TESTBED_DIR_HELP),
) -> None:
    """Stop exactly the processes `testbed up` started and remove what it made (files of others stay, named)."""
    from ..testbed import Testbed

    Testbed(directory).down(systems or None, log=_say().info)


@testbed_app.command("network")
def testbed_network(
    down: bool = typer.Option(False, "--down", help="Remove the emulated network (stop the servers on it first)."),
    directory: str = typer.Option("storeval-testbed", "--dir", metavar="DIR", help=TESTBED_DIR_HELP),
    json_out: Optional[str] = typer.Option(None, "--json", metavar="FILE|-", help=JSON_LISTING_HELP),
) -> None:
    """Show the emulated network: hosts, addresses, links and their counters (bytes, packets, drops, queues)."""
    from ..testbed import Testbed
    from ..units import format_size

    bed = Testbed(directory)
    if down:
        bed.network_down(log=_say().info)
        return
    if json_out is not None:
        from ..app.testbed import network_document

        write_listing(json_out, network_document(directory))
        return
    net = bed.network()
    if net is None:
        print("no emulated network here (`storeval testbed up KIND --host H` or `storeval testbed link HOST` makes one)")
        return
    print("\n".join(net.status()))
    for name, c in net.counters().items():
        line = (f"  {name}: sent {format_size(c['tx_bytes'])} ({c['tx_packets']:.0f} packets), received "
                f"{format_size(c['rx_bytes'])} ({c['rx_packets']:.0f} packets), drops {c['drops']:.0f}")
        if c.get("rate_bytes_s"):
            line += (f"; tbf out: backlog {format_size(c['out_backlog_bytes'])}, drops {c['out_qdisc_drops']:.0f}"
                     f"; in: backlog {format_size(c['in_backlog_bytes'])}, drops {c['in_qdisc_drops']:.0f}")
        if "relay_up_frames" in c:
            line += (f"; relay delay added {c['relay_up_held_p50_s'] * 1e3:.2f}/{c['relay_down_held_p50_s'] * 1e3:.2f} ms"
                     f" (out/in median), lost {c['relay_up_dropped_loss'] + c['relay_down_dropped_loss']:.0f}, "
                     f"queue drops {c['relay_up_dropped_queue'] + c['relay_down_dropped_queue']:.0f}")
        print(line)


@testbed_app.command("link")
def testbed_link(
    host: str = typer.Argument(..., metavar="HOST",
                               help="Emulated host whose link changes (made, with a link, if absent)."),
    rate: Optional[str] = typer.Option(None, "--rate", metavar="RATE",
                                       help="Rate each way: 1gbit, 125MB/s; `none` for unlimited."),
    rtt: Optional[str] = typer.Option(None, "--rtt", metavar="DURATION",
                                      help="Round-trip delay the link adds: 12ms (half each way)."),
    jitter: Optional[str] = typer.Option(None, "--jitter", metavar="DURATION",
                                         help="± on each way's delay, order kept: 1ms."),
    loss: Optional[str] = typer.Option(None, "--loss", metavar="PERCENT",
                                       help="Loss each way: 0.1% (or a fraction, 0.001)."),
    directory: str = typer.Option("storeval-testbed", "--dir", metavar="DIR", help=TESTBED_DIR_HELP),
) -> None:
    """Change one emulated host's link now (rate, delay, jitter, loss); values not given stay as they are."""
    from ..app.testbed import set_link

    net, host, now = set_link(host, {"rate": rate, "rtt": rtt, "jitter": jitter, "loss": loss}, directory,
                              _say())
    print(f"{host} ({net.address(host)}): {now.describe()}")


nodes_app = App(no_args_is_help=True, help="Emulated nodes for MPI: hosts of the testbed's network that "
                                           "mpiexec launches onto, each with its own host name and link.")
testbed_app.add_typer(nodes_app, name="nodes")


@nodes_app.command("up")
def testbed_nodes_up(
    count: int = typer.Argument(..., metavar="N", min=1, max=250,
                                help="How many nodes, 1 to 250: PREFIX1 … PREFIXN."),
    prefix: str = typer.Option("node", "--prefix", metavar="PREFIX",
                               help="Their names' stem: node → node1, node2, …"),
    rate: Optional[str] = typer.Option(None, "--rate", metavar="RATE",
                                       help="Each node's link rate each way: 1gbit, 125MB/s."),
    rtt: Optional[str] = typer.Option(None, "--rtt", metavar="DURATION",
                                      help="Round-trip delay each node's link adds: 2ms."),
    loss: Optional[str] = typer.Option(None, "--loss", metavar="PERCENT",
                                       help="Loss each way on each node's link: 0.1%."),
    directory: str = typer.Option("storeval-testbed", "--dir", metavar="DIR", help=TESTBED_DIR_HELP),
) -> None:
    """Make N emulated nodes (network namespaces with their own host names) and print the mpiexec that runs
    across them; nodes that exist already are kept."""
    from ..app.testbed import nodes_up

    net, names = nodes_up(count, prefix, {"rate": rate, "rtt": rtt, "loss": loss}, directory, _say())
    _print_nodes(net, names, directory)


@nodes_app.command("show")
def testbed_nodes_show(
    directory: str = typer.Option("storeval-testbed", "--dir", metavar="DIR", help=TESTBED_DIR_HELP),
) -> None:
    """The emulated hosts mpiexec can launch onto, and the mpiexec that does it."""
    from ..testbed import Testbed

    net = Testbed(directory).network()
    if net is None:
        print("no emulated network here (`storeval testbed nodes up N` makes nodes)")
        return
    _print_nodes(net, list(net.hosts), directory)


@testbed_app.command("mpiexec", context_settings=PASS_THROUGH)
def testbed_mpiexec(
    ctx: typer.Context,
    directory: str = typer.Option("storeval-testbed", "--dir", metavar="DIR",
                                  help=TESTBED_DIR_HELP + " Give it first."),
) -> None:
    """mpiexec onto the testbed's emulated nodes: `storeval testbed mpiexec -hosts node1,node2 -n 8 storeval run
    STUDY` (MPICH's hydra, launching into each node's namespace under its host name)."""
    from ..app.testbed import mpiexec_command

    argv = mpiexec_command(directory, ctx.args)
    sys.stdout.flush()
    os.execv(argv[0], argv)


@testbed_app.command("slurm", context_settings=PASS_THROUGH)
def testbed_slurm(
    ctx: typer.Context,
    directory: str = typer.Option("storeval-testbed", "--dir", metavar="DIR",
                                  help=TESTBED_DIR_HELP + " Give it first."),
) -> None:
    """Run a command against the testbed's Slurm: `storeval testbed slurm salloc -N 2 mpiexec -n 4 storeval run
    STUDY` (sinfo, squeue, srun, sbatch, scancel alike)."""
    from ..app.testbed import slurm_command

    # this storeval's mpiexec and storeval come first on the PATH
    argv, env = slurm_command(directory, ctx.args, dict(os.environ), os.path.dirname(sys.executable))
    sys.stdout.flush()
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as e:
        raise InputError(f"testbed slurm: cannot run {ctx.args[0]}: {e.strerror}") from None


def _print_nodes(net, names: list[str], directory: str) -> None:
    for name in names:
        info = net.hosts[name]
        link = net.link_settings(name).describe() if info.link else "no link (on the bridge)"
        print(f"{name}: {info.address} in {info.netns}, {link}")
    print(f"mpiexec across them: storeval testbed mpiexec --dir {_safe(directory)} -hosts "
          f"{','.join(names)} -n {len(names)} storeval run STUDY (or {net.mpiexec} -hosts …)")


@testbed_app.command("faults")
def testbed_faults(
    directory: str = typer.Option("storeval-testbed", "--dir", metavar="DIR", help=TESTBED_DIR_HELP),
    json_out: Optional[str] = typer.Option(None, "--json", metavar="FILE|-", help=JSON_LISTING_HELP),
) -> None:
    """List the fault handles of the running testbed servers (whole servers and their nodes) and their actions."""
    from ..testbed.faults import fault_handles

    if json_out is not None:
        from ..app.testbed import faults_document

        write_listing(json_out, faults_document(directory))
        return
    handles = fault_handles(directory)
    if not handles:
        print("no testbed server runs here: no fault handles")
        return
    import shutil
    import textwrap

    from ..report.console import width as columns

    width = max(len(h.name) for h in handles.values())
    actions = max(len(",".join(h.actions)) for h in handles.values())
    indent = width + actions + 4
    total = columns() or shutil.get_terminal_size().columns
    for h in handles.values():  # the description folds under itself, within the terminal's width
        lines = textwrap.wrap(h.description, max(30, total - indent)) or [""]
        print(f"{h.name:<{width}}  {','.join(h.actions):<{actions}}  {lines[0]}")
        for line in lines[1:]:
            print(" " * indent + line)


@testbed_app.command("fault")
def testbed_fault(
    name: str = typer.Argument(..., metavar="HANDLE",
                               help="Fault handle (see `storeval testbed faults`): minio-ec.node2, hdfs.datanode1, "
                                    "xrootd …"),
    action: str = typer.Argument(..., metavar="ACTION",
                                 help="stop (SIGSTOP), cont (SIGCONT), kill, start (a killed one, same ports and "
                                      "data) or restart."),
    directory: str = typer.Option("storeval-testbed", "--dir", metavar="DIR", help=TESTBED_DIR_HELP),
) -> None:
    """Make one testbed server or node hang (stop), resume (cont), crash (kill), come back (start) or restart, now."""
    from ..testbed.faults import act

    print(act(directory, name, action))
