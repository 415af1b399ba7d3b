"""Every value that crosses a process or Redis boundary, as msgspec Structs, plus the state enums.

A leaf module: it imports nothing of ours, so slots, the CLI and the supervisor can all share it.

Timestamps inside Redis are integer milliseconds from Redis ``TIME``: hosts' clocks differ, and a
deadline or an age computed across two hosts' clocks would be off by their skew. They are rendered as
RFC 3339 UTC only at the edge (``JobView``).
"""

from __future__ import annotations

import datetime as _dt
import enum
import re
import unicodedata
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


class ErrorKind(str, enum.Enum):
    TIMEOUT = "timeout"
    HANDLER_FAILED = "handler_failed"
    BAD_OUTPUT = "bad_output"
    OUTSIDE_ROOTS = "outside_roots"
    FILE_NOT_FOUND = "file_not_found"
    DEPENDENCY_FAILED = "dependency_failed"
    DEPENDENCY_CYCLE = "dependency_cycle"
    WAITED_TOO_LONG = "waited_too_long"  # reached pool.max_waits: nothing was killed, so not a timeout
    STORAGE = "storage"  # results or state directory full or unwritable: retried
    CRASH_CAP = "crash_cap"
    CANCELLED = "cancelled"
    UNDECODABLE = "undecodable"
    ENCRYPTED = "encrypted"
    CORRUPT = "corrupt"
    EMPTY = "empty"
    OLD_FORMAT = "old-format"
    UNSUPPORTED = "unsupported"
    TOO_LARGE = "too-large"

    @property
    def retried(self) -> bool:
        """Only these are retried up to max_tries; every other kind is final at once (CONTRACT.md)."""
        return self in (ErrorKind.HANDLER_FAILED, ErrorKind.BAD_OUTPUT, ErrorKind.STORAGE)

    @property
    def pool_owned(self) -> bool:
        """Kinds only the pool may set: a handler's exit 3 naming one is refused (CONTRACT.md)."""
        return self in POOL_OWNED_KINDS


POOL_OWNED_KINDS = frozenset(
    {
        ErrorKind.CANCELLED,
        ErrorKind.CRASH_CAP,
        ErrorKind.UNDECODABLE,
        ErrorKind.DEPENDENCY_FAILED,
        ErrorKind.DEPENDENCY_CYCLE,
        ErrorKind.WAITED_TOO_LONG,
    }
)


class SlotState(str, enum.Enum):
    STARTING = "starting"
    IDLE = "idle"
    BUSY = "busy"
    STOPPING = "stopping"
    OFFLINE = "offline"
    CRASH_LOOPING = "crash-looping"


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
    conc: str | None = None  # what the running attempt holds: "lock" | "sem" | "none" (start.lua)
    proc: str | None = None  # the processing list the attempt started from (start_job; requeue.lua)
    event_id: str | None = None  # stream id of the job's last event on the queue-wide stream (lib.lua emit)


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


class SubmitRequest(msgspec.Struct, forbid_unknown_fields=True):
    """What a producer hands us: through `tender-pool submit`, the library, or a raw JSON entry
    pushed onto the ready list by a producer that can only LPUSH."""

    kind: str
    user: str
    payload: dict[str, Any] = {}
    id: str | None = None
    after: list[str] = []
    priority: Priority = "bulk"


class BadInput(ValueError):
    """A submission that can never run: the CLI exits 2 with this message, the client raises it,
    and a raw producer's entry is dead-lettered with it."""


JOB_ID = re.compile(r"[A-Za-z0-9._:-]{1,200}")
# A run's jobs are ``<run id>/<n>`` (n from 1): ``/`` is in no plain job id (JOB_ID), so a run can
# never take, overwrite or collide with a job it did not create (CONTRACT "Runs").
MAX_RUN_ID = 180  # room for "/<n>" within the 200 characters of a job id
RUN_JOB_ID = re.compile(r"[A-Za-z0-9._:-]{1,180}/[1-9][0-9]{0,18}")
MAX_PAYLOAD_DEPTH = 64
MAX_PAYLOAD_BYTES = 1 << 20


def check_job_id(job_id: str, what: str = "job id") -> None:
    """CONTRACT.md: 1–200 characters of letters, digits and ``._:-`` (so never the ``~wake`` token,
    never a key separator that could break out of the hash tag)."""
    if not isinstance(job_id, str) or not JOB_ID.fullmatch(job_id):
        if isinstance(job_id, str) and "/" in job_id:
            raise BadInput(f"{what} {_shown(job_id)}: no '/' (ids with '/' are a run's jobs, <run id>/<n>); "
                           "1-200 characters of letters, digits and ._:-")
        raise BadInput(f"{what} {_shown(job_id)}: 1-200 characters of letters, digits and ._:-")


def run_job_id(run_id: str, n: int) -> str:
    """The id of a run's ``n``-th job (1-based, item order)."""
    return f"{run_id}/{n}"


def check_job_ref(job_id: str, what: str = "job id") -> None:
    """An id naming an existing job: a plain job id (``check_job_id``) or a run job's ``<run id>/<n>``
    (``--after`` may name either)."""
    if isinstance(job_id, str) and RUN_JOB_ID.fullmatch(job_id):
        return
    if isinstance(job_id, str) and "/" in job_id:
        raise BadInput(f"{what} {_shown(job_id)}: a job id, or a run's job <run id>/<n>")
    check_job_id(job_id, what)


