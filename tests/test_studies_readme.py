"""Every command of studies/README.md runs as written: test_readme.py's machinery, in a file of its own so that the
suite's workers (pytest-xdist hands out whole files) run these sections beside the README's and the guide's."""

from __future__ import annotations

import pytest

from . import test_readme
from .test_readme import STUDY_SECTIONS, Section, run_section

clone = test_readme.clone  # the fixture: a fresh clone of the tracked files per section


def test_studies_readme_has_its_sections():
    """The parse found studies/README.md's runnable sections (a parse that found none would pass below)."""
    assert len(STUDY_SECTIONS) >= 6, [s.id for s in STUDY_SECTIONS]


@pytest.mark.parametrize("section", STUDY_SECTIONS, ids=[s.id for s in STUDY_SECTIONS])
def test_studies_readme_section_runs_as_written(section: Section, clone, request):
    """Every command of one study's section, in order, in one clone (`# not run` ones left out)."""
    run_section(section, clone, request)
