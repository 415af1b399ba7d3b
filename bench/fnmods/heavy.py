"""A module as heavy to import as a small platform worker (the issue's measurement: 0.41-0.45 s of
CPU for these). Imported once per slot as a function handler, once per job as a command handler
(``python bench/fnmods/heavy.py`` reads the job on stdin and prints ``{}``)."""

import click  # noqa: F401
import lxml.etree  # noqa: F401
import msgspec  # noqa: F401
import openpyxl  # noqa: F401
import psutil  # noqa: F401
import pypdf  # noqa: F401
import redis  # noqa: F401
import structlog  # noqa: F401


def work(ctx):
    return {}


if __name__ == "__main__":
    import sys

    sys.stdin.read()
    print("{}")
