"""The typed answers of the slot's hot-path scripts, built here so no caller indexes a reply by
position: a start (``Started`` | ``Parked`` | ``Ended`` | ``Stale``, inside a take), settle.lua
(``SettleReply``; ``Verdict`` is its question), take.lua and settle_take.lua's take part (``Empty``
| ``RawEntry`` | ``BadRecord`` | ``Taken``), and ``TakeArgs``, what a slot passes with every take.

Replies arrive as bytes (RESP2 arrays, or a map for a hash under RESP3) and are decoded here.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

import msgspec
import redis


def _s(v: bytes | str | None) -> str | None:
    if v is None:
        return None
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


# --- a start's answer (lib/attempt.lua start_job, inside take.lua's): a tagged union --------


class Started(msgspec.Struct, frozen=True, tag="run"):
    """An attempt that may run: the slot holds the user's lock (or its place in the kind's
    semaphore, or the kind has no limit) and runs attempt ``attempt`` under ``token`` (Redis-TIME ms)."""

    token: str
    attempt: int
    started_ms: int
    created_ms: int = -1  # -1: the job hash had no created_at


class Parked(msgspec.Struct, frozen=True, tag="parked"):
    """Put in a wait list: behind its user's running job (``reason`` "user", ``on`` the user) or an
    unfinished dependency (``reason`` "dependency", ``on`` that job's id)."""

    reason: str
    on: str


class Ended(msgspec.Struct, frozen=True, tag="ended"):
    """Ended without running: cancelled, waited too long, or a dependency failed."""

    state: str
    error_kind: str
    message: str


class Stale(msgspec.Struct, frozen=True, tag="stale"):
    """A duplicate entry of a job already running or finished elsewhere; dropped from our list."""

    state: str


StartResult = Started | Parked | Ended | Stale


def start_result(res: list) -> StartResult:
    tag, rest = _s(res[0]) or "", [_s(x) or "" for x in res[1:]]
    if tag == "run":
        return Started(rest[0], int(rest[1]), int(rest[2]), int(rest[3]))
    if tag == "parked":
        return Parked(rest[0], rest[1])
    if tag == "ended":
        return Ended(rest[0], rest[1], rest[2])
    if tag == "stale":
        return Stale(rest[0])
    raise redis.ResponseError(f"take.lua's start answered {res!r}")


# --- settle.lua's question and answer ------------------------------------------------------------


class Verdict(str, enum.Enum):
    """What settle.lua does with an attempt (its ARGV[3])."""

    COMPLETED = "completed"  # store the result: final
    FAILED = "failed"  # store the error: final
    CANCELLED = "cancelled"  # cancelled while running: final
    RETRY = "retry"  # a business failure with tries left: to ``delayed`` after a backoff
    REQUEUE = "requeue"  # stopped by the pool (drain, abort): back to ready, an interruption


class SettleAnswer(enum.Enum):
    OK = "ok"
    FENCED = "fenced"  # this attempt no longer owns the job (its token was replaced or cleared)

    def __bool__(self) -> bool:  # ``ok, promoted = q.settle(...)``; ``if ok:`` means accepted
        return self is SettleAnswer.OK


class SettleReply(NamedTuple):
    answer: SettleAnswer
    promoted: str  # the waiter the released lock went to, or ""


# --- take.lua's answer ----------------------------------------------------------------------------


class Empty(msgspec.Struct, frozen=True):
    """Nothing queued (take.lua never blocks: the slot goes back to its BLMOVE)."""


class NoLease(msgspec.Struct, frozen=True):
    """Our host's lease (its key's PTTL) is too short to start anything: our supervisor is not
    renewing it. ``entry``: what a BLMOVE had claimed, still in our list, for the slot to put back
    (b"" when take.lua was to claim itself, or in settle_take's take part)."""

    entry: bytes


class RawEntry(msgspec.Struct, frozen=True):
    """An entry with no job hash (a producer's raw JSON, or an expired job), left in our list: the
    slot adopts or dead-letters it."""

    entry: bytes


class BadRecord(msgspec.Struct, frozen=True):
    """A job hash take.lua could not start (no user, kind or state; ``after`` not a list of ids):
    still in our list, for the slot to dead-letter with the decoder's reason."""

    entry: bytes
    record: dict


class Taken(msgspec.Struct, frozen=True):
    """A job take.lua claimed and tried to start: its hash as read before the start (``record``,
    for ``decode_job``) and the start's answer."""

    entry: bytes
    record: dict
    started: "StartResult"


TakeResult = Empty | NoLease | RawEntry | BadRecord | Taken


def _pairs(flat: list | dict) -> dict:
    if isinstance(flat, dict):  # RESP3
        return flat
    return dict(zip(flat[::2], flat[1::2]))


def take_result(res: list) -> TakeResult:
    tag = _s(res[0])
    if tag == "empty":
        return Empty()
    if tag == "nolease":
        return NoLease(res[1])
    if tag == "raw":
        return RawEntry(res[1])
    if tag == "bad":
        return BadRecord(res[1], _pairs(res[2]))
    if tag == "job":
        return Taken(res[1], _pairs(res[2]), start_result(res[3]))
    raise redis.ResponseError(f"take.lua answered {res!r}")


class TakeArgs(msgspec.Struct, frozen=True):
    """What a slot passes with every take (constant for the slot process's life, so built once):
    ``limits`` is the JSON of {kind: [timeout ms, per_user]}, with "*" for kinds it does not know;
    no start while our host key (``host_key``) has less than ``min_lease_ms`` left (0: no fence)."""

    worker: str
    pid: int
    lock_ttl_ms: int
    retention_s: int
    max_waits: int
    busy_ttl_ms: int
    limits: bytes
    host_key: str = ""
    min_lease_ms: int = 0
