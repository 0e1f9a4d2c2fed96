"""What every key of a study file means, as data: one line each, with its type (and unit) and default.

spec.py validates a study with its models (StudyFile, TargetEntry, ClientGroup, Network, Link, Price …) and
core/faultplan.py against its keys; this is their documentation, kept beside no code so that every layer may
read it. ``storeval.app.reference`` renders it into docs/reference.md, and tests/test_reference.py fails for a
key the code accepts that is not here, or one here the code no longer accepts. A default written ``—`` means
the key is optional and has none (leaving it out turns the feature off)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Key:
    type: str  # what the value is, with its unit
    default: str  # what leaving it out means
    meaning: str


@dataclass(frozen=True)
class Section:
    path: str  # where the keys sit in a study file
    about: str
    keys: dict[str, Key]


SECTIONS: dict[str, Section] = {
    "study": Section("(top level)", "the study file's own keys; any other key is refused naming the closest one", {
        "targets": Key("mapping: name → target (or a URL)", "the current directory (`--target` adds URLs)",
                       "what is measured: each target's URL, driver options, limits and system settings"),
        "targets_from": Key("file name, or mapping (see targets_from)", "—",
                            "read the targets of another file (the storeval-testbed.yaml `storeval testbed up` "
                            "writes); the study's own targets are picked from them or are like them"),
        "workloads": Key("mapping: name → {KIND: parameters}", "bandwidth, metadata and skim (the default study)",
                         "what each cell does: a workload kind and its parameters; a list value sweeps"),
        "clients": Key("count, list of counts, or mapping: group → group", "[1] (the default study: [1, 2])",
                       "how many clients run at once in a cell; a list sweeps; a mapping splits them into groups"),
        "repetitions": Key("whole number, 1 to 10,000", "1 (the default study: 3)",
                           "how many times every cell is run (outermost, so drift shows as spread)"),
        "phase_timeout": Key("duration", "1h", "a phase without progress for this long is stopped as hung"),
        "description": Key("text", "—", "what the study is for; shown in the reports"),
        "keep_cache": Key("true or false", "false", "keep the page caches between phases instead of dropping "
                          "them (the figures may then be memory's)"),
        "probe_interval": Key("duration", "1s", "how often host and server counters are sampled during a phase "
                              "(0 turns sampling off)"),
        "placement": Key("spread or pack", "spread", "under MPI: which ranks a cell of k clients uses — spread "
                         "across hosts, or packed onto the fewest"),
        "clients_per_host": Key("whole number", "— (no limit)", "under MPI: at most this many clients per host"),
        "faults": Key("list of faults (see faults[])", "—", "the fault plan: timed actions on servers or commands "
                      "during phases"),
        "testbed": Key("directory", "—", "the testbed directory (`storeval testbed up --dir`) whose fault handles "
                       "the fault plan names"),
        "network": Key("mapping (see network)", "—", "the emulated network: links with rate/rtt/jitter/loss and "
                       "the hosts they attach"),
        "prices": Key("mapping: target → price (see prices.TARGET)", "—",
                      "what each system costs, for the report's cost table"),
    }),
    "targets_from": Section("targets_from", "written as a file name, or as this mapping", {
        "file": Key("file name", "(required)", "the YAML file whose targets: the study uses"),
        "allow_commands": Key("true or false", "false", "allow that file's targets to run setup/teardown "
                              "commands on this host"),
        "only": Key("list of target names", "all", "the file's targets the study uses (a testbed's file may offer "
                    "more than a study measures, e.g. one server under two protocols)"),
    }),
    "target": Section("targets.NAME", "a target: a URL (or `testbed: KIND`), and the options of its driver (see "
                      "Target options)", {
        "url": Key("URL of a driver's scheme (see Target options) or a path", "(required without testbed)",
                   "where the target is; a bare path is a file:// URL"),
        "description": Key("text", "—", "what the target is; shown in the reports"),
        "limits": Key("mapping (see targets.NAME.limits)", "—", "what the hardware can deliver: a figure above it "
                      "is flagged not-physical"),
        "like": Key("another target's name", "—", "take that target's URL and options, with this entry's keys on "
                    "top (the same server under other settings)"),
        "testbed": Key("a testbed kind (see Testbed settings)", "—",
                       "storeval's testbed brings this system up at each combination of the settings; the URL is "
                       "the running server's"),
        "use": Key("one of the testbed's targets", "the testbed's first", "which of a testbed system's targets to "
                   "measure (e.g. a file system's fuse mount or its native protocol)"),
        "settings": Key("mapping: name → value or list", "—", "the system's settings; a list sweeps (a target with "
                        "a URL needs a setup command that applies them); a testbed kind's settings may also be "
                        "written beside url (see Testbed settings)"),
        "setup": Key("command or list of commands", "—", "run on this host before the target's cells at each "
                     "settings combination; {name} fields are the settings, url, path, target"),
        "teardown": Key("command or list of commands", "—", "run after the target's cells, undoing setup"),
        "host": Key("emulated host name", "—", "a testbed target: the emulated host its servers run on (kinds "
                    "that can)"),
        "degraded": Key("0, a number of parts, or healing (a list sweeps)", "0", "a testbed target: the system's "
                        "state in its cells — its last N parts (the node handles `storeval testbed faults` lists) "
                        "killed through the block, or healing: a part killed, heal_fill written, the cell run while "
                        "it repairs"),
        "heal_fill": Key("size", "256MiB", "a testbed target with degraded: healing: the bytes written while its "
                         "part is down before each cell, for the system to repair"),
    }),
    "limits": Section("targets.NAME.limits", "what the hardware can deliver; a figure above a limit is flagged "
                      "not-physical", {
        "network": Key("rate (per host, e.g. 10Gbit)", "—", "the network's rate per host"),
        "device_read": Key("rate (e.g. 3GB/s)", "—", "what the devices can read"),
        "device_write": Key("rate", "—", "what the devices can write"),
        "iops": Key("number > 0 (operations per second)", "—", "the operations per second the target can do"),
        "stall": Key("duration, at least 1 s", "2s", "a phase without progress this long is flagged stalled"),
    }),
    "group": Section("clients.GROUP", "a client group (clients: as a mapping); a bare count or list is its count", {
        "count": Key("count or list of counts (0 allowed)", "(required)", "how many clients this group runs; a "
                     "list sweeps"),
        "host": Key("emulated host name", "— (this host)", "local clients: the emulated host the group runs on"),
        "link": Key("a link of network.links", "—", "the link that attaches the group's host (needs host)"),
        "hosts": Key("list of host names", "—", "under MPI: the real hosts the group's ranks run on"),
        "hostfile": Key("file name (MPI hostfile)", "—", "under MPI: the hosts, one per line (host, host:4, host "
                        "slots=4)"),
        "ranks": Key("ranks: 0-3,8 or a list", "—", "under MPI: the ranks the group's clients run on"),
    }),
    "network": Section("network", "the testbed's emulated network", {
        "links": Key("mapping: name → link", "—", "the links and their settings"),
        "hosts": Key("mapping: host → {link: NAME} or nothing", "—", "emulated hosts, each attached by a link "
                     "(nothing: unshaped)"),
    }),
    "link": Section("network.links.NAME", "one emulated link; a list value sweeps (one link per setting)", {
        "rate": Key("rate (8kbit to 1tbit), or unlimited", "unlimited", "the link's rate"),
        "rtt": Key("duration, at most 10 s", "0", "the round-trip delay"),
        "jitter": Key("duration, at most half the rtt", "0", "the jitter of each way's delay"),
        "loss": Key("fraction or percentage (0.001, 0.1%)", "0", "the share of packets lost"),
    }),
    "network_host": Section("network.hosts.HOST", "one emulated host", {
        "link": Key("a link of network.links", "— (unshaped)", "the link that attaches the host"),
    }),
    "workload": Section("workloads.NAME", "one workload: its kind with its parameters (see Workload parameters), "
                        "its own faults and the targets it runs on", {
        "KIND": Key("mapping: parameter → value or list", "(required: exactly one kind)", "the workload kind "
                    "(bandwidth, metadata, …) and its parameters; a list value sweeps"),
        "faults": Key("list of faults (see faults[])", "—", "faults that apply to this workload's cells only"),
        "targets": Key("list of target names", "— (every target)", "the only targets this workload runs on (a "
                       "target a parameter names as the other end, tpc's source, never runs it)"),
    }),
    "fault": Section("faults[]", "one fault of the plan (top level, or a workload's own)", {
        "at": Key("duration after the phase's start, or a share of its work (30%)", "(required)",
                  "when the action happens"),
        "phase": Key("a phase of the workload", "the workload's only phase", "the phase whose start at counts from"),
        "action": Key("stop, cont, kill, start, restart or exec", "(required)", "what is done"),
        "server": Key("testbed fault handle", "(required but for exec)",
                      "the server acted on (`storeval testbed faults` lists them); for exec a label"),
        "for": Key("duration", "— (not undone)", "undo after this long: cont after stop, start after kill, the "
                   "undo command after exec"),
        "restart_after": Key("duration", "—", "a kill only: start the server again after this long (same as for)"),
        "run": Key("command", "(required for exec)", "exec: the command to run (by /bin/sh)"),
        "undo": Key("command", "—", "exec: the command that undoes it"),
        "target": Key("a target's name", "— (every target)", "only in cells of this target"),
        "workload": Key("a workload's name", "— (every workload)", "only in cells of this workload"),
        "timeout": Key("duration", "60s", "exec: how long its command may take"),
        "expect": Key("ok or failed", "—", "what the struck phase should do (shown beside what it did)"),
        "heal_timeout": Key("duration", "0", "after the cell's phases: how long to wait for the system to heal "
                            "itself, the cell's data kept meanwhile (a kill, stop or restart; timed by the "
                            "system's own word)"),
        "wait_recovery": Key("duration", "0", "heal_timeout's old name"),
    }),
    "price": Section("prices.TARGET", "what a system costs, for the report's cost table (cost of the best "
                     "measured aggregate); give per_tb or per_gbps", {
        "per_tb": Key("number, 0 to 1e15", "—", "price of a TB of capacity"),
        "per_gbps": Key("number, 0 to 1e15", "—", "price of a GB/s of bandwidth"),
        "currency": Key("currency code, at most 8 characters", "USD", "the currency of both prices"),
    }),
}

__all__ = ["Key", "Section", "SECTIONS"]
