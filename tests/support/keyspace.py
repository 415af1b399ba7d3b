"""The key names a test reads or writes, from the store's own ``Keys`` (the one speller of key names):
no test spells ``{tender_parse}`` or ``:job:`` by hand, so a renamed key breaks no test silently.

``keys(prefix)`` is the key space of a test config (whose queue is the config's default); the
harness's ``h.k`` is ``keys(h.prefix)``."""

from __future__ import annotations

from tender_pool.store.config import PoolConfig
from tender_pool.store.keys import Keys

QUEUE = PoolConfig().queue  # every test config keeps the default queue


def keys(prefix: str, queue: str = QUEUE) -> Keys:
    return Keys(prefix, queue)
