"""Text from outside made safe to show: secrets masked, invisible characters made visible.

Everything storeval prints, stores or puts in a JSON document or HTML report passes through :func:`redact`
(the store on every insert and load, the terminal through ``report.console.safe``), so a credential that
slipped into a URL, an option or a library's error message never reaches output. Masked are: the
``user:password@`` part of URLs (and a bare ``user@`` of schemes that only carry keys there), query
parameters named like secrets (``X-Amz-Signature``, ``X-Amz-Credential``, ``token``, ``authz`` …),
``Authorization`` headers, SigV4 ``Credential=``/``Signature=`` fields, ``password=``-style pairs, and
every value a driver registered with :func:`register_secret` (the keys it read from the environment or a
credentials file). :func:`visible` turns control, bidi and other invisible characters into ``\\x1b``-style
escapes, so names and messages cannot move the cursor, recolour the terminal or reorder a line.
"""

from __future__ import annotations

import re
from typing import Any

MASK = "***"
MIN_SECRET = 4  # shorter registered values are not masked: they would mask ordinary words

_secrets: set[str] = set()

# user:password@ after a scheme; the password may hold '/' (unencoded AWS secrets do)
_PASSWORD = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^\s/?#@:'\"<>]*:[^\s@'\"<>]*@")
# a bare user@ after a scheme (S3 access key ids written there); schemes whose user name is data keep it
_USER = re.compile(r"(?P<scheme>\b(?!root://|xroot://)[A-Za-z][A-Za-z0-9+.-]*://)[^\s/?#@'\"<>]+@")
# a secret value: not one already masked, and not the punctuation that follows it in a sentence
_VALUE = r"(?!\*\*\*(?:[\s&#;,:.)'\"<>]|$))[^\s&#;,'\"<>]*[^\s&#;,:.)'\"<>]"
_QUERY = re.compile(r"(?P<key>[?&;][^=&#\s'\"<>]*?(?:signature|credential|token|secret|password|passwd|pwd|authz|"
                    r"auth|sig|key|session)[^=&#\s'\"<>]*=)" + _VALUE, re.IGNORECASE)
_HEADER = re.compile(r"(?P<key>\bauthorization\s*[:=](?!\s*\*\*\*)\s*)[^\n\"'<>]+", re.IGNORECASE)
_FIELDS = re.compile(r"(?P<key>\b(?:Credential|Signature|X-Amz-Security-Token)=)" + _VALUE)
_BEARER = re.compile(r"(?P<key>\bBearer\s+)(?!\*\*\*)[A-Za-z0-9._~+/=-]+")
_PAIRS = re.compile(r"(?P<key>\b(?:aws_secret_access_key|aws_session_token|secret_access_key|secret_key|password|"
                    r"passwd)\b[\"']?\s*[=:]\s*)(?P<q>[\"']?)" + _VALUE, re.IGNORECASE)


def register_secret(value: str | None) -> None:
    """Mask ``value`` wherever it appears in this process's output from now on (a key read by a driver)."""
    if value and len(value) >= MIN_SECRET:
        _secrets.add(value)


def url_has_password(text: str) -> bool:
    """Whether ``text`` holds a URL with ``user:password@``."""
    return "@" in text and _PASSWORD.search(text) is not None


def redact_text(text: str) -> str:
    """``text`` with every credential-shaped part replaced by ``***``."""
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    if "@" in text:
        text = _PASSWORD.sub(rf"\g<scheme>{MASK}@", text)
        text = _USER.sub(rf"\g<scheme>{MASK}@", text)
    text = _QUERY.sub(rf"\g<key>{MASK}", text)
    text = _HEADER.sub(rf"\g<key>{MASK}", text)
    text = _FIELDS.sub(rf"\g<key>{MASK}", text)
    text = _BEARER.sub(rf"\g<key>{MASK}", text)
    return _PAIRS.sub(rf"\g<key>\g<q>{MASK}", text)


def redact(value: Any) -> Any:
    """``value`` (text, or JSON-like data: dicts, lists, tuples) with every string redacted."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {redact(k): redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    if type(value) is tuple:
        return tuple(redact(v) for v in value)
    return value


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(text: str) -> str:
    """``text`` with every character Python does not call printable (controls, bidi overrides, zero-width
    and other format characters, line separators) written as a visible escape such as ``\\x1b`` or
    ``\\u202e``."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)
