"""docs/reference.md is generated from the code (issue 32): the page is what ``render()`` makes now, every key,
option, parameter, code, variable and exit status the code knows is on it, and a key or code the code gains
without a description in the catalogs fails these checks. No servers, no runs: the sources and the models only."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from storeval import units
from storeval.app import reference
from storeval.core.codes import CODES, ENVIRONMENT, EXITS, Code
from storeval.core.studykeys import SECTIONS, Key, Section
from storeval.testbed import SERVERS
from storeval.workloads import workload_class

DOC = Path(__file__).resolve().parents[1] / "docs" / "reference.md"


@pytest.fixture(scope="module")
def page() -> str:
    return reference.render()


def _part(page: str, heading: str) -> str:
    """The text under ``### heading`` up to the next heading."""
    assert f"\n{heading}\n" in page, f"{heading} is not on the page"
    return page.split(f"\n{heading}\n", 1)[1].split("\n#", 1)[0]


def _rows(part: str) -> list[str]:
    """A table's rows, without its head."""
    rows = [line for line in part.splitlines() if line.startswith("| ")]
    assert len(rows) > 2
    return rows[2:] if rows[1].startswith("| ---") else rows[1:]


def test_the_page_is_what_the_code_renders(page: str) -> None:
    assert page == reference.render()  # deterministic
    assert DOC.read_text(encoding="utf-8") == page, (
        f"docs/reference.md differs from the code: regenerate it with `{reference.REGENERATE}`")


def test_code_and_catalogs_agree() -> None:
    assert reference.problems() == []


def test_every_study_key_is_on_the_page(page: str) -> None:
    keys = reference.code_keys()
    assert "wait_recovery" in keys["fault"] and "targets_from" in keys["study"]  # read from the code's tuples
    assert set(keys["network"]) == {"links", "hosts"}  # spec._network's keys, read from its refusal
    for section, names in keys.items():
        part = _part(page, f"### `{SECTIONS[section].path}`")
        for name in names:
            assert f"| `{name}` | " in part, f"{SECTIONS[section].path}.{name} is not on the page"
    study = _part(page, "### `(top level)`")
    assert "| `phase_timeout` | duration | 1h |" in study and "| `probe_interval` | duration | 1s |" in study


def test_every_testbed_setting_is_on_the_page(page: str) -> None:
    kinds = reference.own("testbed")
    assert kinds[:3] == ["minio", "minio-ec", "xrootd"]  # as `storeval testbed` lists them
    for kind in kinds:
        part = _part(page, f"### `{kind}`")
        for name in SERVERS[kind].options_help:
            assert f"| `{name}` | " in part, f"testbed {kind} setting {name} is not on the page"


def test_every_target_option_is_on_the_page_with_its_description(page: str) -> None:
    models = reference.option_models()
    assert set(models) >= {"file", "null", "s3", "root", "hdfs", "nfs"}
    for scheme, model in models.items():
        part = _part(page, f"### `{scheme}://`")
        for shown, m, name in reference.option_fields(model):
            description = m.model_fields[name].description
            assert description, f"{scheme}:// option {shown} has no description"
            assert f"| `{shown}` | " in part and " ".join(description.split()) in part
    assert "| `part_size` | bytes (size) | 16MiB |" in _part(page, "### `s3://`")
    assert "| `misbehave.seconds` | s (duration) | 3s |" in _part(page, "### `null://`")


def test_every_workload_parameter_is_on_the_page(page: str) -> None:
    kinds = reference.own("workloads")
    assert {"bandwidth", "metadata", "skim", "copy", "command", "jobs", "replay"} <= set(kinds)
    for kind in kinds:
        part = _part(page, f"### `{kind}`")
        for name in workload_class(kind).Params.model_fields:
            assert f"| `{name}` | " in part, f"{kind}.{name} is not on the page"
    assert "| `file_size` | 256MiB | 2GiB | bytes (size) |" in _part(page, "### `bandwidth`")


def test_every_code_variable_and_exit_status_is_on_the_page(page: str) -> None:
    found = reference.scan_codes()
    assert {"not-physical", "write-back", "imported", "fault-missed", "left-behind", "network-up"} <= set(found)
    for code in found:
        assert f"| `{code}` | {' '.join(CODES[code].meaning.split())} |" in page
    flags, events = _part(page, "### Flags"), _part(page, "### Events")
    assert "| `fault-missed` |" in flags and "| `fault-missed` |" in events  # a flag and an event kind both
    variables = reference.scan_environment()
    assert {"STOREVAL_DEBUG", "STOREVAL_STORE_WAIT", "STOREVAL_CACHE", "STOREVAL_TEST_INSTALL"} <= set(variables)
    for name in variables:
        assert f"| `{name}` | {ENVIRONMENT[name].scope} |" in page
    exits = reference.exit_codes()
    assert exits == {"EXIT_OK": 0, "EXIT_FAILED": 1, "EXIT_INPUT": 2, "EXIT_INTERRUPTED": 130}
    for name, value in exits.items():
        assert f"| {value} | `{name}` | {EXITS[name]} |" in page


