"""Command workload: a real client program as the load (seed 004's aws-cli, xrdcp, cp, dd, a user's script).

Every client runs a command template over its own files, inside the cell's barriers like any workload::

    command: {read: "xrdcp -f {url} /dev/null", write: "xrdcp -f {local} {url}", files_per_client: 4}

The template is split like a shell line (``shlex``) *before* the placeholders are filled in, so a value is always
exactly one argument and never read by a shell: a file called ``a; rm -rf x`` stays one argument. With ``shell:
true`` the line runs through ``/bin/sh -c``, and no value ever enters its text (core/shell.py): each placeholder
becomes ``"$STOREVAL_PATH"`` (``STOREVAL_`` and its name in capitals) and the value travels in that environment
variable; a placeholder inside the template's own quotes, backquotes or arithmetic is refused (write it bare). In
both forms a placeholder inside code another program runs (``sh -c "cat {path}"``, ``python -c``, ``eval``,
``ssh host …``) is refused: give it as an argument of its own (``sh -c 'cat "$1"' sh {path}``). The numbers
storeval makes — ``{rank}``, ``{index}``, ``{size}``, ``{port}`` — are only digits and go anywhere, written in as
they are. Every command also finds each value in its ``STOREVAL_*`` variable. Placeholders: ``{url}`` (the
file's address for outside tools, ``Driver.tool_address``: a local path, ``root://host:port//path``,
``s3://bucket/key``, ``hdfs://…``), ``{path}`` (the path part of that address; on an object store, S3, the
key), ``{host}`` and ``{port}`` (the server the target talks to; S3: the endpoint's), ``{local}`` (a local
file: the source of a write, a place a read may copy to), ``{rank}``, ``{index}`` (the file's index among the
client's files) and ``{size}`` (bytes). Unknown placeholders and a program that is not installed are refused
in one line before anything runs. The target's credentials reach the command as environment variables
(``Driver.tool_env``: ``AWS_ACCESS_KEY_ID`` … for S3), never on its command line; the command line kept in the
results shows the placeholders' values, never the environment. ``env:`` is stored with the study's parameters:
give secrets through the target (its credentials), never there.

Phases: ``read`` (storeval lays out each client's files first, untimed, with its incompressible payload, and
clears the page caches it can; the command reads them) and ``write`` (storeval makes the local source files
first, untimed, in a temporary directory of its own that it removes after; the command writes them to
``{url}``; after the phase, untimed, storeval checks each written file's size). ``write`` runs before ``read``
when both are given, and the read phase then reads what the commands wrote.

Nothing of a command outlives its client. Every command carries the client's mark in its environment
(``STOREVAL_COMMAND_GUARD=storeval-<run>:<rank>:<random>``), which its descendants inherit wherever they go (a
daemon in a session of its own, a double fork); it dies with its client (``PR_SET_PDEATHSIG``: the engine's
watchdog SIGKILLs the clients of a dead run, and a command in a session of its own would otherwise go on writing
onto the target after the watchdog's cleanup); and each client has a guard, a small process of its own that waits
for EOF on a pipe from the client — the client's end, however it ends — then SIGKILLs every process carrying the
mark and removes the client's local files. At the end of each phase the client kills what still carries its mark
(the daemon a command left) and names it in a ``left-running`` warning. Limits: a program that clears its
environment (``env -i``) or changes user is not found by the mark (the process group and PDEATHSIG still act).

Each command is started with ``subprocess.Popen`` in a process group of its own (stdin ``/dev/null``, stdout
discarded, stderr kept in a bounded buffer), ``parallel`` at once per client, and waited for through a pidfd:
once it has exited, ``os.waitid(P_PIDFD, …, WEXITED | WNOWAIT)`` leaves it a zombie while ``/proc/PID/io`` is
read, then ``os.wait4`` reaps it and gives its rusage. Both include the command's own children that it waited
for (the kernel adds a reaped child's I/O and rusage to its parent's: ``sh -c``, aws-cli's workers, ``xrdcp``'s
helpers all count), but not a child still running when the command exits (a daemon it left behind) — whatever
is left of the command's process group then is killed. A command that outlives ``timeout`` has its process
group killed and counts as a failure; so do the process groups of a client the engine stops. A command that
fails (exit status ≠ 0, a signal, the timeout) fails the phase with one line naming its exit status and the last
line of its stderr (redacted), the others are killed.

Figures per phase: MB/s = the files' bytes / the phase's wall time (10^6 B); per-command latency (the OpLog:
bytes = the file's size); client CPU seconds per GB = the commands' user + sys seconds (their rusage, not
storeval's) per 10^9 bytes of files; the bytes the commands moved through read/write system calls
(``rchar``/``wchar`` of ``/proc/PID/io``: file and pipe I/O, and sockets read with read(2) — not those read with
recv(2)) and from/to block devices (``read_bytes``/``write_bytes``), beside the files' bytes and the server's
bytes where the probes count them (a testbed server's processes, MinIO's metrics); the largest max RSS of a
command; failures.
"""

from __future__ import annotations

import ctypes
import inspect
import os
import resource
import secrets
import select
import shlex
import shutil
import signal
import string
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from ..drivers.base import Capabilities, Driver, join
from ..drivers.url import PARTS, parse_url
from ..core import remove as _remove
from ..core.oplog import PhaseRecorder
from ..core.remove import remove_tree
from ..core.shell import check_argv, check_shell_line, env_of, shell_line, shown
from ..core.stop import STOP, ClientStopped
from ..errors import StorevalError
from ..fields import Duration, Size
from ..redact import redact_text
from ..units import format_size
from .base import MB_PER_MIB, Best, ClientContext, Figure, Need, Needs, Params, Report, Scaling, Workload, param
from .payload import Payload

