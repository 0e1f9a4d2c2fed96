"""What every command shares: the consoles (tables on stdout, messages on stderr), printing user-given text
safely, and the :class:`~storeval.app.Say` a use case talks through."""

from __future__ import annotations

from rich.console import Console

from ..app import Say

# -h as well as --help, on every command; not where the arguments are another program's (mpiexec -hosts …)
HELP = {"help_option_names": ["-h", "--help"]}
PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": ["--help"]}
JSON_LISTING_HELP = "Write what is listed as JSON to this file instead (-: to stdout)."
TESTBED_DIR_HELP = ("Directory holding the servers' data and state: new, empty or a testbed directory already "
                    "(storeval-testbed.yaml is written beside it).")


def console(stderr: bool = False) -> Console:
    """Tables on stdout (wide enough to stay readable in a file or a pipe), messages on stderr."""
    from ..report.console import console as make

    return make(stderr)


def safe(text) -> str:
    """User-given text (names, URLs, paths, errors) for a printed line: see report.console.safe."""
    from ..report.console import safe as printable

    return printable(text)


def say() -> Say:
    """A use case's lines while it works: progress and notes on stderr, warnings and errors marked as such."""
    err = console(stderr=True)
    return Say(info=lambda line: err.print(safe(line), highlight=False),
               warn=lambda line: err.print(f"warning: {safe(line)}", highlight=False),
               error=lambda line: err.print(f"error: {safe(line)}", highlight=False))




def write_listing(path: str, doc: object) -> None:
    """``--json PATH`` of a listing command: ``-`` writes it to stdout (nothing else is printed then); a file is
    written with storeval's ownership header and replaces only a listing storeval wrote."""
    import json

    if path == "-":
        print(json.dumps(doc, indent=2, default=str))
        return
    from ..outputs import check_output, write_owned

    check_output(path, "--json", "json", kind="listing")
    write_owned(path, "--json", "json", "listing", [], json.dumps(doc, indent=2, default=str) + "\n")
