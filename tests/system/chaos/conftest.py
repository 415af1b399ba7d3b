"""``--long`` for the chaos soak (``pytest tests/system/chaos --long``): the same as TENDER_POOL_CHAOS_LONG=1.

The option exists only when this directory is on the command line (pytest reads ``pytest_addoption``
from the conftests of the paths it is given); the environment variable works from anywhere.
"""

from __future__ import annotations

import os


def pytest_addoption(parser):
    parser.addoption("--long", action="store_true", default=False,
                     help="chaos soak: 20,000 jobs over 2,000 users (TENDER_POOL_CHAOS_JOBS sets any size)")


def pytest_configure(config):
    # Before the test module is imported: its size and timeout are read from the environment.
    if config.getoption("--long", default=False):
        os.environ["TENDER_POOL_CHAOS_LONG"] = "1"