PHASES = ("write", "read")
PLACEHOLDERS = ("url", "path", "host", "port", "local", "rank", "index", "size")
NUMBERS = ("port", "rank", "index", "size")  # values storeval makes of digits only (or empty): never code
STDERR_TAIL = 4096  # bytes of each command's stderr kept (its end: where programs say why they failed)
KEPT_FAILURES = 3  # stderr tails of failed commands kept in a client's record
BLOCK = 1 << 20  # payload block used to lay out and to make the local files
DEFAULT_TIMEOUT = 300.0  # seconds per command when neither the parameter nor the target's timeout says more
IO_KEYS = ("rchar", "wchar", "syscr", "syscw", "read_bytes", "write_bytes")
GUARD_PROCESS_BYTES = 16 << 20  # a bare Python (-I -S) waiting on a pipe: ~10 MiB RSS
COMMAND_PROCESS_BYTES = 64 << 20  # what one command process is assumed to hold (xrdcp ~20 MiB, aws-cli ~80 MiB)

# how to get the programs sites use, for the one-line refusal of one that is missing
HOW_TO_GET = {
    "xrdcp": "apt-get install xrootd-client", "xrdfs": "apt-get install xrootd-client",
    "aws": "pip install awscli", "s5cmd": "go install github.com/peak/s5cmd/v2@latest",
    "s3cmd": "apt-get install s3cmd", "rclone": "apt-get install rclone", "mc": "MinIO's mc client (min.io/download)",
    "gfal-copy": "gfal2-util; not in Debian 12: use gfal2's Python binding, apt-get install python3-gfal2",
    "davix-get": "apt-get install davix", "davix-put": "apt-get install davix",
    "nfs-cp": "apt-get install libnfs-utils", "nfs-cat": "apt-get install libnfs-utils",
    "hdfs": "a Hadoop client distribution (hadoop.apache.org)", "root": "ROOT (root.cern/install)",
    "curl": "apt-get install curl", "cp": "apt-get install coreutils", "dd": "apt-get install coreutils",
    "cat": "apt-get install coreutils",
}


def template_fields(template: str) -> list[str]:
    """The placeholders of ``template`` (ValueError for ``{}``, ``{0}``, ``{x!r}``, ``{x:>4}`` or a lone brace)."""
    names = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as e:
        raise ValueError(f"{template!r}: {e} (write {{{{ and }}}} for literal braces)") from None
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if not name or name.isdigit() or spec or conversion:
            raise ValueError(f"{template!r}: {{{name}{'!' + conversion if conversion else ''}"
                             f"{':' + spec if spec else ''}}} is not a placeholder (write one of "
                             f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)})")
        names.append(name)
    return names


def split_template(template: str) -> list[str]:
    """The template's arguments, split like a shell line before anything is filled in."""
    try:
        argv = shlex.split(template)
    except ValueError as e:
        raise ValueError(f"{template!r} cannot be split into arguments ({e}: close the quote)") from None
    if not argv:
        raise ValueError("is empty (write the command to run, e.g. \"xrdcp -f {url} /dev/null\")")
    return argv


def program_of(template: str, shell: bool) -> str | None:
    """The program a template runs (None when a shell line starts with something else than a program name)."""
    argv = split_template(template)
    first = argv[0]
    if shell and (any(ch in first for ch in "$=()`;|&<>{}") or first in ("exec", "env", "time", "nice")):
        return None
    return first


def missing_program(program: str) -> str | None:
    """One line saying that ``program`` is not installed here and how to get it, or None when it is."""
    if shutil.which(program) is not None:
        return None
    name = os.path.basename(program)
    how = HOW_TO_GET.get(name)
    where = f"{program} is not executable" if "/" in program else f"{program} is not on PATH"
    return f"{where} (install it: {how})" if how else f"{where} (install it, or give its full path)"


Template = str | dict[str, str]  # one command line, or one per kind of target (URL scheme: root, s3, file …)


