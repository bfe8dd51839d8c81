"""The code a new user copies first runs as written, from the wheel: every code block of the
README, the quickstart, the installation and the upgrading pages, in order, in a fresh directory
(how blocks are run: ``docblocks.py``)."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT

from .docblocks import blocks_of, run_document

pytestmark = pytest.mark.packaging

DOCUMENTS = ["README.md", "docs/quickstart.rst", "docs/installation.rst", "docs/upgrading.rst"]


@pytest.mark.parametrize("document", DOCUMENTS)
def test_the_code_blocks_run_as_written(document, wheel_venv, tmp_path):
    path = ROOT / document
    log = run_document(path, tmp_path, wheel_venv.env(), wheel_venv.wheel)
    ran = [line for line in log if line.endswith(")") and " ran (" in line]
    # Something of each page ran: a page whose blocks all went unrecognised would pass empty.
    assert len(ran) >= 3, log
    assert len(log) == len(blocks_of(path))