def check_name(value: str, what: str) -> None:
    """Users and run item keys: 1–200 characters of UTF-8 without control characters or braces."""
    if not isinstance(value, str) or not 1 <= len(value) <= 200:
        raise BadInput(f"{what} {_shown(value)}: 1-200 characters")
    for c in value:
        # Cc: C0, DEL and C1 controls; Cs: lone surrogates (undecodable bytes); Zl/Zp: line breaks
        if c in "{}" or unicodedata.category(c) in ("Cc", "Cs", "Zl", "Zp"):
            raise BadInput(f"{what} {_shown(value)}: no braces, control characters or invalid UTF-8")


def check_payload(payload: Any) -> None:
    """A JSON object, at most MAX_PAYLOAD_DEPTH deep (a deeper one overflows the encoders' stacks)
    and MAX_PAYLOAD_BYTES encoded."""
    if not isinstance(payload, dict):
        raise BadInput("payload must be a JSON object")
    stack: list[tuple[Any, int]] = [(payload, 1)]
    while stack:
        v, depth = stack.pop()
        if depth > MAX_PAYLOAD_DEPTH:
            raise BadInput(f"payload is nested deeper than {MAX_PAYLOAD_DEPTH} levels")
        if isinstance(v, dict):
            for k, x in v.items():
                if isinstance(k, str) and any(0xD800 <= ord(c) <= 0xDFFF for c in k):
                    raise BadInput("payload has a key that is not valid UTF-8")
                stack.append((x, depth + 1))
        elif isinstance(v, list):
            stack.extend((x, depth + 1) for x in v)
        elif isinstance(v, str) and any(0xD800 <= ord(c) <= 0xDFFF for c in v):
            raise BadInput("payload has a string that is not valid UTF-8")
    if len(msgspec.json.encode(payload)) > MAX_PAYLOAD_BYTES:
        raise BadInput(f"payload is larger than {MAX_PAYLOAD_BYTES} bytes encoded")


def check_submit(req: "SubmitRequest") -> None:
    """Everything about a submission that can be judged without Redis."""
    if req.id is not None:
        check_job_id(req.id)
    check_name(req.user, "user")
    check_payload(req.payload)
    for dep in req.after:
        check_job_ref(dep, "--after id")
        if dep == req.id:
            raise BadInput(f"--after {dep}: a job cannot wait for itself")


def _shown(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


class HandlerInput(msgspec.Struct):
    """One JSON object on a command handler's stdin (CONTRACT.md, "Command handlers")."""

    id: str
    kind: str
    user: str
    payload: dict[str, Any]
    attempt: int


class HandlerFailure(msgspec.Struct):
    error: JobError


class Outcome(msgspec.Struct):
    """What the runner concluded about one attempt; the slot turns it into one settle call."""

    status: Literal["completed", "failed", "interrupted"]
    result: dict[str, Any] | None = None
    error: JobError | None = None
    final: bool = False  # the handler said so (exit 3): no retry whatever the kind
    ran: bool = True  # False for rejections before any process started: not a business try
    signals: list[str] = []  # signals the runner had to send (for logs and metrics)
    inline: str | None = None  # parse_markdown: the Markdown itself, kept in Redis beside the job


def rfc3339(ms: int | None) -> str | None:
    if ms is None:
        return None
    return _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.timezone.utc).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z"
    )


class JobView(msgspec.Struct):
    """`job --json`: exactly the contract's field set."""

    id: str
    kind: str
    user: str
    state: str
    priority: str
    payload: dict[str, Any]
    after: list[str]
    attempts: int
    tries: int
    interruptions: int
    created_at: str | None
    started_at: str | None
    finished_at: str | None
    worker: str | None
    error: JobError | None
    result: dict[str, Any] | None
    skipped_from: str | None = None  # skipped: the id of the completed job whose result it carries

    @classmethod
    def of(cls, rec: JobRecord) -> "JobView":
        return cls(
            id=rec.id,
            kind=rec.kind,
            user=rec.user,
            state=rec.state.value,
            priority=rec.priority,
            payload=rec.payload,
            after=rec.after,
            attempts=rec.attempts,
            tries=rec.tries,
            interruptions=rec.interruptions,
            created_at=rfc3339(rec.created_at),
            started_at=rfc3339(rec.started_at),
            finished_at=rfc3339(rec.finished_at),
            worker=rec.worker,
            error=rec.error,
            result=rec.result,
            skipped_from=rec.skipped_from,
        )


# --- observability: Redis values and status-socket frames ---------------------------------------


class BusyState(msgspec.Struct, forbid_unknown_fields=True):
    """``busy:<worker>`` in Redis: what a slot is running. Written by start.lua once the slot
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


class CountersView(msgspec.Struct):
    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    deferred: int = 0
    reclaimed: int = 0
    timed_out: int = 0
    killed: int = 0
    slot_restarts: int = 0


def add_counters(into: CountersView, delta: CountersView) -> None:
    for f in CountersView.__struct_fields__:
        setattr(into, f, getattr(into, f) + getattr(delta, f))


STATUS_PROTOCOL = 1
