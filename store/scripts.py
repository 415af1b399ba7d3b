"""The one owner of the Lua scripts in ``lua/``: their text as Redis runs it and their registration
on a client. Every caller, slot, client or supervisor, gets a script from here.

Redis has no include, so the shared Lua (``lua/lib/<part>.lua``: ``base``, ``ctx``, ``classes``,
``fairness``, ``events``, ``runs``, ``state``, ``lock``, ``terminal``, ``attempt``) is joined in
front of a script here. Each script names the parts it calls on a ``-- needs:`` line of its header,
and each part names the parts it calls the same way; a script gets the closure of its needs, each
part once, every part after the parts it needs (a Lua ``local`` is visible only below its
definition). So the text Redis parses on every call carries only what the script can reach:
``stamp.lua`` carries ``base`` alone, not the slot's hot path (``bench/bench_lua_prelude.py``
measures the difference). Each script's header (KEYS / ARGV / returns) is its interface.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

import redis
from redis.commands.core import Script

NAMES = (
    "enqueue",
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

_NEEDS = re.compile(r"^-- needs:(.*)$")


def _lua():
    return resources.files("tender_pool.store").joinpath("lua")


def needs_of(text: str) -> tuple[str, ...]:
    """The parts a script or part names on the ``-- needs:`` line of its header (the comment lines
    it opens with), comma-separated; a remark in parentheses is not a name. Every script and part
    has that line, with no name when it needs none: a missing one is an error, not the whole
    library by default."""
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        m = _NEEDS.match(line)
        if m:
            names = re.sub(r"\(.*?\)", "", m.group(1))
            return tuple(n.strip() for n in names.split(",") if n.strip())
    raise ValueError("no '-- needs:' line in the header")


@cache
def part(name: str) -> str:
    """The text of ``lua/lib/<name>.lua``."""
    path = _lua().joinpath("lib").joinpath(f"{name}.lua")
    if not path.is_file():
        raise KeyError(f"no Lua lib part named {name!r}")
    return path.read_text()


def parts() -> tuple[str, ...]:
    """Every lib part's name."""
    return tuple(sorted(p.name[:-4] for p in _lua().joinpath("lib").iterdir() if p.name.endswith(".lua")))


@cache
def closure(needs: tuple[str, ...]) -> tuple[str, ...]:
    """``needs`` and every part they need, each once, each after the parts it needs (a depth-first
    walk in the order the needs are named)."""
    order: list[str] = []
    on_path: list[str] = []

    def visit(name: str) -> None:
        if name in order:
            return
        if name in on_path:
            raise ValueError(f"lib parts need each other in a cycle: {' -> '.join(on_path + [name])}")
        on_path.append(name)
        for dep in needs_of(part(name)):
            visit(dep)
        on_path.pop()
        order.append(name)

    for name in needs:
        visit(name)
    return tuple(order)


def prelude(*needs: str) -> str:
    """The joined text of the parts ``needs`` reach, to put in front of a script's own text (also for
    a script written elsewhere, e.g. a benchmark's seeding loop)."""
    return "".join(part(name) + "\n" for name in closure(tuple(needs)))


def source(name: str) -> str:
    """The text of ``lua/<name>.lua`` as it is in the file (no prelude)."""
    path = _lua().joinpath(f"{name}.lua")
    if not path.is_file():
        raise KeyError(f"no Lua script named {name!r}")
    return path.read_text()


@cache
def text(name: str) -> str:
    """The full text of ``lua/<name>.lua`` as sent to Redis: the parts it needs, then the script."""
    if name not in NAMES:
        raise KeyError(f"no Lua script named {name!r}")
    own = source(name)
    return prelude(*needs_of(own)) + own


def register(client: redis.Redis, *names: str) -> dict[str, Script]:
    """redis-py Script objects (EVALSHA, loading on NOSCRIPT) for ``names`` on ``client``."""
    return {name: client.register_script(text(name)) for name in names}


BATCHES = ("requeue",)


@cache
def batch_text(name: str) -> str:
    """The text of ``lua/<name>_many.lua`` as sent to Redis: the parts both scripts need, then
    ``<name>.lua`` byte for byte as the body of ``local function <name>_one()``, then the batch, which
    sets KEYS and ARGV for each entry and calls it. The per-entry logic is the single script's own
    text, so the batch cannot drift from it (and its model check, through ``<name>.lua``'s recorded
    hash, covers both)."""
    if name not in BATCHES:
        raise KeyError(f"no batched Lua script named {name!r}")
    one, many = source(name), source(f"{name}_many")
    return (prelude(*needs_of(one), *needs_of(many)) + f"local function {name}_one()\n" + one + "\nend\n"
            + many)


def register_batch(client: redis.Redis, name: str) -> Script:
    """``batch_text(name)`` as a redis-py Script on ``client`` (EVALSHA, loading on NOSCRIPT)."""
    return client.register_script(batch_text(name))
