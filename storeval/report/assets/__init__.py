"""The partial plotly.js bundle the HTML report embeds: plotly.js-basic-dist-min (scatter, bar, pie), 1.2 MB
where the full plotly.js is 4.8 MB, so a report stays one small offline file.

It comes from the npm registry at INSTALL time (setup.py's build step, or ``python -m storeval.report.assets``),
never when a report is written: HPC nodes are often offline. The version is the one the Python plotly package
embeds, so the page draws what plotly validates; the tarball is checked against its sha512 ``integrity`` (pinned
here for a known version, else the registry's own metadata) before one byte of it is written. The file itself is
git-ignored. Stdlib only at module level: setup.py loads this file by path, before storeval's dependencies exist.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import tarfile
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

PACKAGE = "plotly.js-basic-dist-min"
REGISTRY = "https://registry.npmjs.org"
FILE = "plotly-basic.min.js"
TRACES = frozenset({"scatter", "bar", "pie"})  # the trace types the basic bundle draws; any other renders blank
# sha512 integrity from the registry's metadata, pinned for the versions we have checked by hand
PINNED = {
    "4.1.1": "sha512-1oNF8PeQx2hv/y7tqEVWKD3JGwn/MGEMQ8mL9HUwsaqG9FGy/OU5FHUHvzqbqxN4mnwZGI9abTiE775C4kkjMQ==",
}
HEADER = re.compile(rb"plotly\.js \(basic - minified\) v([0-9][0-9A-Za-z.+-]*)")
MAX_TARBALL = 64 << 20


class FetchError(Exception):
    """The bundle could not be fetched or did not verify: one line naming why."""


def bundle_path(directory: Path | None = None) -> Path:
    return (directory or Path(__file__).parent) / FILE


def version_of(path: Path) -> str | None:
    """The plotly.js version a basic bundle's header names; None when the file is missing or is no such bundle."""
    try:
        with open(path, "rb") as f:
            m = HEADER.search(f.read(512))
    except OSError:
        return None
    return m.group(1).decode() if m else None


def plotly_version() -> str | None:
    """The plotly.js version the installed Python plotly embeds (None without plotly)."""
    try:
        from plotly.offline import get_plotlyjs_version
    except ImportError:
        return None
    return get_plotlyjs_version()


def _get(url: str, timeout: float) -> bytes:
    if not url.startswith(REGISTRY + "/"):
        raise FetchError(f"{url}: not on {REGISTRY}, refused")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            data = r.read(MAX_TARBALL + 1)
    except urllib.error.HTTPError as e:
        raise FetchError(f"{url}: HTTP {e.code} {e.reason}") from None
    except OSError as e:  # URLError (offline, DNS), timeouts
        raise FetchError(f"{url}: {getattr(e, 'reason', None) or e}") from None
    if len(data) > MAX_TARBALL:
        raise FetchError(f"{url}: larger than {MAX_TARBALL >> 20} MiB, refused")
    return data


def source(version: str, timeout: float = 60) -> tuple[str, str]:
    """(tarball URL, sha512 integrity) of ``version``: the pinned integrity when we have one, else the registry's."""
    tarball = f"{REGISTRY}/{PACKAGE}/-/{PACKAGE}-{version}.tgz"
    if version in PINNED:
        return tarball, PINNED[version]
    try:
        dist = json.loads(_get(f"{REGISTRY}/{PACKAGE}/{version}", timeout))["dist"]
        integrity = next(i for i in dist["integrity"].split() if i.startswith("sha512-"))
    except (ValueError, KeyError, TypeError, StopIteration):
        raise FetchError(f"{PACKAGE} {version}: the registry's metadata has no sha512 integrity") from None
    return dist.get("tarball") or tarball, integrity


def fetch(version: str, directory: Path | None = None, timeout: float = 60, force: bool = False) -> Path:
    """Download, verify and write the basic bundle of ``version``; nothing is written unless the hash matches.
    An installed file of that version is kept as it is (unless ``force``)."""
    target = bundle_path(directory)
    if not force and version_of(target) == version:
        return target
    url, integrity = source(version, timeout)
    data = _get(url, timeout)
    digest = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    if digest != integrity:
        raise FetchError(f"{url}: sha512 {digest} is not the expected {integrity}; nothing written")
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            member = tar.getmember(f"package/{FILE}")
            js = tar.extractfile(member).read() if member.isfile() else b""
    except (tarfile.TarError, KeyError, OSError) as e:
        raise FetchError(f"{url}: no package/{FILE} in the tarball ({e})") from None
    found = HEADER.search(js[:512])
    if not found or found.group(1).decode() != version:
        raise FetchError(f"{url}: package/{FILE} does not name plotly.js (basic) v{version}; nothing written")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{FILE}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(js)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
