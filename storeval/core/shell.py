"""Command templates whose values are never read as code (the command workload's lines, setup/teardown commands).

A template names values as placeholders (``{path}``, ``{url}``, ``{stripe_count}``) and the values come from
outside: a target's path, a setting, a URL someone typed. Quoting a value into a shell line is not enough: a
quote of the template around the placeholder (``"{path}"``: a single-quoted value inside double quotes is
expanded) or a second shell the line starts (``sh -c "cat {path}"``, ``eval``, ``ssh host …``) reads it as
code again. So:

* a value never enters the text a shell reads: where the template says ``{path}`` the line holds
  ``"$STOREVAL_PATH"``, and the value travels in that environment variable (a shell expands a variable once
  and never reads its value as code);
* a placeholder inside the template's own quotes, backquotes, ``${…}``, arithmetic or an array subscript, or
  right after ``\\`` or ``$``, is refused: written bare, it is one word whatever it holds;
* a placeholder inside the code a program runs — the script of ``sh -c`` (bash, dash, zsh …), ``python -c``,
  ``perl -e``, ``awk``/``sed`` programs, ``eval``, ``let``, ``ssh``'s remote command, ``watch``, ``su -c``,
  ``env -S`` — is refused, with or without a shell around it: give it as an argument of its own
  (``sh -c 'cat "$1"' sh {path}``), or read ``$STOREVAL_PATH`` there.
"""

from __future__ import annotations

import os
import re
import shlex
import string
from typing import Any, Iterator

PREFIX = "STOREVAL_"
_PUNCT = "();<>|&\n"


def env_name(name: str) -> str:
    """The environment variable a placeholder's value travels in: ``{path}`` → ``STOREVAL_PATH``."""
    return PREFIX + re.sub(r"[^A-Za-z0-9_]", "_", name).upper()


