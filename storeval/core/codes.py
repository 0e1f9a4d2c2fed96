"""The one catalog of what storeval says in codes: every flag, warning and event kind a run can carry, every exit
status and every ``STOREVAL_*`` environment variable, each with what it means and what to do.

Plain data (the core layer): ``storeval.app.reference`` renders it into docs/reference.md, and
tests/test_reference.py fails for a code the sources use that is not here, or one here that they no longer use."""

from __future__ import annotations

from dataclasses import dataclass

FLAG, WARNING, EVENT = "flag", "warning", "event"


@dataclass(frozen=True)
class Code:
    """One code: the kinds it is (a phase's flag, a phase's warning, a stored event), what it means, what to do."""

    kinds: tuple[str, ...]
    meaning: str
    action: str


CODES: dict[str, Code] = {
    # -- flags: a figure that is not what it claims to be (report: ✗) ------------------------------------------
    "busy-host": Code((FLAG,), "other processes used a large share of a host's CPU time during the phase, beside "
                      "storeval's clients and the target's servers: foreign load may have cut the figure",
                      "run on an idle host, or rerun when the other load has ended"),
    "clock-skew": Code((FLAG,), "an MPI client's clock was aligned to rank 0's only within a share of the phase "
                       "larger than allowed: the phase's start and end across hosts are uncertain",
                       "keep the hosts' clocks synchronised (chrony/NTP), or time longer phases"),
    "data-lost": Code((FLAG,), "after a faulted or degraded write phase, bytes the writes had acknowledged were "
                      "missing, corrupted or unreadable when read back",
                      "the storage lost acknowledged data: check its redundancy settings and the fault it was under"),
    "degraded": Code((FLAG,), "operations failed during the phase and were retried or skipped (on_error); the "
                     "figure counts what succeeded, over a time that includes the failures and the pauses",
                     "read the figure as the rate under failure; on_error: fail makes the first error end the phase"),
    "fault-missed": Code((FLAG, EVENT), "a fault the study asked for did not strike (its moment was not reached, "
                         "its server was held by another fault, or its action failed): the phase ran without it",
                         "make the phase long enough to reach the moment (at:), or fix the action; the run exits 1"),
    "fault-not-undone": Code((FLAG,), "a fault's undo (cont, start or the undo command) failed: the server may "
                             "still be stopped", "check the server by hand and restart it; the run exits 1"),
    "memory-pressure": Code((FLAG,), "tasks on a host waited a large share of the phase for memory (PSI): reclaim "
                            "slowed the run", "free memory on the host, or use a smaller data set"),
    "not-physical": Code((FLAG,), "a rate (or ops/s) above the limit the target declares (limits: network, "
                         "device_read, device_write, iops): a cache or compression served it",
                         "use data larger than the caches, direct I/O, or drop caches; check the declared limits"),
    "replay-bytes": Code((FLAG,), "a replay read or wrote other byte totals than the trace's streams (short reads: "
                         "a file smaller than the trace's reads, or an operation that failed)",
                         "check that the replayed files are as large as the trace expects"),
    "replay-moved": Code((FLAG,), "the target moved more bytes during a replay than the trace's operations asked "
                         "for: the replay did not make the server do what the original did (e.g. vector reads "
                         "coalesced into GETs that read the gaps too)",
                         "follow the message: e.g. replay with vector: native or split"),
    "server-cache": Code((FLAG,), "the server's disk read less than it served: the rest came from the server's page "
                         "cache, which was kept", "run as root on the server's host without --keep-cache to drop it"),
    "short-phase": Code((FLAG,), "the timed phase lasted less than the minimum: timer, barriers and start-up are a "
                        "share of it", "use more data (file_size, items) or a deadline"),
    "stalled": Code((FLAG,), "no client completed an operation for longer than the stall limit, or errors were "
                    "retried and the phase still passed: the figure includes the pause or the retries",
                    "look at the target's health during the phase; raise limits.stall if such pauses are expected"),
    "swapping": Code((FLAG,), "a host swapped pages during the phase: memory, not only the storage, set the figure",
                     "free memory, or use fewer clients or smaller buffers"),
    # -- warnings: a figure to read with care (report: ⚠) ------------------------------------------------------
    "cache-served": Code((WARNING,), "the device delivered far fewer bytes than were read: memory (the page cache) "
                         "served the rest", "read more than RAM, use direct: true, or let storeval drop caches"),
    "client-bound": Code((WARNING,), "storeval's clients were busy on CPU most of the phase: the client, not the "
                         "storage, may have set the figure", "use more clients or hosts, or larger transfers"),
    "direct-refused": Code((WARNING,), "the file system refused O_DIRECT; the phase ran with buffered I/O",
                           "read the figure as buffered, or use a file system that takes O_DIRECT"),
    "engine-fallback": Code((WARNING,), "the I/O engine asked for (io_uring, the native loop) could not be used; "
                            "the phase ran on another (the message names it)",
                            "build the native extension, or enable io_uring on the host"),
    "vector-split": Code((WARNING,), "the target did not take the phase's vector reads as one request each: every "
                         "range went as a request of its own (an HTTP server without multi-range GETs)",
                         "read the figure as one request per range, or use a server or protocol with vector reads"),
    "copies-failed": Code((WARNING,), "some third-party copies of the phase failed (the server's words for the "
                          "first are given); the others went on, and the figures count only the copies made",
                          "read the server's message: a source gone, a destination that exists, a refused credential"),
    "through-client": Code((WARNING,), "the client host's interfaces towards the servers moved most of what a "
                           "third-party copy moved: the data may have passed through the client",
                           "check that both servers copy directly (a server on 127.0.0.1 shares lo with the client)"),
    "fits-in-ram": Code((WARNING,), "the data read fit in the RAM of a host whose page cache was kept: memory may "
                        "have served it", "read at least the RAM factor × RAM, or let storeval drop caches"),
    "imported": Code((WARNING,), "the record was imported from a peer tool's output (IOR, mdtest, fio, warp), not "
                     "measured by storeval: only what that tool reported is known", "nothing; compare with care"),
    "left-running": Code((WARNING,), "the command workload's programs left processes running after they exited; "
                         "storeval killed them at the phase's end, and their I/O and CPU are not in the figures",
                         "make the commands wait for their children"),
    "link-saturated": Code((WARNING,), "an emulated host's link carried nearly its whole rate: the link, not the "
                           "storage, set the figure", "raise the link's rate to measure the storage"),
    "loss-under-bbr": Code((WARNING,), "a lossy emulated link under BBR, which barely slows for random loss: CUBIC "
                           "(most clusters' default) would slow far more",
                           "set the hosts' TCP congestion control to the one the real clients use"),
    "memory-medium": Code((WARNING,), "the target's file system lives in RAM (tmpfs): these are memory speeds",
                          "measure a target on real storage"),
    "rate-not-held": Code((WARNING,), "a client paced by rate or iops did not reach 98 % of its pace: the storage or "
                          "its host could not keep it, so the background load was lighter than asked",
                          "lower rate or iops, or give the clients more CPU"),
    "disk-bound": Code((WARNING,), "the target's device had I/O in flight 90 % of the phase or more: the disk, not "
                       "the network or the CPUs, set the figure", "compare with a faster device, or more devices"),
    "server-io-bound": Code((WARNING,), "the target's servers (their control group) had every working task waiting "
                            "for I/O half the phase or more: their storage, not the network or the CPUs, set "
                            "the figure", "give the servers faster or more disks, or compare with one that has them"),
    "server-cpu-bound": Code((WARNING,), "the host was 90 % busy or more and the target's server processes used "
                             "most of it: the servers' CPU may have set the figure",
                             "give the servers more CPUs, or run the clients on another host"),
    "background-short": Code((WARNING,), "a background part of a concurrent cell ran out of work before its "
                             "foreground finished the step: for the rest of it, the foreground ran without that load",
                             "give the background part more to do (file_size, items)"),
    "page-cache": Code((WARNING,), "reads of the phase may have been served by a page cache that was kept or could "
                       "not be cleared", "run as root without --keep-cache, or read more data than RAM"),
    "plotly-full-bundle": Code((WARNING,), "the HTML report embeds the full plotly.js (about 4.8 MB): the partial "
                               "bundle of the version plotly embeds was not installed",
                               "python -m storeval.report.assets (fetches it from the npm registry), then write "
                               "the report again"),
    "recorded": Code((WARNING,), "record: true traced the phase's operations through the Python loop, which costs "
                     "a little per operation (or nothing was recorded: no I/O went through storeval's driver)",
                     "use the recorded phase for its trace, an unrecorded one for its figure"),
    "rtt-off": Code((WARNING,), "the round trip measured to a group's target differs from the requested rtt by "
                    "more than the rule allows: the emulated delay is not what was asked",
                    "check the host's load and the link's settings"),
    "shared-files": Code((WARNING,), "clients of a phase read the same files: one client's reads warm the caches "
                         "another reads from", "set files_per_client to give each client its own files"),
    "shared-interface": Code((WARNING,), "the network interface the figure's moved bytes come from carried other "
                             "traffic beside storeval's clients", "give the target server_pids to count its "
                             "server's processes alone"),
    "write-back": Code((WARNING,), "a write phase ended without a durable flush (no fsync, no O_DIRECT): the figure "
                       "can exceed what the storage accepts", "set fsync: true or direct: true where the target "
                       "takes them"),
    # -- events: what happened during a run, stored with it (report: events) ------------------------------------
    "cell-failed": Code((EVENT,), "a cell ended with an error; its phases are not measured",
                        "read the message; fix the target or the study and rerun"),
    "cleaned-up": Code((EVENT,), "what an ended run left on a target was removed by a later run",
                       "nothing"),
    "cleanup": Code((EVENT,), "this run removed what an ended run had left behind on a target", "nothing"),
    "died": Code((EVENT,), "a client, a rank or the whole run died (killed, crashed, or ended without saying how)",
                 "read the message; `storeval clean` removes what a dead run left"),
    "error": Code((EVENT,), "a client's operation failed and ended its cell (the error's kind is kept)",
                  "read the message; on_error: retry or continue runs through such errors"),
    "fault": Code((EVENT,), "a planned fault struck: what was done, when (planned and real), what it said",
                  "nothing; the report puts it on the phase's timeline"),
    "fault-failed": Code((EVENT,), "a planned fault's action or undo failed (flagged fault-missed or "
                         "fault-not-undone)", "check the server and the fault's command"),
    "interrupted": Code((EVENT,), "the run was stopped (Ctrl-C, SIGTERM, SIGHUP); the cells it never reached are "
                        "stored as not-run", "rerun the study to measure the rest"),
    "left-behind": Code((EVENT,), "storeval created something on a target and could not remove it; the message "
                        "says what, where and why", "the next run against that target removes it, or remove it "
                        "by hand"),
    "network": Code((EVENT,), "the cell's emulated network: links at this cell's settings and the measured round "
                    "trip", "nothing"),
    "network-down": Code((EVENT,), "the emulated network was removed", "nothing"),
    "network-set": Code((EVENT,), "the emulated network's links were set to a cell's settings", "nothing"),
    "network-up": Code((EVENT,), "the emulated network was made", "nothing"),
    "setup": Code((EVENT,), "a target's setup command ran: command, exit status, output tail, seconds",
                  "a failed setup fails the block of cells: fix the command"),
    "system-down": Code((EVENT,), "a configured system (testbed or target settings) was stopped or undone",
                        "nothing"),
    "system-failed": Code((EVENT,), "a configured system could not be brought about: its cells did not run",
                          "read the message; fix the settings or the setup command"),
    "system-degraded": Code((EVENT,), "a testbed system was put in the state its `degraded` setting asks for: its "
                            "last N parts killed for the block, or a heal made before a cell (a part killed, "
                            "heal_fill written, the part back or left down)", "nothing"),
    "system-state": Code((EVENT,), "what a testbed system in a degraded or healing state said while a cell ran: its "
                         "readings, the parts down, when it was whole again, the bytes its servers moved",
                         "a healing cell that outlived the repair is also a warning: raise heal_fill"),
    "system-up": Code((EVENT,), "a configured system was brought about at a cell block's settings", "nothing"),
    "teardown": Code((EVENT,), "a target's teardown command ran: command, exit status, output tail, seconds",
                     "a failed teardown may leave the system configured: undo it by hand"),
    "timeout": Code((EVENT,), "a client made no progress for the phase timeout (or never answered): it was "
                    "named and its cell stopped", "raise phase_timeout for slow phases, or look at the target"),
    "warning": Code((EVENT,), "something the run said and went on from (a stale scratch directory, a target it "
                    "cannot describe, a testbed it could not stop)", "read the message"),
}

