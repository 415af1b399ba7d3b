"""Fixtures of the extraction tests (this directory is a package: its conftest never shadows
tests/conftest.py's ``from conftest import …``)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def bigbook():
    """(bill.xlsx, bill.xls): the large generated bill of quantities (bigbook.py), made once and
    cached under $TMPDIR; LibreOffice writes both twins."""
    from . import bigbook as book

    book.ensure_soffice()
    return book.paths()
