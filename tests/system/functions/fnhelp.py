"""Helpers for the function handlers' tests (not a conftest: tests/conftest.py is the one): a
config whose kinds are functions of tests/jobs/fnjobs.py, a Client on the harness's Redis, the
events of a stream."""

from __future__ import annotations

import json

from conftest import JOBS


def fn_handlers(*names: str, timeout: float = 10, extra: str = "", **specials: str) -> str:
    """``[handlers.<name>] function = "fnjobs:<name>"`` for each name, ``path`` = tests/jobs, plus
    ``extra`` TOML in each; ``specials``: handler name → its whole TOML body."""
    out = []
    for name in names:
        out.append(f'[handlers.{name}]\nfunction = "fnjobs:{name}"\ntimeout = {timeout}\npath = ["{JOBS}"]\n'
                   f'per_user = 0\n{extra}\n')
    for name, body in specials.items():
        out.append(f"[handlers.{name}]\n{body}\n")
    return "\n".join(out)


def client_of(h, name: str = "a"):
    from tender_pool.client import Client
    from tender_pool.store.config import load

    cfg = load(str(h.tmp / f"{name}.toml"), {})
    return Client.for_config(cfg)


def events(h, stream: str) -> list[dict]:
    return [dict(json.loads(f[b"e"]), id=i.decode()) for i, f in h.r.xrange(stream)]


def record(h, name: str) -> dict:
    return json.loads((h.records / name).read_text())
