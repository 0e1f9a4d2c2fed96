"""``python -m storeval.report.assets [--force] [VERSION]``: fetch the HTML report's partial plotly.js bundle
again (an install made offline, or plotly upgraded since), for the plotly.js the installed plotly embeds."""

from __future__ import annotations

import sys

from . import PACKAGE, FetchError, fetch, plotly_version


def main(argv: list[str]) -> int:
    force = "--force" in argv
    args = [a for a in argv if a != "--force"]
    if len(args) > 1 or any(a.startswith("-") for a in args):
        print("usage: python -m storeval.report.assets [--force] [VERSION]", file=sys.stderr)
        return 2
    version = args[0] if args else plotly_version()
    if version is None:
        print("error: plotly is not installed: give the plotly.js VERSION to fetch", file=sys.stderr)
        return 2
    try:
        path = fetch(version, force=force)
    except FetchError as e:
        print(f"error: {PACKAGE} {version} not fetched: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"error: {PACKAGE} {version} not written: {e}", file=sys.stderr)
        return 1
    print(f"{PACKAGE} {version}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