def fields(template: str) -> list[tuple[str, str | None]]:
    """(literal text, placeholder or None) pieces; ValueError for ``{}``, ``{0}``, ``{x!r}``, ``{x:>4}``, a lone
    brace."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as e:
        raise ValueError(f"{e} (write {{{{ and }}}} for literal braces)") from None
    out: list[tuple[str, str | None]] = []
    for literal, name, spec, conversion in parsed:
        if name is not None and (not name or name.isdigit() or spec or conversion or "." in name or "[" in name):
            raise ValueError(f"{{{name}{'!' + conversion if conversion else ''}{':' + spec if spec else ''}}} is "
                             "not a placeholder (write {name}; {{ and }} for literal braces)")
        out.append((literal, name))
    return out


_WHERE = {"single": "inside single quotes", "double": "inside double quotes", "ansi": "inside $'…'",
          "backtick": "inside backquotes", "param": "inside ${…}", "arith": "inside arithmetic (( … ))",
          "subscript": "inside an array subscript [ … ]", "escaped": "right after \\ or $"}


def _contexts(template: str) -> Iterator[tuple[str, str]]:
    """(placeholder, where the shell reads it: plain, or a key of _WHERE) for each placeholder of a shell line."""
    stack: list[list[Any]] = [["plain", 0]]
    escaped, prev = False, ""
    for literal, name in fields(template):
        i, n = 0, len(literal)
        while i < n:
            c, top = literal[i], stack[-1]
            nxt, nxt2 = literal[i + 1:i + 2], literal[i + 2:i + 3]
            kind = top[0]
            if escaped:
                escaped = False
            elif kind == "comment":
                if c == "\n":
                    stack.pop()
            elif kind == "single":
                if c == "'":
                    stack.pop()
            elif kind in ("ansi", "backtick", "param"):
                if c == "\\":
                    escaped = True
                elif c == {"ansi": "'", "backtick": "`", "param": "}"}[kind]:
                    stack.pop()
            elif kind == "arith":
                if c == "(":
                    top[1] += 1
                elif c == ")":
                    top[1] -= 1
                    if top[1] <= 0:
                        stack.pop()
            elif kind == "double":
                if c == "\\":
                    escaped = True
                elif c == '"':
                    stack.pop()
                elif c == "`":
                    stack.append(["backtick", 0])
                elif c == "$" and nxt == "(" and nxt2 == "(":
                    stack.append(["arith", 2])
                    i += 2
                elif c == "$" and nxt == "(":
                    stack.append(["subst", 0])
                    i += 1
                elif c == "$" and nxt == "{":
                    stack.append(["param", 0])
                    i += 1
            else:  # plain, or inside $( … ) / ( … ): a fresh line
                if c == "\\":
                    escaped = True
                elif c == "'":
                    stack.append(["single", 0])
                elif c == '"':
                    stack.append(["double", 0])
                elif c == "`":
                    stack.append(["backtick", 0])
                elif c == "$" and nxt == "'":
                    stack.append(["ansi", 0])
                    i += 1
                elif c == "$" and nxt == "(" and nxt2 == "(":
                    stack.append(["arith", 2])
                    i += 2
                elif c == "(" and nxt == "(":
                    stack.append(["arith", 2])
                    i += 1
                elif c == "$" and nxt == "(":
                    stack.append(["subst", 0])
                    i += 1
                elif c == "$" and nxt == "{":
                    stack.append(["param", 0])
                    i += 1
                elif c == "(":
                    stack.append(["subst", 0])
                elif c == ")" and kind == "subst":
                    stack.pop()
                elif c == "#" and (prev == "" or prev in " \t\n;|&()"):
                    stack.append(["comment", 0])
            prev = c
            i += 1
        if name is not None:
            kind = stack[-1][0]
            if escaped or (prev == "$" and kind in ("plain", "subst", "double")):
                kind = "escaped"
            elif prev == "[" and kind in ("plain", "subst"):
                kind = "subscript"
            yield name, "plain" if kind in ("subst", "comment") else kind
            escaped, prev = False, "x"


# -- programs that run one of their arguments as code ---------------------------------------------------------
_SHELLS = {"sh", "bash", "rbash", "dash", "zsh", "ksh", "mksh", "lksh", "oksh", "pdksh", "ash", "yash", "posh",
           "csh", "tcsh", "fish"}
_FLAGS = {"python": ("c", ()), "pypy": ("c", ()), "perl": ("eE", ()), "ruby": ("e", ()), "node": ("ep", ("--eval", "--print")),
          "nodejs": ("ep", ("--eval", "--print")), "php": ("r", ()), "lua": ("e", ()), "luajit": ("e", ()),
          "rscript": ("e", ()), "osascript": ("e", ()), "su": ("c", ("--command",)), "runuser": ("c", ("--command",)),
          "script": ("c", ("--command",)), "flock": ("c", ("--command",)), "env": ("S", ("--split-string",))}
_SSH_ARGS = set("BbcDEeFIiJLlmOoPpQRSWw")


def _program(word: str) -> str:
    """``/usr/bin/python3.11`` → ``python``; ``bash`` → ``bash``."""
    base = os.path.basename(word).lower()
    return re.sub(r"[\d.]+$", "", base) or base


def _flagged(words: list[str], i: int, letters: str, longs: tuple[str, ...]) -> Iterator[int]:
    """Indices of the code given with ``-X CODE`` / ``-XCODE`` / ``--long=CODE`` after the program at ``i``."""
    j = i + 1
    while j < len(words):
        w = words[j]
        if w == "--" or not w.startswith("-") or w == "-":
            return
        if w.startswith("--"):
            key = w.split("=", 1)[0]
            if key in longs:
                if "=" in w:
                    yield j
                else:
                    yield j + 1
                    j += 1
        else:
            at = next((k for k, ch in enumerate(w[1:], 1) if ch in letters), None)
            if at is not None:
                if at == len(w) - 1:
                    yield j + 1
                    j += 1
                else:
                    yield j
        j += 1


def _shell_script(words: list[str], i: int) -> Iterator[int]:
    """``sh [-options] -c SCRIPT [name args…]``: the script's index (the arguments after it are data)."""
    wants = False
    j = i + 1
    while j < len(words):
        w = words[j]
        if w in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            j += 2
            continue
        if w == "--command":
            wants = True
        elif len(w) > 1 and w[0] in "-+" and not w.startswith("--"):
            wants = wants or "c" in w[1:]
        elif not w.startswith("--"):
            if wants:
                yield j
            return
        j += 1


def _awk_sed(words: list[str], i: int, sed: bool) -> Iterator[int]:
    code_flags, file_flags = (("-e", "--expression"), ("-f", "--file")) if sed else (("-e", "--source"), ("-f", "--file"))
    with_arg = {"-F", "-v", "--assign", "--field-separator", "-l", "--line-length"} if not sed else {"-l", "--line-length"}
    given = False
    j = i + 1
    while j < len(words):
        w = words[j]
        key = w.split("=", 1)[0]
        if key in code_flags:
            given = True
            if "=" in w:
                yield j
            else:
                yield j + 1
                j += 1
        elif key in file_flags:
            given = True
            j += 0 if "=" in w else 1
        elif w in with_arg:
            j += 1
        elif w == "--" or not w.startswith("-") or w == "-":
            if not given:
                yield j + (w == "--")
            return
        j += 1


def _ssh_remote(words: list[str], i: int) -> Iterator[int]:
    j = i + 1
    while j < len(words):
        w = words[j]
        if w.startswith("-") and len(w) > 1:
            j += 2 if w[-1] in _SSH_ARGS and len(w) == 2 else 1
            continue
        yield from range(j + 1, len(words))  # after the destination: a line for the remote shell
        return


def _watch(words: list[str], i: int) -> Iterator[int]:
    j = i + 1
    while j < len(words) and words[j].startswith("-"):
        if words[j] in ("-x", "--exec"):
            return  # exec'd as given, no shell
        j += 2 if words[j] in ("-n", "--interval", "-d") and "=" not in words[j] else 1
    yield from range(j, len(words))


