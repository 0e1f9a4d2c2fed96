"""Command line: ``storeval run`` (the main job), ``report``, ``compare``, ``import``, ``export``, ``workloads``,
``clean`` and ``testbed``. Each command parses its arguments into a request for a use case (``storeval.app``) and
prints what comes back; what the commands do lives there.

Every error the user can fix is printed as one line (``error: ...``) with exit
code 2 for bad input, never as a traceback. A stop signal (Ctrl-C, SIGTERM,
SIGHUP) ends any command with 128 + its number and no traceback.
"""

from __future__ import annotations

import os
import sys

from .. import interrupts

if os.path.basename(sys.argv[0] if sys.argv else "") == "storeval":  # the installed program: stop signals are
    interrupts.install()  # noted from its first moment (python -m storeval does this in __main__.py)

import typer  # noqa: E402
from typer.exceptions import TyperException  # noqa: E402

# the commands' modules come after: the stop signals are noted first
from ..app import EXIT_FAILED, EXIT_INPUT, EXIT_INTERRUPTED, EXIT_OK  # noqa: E402
from ..errors import StorevalError  # noqa: E402
from .commands import app  # noqa: E402
from .common import console as _console, safe as _safe  # noqa: E402
from .testbed import testbed_app  # noqa: E402

app.add_typer(testbed_app, name="testbed")


def _mpi_rank() -> int:
    for key in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        if key in os.environ:
            try:
                return int(os.environ[key])
            except ValueError:
                return 0
    return 0


def main(argv: list[str] | None = None) -> None:
    interrupts.install()  # from here a stop signal raises only where the code can be interrupted (interrupts.py)
    command = typer.main.get_command(app)
    err = _console(stderr=True)
    try:
        try:
            with interrupts.interruptible():
                code = command.main(args=argv, prog_name="storeval", standalone_mode=False)
        except Exception:
            if not interrupts.raised():
                raise
            code = EXIT_INTERRUPTED  # the interruption, handed on as a library's error (DuckDB: "Query interrupted")
    except TyperException as e:  # usage errors: unknown option, bad option value, missing argument
        if type(e).__name__ == "NoArgsIsHelpError":
            print(e.format_message() if hasattr(e, "format_message") else str(e))
            code = EXIT_OK
        else:
            message = e.format_message() if hasattr(e, "format_message") else str(e)
            where = getattr(getattr(e, "ctx", None), "command_path", None) or "storeval"  # the subcommand's help
            err.print(f"error: {_safe(' '.join(message.split()))} (see {_safe(where)} --help)")
            code = EXIT_INPUT
    except typer.Abort:  # click's form of a KeyboardInterrupt
        code = interrupts.exit_code(EXIT_INTERRUPTED)
    except StorevalError as e:
        if _mpi_rank() == 0:  # under mpiexec every rank meets the same mistake; one says it
            err.print(f"error: {_safe(e)}")
        code = e.exit_code
    except KeyboardInterrupt:
        code = interrupts.exit_code(EXIT_INTERRUPTED)
    except Exception as e:  # a bug: say so in one line; STOREVAL_DEBUG=1 shows the traceback
        if os.environ.get("STOREVAL_DEBUG"):
            raise
        err.print(f"internal error (a bug in storeval, please report it): {type(e).__name__}: {_safe(e)} "
                  "(rerun with STOREVAL_DEBUG=1 for the traceback)")
        code = EXIT_FAILED
    if code == EXIT_INTERRUPTED:  # a run stopped by SIGTERM (or SIGHUP) says so: 143 (129)
        code = interrupts.exit_code(EXIT_INTERRUPTED)
    sys.exit(code if isinstance(code, int) else 0)