# the exit status of `storeval` (storeval/app/__init__.py EXIT_*; a stop signal: 128 + its number)
EXITS: dict[str, str] = {
    "EXIT_OK": "success: the command did what it was asked",
    "EXIT_FAILED": "the run or command failed: a cell failed, an output could not be written, a failing flag "
                   "(fault-missed, fault-not-undone), or an internal error",
    "EXIT_INPUT": "bad input: a study, an option or a file refused in one line naming the problem and the fix",
    "EXIT_INTERRUPTED": "stopped by Ctrl-C (SIGINT); a stop by another signal exits 128 + its number "
                        "(SIGTERM: 143, SIGHUP: 129)",
}


@dataclass(frozen=True)
class Env:
    """One environment variable: who reads (or sets) it, and what it does."""

    scope: str
    meaning: str


# ``STOREVAL_NAME`` stands for every placeholder of a command: {path} travels as STOREVAL_PATH, and so on
ENVIRONMENT: dict[str, Env] = {
    "STOREVAL_CACHE": Env("storeval", "where built testbed servers and downloads are kept between runs (default "
                          "$XDG_CACHE_HOME/storeval, else ~/.cache/storeval)"),
    "STOREVAL_COMMAND_GUARD": Env("set by storeval", "in every command the command workload starts: the mark "
                                  "(storeval-<run>:<rank>:<random>) by which its descendants are found and killed"),
    "STOREVAL_DEBUG": Env("storeval", "set (to anything): an internal error shows its traceback instead of one line"),
    "STOREVAL_NAME": Env("set by storeval", "a command template's placeholder {name} travels in STOREVAL_NAME (its "
                         "name in capitals: {path} → STOREVAL_PATH), never read as code"),
    "STOREVAL_NATIVE": Env("build (setup.py)", "required: installing storeval fails when its native extension "
                           "(Rust) does not build; otherwise it is optional and storeval runs its Python loop"),
    "STOREVAL_STORE_WAIT": Env("storeval", "how long the end of a run waits for a busy or full results store (a "
                               "duration: 300, 30s, 5m; default 5 minutes)"),
    "STOREVAL_STRICT_SKIPS": Env("test suite", "1: a skip whose reason tests/skips-allowed.txt does not allow "
                                 "fails the test (CI=true does the same)"),
    "STOREVAL_TEST_INSTALL": Env("test suite", "0: skip installing the servers and the browser before collection"),
    "STOREVAL_TEST_WITHOUT_IO_URING": Env("test suite", "1: this host lacks io_uring (set by a person who knows): "
                                          "tests expect the threads engine instead"),
}

__all__ = ["Code", "CODES", "EXITS", "Env", "ENVIRONMENT", "FLAG", "WARNING", "EVENT"]
