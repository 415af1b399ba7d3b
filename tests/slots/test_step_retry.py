"""The slot's one retry policy (``slots/retry.py``), with no Redis: what is repeated, how it tells
the call it is a repeat, what it reports about replication, and when it gives up."""

from __future__ import annotations

import pytest
import redis

from tender_pool.slots.retry import Retry
from tender_pool.store.replication import NotReplicated


class Log:
    def __init__(self) -> None:
        self.warnings: list[tuple[str, dict]] = []

    def warning(self, event: str, **fields: object) -> None:
        self.warnings.append((event, fields))


def policy() -> tuple[Retry, dict]:
    seen: dict = {"errors": [], "unreplicated": [], "waits": []}
    log = Log()
    seen["log"] = log
    r = Retry(log, seen["errors"].append, seen["unreplicated"].append, seen["waits"].append)
    return r, seen


def failing(*errors: BaseException):
    """A call that raises ``errors`` in turn, then answers which calls were repeats."""
    calls: list[bool] = []

    def call(retry: bool) -> list[bool]:
        calls.append(retry)
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return calls

    return call


def test_a_lost_reply_is_repeated_as_a_retry_and_counted():
    r, seen = policy()
    out = r.call(failing(redis.ConnectionError("lost"), redis.TimeoutError("slow")), what="settle", tries=5,
                 event="settle_retry", job_id="j1")
    assert out == [False, True, True]  # the first call is not a retry; every repeat is
    assert len(seen["errors"]) == 2
    assert seen["waits"] == [0.1, 0.2]  # doubling from 0.1 s
    assert [e for e, _ in seen["log"].warnings] == ["settle_retry"] * 2
    assert seen["log"].warnings[0][1] == {"job_id": "j1", "error": "lost"}
    assert seen["unreplicated"] == [False, False, False]  # no replica wait; the write that landed says so


def test_a_write_waiting_for_a_replica_is_reported_until_one_lands():
    r, seen = policy()
    r.call(failing(NotReplicated(0, 1, 1000)), what="take.lua", tries=5)
    assert seen["unreplicated"] == [True, False]
    assert seen["waits"] == [0.1]


def test_a_read_does_not_clear_the_replica_report():
    r, seen = policy()
    r.call(failing(), what="attempt_end", tries=3, write=False)
    assert seen["unreplicated"] == [] and seen["errors"] == []


def test_other_redis_errors_are_not_retried():
    r, seen = policy()
    with pytest.raises(redis.ResponseError):
        r.call(failing(redis.ResponseError("a script error")), what="take.lua", tries=5)
    assert seen["errors"] == [] and seen["waits"] == []


def test_it_gives_up_after_its_tries():
    r, seen = policy()
    with pytest.raises(redis.ConnectionError, match="take.lua: Redis unreachable"):
        r.call(failing(*[redis.ConnectionError("down")] * 3), what="take.lua", tries=3, cap=0.15)
    assert seen["waits"] == [0.1, 0.15, 0.15]  # capped
