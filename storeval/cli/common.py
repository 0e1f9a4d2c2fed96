"""What every command shares: the consoles (tables on stdout, messages on stderr), printing user-given text
safely, and the :class:`~storeval.app.Say` a use case talks through."""

from __future__ import annotations

import typer
from rich.console import Console
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from ..app import Say

# -h as well as --help, on every command; not where the arguments are another program's (mpiexec -hosts …)
HELP = {"help_option_names": ["-h", "--help"]}
PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": ["--help"]}
JSON_LISTING_HELP = "Write what is listed as JSON to this file instead (-: to stdout)."
RESULTS = "storeval-results"  # the results directory every command that reads or writes a store defaults to
RESULTS_HELP = "Results directory (the DuckDB store and the reports)."
TESTBED_DIR_HELP = ("Directory holding the servers' data and state: new, empty or a testbed directory already "
                    "(storeval-testbed.yaml is written beside it).")


# --- help as users read it -------------------------------------------------------------------------------------
# typer's help shows each parameter's Python type (<str>, <bool> on flags, <list[str]>, <int range> [1<=x<=16]);
# users of fio, IOR and warp expect what they type: DIR, FILE, N, KEY=VALUE, nothing after a flag, ranges in
# words. typer builds its TyperOption/TyperArgument with no hook for their class, so every command of an `App`
# turns its parameters into the subclasses below as it is made (`_humanize`), the help option included.


def _range(param) -> str | None:
    lo, hi = getattr(param, "min", None), getattr(param, "max", None)
    if lo is None and hi is None:
        return None
    return f"{lo} to {hi}" if lo is not None and hi is not None else f"at least {lo}" if hi is None else f"at most {hi}"


class _Option(TyperOption):
    """An option shown by its metavar (nothing on a flag), its range said in its help."""

    def display_type_rich(self, ctx) -> str | None:
        return None if self.is_flag or self.count else self.metavar

    def _get_number_range_help_str(self) -> str | None:
        return None


class _Argument(TyperArgument):
    """A positional argument shown by its upper-case name (SYSTEM..., FILE...), no type; a hidden one (an old
    spelling kept working) is left out of the usage line too."""

    human: str | None = None

    @property
    def display_name_raw(self) -> str:
        return self.human or self.name.upper()

    def display_type_rich(self, ctx) -> str | None:
        return None

    def _get_number_range_help_str(self) -> str | None:
        return None

    def get_usage_pieces(self, ctx) -> list[str]:
        return [] if self.hidden else super().get_usage_pieces(ctx)


def _humanize(param):
    if type(param) is TyperOption:
        param.__class__ = _Option
        if param.metavar is None and not (param.is_flag or param.count):  # a metavar forgotten: the option's name
            param.metavar = max(param.opts, key=len).lstrip("-").replace("-", "_").upper()
    elif type(param) is TyperArgument:
        param.__class__ = _Argument
        # the name alone, "..." is added where it takes several (a metavar would stop typer adding it)
        param.human, param.metavar = (param.metavar.removesuffix("...") if param.metavar else None), None
    else:
        return param
    said = _range(param)
    if said and said not in (param.help or ""):
        param.help = f"{(param.help or '').rstrip()} ({said})".lstrip()
    return param


class _Human:
    """A command or group whose parameters are shown as users read them."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            _humanize(param)

    def get_help_option(self, ctx):
        option = super().get_help_option(ctx)
        return None if option is None else _humanize(option)


class Command(_Human, TyperCommand):
    pass


class Group(_Human, TyperGroup):
    pass


class App(typer.Typer):
    """storeval's typer app: -h as well as --help, and every command's help as users read it."""

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("context_settings", HELP)
        super().__init__(cls=Group, **kwargs)

    def command(self, name: str | None = None, *, cls=None, **kwargs):
        return super().command(name, cls=cls or Command, **kwargs)


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
