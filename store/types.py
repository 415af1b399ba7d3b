"""The slot → supervisor reports, sent over each slot's pipe (``SlotReport``), and the two enums they
carry: how an attempt ended (``AttemptEnd``) and a slot process's exit status (``SlotExit``).

A leaf module: it imports nothing of ours, so the slots and the supervisor share it.
"""

from __future__ import annotations

import enum

import msgspec


class AttemptEnd(str, enum.Enum):
    """How one claimed entry ended, as a slot reports it (``Finished.outcome``). The first four are
    the job's final states; the rest leave it unfinished."""

    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    DEAD = "dead"  # undecodable entry, dead-lettered
    RETRIED = "retried"  # a business failure put back for another try, after a backoff
    INTERRUPTED = "interrupted"  # stopped by the pool (drain, abort, fence): neither try nor crash
    FENCED = "fenced"  # settle refused: a newer attempt owns the job
    PARKED = "parked"  # waits for its user's lock or a dependency

    @property
    def terminal(self) -> bool:
        return self in (AttemptEnd.COMPLETED, AttemptEnd.FAILED, AttemptEnd.CANCELLED, AttemptEnd.DEAD)


class SlotExit(enum.IntEnum):
    """A slot process's exit status, read by the supervisor (gunicorn's WORKER_BOOT_ERROR idea)."""

    OK = 0  # asked to stop (drain, scale, reload, abort) and stopped
    ERROR = 1  # an unexpected exception escaped the slot: respawned with backoff
    BOOT_ERROR = 3  # could not get ready to claim (its config, imports, environment): not respawned


# --- slot -> supervisor reports (over the slot's pipe) ------------------------------------------


class Beat(msgspec.Struct, tag="beat"):
    """Sent at least every heartbeat/3 seconds, idle or busy: the slot's loop is alive.
    ``redis_errors`` is cumulative for this slot process; the supervisor adds the deltas to its
    metrics, so a SIGKILLed slot loses at most one beat's worth. ``unreplicated``: the slot is
    retrying a start or settle that Redis ran but no replica acknowledged yet (``NotReplicated``;
    a failover waiting for a replica), for ``status``'s warning."""

    redis_errors: int = 0
    unreplicated: bool = False


class Busy(msgspec.Struct, tag="busy"):
    """The slot holds the user's lock and is about to run this attempt. ``child_pid`` follows in
    a second report once the child exists, so the supervisor can kill its tree if the slot dies."""

    job_id: str
    kind: str
    user: str
    file: str | None
    token: str
    attempt: int
    started_ms: int
    child_pid: int | None = None


class Idle(msgspec.Struct, tag="idle"):
    pass


class Finished(msgspec.Struct, tag="finished"):
    """One attempt's end, for the supervisor's counters (``tally``) and metrics. For ``PARKED``,
    ``park_reason`` says behind what ("user" or "dependency"); ``error_kind`` is the job's error."""

    kind: str
    outcome: AttemptEnd
    error_kind: str | None = None
    park_reason: str | None = None
    duration_s: float = 0.0
    killed: list[str] = []
    queue_wait_s: float | None = None  # created → first start (attempt 1 only; retries wait on purpose)
    pages: int = 0  # parse_markdown: pages extracted
    input_bytes: int = 0  # parse_markdown: size of the input file
    format: str | None = None  # parse_markdown: detected format
    progress_events: int = 0  # job_progress events written for this attempt (fd 3)
    progress_dropped: int = 0  # fd-3 lines dropped: coalesced away, past the byte cap, or undecodable


class Preloaded(msgspec.Struct, tag="preloaded"):
    """Sent once by a slot before its first claim when it has function handlers: per handler name,
    "" when its function imported, else why not (the slot then exits ``BOOT_ERROR``)."""

    imports: dict[str, str] = {}


SlotReport = Beat | Busy | Idle | Finished | Preloaded
