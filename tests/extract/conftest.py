"""Fixtures of the extraction tests: the large generated bill of quantities (bigbook.py) as .xlsx and .xls."""

from __future__ import annotations

import pytest

import bigbook as _bigbook


@pytest.fixture(scope="session")
def bigbook():
    """(bill.xlsx, bill.xls), generated once and cached under $TMPDIR; LibreOffice writes both twins."""
    _bigbook.ensure_soffice()
    return _bigbook.paths()
