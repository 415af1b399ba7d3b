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
    lua = resources.files("tender_pool.slots").joinpath("lua")
    return lua.joinpath("lib.lua").read_text() + "\n" + lua.joinpath(f"{name}.lua").read_text()


def register(client: redis.Redis, *names: str) -> dict[str, Script]:
    """redis-py Script objects (EVALSHA, loading on NOSCRIPT) for ``names`` on ``client``."""
    return {name: client.register_script(text(name)) for name in names}