def _code_words(words: list[str]) -> Iterator[tuple[int, str]]:
    """(index of a word another program runs as code, that program) in one simple command."""
    for i, w in enumerate(words):
        if "{" in w and "}" in w:
            continue  # a placeholder's own word is never taken for the program it might name
        prog = _program(w)
        found: Iterator[int] = iter(())
        if prog in _SHELLS:
            found = _shell_script(words, i)
        elif prog in _FLAGS:
            found = _flagged(words, i, *_FLAGS[prog])
        elif prog in ("awk", "gawk", "mawk", "nawk", "sed", "gsed"):
            found = _awk_sed(words, i, prog.endswith("sed"))
        elif prog == "ssh":
            found = _ssh_remote(words, i)
        elif prog == "watch":
            found = _watch(words, i)
        elif w in ("eval", "let"):
            found = iter(range(i + 1, len(words)))
        elif w in ("declare", "typeset", "local", "export", "readonly") and any(
                x.startswith("-") and "i" in x for x in words[i + 1:]):
            found = iter(range(i + 1, len(words)))  # integer variables: the value is evaluated
        elif w == "[[":
            found = (k for k in range(i + 1, len(words))
                     if any(words[m] in ("-eq", "-ne", "-lt", "-le", "-gt", "-ge") for m in (k - 1, k + 1)
                            if i < m < len(words)))
        for j in found:
            if j < len(words):
                yield j, prog


def _placeholders(word: str) -> list[str]:
    try:
        return [name for _, name in fields(word) if name is not None]
    except ValueError:
        return []


def _why_code(name: str, prog: str) -> str:
    return (f"{{{name}}} is in the code {prog} runs, where its value would be read as code (a path holding "
            f"$(…) or ; would run): give it as an argument of its own (sh -c 'cat \"$1\"' sh {{{name}}}) or read "
            f"${env_name(name)} there")


def check_argv(words: list[str], digits: tuple[str, ...] = ()) -> None:
    """ValueError naming a placeholder that a program of this argument list would run as code (``digits``: the
    placeholders whose values are always a number storeval made, such as a rank, which cannot be code)."""
    for j, prog in _code_words(words):
        names = [n for n in _placeholders(words[j]) if n not in digits]
        if names:
            raise ValueError(_why_code(names[0], prog))


def _commands(template: str) -> list[list[str]]:
    """The simple commands of a shell line, as words (placeholders still in them; redirection targets left out)."""
    lex = shlex.shlex(template, posix=True, punctuation_chars=_PUNCT)
    lex.whitespace = " \t\r"
    lex.whitespace_split = True
    lex.commenters = "#"
    out: list[list[str]] = [[]]
    skip = False
    try:
        for tok in lex:
            if tok and all(ch in _PUNCT for ch in tok):
                if set(tok) <= set("<>&") and ("<" in tok or ">" in tok):
                    skip = True  # the next word is a file, not an argument
                    continue
                out.append([])
                continue
            if skip:
                skip = False
                continue
            out[-1].append(tok)
    except ValueError as e:
        raise ValueError(f"cannot be read as a shell line ({e}: close the quote)") from None
    return [c for c in out if c]


def check_shell_line(template: str, digits: tuple[str, ...] = ()) -> None:
    """ValueError (a short reason) when a placeholder of a line run by ``/bin/sh -c`` could be read as code
    (``digits``: placeholders whose values are always a number storeval made, written into the line as they are)."""
    for name, where in _contexts(template):
        if where != "plain" and name not in digits:
            hint = "write $(…)" if where == "backtick" else f"write {{{name}}} bare"
            raise ValueError(f"{{{name}}} is {_WHERE[where]}: {hint} — storeval passes each value as one word "
                             f"of its own, never as shell code (or use \"${env_name(name)}\" in the quotes)")
    for words in _commands(template):
        check_argv(words, digits)


def shell_line(template: str, numbers: dict[str, str] | None = None) -> str:
    """The line ``/bin/sh -c`` runs: each ``{name}`` as ``"$STOREVAL_NAME"``, those of ``numbers`` (values that
    are only digits, or empty) as themselves (check the template first)."""
    numbers = numbers or {}
    if not all(v == "" or (v.isdigit() and v.isascii()) for v in numbers.values()):
        raise ValueError(f"not numbers: {numbers}")
    return "".join(literal + ("" if name is None else numbers[name] if name in numbers else f'"${env_name(name)}"')
                   for literal, name in fields(template))


def env_of(values: dict[str, Any]) -> dict[str, str]:
    """The environment variables carrying the values (``STOREVAL_PATH`` …)."""
    return {env_name(k): str(v) for k, v in values.items()}


def shown(template: str, values: dict[str, Any]) -> str:
    """The line as a person reads it, each value shell-quoted in place (kept in the results; never run)."""
    return "".join(literal + (shlex.quote(str(values[name])) if name is not None else "")
                   for literal, name in fields(template))
