"""The slot's one retry policy: how a Redis call it must see through is repeated.

A claimed job's take, start and settle, and the read that tells whether a lost settle reply
landed, are all retried the same way: the same arguments again (every script the slot runs is
safe to repeat: a token suffix chosen once makes a repeated start adopt the first one's attempt,
and a repeated settle is fenced or recognised), after ``retry_delay`` (``NotReplicated``: as
soon as Redis says a replica may have caught up), beating meanwhile so the supervisor never
takes a slot that waits on Redis for a silent one. Other Redis errors (a script error, a bad
reply) are not retried here: they are the loop's, which backs off and reconciles.
"""

from __future__ import annotations

from typing import Callable, TypeVar

import redis

from tender_pool.store.replication import NotReplicated, retry_delay

T = TypeVar("T")

# Errors after which repeating the same call is right: the server may or may not have run it (a lost
# reply). READONLY: we reached a demoted primary. NotReplicated: the write is on the primary but not
# yet on enough replicas; the retry (same token) is idempotent, and re-applies the write if a
# failover lost it.
RETRYABLE = (redis.ConnectionError, redis.TimeoutError, redis.exceptions.ReadOnlyError, NotReplicated)


class Retry:
    """``on_error`` counts each error (and makes the slot reconcile its list before its next
    claim); ``unreplicated`` tells the supervisor whether the slot is waiting for a replica (True
    while a ``NotReplicated`` is being retried, False once a write landed); ``wait`` sleeps while
    beating, and does not end early on a stop request (the call is for a job already claimed)."""

    def __init__(
        self,
        log,
        on_error: Callable[[redis.RedisError], None],
        unreplicated: Callable[[bool], None],
        wait: Callable[[float], None],
    ):
        self.log = log
        self.on_error = on_error
        self.unreplicated = unreplicated
        self.wait = wait

    def call(self, fn: Callable[[bool], T], *, what: str, tries: int, cap: float = 5.0, write: bool = True,
             event: str = "", **fields: object) -> T:
        """``fn(retry)`` until it returns, at most ``tries`` times (``retry``: an earlier call
        failed, its effect unknown); ``event``: the warning logged for each failure, with
        ``fields``. A ``write`` that returns clears the waiting-for-a-replica report. Raises
        ``redis.ConnectionError`` when every try failed."""
        for attempt in range(tries):
            try:
                out = fn(attempt > 0)
            except RETRYABLE as e:
                self.on_error(e)
                if event:
                    self.log.warning(event, **fields, error=str(e))
                self.unreplicated(isinstance(e, NotReplicated))
                self.wait(retry_delay(attempt, e, cap))
                continue
            if write:
                self.unreplicated(False)
            return out
        raise redis.ConnectionError(f"{what}: Redis unreachable")
