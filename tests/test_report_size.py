"""The HTML report stays one small offline file (issue 32): it embeds the partial plotly.js bundle
(plotly.js-basic-dist-min, fetched at install time into storeval/report/assets), not the 4.8 MB full one, and
every chart it carries is of a trace type that bundle draws — a chart of another type fails here instead of
rendering blank.

The bundle is a required part of the test environment, like the native module: missing, these tests fail (they
never skip), naming the command that fetches it. Without it a report still works, bigger, and says so.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from plotly.offline import get_plotlyjs, get_plotlyjs_version

from storeval.report import assets, html

from .helpers import load_json

LIMIT = 1_500_000  # bytes: the default run's whole report, bundle included
FIX = "fetch it with `python -m storeval.report.assets` (or reinstall online: pip install -e .)"
BUNDLE = re.compile(r"<script>/\*\*\s*\* plotly\.js \(basic - minified\) v([0-9][^\s]*)")


@pytest.fixture(scope="module")
def default_report(default_study_run) -> tuple[Path, str]:
    work, r, out = default_study_run
    assert r.rc == 0, r.err
    path = work / "storeval-results" / f"report-{load_json(out)['run_id']}.html"
    return path, path.read_text(encoding="utf-8")


def _figures(text: str) -> dict:
    m = re.search(r'<script type="application/json" id="storeval-figures">(.*?)</script>', text, re.S)
    return json.loads(m.group(1).replace("<\\/", "</"))


def test_the_partial_plotly_bundle_is_installed_for_plotlys_version():
    want = get_plotlyjs_version()
    have = assets.version_of(assets.bundle_path())
    assert have == want, (f"{assets.PACKAGE} {want} is not installed in {assets.bundle_path().parent} "
                          f"(found: {have}): {FIX}")
    assert html.plotly_js().startswith(f"/**\n* plotly.js (basic - minified) v{want}\n")


def test_the_default_report_is_one_small_offline_file_with_the_partial_bundle(default_report):
    path, text = default_report
    size = path.stat().st_size
    assert size <= LIMIT, f"{path.name}: {size:,} bytes, over {LIMIT:,}"
    bundles = BUNDLE.findall(text)
    assert bundles == [get_plotlyjs_version()], f"the page embeds {bundles or 'no partial bundle'}: {FIX}"
    assert "plotly-full-bundle" not in text and get_plotlyjs()[:2000] not in text
    # the page's own markup (everything but the bundle, whose modebar logo link is never drawn: displaylogo off)
    start = text.index(BUNDLE.search(text).group(0))
    markup = text[:start] + text[text.index("</script>", start):]
    assert not re.findall(r"""(?:src|href|action)\s*=\s*["']?\s*(?:https?:)?//""", markup, re.I)
    assert not re.findall(r"url\(\s*[\"']?\s*(?:https?:)?//|@import", markup, re.I)
    assert '<meta http-equiv="Content-Security-Policy" content="default-src \'none\';' in markup


def test_every_figure_is_of_a_trace_type_the_bundle_draws(default_report):
    _, text = default_report
    figures = _figures(text)
    types = {fid: {t.get("type", "scatter") for t in fig["data"]} for fid, fig in figures.items()}
    assert len(figures) >= 10 and all(fig["data"] for fig in figures.values())
    unsupported = {fid: sorted(ts - assets.TRACES) for fid, ts in types.items() if ts - assets.TRACES}
    assert not unsupported, f"charts {assets.PACKAGE} cannot draw (they would be blank): {unsupported}"
    assert set().union(*types.values()) == {"bar", "scatter"}  # what the default run draws today


@pytest.fixture
def no_cached_bundle():
    html._bundle.cache_clear()
    yield
    html._bundle.cache_clear()


def test_without_the_partial_bundle_the_page_embeds_the_full_one_and_says_so(
        tmp_path, monkeypatch, capsys, no_cached_bundle):
    want = get_plotlyjs_version()
    monkeypatch.setattr(assets, "bundle_path", lambda directory=None: tmp_path / assets.FILE)
    assert html.plotly_js() == get_plotlyjs()
    full_mb = f"{len(get_plotlyjs()) / 1e6:.1f} MB"
    note = (f"this page embeds the full plotly.js ({full_mb}, not 1.2 MB): the partial bundle {assets.PACKAGE} "
            f"{want} is not installed; fetch it with `python -m storeval.report.assets`")
    assert capsys.readouterr().err == f"warning: {note}\n"
    assert html._bundle_messages() == [{"cls": "warn", "text": f"⚠ plotly-full-bundle: {note}"}]
    assert capsys.readouterr().err == ""  # said once per process

    # a bundle of another plotly.js than plotly's own is not used either
    (tmp_path / assets.FILE).write_text("/**\n* plotly.js (basic - minified) v0.0.1\n*/\nvar Plotly;\n")
    html._bundle.cache_clear()
    assert html.plotly_js() == get_plotlyjs()
    assert capsys.readouterr().err == (
        f"warning: this page embeds the full plotly.js ({full_mb}, not 1.2 MB): the {assets.PACKAGE} installed "
        f"is 0.0.1, not {want} (the plotly.js plotly embeds); fetch it with `python -m storeval.report.assets`\n")


def test_fetch_writes_only_a_bundle_whose_sha512_matches(tmp_path, monkeypatch):
    """The install step's fetch, against the registry: the pinned version verifies and is the file installed;
    a wrong pin writes nothing."""
    version = "4.1.1"
    assert version in assets.PINNED
    path = assets.fetch(version, tmp_path / "ok")
    assert path == tmp_path / "ok" / assets.FILE and assets.version_of(path) == version
    if get_plotlyjs_version() == version:
        assert path.read_bytes() == assets.bundle_path().read_bytes()
    monkeypatch.setitem(assets.PINNED, version, "sha512-" + "A" * 86 + "==")
    with pytest.raises(assets.FetchError, match=r"is not the expected sha512-AAAA.*; nothing written"):
        assets.fetch(version, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()
    with pytest.raises(assets.FetchError, match=r"https://example\.org/x: not on https://registry\.npmjs\.org"):
        assets._get("https://example.org/x", 10)
