"""Function handlers' tests: a config whose kinds are functions of tests/jobs/fnjobs.py."""

from __future__ import annotations

from conftest import JOBS


def fn_handlers(*names: str, timeout: float = 10, extra: str = "", **specials: str) -> str:
    """``[handlers.<name>] function = "fnjobs:<name>"`` for each name (``specials``: name → spec)."""
    out = []
    for name in names:
        out.append(f'[handlers.{name}]\nfunction = "fnjobs:{name}"\ntimeout = {timeout}\npath = ["{JOBS}"]\n{extra}\n')
    for name, spec in specials.items():
        out.append(f'[handlers.{name}]\n{spec}\n')
    return "\n".join(out)