class CommandParams(Params):
    run: Template | None = param(
        None, "the command line run for each file in phase `phase`, with placeholders {url} {path} {host} {port} "
              "{local} {rank} {index} {size}; or a mapping of URL scheme (root, s3, file …) to command line",
        "command line")
    phase: Literal["read", "write"] = param("read", "the phase `run` is timed as")
    read: Template | None = param(None, "the command line of the read phase, instead of run (a line, or one per URL "
                                        "scheme)", "command line")
    write: Template | None = param(None, "the command line of the write phase, instead of run; it runs before read "
                                         "when both are given", "command line")
    shell: bool = param(False, "run the line through /bin/sh -c; each placeholder becomes \"$STOREVAL_NAME\", its "
                               "value in that environment variable (a placeholder inside quotes is refused: write it "
                               "bare)")
    files_per_client: Annotated[int, Field(ge=1, le=100_000)] = param(4, "files each client's commands read or "
                                                                         "write, one command each", "count")
    file_size: Size = param(64 << 20, "bytes of each file")
    parallel: Annotated[int, Field(ge=1, le=256)] = param(1, "commands running at once per client", "count")
    timeout: Duration | None = param(
        None, f"a command running longer is killed with its process group and fails the phase; none: 10 × the "
              f"target's timeout, at least {DEFAULT_TIMEOUT:g} s")
    env: dict[str, str] = param({}, "extra environment variables of the commands, after the target's (stored "
                                    "with the study: never put secrets here)", "mapping")
    random_seed: int = param(0, "seed of the files' payload", "seed")

    @model_validator(mode="after")
    def _consistent(self) -> CommandParams:
        if self.run is not None and (self.read is not None or self.write is not None):
            raise ValueError("give run (with phase) or read/write templates, not both")
        if self.run is None and self.read is None and self.write is None:
            raise ValueError("give the command to run: run: \"xrdcp -f {url} /dev/null\" (with phase: read or "
                             "write), or read:/write: templates")
        if self.file_size <= 0:
            raise ValueError("file_size must be more than 0 bytes")
        if self.timeout is not None and self.timeout <= 0:
            raise ValueError("timeout must be more than 0 seconds")
        for phase, given in self.templates().items():
            where = "run" if self.run is not None else phase
            if isinstance(given, dict):
                if not given:
                    raise ValueError(f"{where}: names no kind of target (write {{root: \"xrdcp …\", s3: \"aws …\"}})")
                bad = next((k for k in given if not k.isidentifier() or not k.islower()), None)
                if bad is not None:
                    raise ValueError(f"{where}: {bad!r} is not a URL scheme (write root, s3, file, hdfs or nfs)")
            for scheme, template in (given.items() if isinstance(given, dict) else [(None, given)]):
                at = f"{where}.{scheme}" if scheme else where
                try:
                    names = template_fields(template)
                    argv = split_template(template)
                    if self.shell:  # no value is ever read as code (core/shell.py)
                        check_shell_line(template, NUMBERS)
                    else:
                        check_argv(argv, NUMBERS)
                except ValueError as e:
                    raise ValueError(f"{at}: {e}") from None
                unknown = [n for n in names if n not in PLACEHOLDERS]
                if unknown:
                    raise ValueError(f"{at}: unknown placeholder {{{unknown[0]}}} (known: "
                                     f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)}; write {{{{ for a literal "
                                     "brace)")
                program = program_of(template, self.shell)
                why = missing_program(program) if program is not None else None
                if why is not None:
                    raise ValueError(f"{at}: {why}")
        for name, value in self.env.items():  # what exec would refuse, after the files were laid out
            if not name or "=" in name or "\0" in name:
                raise ValueError(f"env: {name!r} is not an environment variable name (no '=', no NUL byte, not "
                                 "empty: write e.g. env: {MY_VAR: value})")
            if "\0" in value:
                raise ValueError(f"env: the value of {name} has a NUL byte, which no environment can hold (remove it)")
        if self.record:
            raise ValueError("record: true cannot record the command workload: its commands do their I/O themselves, "
                             "not through storeval's driver, so nothing would be recorded (drop record, or trace the "
                             "program with its own tools)")
        if self.shell and shutil.which("sh") is None:
            raise ValueError("shell: true needs /bin/sh")
        return self

    def templates(self) -> dict[str, Template]:
        """Phase -> template (or templates by URL scheme), in the order the phases run."""
        if self.run is not None:
            return {self.phase: self.run}
        given = {"write": self.write, "read": self.read}
        return {ph: given[ph] for ph in PHASES if given[ph] is not None}

    def template(self, phase: str, scheme: str) -> str:
        """The command line of ``phase`` on a target of URL scheme ``scheme``."""
        given = self.templates()[phase]
        if isinstance(given, str):
            return given
        if scheme not in given:
            where = "run" if self.run is not None else phase
            raise StorevalError(f"the command workload has no {where} template for {scheme}:// targets (add "
                                f"{scheme}: \"...\" under {where}, beside {', '.join(sorted(given))})")
        return given[scheme]


def tool_path(address: str, caps: Capabilities) -> str:
    """The ``{path}`` of a tool address (``Driver.tool_address``), split by the one URL parser: a local path as it
    is; on an object store (``caps.directories`` false: the address's host names the bucket) the object's key,
    ``s3://bucket/key`` → ``key``; elsewhere the absolute path, ``root://h:p//a`` → ``/a``."""
    if "://" not in address:
        return address
    path = parse_url(address, PARTS, reader="the command workload").path
    return path.lstrip("/") if not caps.directories else "/" + path.lstrip("/")


@dataclass
class Running:
    """One command in flight."""

    index: int
    pid: int
    pidfd: int
    errfd: int
    t0: int
    deadline: float
    proc: subprocess.Popen
    stderr: bytearray = field(default_factory=bytearray)
    timed_out: bool = False


@dataclass
class Tally:
    """What one client's commands did in a phase (summed as they end)."""

    commands: int = 0
    failures: int = 0
    timeouts: int = 0
    file_bytes: int = 0
    user_s: float = 0.0
    sys_s: float = 0.0
    maxrss_kib: int = 0
    io: dict[str, int] = field(default_factory=lambda: dict.fromkeys(IO_KEYS, 0))
    io_missing: int = 0  # commands whose /proc/PID/io could not be read
    first_failure: str | None = None
    failed: list[dict[str, Any]] = field(default_factory=list)


def read_proc_io(pid: int) -> dict[str, int] | None:
    """``/proc/PID/io`` of a zombie (exited, not yet reaped): its I/O and that of the children it reaped."""
    try:
        with open(f"/proc/{pid}/io", "rb") as f:
            text = f.read().decode()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in IO_KEYS:
            out[key] = int(value)
    return out


def last_line(tail: bytes) -> str:
    """The last non-empty line of a stderr tail, redacted and made printable."""
    lines = [ln.strip() for ln in tail.decode("utf-8", "replace").splitlines() if ln.strip()]
    text = lines[-1] if lines else "(nothing on stderr)"
    return redact_text("".join(ch if ch.isprintable() else "?" for ch in text))[:300]


def killpg(pid: int) -> None:
    """SIGKILL the process group led by ``pid`` (call it before the leader is reaped, so the group id cannot be
    another's)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


MARK = "STOREVAL_COMMAND_GUARD"  # in every command's environment: its descendants are found by it, wherever they went
PR_SET_PDEATHSIG = 1
try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here: the forked child only calls it
except (OSError, AttributeError):  # not Linux: the guard alone
    _prctl = None


def die_with(parent: int):
    """The preexec of a command: SIGKILL it when its client dies (the client's own SIGKILL included). The signal
    follows the thread that forked, so commands are started from the client's main thread only."""
    def preexec() -> None:
        if _prctl is not None:
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the client died before the line above: nobody to die with
            os.kill(os.getpid(), signal.SIGKILL)
    return preexec


def marked(mark: str) -> list[tuple[int, str]]:
    """(pid, name) of every process of this user whose environment carries ``MARK=mark`` (or, for a mark ending in
    ``:``, a mark that starts with it: a whole run's): a client's commands and whatever they started, a daemon in a
    session of its own (setsid) or a double fork included."""
    entry = f"{MARK}={mark}".encode()
    prefix = mark.endswith(":")
    me, found = os.getpid(), []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
        except OSError:  # gone, or another user's
            continue
        if any(v.startswith(entry) if prefix else v == entry for v in env.split(b"\0")):
            try:
                with open(f"/proc/{name}/comm", "rb") as f:
                    comm = f.read().decode(errors="replace").strip()
            except OSError:
                comm = "?"
            found.append((int(name), comm))
    return found


def kill_marked(mark: str) -> list[tuple[int, str]]:
    """SIGKILL every process carrying ``mark`` until none is left (one may fork as it is killed); what was killed."""
    killed: list[tuple[int, str]] = []
    for _ in range(100):
        found = marked(mark)
        if not found:
            break
        for pid, comm in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue
            if (pid, comm) not in killed:
                killed.append((pid, comm))
        time.sleep(0.01)
    return killed


def _guard_main(mark: str, local: str) -> None:
    """The guard: waits for EOF on stdin (its client ended, however: SIGKILL included), then kills what carries
    the client's mark and removes the client's local files (its source is the guard's program: GUARD_SOURCE)."""
    while True:
        try:
            if not os.read(0, 4096):
                break
        except InterruptedError:
            continue
        except OSError:
            break
    kill_marked(mark)
    remove_tree(os.path.dirname(local), os.path.basename(local))  # no link followed, no mount crossed, any depth


GUARD_SOURCE = "\n".join([inspect.getsource(_remove), f"MARK = {MARK!r}", "import os, shutil, signal, time",
                          *(inspect.getsource(f) for f in (marked, kill_marked, _guard_main)),
                          "import sys", "_guard_main(sys.argv[1], sys.argv[2])"])


class Guard:
    """A small process beside a client that cleans up after its commands if the client is killed: the engine's
    watchdog kills the clients of a dead run (by PID), and their commands, in sessions of their own, would
    otherwise go on writing onto the target after its cleanup and leave their local sources. Each command dies
    with its client (PR_SET_PDEATHSIG); the guard sees its stdin's EOF as the client ends and SIGKILLs every
    process carrying the client's mark (the commands' descendants, daemons included), then removes the local
    directory. It is born in a session of its own with the stop signals blocked, so only EOF moves it."""

    def __init__(self, local: str, run: str, rank: int) -> None:
        from ..interrupts import SHIELD

        # the run's name first, so that whoever cleans up after a dead run can find all of its commands
        self.mark, self.local = f"{run}:{rank}:{secrets.token_hex(8)}", local
        old = signal.pthread_sigmask(signal.SIG_BLOCK, SHIELD)
        try:
            env = {k: v for k, v in os.environ.items() if k != MARK}
            self.proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", GUARD_SOURCE, self.mark, local],
                                         stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         start_new_session=True, close_fds=True, env=env)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def close(self) -> None:
        """The client cleans up itself: the guard finds nothing left and exits."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def run_of(cell_dir: str) -> str:
    """The run's scratch directory name (``storeval-<run>``) in a cell directory's path."""
    return next((part for part in reversed(cell_dir.split("/")) if part.startswith("storeval-")), "storeval-run")


def kill_commands_of_run(run: str) -> list[tuple[int, str]]:
    """SIGKILL, on this host, whatever the command workload's clients of the run ``storeval-<run>`` started (for
    the watchdog of a dead run, before it removes the run's files)."""
    return kill_marked(f"{run}:")


class Commands:
    """Runs one client's commands of a phase, ``parallel`` at once, and tallies what each did."""

    def __init__(self, argvs: list[list[str]], sizes: list[int], env: dict[str, str], parallel: int,
                 timeout: float, log: Any, program: str, values: list[dict[str, str]] | None = None) -> None:
        self.argvs, self.sizes, self.env = argvs, sizes, env
        self.values = values  # per command: the placeholders' values as STOREVAL_* variables
        self.parallel, self.timeout, self.log, self.program = parallel, timeout, log, program
        self.running: dict[int, Running] = {}  # pidfd -> command
        self.by_err: dict[int, Running] = {}  # stderr fd -> command
        self.poll = select.poll()
        self.tally = Tally()
        self.buf = bytearray(65536)

    def start(self, index: int) -> None:
        r, w = os.pipe()
        try:
            t0 = time.perf_counter_ns()
            env = self.env if self.values is None else {**self.env, **self.values[index]}
            proc = subprocess.Popen(self.argvs[index], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=w,
                                    env=env, start_new_session=True, close_fds=True,
                                    preexec_fn=die_with(os.getpid()))
        except OSError as e:
            os.close(r)
            raise StorevalError(f"cannot start {self.program}: {e.strerror or e}") from None
        finally:
            os.close(w)
        os.set_blocking(r, False)
        pidfd = os.pidfd_open(proc.pid)
        run = Running(index, proc.pid, pidfd, r, t0, time.monotonic() + self.timeout, proc)
        self.running[pidfd], self.by_err[r] = run, run
        self.poll.register(pidfd, select.POLLIN)
        self.poll.register(r, select.POLLIN)

    def _drain(self, run: Running) -> bool:
        """Read what the command wrote on stderr, keeping the last STDERR_TAIL bytes; False at EOF."""
        while True:
            try:
                n = os.readv(run.errfd, [self.buf])
            except BlockingIOError:
                return True
            except OSError:
                return False
            if n == 0:
                return False
            run.stderr += self.buf[:n]
            if len(run.stderr) > 2 * STDERR_TAIL:
                del run.stderr[:-STDERR_TAIL]

    def _close_err(self, run: Running) -> None:
        if run.errfd in self.by_err:
            self.poll.unregister(run.errfd)
            del self.by_err[run.errfd]
            os.close(run.errfd)

    def _reap(self, run: Running, t1: int) -> None:
        """The command has exited (seen at ``t1``): its /proc/PID/io while it is a zombie, what is left of its group
        killed, then reaped with its rusage; its latency into the OpLog, folded at once (a command is a long
        operation: the engine's hang detection sees each one end) when it succeeded."""
        os.waitid(os.P_PIDFD, run.pidfd, os.WEXITED | os.WNOWAIT)
        io = read_proc_io(run.pid)
        killpg(run.pid)  # a child it left running (the group id is still the zombie's: no one else's)
        _, status, ru = os.wait4(run.pid, 0)
        code = os.waitstatus_to_exitcode(status)
        run.proc.returncode = code  # reaped here: Popen must never wait for this pid again
        self.poll.unregister(run.pidfd)
        del self.running[run.pidfd]
        os.close(run.pidfd)
        self._drain(run)
        self._close_err(run)
        t = self.tally
        t.commands += 1
        t.user_s += ru.ru_utime
        t.sys_s += ru.ru_stime
        t.maxrss_kib = max(t.maxrss_kib, ru.ru_maxrss)
        if io is None:
            t.io_missing += 1
        else:
            for k in IO_KEYS:
                t.io[k] += io.get(k, 0)
        if code == 0 and not run.timed_out:
            self.log.add(run.t0, t1, self.sizes[run.index])
            self.log.flush()
            t.file_bytes += self.sizes[run.index]
            return
        t.failures += 1
        if run.timed_out:
            t.timeouts += 1
            why = f"did not finish within its timeout of {self.timeout:g} s and was killed"
        elif code < 0:
            why = f"was killed by signal {signal.Signals(-code).name}"
        else:
            why = f"exited with status {code}"
        tail = bytes(run.stderr[-STDERR_TAIL:])
        line = last_line(tail)
        message = f"{self.program} (file {run.index}) {why}: {line}"
        if t.first_failure is None:
            t.first_failure = message
        if len(t.failed) < KEPT_FAILURES:
            t.failed.append({"index": run.index, "exit_status": code, "timed_out": run.timed_out,
                             "stderr_tail": redact_text(tail.decode("utf-8", "replace"))})

    def run(self) -> None:
        """Every command, ``parallel`` at once; the first failure kills the others and fails the phase."""
        pending = list(range(len(self.argvs)))
        pending.reverse()
        try:
            while pending or self.running:
                while pending and len(self.running) < self.parallel and not self.tally.failures:
                    self.start(pending.pop())
                if not self.running:
                    break
                if STOP.is_set():
                    raise ClientStopped("stopped by the engine")
                wait = min(r.deadline for r in self.running.values()) - time.monotonic()
                events = self.poll.poll(max(0, min(wait, 1.0)) * 1000)
                woke = time.perf_counter_ns()
                for fd, _ in events:
                    if fd in self.by_err:
                        if not self._drain(self.by_err[fd]):
                            self._close_err(self.by_err[fd])
                    elif fd in self.running:
                        self._reap(self.running[fd], woke)
                now = time.monotonic()
                for run in list(self.running.values()):
                    if now >= run.deadline and not run.timed_out:
                        run.timed_out = True
                        killpg(run.pid)
                if self.tally.failures:
                    pending.clear()
                    for run in self.running.values():
                        killpg(run.pid)
        finally:
            self.stop_all()

    def stop_all(self) -> None:
        """Kill and reap whatever still runs (a failure elsewhere, a stop signal): nothing is left behind."""
        for run in list(self.running.values()):
            killpg(run.pid)
            try:
                os.wait4(run.pid, 0)
            except ChildProcessError:
                pass
            run.proc.returncode = -signal.SIGKILL
            os.close(run.pidfd)
            if run.errfd in self.by_err:
                os.close(run.errfd)
        self.running.clear()
        self.by_err.clear()


class Command(Workload):
    kind = "command"
    Params = CommandParams
    PHASES = PHASES
    summary = "a real client program (xrdcp, aws s3 cp, cp, dd, a script) run over each client's files (seed 004)"
    report = Report(
        columns=(Figure("MB/s", "MB/s", caption="files' bytes / phase wall", value=lambda r: r.extras.get("MBps")),
                 Figure("commands", direction="events", value=lambda r: r.extras.get("commands")),
                 Figure("CPU s/GB", "CPU s/GB", direction="cost", caption="the commands' user+sys",
                        value=lambda r: r.extras.get("cmd_cpu_seconds_per_GB"), higher_is_better=False),
                 Figure("syscall ×", "×", direction="ratio", caption="rchar+wchar / files' bytes",
                        value=lambda r: r.extras.get("syscall_ratio"), higher_is_better=False),
                 Figure("moved MB", "MB", direction="read", caption="the server's counters, else device/interface",
                        value=lambda r: r.extras.get("moved_bytes"), scale=1e-6),
                 Figure("RSS MiB", "MiB", direction="cost", caption="largest max RSS of a command",
                        value=lambda r: r.extras.get("max_rss_MiB"), stat="max", higher_is_better=False),
                 Figure("failures", direction="cost", value=lambda r: r.extras.get("failures"),
                        higher_is_better=False)),
        how_measured=("MB/s: bytes of the files all commands read or wrote / (last end − first start), 10^6 B; latency: "
                      "each command from its start to its exit seen (bytes = the file's size); CPU s/GB: the commands' "
                      "own user+sys seconds (rusage from wait4, their waited-for children included, storeval's excluded) "
                      "per 10^9 bytes of files; syscall ×: bytes the commands passed through read/write system calls "
                      "(/proc/PID/io rchar+wchar, read as zombies; sockets read with recv(2) are not in it) / the files' "
                      "bytes; moved MB: what the target moved for the phase by the best counter taken (the server's own: a "
                      "testbed server's processes, MinIO's metrics; else the device under a local file system, else the "
                      "interface — where, see moved ×), – where none was; RSS: the largest ru_maxrss of any command — Linux counts in it the "
                      "forking client's own memory at exec, so a value at the client's (client_rss_MiB in the JSON) "
                      "means the command itself stayed below it."),
        read=Best(lambda r: r.extras.get("MBps"), ("read",), unit="MB/s", caption="the files' bytes the commands read"),
        write=Best(lambda r: r.extras.get("MBps"), ("write",), unit="MB/s",
                   caption="the files' bytes the commands wrote"),
        # the phase table's MB/s (the files' bytes / wall, 10^6 B) against clients
        scaling=Scaling(figure="MBps", unit="MB/s", aggregate=lambda ph: ph.extra.get("MBps"),
                        per_client=lambda ph: None if ph.client_MiBps[0] is None else ph.client_MiBps[0] * MB_PER_MIB),
        rate=Best(lambda r: r.ops_per_s, (), unit="commands/s"),
        compare=(Figure("MBps", "MB/s"),
                 Figure("cmd_cpu_seconds_per_GB", "CPU s/GB", direction="cost", higher_is_better=False),
                 Figure("syscall_ratio", "×", direction="ratio", higher_is_better=False)),
        amplification=True)
    p: CommandParams

    @classmethod
    def describe_settings(cls, params: dict, exclude: set[str]) -> str:
        from ..units import format_size_compact

        p = {k: v for k, v in params.items() if k not in exclude}
        def shown(t: Any) -> str:
            return "; ".join(f"{k}: {v!r}" for k, v in t.items()) if isinstance(t, dict) else repr(t)

        runs = [f"{shown(p['run'])} ({p.get('phase', 'read')})"] if p.get("run") else \
            [f"{ph}: {shown(p[ph])}" for ph in PHASES if p.get(ph)]
        parts = [", ".join(runs)]
        if "files_per_client" in p or "file_size" in p:
            parts.append(f"{p.get('files_per_client', 4)} files of {format_size_compact(p.get('file_size', 64 << 20))} "
                         "per client")
        if p.get("parallel", 1) > 1:
            parts.append(f"{p['parallel']} at once")
        return ", ".join(x for x in parts if x)

    @classmethod
    def phases_of(cls, params: Params) -> list[str]:
        return list(params.templates())

    @staticmethod
    def direction(phase: str, params: dict) -> str | None:
        return phase if phase in PHASES else None

    def expected(self, phase: str, nclients: int) -> tuple[int, int]:
        n = nclients * self.p.files_per_client
        return n * self.p.file_size, n

    def needs(self, nclients: int, caps: Capabilities) -> Needs:
        """A payload block per client, the command processes beside it; every client's files on the target."""
        p = self.p
        files = nclients * p.files_per_client
        return Needs(memory=(Need(BLOCK, "a payload block of 1 MiB", "nothing lowers it"),
                             Need(p.parallel * COMMAND_PROCESS_BYTES,
                                  f"{p.parallel} command processes at once (about 64 MiB each)", "lower parallel"),
                             Need(GUARD_PROCESS_BYTES, "the client's guard process (about 16 MiB)", "nothing lowers it")),
                     scratch=(Need(files * p.file_size, f"{files:,} files of file_size {format_size(p.file_size)}",
                                   "lower files_per_client, file_size or --clients"),),
                     entries=files, largest_buffer=BLOCK, extent=p.file_size, threads=1)

    # -- files -------------------------------------------------------------------------------------------
    @staticmethod
    def _name(rank: int, index: int) -> str:
        return f"command-{rank}-{index}"

    def _paths(self, c: ClientContext) -> list[str]:
        return [join(c.cell_dir, self._name(c.rank, i)) for i in range(self.p.files_per_client)]

    def cell_cleanup(self, driver: Driver, cell_dir: str, nclients: int) -> None:
        for k in range(nclients):
            for i in range(self.p.files_per_client):
                driver.remove_quietly(join(cell_dir, self._name(k, i)))

    def _fill(self, c: ClientContext, write: Any) -> None:
        """Write ``file_size`` bytes of this client's stamped payload through ``write(view, offset)``."""
        payload = c.state["payload"]
        buf = c.state["block"]
        size = self.p.file_size
        for offset in range(0, size, BLOCK):
            n = min(BLOCK, size - offset)
            payload.stamp(buf, offset)
            write(buf[:n], offset)

    def _timeout(self, c: ClientContext) -> float:
        if self.p.timeout is not None:
            return self.p.timeout
        target = getattr(c.driver.options, "timeout", None)
        return max(DEFAULT_TIMEOUT, 10 * target) if target else DEFAULT_TIMEOUT

    @classmethod
    def kill_orphans(cls, run: str) -> list[tuple[int, str]]:
        """The commands of a dead run and whatever they started (daemons in sessions of their own included),
        found on this host by the mark every one carries in its environment: ``STOREVAL_COMMAND_GUARD=<run>:…``."""
        return kill_commands_of_run(run)

    def prepare(self, c: ClientContext) -> None:
        """Untimed: the program checked on this host, the addresses and environment, the local files (a write's
        sources) and, when the first phase reads, the files on the target."""
        p = self.p
        templates = {phase: p.template(phase, c.driver.scheme) for phase in p.templates()}
        for template in templates.values():
            program = program_of(template, p.shell)
            why = missing_program(program) if program is not None else None
            if why is not None:
                raise StorevalError(f"client {c.rank}: {why}")
        paths = self._paths(c)
        addresses = [c.driver.tool_address(path) for path in paths]  # refuses a target tools cannot reach
        env = dict(os.environ)
        env.update(c.driver.tool_env())
        env.update(p.env)
        local = tempfile.mkdtemp(prefix=f"storeval-command-{c.rank}-")
        c.state["local_dir"] = local
        guard = c.state["guard"] = Guard(local, run_of(c.cell_dir), c.rank)  # from here on, a killed client leaves nothing running, nothing here
        env[MARK] = guard.mark
        c.state.update(paths=paths, addresses=addresses, env=env,
                       payload=Payload(BLOCK, c.rank, p.random_seed), block=memoryview(bytearray(BLOCK)))
        c.state["block"][:] = c.state["payload"].base
        c.state["locals"] = [os.path.join(local, f"file-{i}") for i in range(p.files_per_client)]
        if "write" in templates:
            for name in c.state["locals"]:
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                try:
                    self._fill(c, lambda view, offset, _fd=fd: os.pwrite(_fd, view, offset))
                finally:
                    os.close(fd)
        if next(iter(templates)) == "read":  # the files must be there before they are read
            for path in paths:
                h = c.driver.open(path, "w")
                try:
                    self._fill(c, lambda view, offset, _h=h: c.driver.pwrite(_h, view, offset))
                finally:
                    c.driver.close(h)

    def _argvs(self, c: ClientContext, phase: str) -> tuple[list[list[str]], list[dict[str, str]], str]:
        """Every command line of the phase and its values as ``STOREVAL_*`` variables, filled in before the timed
        region, and the first line as a person reads it."""
        p, st = self.p, c.state
        template = p.template(phase, c.driver.scheme)
        server = c.driver.address()  # host:port it talks to (the URL itself, or words, where there is none)
        server = "" if server == c.driver.url or " " in server else server
        host, _, port = server.rpartition(":") if server.rpartition(":")[2].isdigit() else (server, "", "")
        out, envs, first = [], [], ""
        for i, (address, local) in enumerate(zip(st["addresses"], st["locals"])):
            values = {"url": address, "path": tool_path(address, c.driver.caps), "host": host, "port": port, "local": local,
                      "rank": str(c.rank), "index": str(i), "size": str(p.file_size)}
            if p.shell:  # the values in STOREVAL_* variables, the numbers storeval made written in
                out.append(["/bin/sh", "-c", shell_line(template, {k: values[k] for k in NUMBERS})])
            else:
                out.append([token.format(**values) for token in split_template(template)])
            envs.append(env_of(values))
            if i == 0:
                first = shlex.join(["/bin/sh", "-c", shown(template, values)]) if p.shell else shlex.join(out[0])
        return out, envs, first

    def before_phase(self, c: ClientContext, phase: str) -> None:
        c.state["argvs"], c.state["values"], c.state["shown"] = self._argvs(c, phase)
        if phase == "read":  # the command reads the storage, not what laying out or writing left in memory
            c.state["cache"] = c.clear_cache(c.state["paths"])

    def run_phase(self, c: ClientContext, phase: str, rec: PhaseRecorder) -> None:
        p, st = self.p, c.state
        argvs = st["argvs"]
        program = os.path.basename(argvs[0][0] if not p.shell else split_template(p.template(phase, c.driver.scheme))[0])
        log = rec.oplog(max(16, min(4096, p.files_per_client)))
        runner = Commands(argvs, [p.file_size] * len(argvs), st["env"], p.parallel, self._timeout(c), log, program,
                          st["values"])
        if phase == "read":
            rec.extra["cache"] = st["cache"]
        try:
            runner.run()
        finally:
            # what the commands left running (a daemon in a session of its own, a child of a command killed at its
            # timeout): killed now, so nothing of this phase goes on writing, and named in the record
            left = kill_marked(st["guard"].mark)
            log.flush()
            t = runner.tally
            rec.extra.update({
                "commands": t.commands, "failures": t.failures, "timeouts": t.timeouts, "file_bytes": t.file_bytes,
                "cmd_user_s": t.user_s, "cmd_sys_s": t.sys_s, "max_rss_kib": t.maxrss_kib, "io": t.io,
                "io_missing": t.io_missing, "first_failure": t.first_failure, "failed": t.failed,
                "command": redact_text(st["shown"]), "program": program, "parallel": p.parallel,
                "timeout_s": runner.timeout,
                "client_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                # CPU this client's children used: storeval's, not foreign load (analysis/guards.py's busy-host)
                "children_cpu_seconds": t.user_s + t.sys_s,
                "left_running": [f"{comm} (pid {pid})" for pid, comm in left]})
            if left:
                c.warn(rec, "left-running", f"the commands left {len(left)} process(es) running after they exited "
                                            f"or were killed, killed at the phase's end: "
                                            f"{', '.join(rec.extra['left_running'][:10])} (their I/O and CPU are not "
                                            "in the figures)")
            if t.failures:
                rec.error("command-failed", t.failures)
        if t.first_failure is not None:
            raise StorevalError(t.first_failure)
        if phase == "write" and c.driver.caps.client_page_cache:
            c.warn(rec, "write-back", "the commands wrote through this host's page cache and storeval cannot tell "
                                      "whether they flushed it before exiting (cp does not; dd conv=fsync does): the "
                                      "figure may include data not yet on the storage")
        if phase == "read" and st["cache"] in ("not-cleared", "kept"):
            why = "kept (--keep-cache)" if st["cache"] == "kept" else "not cleared"
            c.warn(rec, "page-cache", f"the page cache was {why} before the commands read: reads may be served from "
                                      "memory")

    def check_after(self, c: ClientContext, phase: str) -> dict[str, Any] | None:
        """Untimed, after a write phase: every file the commands wrote is on the target at its full size."""
        if phase != "write":
            return None
        for path in c.state["paths"]:
            try:
                size = c.driver.size(path)
            except FileNotFoundError:
                raise StorevalError(f"the write command exited 0 but left no {c.driver.tool_address(path)}") from None
            if size != self.p.file_size:
                raise StorevalError(f"the write command left {c.driver.tool_address(path)} with {size:,} bytes, not "
                                    f"{self.p.file_size:,}")
        return None

    def cleanup(self, c: ClientContext) -> None:
        for path in c.state.get("paths", ()):
            c.driver.remove_quietly(path)
        guard = c.state.get("guard")
        if guard is not None:
            kill_marked(guard.mark)  # nothing of the commands may outlive the cell
        local = c.state.get("local_dir")
        if local:
            remove_tree(os.path.dirname(local), os.path.basename(local))  # the shared remover: links, mounts, depth
        if guard is not None:
            guard.close()
            c.state["guard"] = None

    # -- figures -------------------------------------------------------------------------------------------
    @staticmethod
    def client_extra(extra: dict[str, Any], seconds: float, cpu_seconds: float) -> dict[str, Any]:
        nbytes = extra.get("file_bytes", 0)
        cpu = extra.get("cmd_user_s", 0.0) + extra.get("cmd_sys_s", 0.0)
        io = extra.get("io") or {}
        return {"commands": extra.get("commands", 0), "failures": extra.get("failures", 0),
                "timeouts": extra.get("timeouts", 0), "file_bytes": nbytes,
                "MBps": nbytes / 1e6 / seconds if seconds else None, "cmd_cpu_seconds": cpu,
                "cmd_cpu_seconds_per_GB": cpu / (nbytes / 1e9) if nbytes else None,
                "io": {k: io.get(k, 0) for k in IO_KEYS}, "io_missing": extra.get("io_missing", 0),
                "max_rss_kib": extra.get("max_rss_kib", 0), "client_rss_kib": extra.get("client_rss_kib", 0),
                "first_failure": extra.get("first_failure"),
                "failed": extra.get("failed", []), "command": extra.get("command"), "program": extra.get("program"),
                "storeval_cpu_seconds": cpu_seconds}

    @staticmethod
    def phase_extra(clients: list[dict[str, Any]], seconds: float, moved: float | None) -> dict[str, Any]:
        """The phase's figures from its clients' commands; ``moved`` is what the server's counters say it moved
        (None where no probe counted it)."""
        nbytes = sum(c["file_bytes"] for c in clients)
        cpu = sum(c["cmd_cpu_seconds"] for c in clients)
        io = {k: sum(c["io"][k] for c in clients) for k in IO_KEYS}
        counted = bool(clients) and not any(c["io_missing"] for c in clients)
        out = {"commands": sum(c["commands"] for c in clients), "failures": sum(c["failures"] for c in clients),
               "timeouts": sum(c["timeouts"] for c in clients), "file_bytes": nbytes,
               "MBps": nbytes / 1e6 / seconds if seconds else None, "cmd_cpu_seconds": cpu,
               "cmd_cpu_seconds_per_GB": cpu / (nbytes / 1e9) if nbytes else None,
               "syscall_bytes": io if counted else None,
               "syscall_ratio": (io["rchar"] + io["wchar"]) / nbytes if counted and nbytes else None,
               "moved_bytes": moved,
               "max_rss_MiB": max((c["max_rss_kib"] for c in clients), default=0) / 1024,
               "client_rss_MiB": max((c["client_rss_kib"] for c in clients), default=0) / 1024,
               "command": next((c["command"] for c in clients if c.get("command")), None),
               "first_failure": next((c["first_failure"] for c in clients if c.get("first_failure")), None)}
        return out


__all__ = ["Command", "CommandParams", "Commands", "PLACEHOLDERS", "template_fields", "split_template"]
