"""Client groups and link settings in a study (issue 17.3, 17.4): what they parse to, the cells they plan, one-line
errors for every mistake, and each client's group carried into its records — locally and under MPI."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import duckdb
import pytest

from storeval.errors import InputError
from storeval.plan import plan
from storeval.spec import load_study

from .helpers import storeval
from .test_mpi import MPIEXEC, mpirun, needs_mpiexec


def write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "study.yaml"
    p.write_text(textwrap.dedent(text))
    return str(p)


GROUPS = """\
targets: {here: {url: "file://%s"}}
workloads:
  bw: {bandwidth: {file_size: 1MiB, transfer_size: 256KiB, phases: [write, read]}}
network:
  links:
    wan: {rate: 1Gbit, rtt: [0ms, 12ms, 50ms], loss: 0.1%%}
clients:
  onboard: {count: [2, 4], host: server1}
  external: {count: [0, 2], host: client-net, link: wan}
repetitions: 2
"""


def test_groups_and_a_swept_link_plan_the_product_with_factors_named_after_them(tmp_path, target):
    study = load_study(write(tmp_path, GROUPS % target))
    assert study.network.hosts == {"server1": None, "client-net": "wan"}
    assert study.network.links["wan"] == {"rate": 125e6, "rtt": [0.0, 0.012, 0.05], "loss": 0.001}
    assert study.clients == [2, 4, 6]
    cells = plan(study)
    assert len(cells) == 3 * 4 * 2  # rtt values x group count combinations x repetitions
    first = cells[:12]
    assert [(c.factors["rtt"], c.factors["clients.onboard"], c.factors["clients.external"], c.clients)
            for c in first] == [(rtt, on, ext, on + ext) for rtt in (0.0, 0.012, 0.05) for on in (2, 4)
                                for ext in (0, 2)]
    c = first[1]  # rtt 0, 2 on board + 2 external
    assert c.groups == ({"name": "onboard", "count": 2, "host": "server1"},
                        {"name": "external", "count": 2, "host": "client-net"})
    assert c.network == {"hosts": {"server1": None, "client-net": "wan"},
                         "links": {"wan": {"rate": 125e6, "rtt": 0.0, "jitter": 0.0, "loss": 0.001}}}
    assert first[0].groups == ({"name": "onboard", "count": 2, "host": "server1"},)  # a group of 0 is left out
    assert c.label == "here · bw (rtt=0ms, 2 onboard + 2 external) · 4 clients"
    # the state a watchdog rebuilds a cell from keeps them
    from storeval.core.cell import Cell

    back = Cell.from_state(c.state(None))
    assert (back.groups, back.network) == (c.groups, c.network)
    assert [cl.repetition for cl in cells] == [0] * 12 + [1] * 12


def test_plain_counts_still_plan_as_before(tmp_path, target):
    study = load_study(write(tmp_path, f"targets: {{here: {{url: 'file://{target}'}}}}\nworkloads: {{bw: bandwidth}}\n"
                                       "clients: [1, 2]\n"))
    cells = plan(study)
    assert [c.factors for c in cells] == [{"clients": 1}, {"clients": 2}]
    assert all(c.groups == () and c.network is None for c in cells)


BASE = "targets: {here: {url: 'file:///tmp'}}\nworkloads: {bw: bandwidth}\n"
MISTAKES = [
    ("clients: {a: {count: [1], hots: x}}", "clients.a.hots: unknown key (did you mean 'hosts'?)"),
    ("clients: {a: {host: x}}", "clients.a.count: missing (how many clients this group runs, e.g. [2, 4])"),
    ("clients: {a: {count: [1, -1]}}", "clients.a.count: -1 is not a number of clients (a whole number, 0 to "
                                       "1,000,000)"),
    ("clients: {a: {count: [0]}, b: {count: 0}}", "clients: every group's count is 0: no cell would run a client"),
    ("clients: {a: {count: 1, link: wan}}\nnetwork: {links: {wan: {rtt: 1ms}}}",
     "clients.a.link: a link attaches an emulated host; add host: NAME (the clients run there)"),
    ("clients: {a: {count: 1, host: h, link: lan}}\nnetwork: {links: {wan: {rtt: 1ms}}}",
     "clients.a.link: 'lan' is not a link of network.links (wan)"),
    ("clients: {a: {count: 1, host: h, link: wan}}\nnetwork: {links: {wan: {}, lan: {}}, hosts: {h: {link: lan}}}",
     "clients.a.link: host h is attached by link lan elsewhere in the study; a host has one link (use another "
     "host name)"),
    ("clients: {a: {count: 1, host: h, ranks: 0-3}}",
     "clients.a: give host (an emulated host, local clients) or hosts/hostfile/ranks (MPI), not both"),
    ("clients: {a: {count: 1, hostfile: /nonexistent/hosts}}",
     "clients.a.hostfile: cannot read /nonexistent/hosts: No such file or directory"),
    ("clients: {a: {count: 1, ranks: 3-1}}", "clients.a.ranks: '3-1' is not a range of ranks (e.g. 0-3)"),
    ("network: {links: {wan: {rtt: 12s}}}", "network.links.wan.rtt: '12s' is longer than 10 s (write milliseconds: "
                                            "12ms)"),
    ("network: {links: {wan: {loss: 150%}}}", "network.links.wan.loss: '150%' is not a loss between 0 and 100 % "
                                              "(e.g. 0.1% or 0.001)"),
    ("network: {links: {wan: {rate: fast}}}", "network.links.wan.rate: 'fast' is not a rate (e.g. 10Gbit, 3GB/s, "
                                              "800MiB/s)"),
    ("network: {links: {wan: {delay: 1ms}}}", "network.links.wan.delay: unknown key (known: jitter, loss, "
                                              "rate, rtt)"),
    ("network: {links: {wan: {rtt: [1ms, 1ms]}}}", 'network.links.wan.rtt: ["1ms", "1ms"] repeats a value: \'1ms\' is given at [0] and [1] (give each value once)'),
    ("network: {links: {a: {rtt: [1ms, 2ms]}, b: {rtt: [3ms, 4ms]}}}",
     "network.links.b.rtt: links a and b both sweep rtt; sweep it on one link (the factor is named rtt)"),
    ("network: {link: {}}", "network.link: unknown key (did you mean 'links'?)"),
    ("network: {links: {wan: {rate: 1bit}}}", "network.links.wan.rate: '1bit' is not a rate an emulated link can have "
                                              "(8kbit to 1tbit, e.g. 1Gbit)"),
    ("network: {links: {wan: {rtt: [0ms, 10ms], jitter: 2ms}}}",
     "network.links.wan.jitter: 2ms is more than half the rtt 0ms (the jitter of each way's delay); lower it or raise "
     "the rtt"),
    ("clients: {a: {count: 1, host: controller}}",
     "clients.a.host: 'controller' names storeval's own end of the emulated network; call the host otherwise"),
    ("clients: {all: {count: 1}}", "clients.all: 'all' names every client in the reports; call the group otherwise"),
    ("network: {hosts: {h: {link: wan}}}", "network.hosts.h.link: 'wan' is not a link of network.links (none: "
                                           "declare it under network.links)"),
]


@pytest.mark.parametrize("text,message", MISTAKES, ids=[m for _, m in MISTAKES])
def test_every_mistake_is_one_line(tmp_path, text, message):
    with pytest.raises(InputError) as e:
        load_study(write(tmp_path, BASE + text + "\n"))
    assert str(e.value) == message


def test_a_groups_hosts_may_come_from_an_mpi_hostfile(tmp_path):
    (tmp_path / "hosts").write_text("# rack 1\nnode1:4\nnode2 slots=4\n\nnode1\n")
    study = load_study(write(tmp_path, BASE + f"clients: {{a: {{count: 2, hosts: [node0], hostfile: {tmp_path}/hosts}}}}\n"))
    assert study.groups["a"].hosts == ("node0", "node1", "node2")
    (tmp_path / "empty").write_text("# nothing\n")
    with pytest.raises(InputError, match=r"^clients\.a\.hostfile: .*/empty names no host \(one host name per line\)$"):
        load_study(write(tmp_path, BASE + f"clients: {{a: {{count: 2, hostfile: {tmp_path}/empty}}}}\n"))


def test_a_link_on_the_servers_own_host_is_refused(tmp_path):
    text = ("targets: {m: {testbed: minio, host: store}}\nworkloads: {bw: bandwidth}\n"
            "network: {links: {wan: {rate: 100Mbit}}}\nclients: {g: {count: 1, host: store, link: wan}}\n")
    with pytest.raises(InputError) as e:
        load_study(write(tmp_path, text))
    assert str(e.value) == ("clients.g.link: the group runs on host store, where every target's server runs: its "
                            "traffic never crosses link wan; put the group on another host, or drop link")
    load_study(write(tmp_path, text.replace("host: store, link", "host: far, link")))  # elsewhere: fine


def test_the_command_line_cannot_override_groups(tmp_path):
    path = write(tmp_path, BASE + "clients: {a: {count: 1}}\n")
    with pytest.raises(InputError, match=r"^--clients: the study splits its clients into groups"):
        load_study(path, clients="2")


def _records(results: Path) -> list[tuple]:
    con = duckdb.connect(str(results / "storeval.duckdb"), read_only=True)
    try:
        return con.execute("SELECT c.factors, r.rank, r.phase, json_extract_string(r.extra, '$.group') "
                           "FROM records r JOIN cells c USING (cell_id) ORDER BY r.cell_id, r.phase, r.rank").fetchall()
    finally:
        con.close()


def test_each_record_carries_its_clients_group_ranks_group_by_group(tmp_path, target):
    study = write(tmp_path, f"""\
        targets: {{here: {{url: "file://{target}"}}}}
        workloads: {{bw: {{bandwidth: {{file_size: 1MiB, transfer_size: 256KiB, phases: [write]}}}}}}
        clients:
          first: {{count: [1, 2]}}
          second: [0, 2]
        """)
    r = storeval("run", study, "--results", str(tmp_path / "res"), "--quiet", "--json", str(tmp_path / "out.json"))
    assert r.rc == 0, r.err
    seen: dict[str, list] = {}
    for factors, rank, _phase, group in _records(tmp_path / "res"):
        f = json.loads(factors)
        seen.setdefault(f"{f['clients.first']}+{f['clients.second']}", []).append((rank, group))
    assert seen == {"1+0": [(0, "first")], "1+2": [(0, "first"), (1, "second"), (2, "second")],
                    "2+0": [(0, "first"), (1, "first")],
                    "2+2": [(0, "first"), (1, "first"), (2, "second"), (3, "second")]}


def test_real_hosts_and_ranks_need_mpi(tmp_path, target):
    study = write(tmp_path, f"targets: {{here: {{url: 'file://{target}'}}}}\nworkloads: {{bw: bandwidth}}\n"
                            "clients: {a: {count: 1, hosts: [node1]}}\n")
    r = storeval("run", study, "--results", str(tmp_path / "res"))
    assert r.rc == 2
    assert r.err.strip() == ("error: clients.a.hosts: real hosts and ranks are for the MPI engine (run under "
                             "mpiexec); locally, place the group on an emulated host with host: NAME")


@needs_mpiexec
def test_mpi_takes_each_groups_ranks_from_its_rule(tmp_path, target):
    study = write(tmp_path, f"""\
        targets: {{here: {{url: "file://{target}"}}}}
        workloads: {{bw: {{bandwidth: {{file_size: 1MiB, transfer_size: 256KiB, phases: [write]}}}}}}
        clients:
          low: {{count: 1, ranks: "2-3"}}
          high: {{count: [1, 3], ranks: "0,1"}}
        """)
    r = mpirun(4, "run", study, "--results", str(tmp_path / "res"), "--quiet", cwd=tmp_path)
    assert r.returncode == 1, r.stderr  # the cell asking 3 ranks of 2 fails; the other runs
    assert ("client group high needs 3 ranks among ranks 0-1; the job has 2 left there (start more ranks with "
            "mpiexec, or lower its count)") in r.stdout + r.stderr
    rows = [(json.loads(f)["clients.high"], rank, group) for f, rank, _p, group in _records(tmp_path / "res")]
    assert rows == [(1, 0, "high"), (1, 1, "low")]  # rank 0, the coordinator's own client, first
    assert MPIEXEC.exists()
