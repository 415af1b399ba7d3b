"""The values we keep in Redis, decoded: the job hash (``JobRecord``, through ``decode_job``), its
states, and a slot's ``busy:<worker>`` value (``BusyState``).

A leaf like the rest of the store: the slot, the client and the supervisor decode the same bytes
with the same code, so no two readers can disagree about a record.

Timestamps inside Redis are integer milliseconds from Redis ``TIME``: hosts' clocks differ, and a
deadline or an age computed across two hosts' clocks would be off by their skew. They are rendered as
RFC 3339 UTC only at the edge (the client's ``JobView``).
"""

from __future__ import annotations

import enum
from typing import Any, Literal

import msgspec


class JobState(str, enum.Enum):
    QUEUED = "queued"
    WAITING = "waiting"  # parked behind the user's lock or an `after` dependency
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"
    DEAD = "dead"  # an entry that could not be decoded

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset(
    {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.SKIPPED, JobState.DEAD}
)


Priority = Literal["interactive", "bulk"]


class JobError(msgspec.Struct):
    kind: str
    message: str


class JobRecord(msgspec.Struct, forbid_unknown_fields=True):
    """The job hash in Redis, decoded. Field names are the hash's field names."""

    id: str
    kind: str
    user: str
    payload: dict[str, Any]
    priority: Priority = "bulk"
    after: list[str] = []
    state: JobState = JobState.QUEUED
    attempts: int = 0
    tries: int = 0
    interruptions: int = 0
    crashes: int = 0
    waits: int = 0
    created_at: int | None = None
    started_at: int | None = None
    finished_at: int | None = None
    worker: str | None = None
    token: str | None = None
    timeout_ms: int | None = None
    cancel: bool = False
    error: JobError | None = None
    result: dict[str, Any] | None = None
    run: str | None = None  # the run it belongs to (never changes after creation)
    key: str | None = None  # its item key in that run
    input_hash: str | None = None  # kind + payload (+ input file) digest, for skip
    skipped_from: str | None = None  # skipped: the completed job whose result it carries
    conc: str | None = None  # what the running attempt holds: "lock" | "sem" | "none" (take.lua)
    proc: str | None = None  # the processing list the attempt started from (start_job; requeue.lua)
    event_id: str | None = None  # stream id of the job's last event on the queue-wide stream (lib/events.lua emit)


class Undecodable(Exception):
    """A list entry or job hash that does not turn into a JobRecord (written by something else, or
    by hand): the slot dead-letters it (``deadletter.lua``'s header describes a dead letter), the
    client raises it to its caller."""


_JSON_FIELDS = frozenset({"payload", "after", "error", "result"})


def decode_job(h: dict[bytes, bytes]) -> JobRecord:
    """The job hash (HGETALL, bytes) → JobRecord, for the slot and the client alike; raises
    Undecodable with the reason. Empty values and JSON nulls are left out (the Struct's defaults
    apply); a field this version does not know is an error (``forbid_unknown_fields``: a newer
    daemon's field needs a newer reader). One pass: the slot runs this once per job."""
    out: dict[str, Any] = {}
    try:
        for k, v in h.items():
            key = k.decode()
            if key in _JSON_FIELDS:
                if v:
                    value = msgspec.json.decode(v)
                    if value is not None:
                        out[key] = value
            elif key == "cancel":
                out[key] = v == b"1"
            elif v:
                out[key] = v.decode()
    except UnicodeDecodeError as e:
        raise Undecodable(f"job hash is not UTF-8: {e}") from None
    except msgspec.DecodeError as e:
        raise Undecodable(f"job hash does not validate: {e}") from None
    try:
        return msgspec.convert(out, JobRecord, strict=False)
    except msgspec.ValidationError as e:
        raise Undecodable(f"job hash does not validate: {e}") from None


class BusyState(msgspec.Struct, forbid_unknown_fields=True):
    """``busy:<worker>`` in Redis: what a slot is running. Written by take.lua once the slot
    holds the user's lock (``started_at`` is the job's Redis-TIME start), deleted by busy_clear.lua
    only while it still names the same job."""

    worker: str
    pid: int
    kind: str
    job_id: str
    user: str
    file: str | None
    attempt: int
    started_at: int = 0
