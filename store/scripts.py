"""The one owner of the Lua scripts in ``lua/``: their text (with the shared ``lib.lua`` prelude)
and their registration on a client. Every caller, slot or supervisor, gets a script from here.

Redis has no include, so ``lib.lua`` (``set_state``, ``on_terminal``, ``release_lock``,
``promote_waiter``, the fairness helpers) is prepended to every script; a script that does not use
it pays only the parse. Each script's header (KEYS / ARGV / returns) is its interface.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

import redis
from redis.commands.core import Script

NAMES = (
    "enqueue",
    "start",
    "settle",
    "requeue",
    "deadletter",
    "promote_due",
    "stamp",
    "unstick",
    "cancel",
    "busy_clear",
    "depwaits_count",
    "run_submit",
    "run_queue",
    "run_abort",
    "run_cancel",
    "run_retry",
    "progress",
    "take",
    "settle_take",
)


@cache
def text(name: str) -> str:
    """The full text of ``lua/<name>.lua`` as sent to Redis (prelude first)."""
    if name not in NAMES:
        raise KeyError(f"no Lua script named {name!r}")
    lua = resources.files("tender_pool.store").joinpath("lua")
    return lua.joinpath("lib.lua").read_text() + "\n" + lua.joinpath(f"{name}.lua").read_text()


def register(client: redis.Redis, *names: str) -> dict[str, Script]:
    """redis-py Script objects (EVALSHA, loading on NOSCRIPT) for ``names`` on ``client``."""
    return {name: client.register_script(text(name)) for name in names}


BATCHES = ("requeue",)


@cache
def batch_text(name: str) -> str:
    """The text of ``lua/<name>_many.lua`` as sent to Redis: lib.lua, then ``<name>.lua`` byte for
    byte as the body of ``local function <name>_one()``, then the batch, which sets KEYS and ARGV
    for each entry and calls it. The per-entry logic is the single script's own text, so the batch
    cannot drift from it (and its model check, through ``<name>.lua``'s recorded hash, covers both)."""
    if name not in BATCHES:
        raise KeyError(f"no batched Lua script named {name!r}")
    lua = resources.files("tender_pool.store").joinpath("lua")
    one = lua.joinpath(f"{name}.lua").read_text()
    return (lua.joinpath("lib.lua").read_text() + f"\nlocal function {name}_one()\n" + one + "\nend\n"
            + lua.joinpath(f"{name}_many.lua").read_text())


def register_batch(client: redis.Redis, name: str) -> Script:
    """``batch_text(name)`` as a redis-py Script on ``client`` (EVALSHA, loading on NOSCRIPT)."""
    return client.register_script(batch_text(name))
