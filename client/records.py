"""Redis hashes → typed values: a job hash → ``records.JobRecord``, a run hash → ``Counts`` and
``RunSummary``, a stream entry → ``Event``.

Replies are bytes (clients are built with ``decode_responses=False``) and are decoded here, so a
producer's binary junk in a hash becomes ``Undecodable``, never a crash of the caller.
"""

from __future__ import annotations

from typing import Any

import msgspec

from tender_pool.store.records import JobError, decode_job  # noqa: F401  (decode_job: re-exported)

from tender_pool.client.models import COUNT_FIELDS, Counts, Event, RunSummary, rfc3339


def s(v: bytes | str | int | None) -> str | None:
    """A reply value as text (Lua integers included); None stays None."""
    if v is None:
        return None
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def as_dict(reply: Any) -> dict[bytes, bytes]:
    """HGETALL's reply under RESP2 (dict) or a raw flat list."""
    if isinstance(reply, dict):
        return reply
    return dict(zip(reply[::2], reply[1::2]))


def job_error(raw: bytes | None) -> JobError | None:
    if not raw:
        return None
    try:
        return msgspec.json.decode(raw, type=JobError)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return JobError("undecodable", s(raw) or "")


def _int(v: bytes | None) -> int:
    try:
        return int(v) if v else 0
    except ValueError:
        return 0


def _ms(v: bytes | None) -> int | None:
    try:
        return int(v) if v else None
    except ValueError:
        return None


def counts(h: dict[bytes, bytes]) -> Counts:
    """The run hash's ``total`` and one field per count."""
    return Counts(total=_int(h.get(b"total")), **{f: _int(h.get(f.encode())) for f in COUNT_FIELDS})


def run_summary(run_id: str, h: dict[bytes, bytes]) -> RunSummary:
    return RunSummary(
        id=run_id,
        user=s(h.get(b"user")) or "",
        kind=s(h.get(b"kind")) or "",
        state=s(h.get(b"state")) or "pending",
        created_at=rfc3339(_ms(h.get(b"created_at"))),
        finished_at=rfc3339(_ms(h.get(b"finished_at"))),
        counts=counts(h),
    )


_EVENT_FIELDS = frozenset(Event.__struct_fields__)
_JOB_ONLY = ("job_id", "key", "job_state", "skipped_from")
_PROGRESS_ONLY = ("progress", "message", "chunk")
_SNAPSHOT_ONLY = frozenset({"jobs", "gap"})
_TIMES = ("created_at", "started_at", "finished_at")  # ms in the stream, RFC 3339 in an Event


def event(stream_id: bytes | str, fields: dict[bytes, bytes]) -> Event | None:
    """A stream entry (one field ``e``: the JSON body) → Event with its stream id; None for an entry
    that is not an event (skipped, never fatal to a watcher)."""
    raw = fields.get(b"e")
    if raw is None:
        return None
    try:
        body = msgspec.json.decode(raw)
        if not isinstance(body, dict):
            return None
        etype = body.get("type")
        body = {k: v for k, v in body.items() if k in _EVENT_FIELDS and k not in _SNAPSHOT_ONLY}
        body["id"] = s(stream_id)
        for k in _TIMES:
            if isinstance(body.get(k), int):
                body[k] = rfc3339(body[k])
        for k in ("run_id", "state", "counts"):
            body.setdefault(k, None)
        if not (isinstance(etype, str) and etype.startswith("job_")):
            for k in _JOB_ONLY:  # run_started / run_finished: written with null job fields
                body.pop(k, None)
        else:
            body.setdefault("skipped_from", None)  # events written before it was a field
        if etype == "job_progress":
            for k in _PROGRESS_ONLY:
                body.setdefault(k, None)
        else:
            for k in _PROGRESS_ONLY:
                body.pop(k, None)
        return msgspec.convert(body, Event)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
