"""The client's typed return values: msgspec Structs whose fields are exactly the contract's JSON
fields, so ``msgspec.json.encode(x)`` is what the CLI's ``--json`` prints.

``Job`` is ``JobView`` (``job --json``), the view of a ``JobRecord`` that leaves the pool: Redis keeps
times as integer ms (Redis ``TIME``), rendered as RFC 3339 UTC here, at the edge (``rfc3339``).

An ``Event`` carries only the fields of its type: fields that do not belong to it are
``msgspec.UNSET`` and left out of its JSON (a job event has ``job_id``, ``key``, ``job_state``,
``skipped_from`` (null but on ``job_skipped``); ``job_progress`` adds ``progress``, ``message``,
``chunk``, each possibly null; a snapshot adds the run's ``user``, ``kind``, ``created_at``,
``finished_at``, ``jobs`` and ``gap``).
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from tender_pool.store.records import JobError, JobRecord

RUN_STATES = ("pending", "running", "completed", "partial_success", "failed", "cancelled")
FINAL_RUN_STATES = frozenset({"completed", "partial_success", "failed", "cancelled"})
COUNT_FIELDS = ("queued", "waiting", "running", "completed", "failed", "cancelled", "skipped")
EVENT_TYPES = ("snapshot", "run_started", "job_started", "job_progress", "job_completed", "job_failed",
               "job_skipped", "job_cancelled", "run_finished")


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


Job = JobView


class Counts(msgspec.Struct):
    """A run's jobs by state; always adds up to ``total`` (``dead`` jobs count as ``failed``)."""

    total: int = 0
    queued: int = 0
    waiting: int = 0
    running: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    skipped: int = 0


class RunJob(msgspec.Struct):
    """One job of a run, in item order: its id (``<run id>/<n>``), the item's key, its state and
    error, and for a skipped job the id of the completed job whose result it carries."""

    id: str
    key: str
    state: str
    error: JobError | None = None
    skipped_from: str | None = None


class RunSummary(msgspec.Struct):
    """A run without its jobs: one row of ``runs list``."""

    id: str
    user: str
    kind: str
    state: str
    created_at: str | None
    finished_at: str | None
    counts: Counts

    @property
    def finished(self) -> bool:
        return self.state in FINAL_RUN_STATES


class Run(msgspec.Struct):
    """``runs show --json`` (and ``runs submit --json``)."""

    id: str
    user: str
    kind: str
    state: str
    created_at: str | None
    finished_at: str | None
    counts: Counts
    jobs: list[RunJob]

    @property
    def finished(self) -> bool:
        return self.state in FINAL_RUN_STATES


class Event(msgspec.Struct):
    """One event of a run's stream (or of the queue's ``events`` stream, where ``run_id``, ``state``
    and ``counts`` are null for plain jobs). ``id`` is the stream id to resume after."""

    id: str
    type: str
    run_id: str | None
    state: str | None
    counts: Counts | None
    job_id: str | UnsetType = UNSET
    key: str | None | UnsetType = UNSET
    job_state: str | UnsetType = UNSET
    skipped_from: str | None | UnsetType = UNSET
    progress: float | None | UnsetType = UNSET
    message: str | None | UnsetType = UNSET
    chunk: str | None | UnsetType = UNSET
    # queue-wide job events (``events``): enough of the job to write its row from the event alone
    attempts: int | UnsetType = UNSET
    tries: int | UnsetType = UNSET
    worker: str | None | UnsetType = UNSET
    error: JobError | None | UnsetType = UNSET
    started_at: str | None | UnsetType = UNSET
    # snapshot: the run as ``runs show --json`` has it, and whether events were lost to trimming;
    # job events: the job's user, kind and times (created_at, finished_at also with started_at above)
    user: str | UnsetType = UNSET
    kind: str | UnsetType = UNSET
    created_at: str | None | UnsetType = UNSET
    finished_at: str | None | UnsetType = UNSET
    jobs: list[RunJob] | UnsetType = UNSET
    gap: bool | UnsetType = UNSET

    @property
    def final(self) -> bool:
        """The run has ended (``run_finished``, or a snapshot of a finished run)."""
        return self.type == "run_finished" or (self.type == "snapshot" and self.state in FINAL_RUN_STATES)

    def to_dict(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)


def snapshot_event(run: Run, stream_id: str, gap: bool = False) -> Event:
    return Event(id=stream_id, type="snapshot", run_id=run.id, state=run.state, counts=run.counts,
                 user=run.user, kind=run.kind, created_at=run.created_at, finished_at=run.finished_at,
                 jobs=run.jobs, gap=gap)


def summary(run: Run) -> RunSummary:
    return RunSummary(run.id, run.user, run.kind, run.state, run.created_at, run.finished_at, run.counts)
