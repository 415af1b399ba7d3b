"""Reliability tests (issue 9). A package so that its conftest.py is ``reliability.conftest`` and
never takes the module name ``conftest`` from tests/conftest.py (``from conftest import …``)."""
