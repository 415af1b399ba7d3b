"""The words an attempt's end is told in, as enums: what a handler's attempt came to (``Status``),
why the slot stopped a running attempt (``Stop``), and why an entry goes back to ready
(``Requeue``, requeue.lua's ARGV[2]).

They are ``StrEnum``s: each member *is* its string, so a member compares equal to the string Redis
holds or a log line carries, and what is written to Redis or JSON is byte-identical to the plain
strings these replaced. A leaf: imports nothing of ours.
"""

from __future__ import annotations

import enum


class Status(enum.StrEnum):
    """``Outcome.status``: what an attempt came to, before the slot picks a settle verdict."""

    COMPLETED = "completed"
    FAILED = "failed"  # retried or final: the settle decides from the error kind and the tries
    INTERRUPTED = "interrupted"  # stopped by the pool (drain, abort, fence): neither a try nor a crash


class Stop(enum.StrEnum):
    """``RunResult.stopped``: why the slot killed an attempt's group before it ended by itself."""

    TIMEOUT = "timeout"  # the kind's timeout passed
    CANCEL = "cancel"  # the job was cancelled while running
    ABORT = "abort"  # the supervisor's order (drain timeout) or SIGUSR1: an interruption
    FENCED = "fenced"  # the job's token is not ours any more, or our host's lease is lapsing


class Requeue(enum.StrEnum):
    """requeue.lua's reason: whether putting an entry back counts as a crash of its job."""

    CRASH = "crash"  # its slot or host died: counts towards pool.crash_cap
    DRAIN = "drain"  # its slot was stopped on purpose: an interruption
    DEADLINE = "deadline"  # it outlived its deadline in a live list: counts as a crash
    UNCLAIM = "unclaim"  # claimed but never started by its slot (a lost reply, a stop, no lease)