def test_the_units_on_the_page_parse_as_they_say(page: str) -> None:
    sizes = _part(page, "### Sizes")
    assert "| `MB` | 1,000,000 |" in sizes and "| `m`, `MiB` | 1,048,576 |" in sizes
    for spelled, n in (("32MB", 32_000_000), ("32MiB", 32 << 20), ("4k", 4096)):
        assert units.parse_size(spelled) == n
    for row in _rows(sizes):
        cells = row.strip("| ").split(" | ")
        for unit in cells[0].split(", "):
            if unit.startswith("`"):
                assert units.parse_size("1" + unit.strip("`")) == int(cells[1].replace(",", ""))
    for row in _rows(_part(page, "### Rates")):
        cells = row.strip("| ").split(" | ")
        for unit in cells[0].split(", "):
            assert units.parse_rate("8" + unit.strip("`")) == int(cells[1].replace(",", ""))
    for row in _rows(_part(page, "### Durations")):
        cells = row.strip("| ").split(" | ")
        for unit in cells[0].split(", "):
            text = "2" + unit.strip("`") if unit.startswith("`") else "2"
            assert units.parse_duration(text) == pytest.approx(2 * float(cells[1]))


# -- the checks themselves fail for what the code gains without words -----------------------------------------
def test_an_undocumented_study_key_fails_the_check() -> None:
    code = reference.code_keys()
    assert reference.key_problems(code, SECTIONS) == []
    grown = {**code, "study": (*code["study"], "new_key"), "link": (*code["link"], "burst")}
    assert reference.key_problems(grown, SECTIONS) == [
        "network.links.NAME.burst: accepted by the code, undocumented (add it to core/studykeys.py)",
        "(top level).new_key: accepted by the code, undocumented (add it to core/studykeys.py)"]
    stale = {**SECTIONS, "price": Section("prices.TARGET", "", {**SECTIONS["price"].keys, "per_iops": Key("", "", "")})}
    assert reference.key_problems(code, stale) == [
        "prices.TARGET.per_iops: documented in core/studykeys.py, but the code no longer accepts it"]
    assert reference.key_problems({**code, "extra": ("x",)}, SECTIONS) == [
        "section extra: accepted by the code, not in core/studykeys.py SECTIONS"]


def test_an_undocumented_option_fails_the_check() -> None:
    class Plain(BaseModel):
        said: int = Field(1, description="documented")
        bare: int = 2

    class Outer(BaseModel):
        inner: Plain | None = Field(None, description="nested")

    assert reference.option_problems({"x": Outer}) == [
        f"x:// option inner.bare ({__name__}.Plain): no description (add Field(description=...))"]


def test_an_undocumented_code_or_variable_fails_the_check(tmp_path: Path) -> None:
    source = tmp_path / "newcode.py"
    source.write_text('WHY = "brand-new-flag"\n'
                      'def check(c, rec, fig):\n'
                      '    c.warn(rec, "brand-new-warning", "a sentence")\n'
                      '    fig.flags.append({"code": WHY, "message": "why"})\n'
                      '    events = [{"kind": "up" if fig else "down", "message": "m"}]\n'
                      '    return {"code": "page-cache"}, "STOREVAL_BRAND_NEW"\n', encoding="utf-8")
    found = reference.scan_codes([source])
    assert found == {"brand-new-warning": {f"{source}:3"}, "brand-new-flag": {f"{source}:4"},
                     "up": {f"{source}:5"}, "down": {f"{source}:5"}, "page-cache": {f"{source}:6"}}
    texts = source.read_text(encoding="utf-8")
    problems = reference.code_problems(found, {**CODES, "gone-code": Code(("flag",), "", "")}, texts)
    assert problems[:4] == [f"code {c!r} (used at {source}:{n}): not in core/codes.py CODES"
                            for c, n in (("brand-new-flag", 4), ("brand-new-warning", 3), ("down", 5), ("up", 5))]
    assert "code 'gone-code': in core/codes.py CODES, but no source uses it" in problems
    assert "code 'page-cache': in core/codes.py CODES, but no source uses it" not in problems
    variables = reference.scan_environment([source])
    assert variables == {"STOREVAL_BRAND_NEW": {"newcode.py:6"}}
    assert reference.environment_problems(variables, ENVIRONMENT, texts)[0] == (
        "environment variable STOREVAL_BRAND_NEW (at newcode.py:6): not in core/codes.py ENVIRONMENT")
