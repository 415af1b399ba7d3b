"""The function handlers' benchmark jobs (bench/bench_functions.py): a no-op, and a job whose module
imports what a real platform worker imports (~0.4-0.5 s of CPU: openpyxl, lxml, pypdf, redis,
msgspec, structlog, click, psutil)."""


def noop(ctx):
    return {}
