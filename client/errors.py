"""What the client raises, drawn in one place (httpx's habit):

    Exception
    ├── NotFound        no such job or run (the CLI exits 2)
    ├── Unavailable     Redis (or the status socket) did not answer (the CLI exits 4)
    ├── Undecodable     a job hash exists but is not a job we can read (the CLI exits 1)
    ├── ValueError
    │   └── BadInput    a submission that can never run (the CLI exits 2); ``submission.BadInput`` itself
    └── redis.RedisError
        └── NotReplicated   the write ran on the primary but too few replicas have it (``[redis]
                            wait_replicas``): it may be lost by a failover; submit it again with the
                            same id (the CLI exits 4). ``replication.NotReplicated`` itself.

Redis connection errors and timeouts become ``Unavailable`` at the client's boundary
(``translated``); any other Redis error (a script bug, a wrong server) is not ours to rename and
passes through as ``redis.RedisError``.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import redis

from tender_pool.store.replication import NotReplicated
from tender_pool.store.records import Undecodable
from tender_pool.store.submission import BadInput

__all__ = ["BadInput", "NotFound", "NotReplicated", "Unavailable", "Undecodable", "translated"]


class NotFound(LookupError):
    """No such job or run (never created, or expired after ``result_retention``)."""


class Unavailable(Exception):
    """Redis did not answer (connection refused, timed out, a failover in progress), or, for
    ``status()``, neither the status socket nor Redis did."""


@contextlib.contextmanager
def translated(url: str) -> Iterator[None]:
    """Connection errors and timeouts → ``Unavailable`` naming the server; ``NotReplicated`` and
    every other Redis error pass through."""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as e:
        raise Unavailable(f"Redis unreachable at {url}: {e}") from None
