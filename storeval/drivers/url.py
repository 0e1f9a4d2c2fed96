"""The one parser of target and endpoint URLs: every part is either understood or refused.

``urllib`` happily splits off a ``?query`` or ``#fragment`` that a driver then never looks at
(``s3://bucket/x?endpoint=…`` went to AWS; ``file:///data/hd#2`` measured ``/data/hd``) and silently
drops tabs and newlines. Here each caller says which parts it understands (``user``, ``host``, ``port``,
``path``, ``query``, ``fragment``); anything else present is an :class:`InputError` of one line that names
the part and the fix. A password in the URL is refused always: it would be stored and printed. Messages
show the URL through :func:`storeval.redact.redact_text`, so a refusal never repeats a secret.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from ..errors import InputError
from ..redact import redact_text, url_has_password, visible

PARTS = ("user", "host", "port", "path", "query", "fragment")

# what to write instead of a part a caller does not understand; callers add their own (a driver's url_hints)
HINTS = {
    "user": "remove the part before '@'",
    "host": "remove the host",
    "port": "remove ':PORT'",
    "path": "remove the path",
    "query": "give settings as keys of the target, not in the URL; a '?' in a name is written %3F",
    "fragment": "a '#' in a name is written %23",
    "password": "remove them",
}


@dataclass(frozen=True)
class ParsedUrl:
    """A URL whose every part was understood by the caller. ``host`` and ``path`` are as written."""

    text: str
    scheme: str
    user: str  # '' when none
    host: str  # '' when none; an IPv6 address keeps its brackets
    port: int | None
    path: str  # percent-encoded, as written
    query: str
    fragment: str

    @property
    def netloc(self) -> str:
        """``[user@]host[:port]``: what a client library is given to reach the server."""
        return (f"{self.user}@" if self.user else "") + self.host + (f":{self.port}" if self.port is not None else "")

    @property
    def local_path(self) -> str:
        """The path with %-escapes decoded (a file name)."""
        return unquote(self.path)

    @property
    def shown(self) -> str:
        """The URL as messages may show it: secrets masked, invisible characters escaped."""
        return visible(redact_text(self.text))


def parse_url(url: str, understood: Collection[str], hints: Mapping[str, str] | None = None,
              schemes: Collection[str] | None = None, reader: str | None = None) -> ParsedUrl:
    """Split ``url`` and refuse every part not in ``understood`` (and a password, always). ``reader`` names
    who reads the URL in messages (default: the scheme's driver)."""
    hints = {**HINTS, **(hints or {})}
    shown = visible(redact_text(url))
    if not url.isprintable():
        bad = next(ch for ch in url if not ch.isprintable())
        raise InputError(f"{shown}: holds the invisible character {visible(bad)} (write the URL on one line, "
                         "without control characters)")
    if url_has_password(url):
        raise InputError(f"{shown}: holds a password; credentials never go in a URL, where they would be stored "
                         f"and printed ({hints['password']})")
    parts = urlsplit(url)
    scheme = parts.scheme
    if schemes is not None and scheme not in schemes:
        raise InputError(f"{shown}: is not an {' or '.join(f'{s}://' for s in schemes)} URL")
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if hostport.startswith("["):
        close = hostport.find("]")
        host, rest = (hostport[:close + 1], hostport[close + 1:]) if close > 0 else (hostport, "")
        if rest and not rest.startswith(":"):
            raise InputError(f"{shown}: the host {hostport!r} is not [IPv6 address] or [IPv6 address]:PORT")
        port_text = rest[1:] if rest else None
    else:
        host, colon, port_text = hostport.partition(":")
        port_text = port_text if colon else None
    port = None
    if port_text is not None:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise InputError(f"{shown}: the port is not a number from 1 to 65535")
        port = int(port_text)
    present = {"user": bool(at), "host": bool(host), "port": port_text is not None, "path": bool(parts.path),
               "query": "?" in url.split("#", 1)[0], "fragment": "#" in url}
    for part in PARTS:
        if present[part] and part not in understood:
            what = {"query": f"the query '?{parts.query}'", "fragment": f"the fragment '#{parts.fragment}'",
                    "host": f"the host {host!r}", "port": f"the port {port_text}",
                    "user": "a user name", "path": f"the path {parts.path!r}"}[part]
            who = reader or f"the {scheme}:// driver"
            raise InputError(f"{shown}: {who} does not understand {visible(redact_text(what))}, so it would be "
                             f"ignored ({hints[part]})")
    return ParsedUrl(text=url, scheme=scheme, user=userinfo, host=host, port=port,
                     path=parts.path, query=parts.query, fragment=parts.fragment)
