"""The reference path that requeue_many.lua is checked against: requeue.lua itself, one call per
entry (``Queue.requeue``), as the reaper requeued a dead list before the batch script."""

from __future__ import annotations


def requeue_one_by_one(q, proc: str, reason: str, **kw) -> list[tuple[str, str]]:
    """Every entry of ``proc``, in list order, through ``Queue.requeue``: (entry, verdict) pairs."""
    return [(e.decode("utf-8", "backslashreplace"), q.requeue(proc, e, reason, **kw)) for e in q.r.lrange(proc, 0, -1)]
