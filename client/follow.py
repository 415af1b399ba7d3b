"""Reading a run: its snapshot, and following its event stream — written once, without I/O, for the
sync and the asyncio client alike.

The logic is a generator of steps: it yields a ``Batch`` (commands to queue on one pipeline) and is
sent back that pipeline's replies, or yields an ``Event`` for the caller. ``drive`` runs it on a
``redis.Redis``, ``adrive`` on a ``redis.asyncio.Redis`` (queuing on a pipeline is synchronous in
both; only ``execute`` differs), so the two watchers cannot drift apart.

Why a watcher sees every event exactly once:
- The snapshot is one MULTI: the run hash, each job's state and the stream's last id are read at one
  instant, and every change after it is an event with a larger id (the Lua step that changes a
  state writes its event in the same step). The job list is read just before: it never changes
  after the run's creation.
- Following is ``XREAD`` after the last id delivered, so a reconnect with that id resumes exactly.
- Streams are trimmed (``MAXLEN ~``). A resume point older than what was trimmed
  (``trimmed_past``) cannot be resumed: a new snapshot with ``gap`` true is
  delivered instead, then events after it. The same check runs whenever a read comes back full
  (the watcher is lagging, so trimming may have overtaken it).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Generator, NamedTuple

from tender_pool.store.keys import Keys
from tender_pool.client import records
from tender_pool.client.errors import BadInput, NotFound
from tender_pool.client.models import FINAL_RUN_STATES, Event, Run, RunJob, snapshot_event

READ_COUNT = 200  # entries per XREAD; a full read triggers the trimming check
STREAM_ID = re.compile(r"\d{1,20}(-\d{1,20})?")


class Batch(NamedTuple):
    """Commands for one pipeline (a MULTI when ``transaction``); the step gets the list of replies,
    a failed command's reply being its exception (``execute(raise_on_error=False)``)."""

    transaction: bool
    queue: Callable[[Any], None]


Steps = Generator["Batch | Event", Any, Any]


def drive(r: Any, steps: Steps):
    """Run ``steps`` on a sync client: a generator of the Events it yields; its return value is the
    ``StopIteration`` value (``yield from drive(...)`` gets it)."""
    reply = None
    while True:
        try:
            step = steps.send(reply)
        except StopIteration as stop:
            return stop.value
        if isinstance(step, Event):
            reply = None
            yield step
        else:
            p = r.pipeline(transaction=step.transaction)
            step.queue(p)
            reply = p.execute(raise_on_error=False)


def complete(r: Any, steps: Steps) -> Any:
    """Run steps that yield no Event (a snapshot) to their return value."""
    gen = drive(r, steps)
    while True:
        try:
            next(gen)
        except StopIteration as stop:
            return stop.value


async def adrive(r: Any, steps: Steps):
    """``drive`` on a ``redis.asyncio`` client: an async generator of the Events."""
    reply = None
    while True:
        try:
            step = steps.send(reply)
        except StopIteration:
            return
        if isinstance(step, Event):
            reply = None
            yield step
        else:
            p = r.pipeline(transaction=step.transaction)
            step.queue(p)
            reply = await p.execute(raise_on_error=False)


def _ok(v: Any) -> Any:
    if isinstance(v, Exception):
        raise v
    return v


def _id(v: bytes | str) -> tuple[int, int]:
    ms, _, seq = (v.decode() if isinstance(v, bytes) else v).partition("-")
    return int(ms), int(seq or 0)


def snapshot(k: Keys, run_id: str) -> Steps:
    """Steps returning ``(Run, last stream id)``; raises NotFound."""
    ids = _ok((yield Batch(False, lambda p: p.lrange(k.runjobs(run_id), 0, -1)))[0])
    job_ids = [records.s(j) or "" for j in ids]

    def queue(p: Any) -> None:
        p.hgetall(k.run(run_id))
        for j in job_ids:
            p.hmget(k.job(j), "key", "state", "error", "skipped_from")
        p.xrevrange(k.run_events(run_id), "+", "-", count=1)

    reply = yield Batch(True, queue)
    h = _ok(reply[0])
    if not h or b"staging" in h:  # unsealed: its submission is still under way (or died: it expires)
        raise NotFound(f"no such run: {run_id}")
    h = records.as_dict(h)
    jobs = []
    for j, row in zip(job_ids, reply[1:-1]):
        key, state, err, src = _ok(row)
        jobs.append(RunJob(j, records.s(key) or "", records.s(state) or "expired", records.job_error(err),
                           records.s(src) or None))
    last = _ok(reply[-1])
    summary = records.run_summary(run_id, h)
    run = Run(summary.id, summary.user, summary.kind, summary.state, summary.created_at, summary.finished_at,
              summary.counts, jobs)
    return run, (records.s(last[0][0]) if last else "0-0")


def _parse_since(since: str) -> str:
    if not isinstance(since, str) or not STREAM_ID.fullmatch(since):
        raise BadInput(f"since {since!r}: a stream id like 1700000000000-0")
    return since if "-" in since else since + "-0"


def trimmed_past(info: dict, since: str) -> bool:
    """Were events after ``since`` trimmed off this stream (``XINFO STREAM``)? Trimming (unlike
    XDEL) leaves ``max-deleted-entry-id`` alone, so: some entries were removed (``entries-added``
    > ``length``) and ``since`` is older than the first entry left. Resuming exactly at the last
    entry trimmed is taken for a gap too: one snapshot more, never an event lost."""
    if int(info.get("entries-added") or 0) <= int(info.get("length") or 0):
        return False
    first = info.get("first-entry")
    if not first:
        return _id(info.get("last-generated-id") or b"0-0") > _id(since)
    return _id(first[0]) > _id(since)


def _trimmed_past(k: Keys, run_id: str, since: str) -> Steps:
    """Steps returning (gap, run state, last id): whether events after ``since`` were trimmed."""

    def queue(p: Any) -> None:
        p.hget(k.run(run_id), "state")
        p.xinfo_stream(k.run_events(run_id))

    state, info = yield Batch(True, queue)
    state = records.s(_ok(state))
    if state is None:
        raise NotFound(f"no such run: {run_id}")
    if isinstance(info, Exception):  # no stream (expired, or never written): nothing to resume
        return True, state, "0-0"
    return trimmed_past(info, since), state, records.s(info.get("last-generated-id") or b"0-0")


def follow(k: Keys, run_id: str, since: str | None = None, block_ms: int = 2000) -> Steps:
    """The events of one run: a snapshot first (unless resuming with ``since``), then every event
    after it, ending after ``run_finished`` (or after the snapshot of a finished run)."""
    if since is None:
        run, last = yield from snapshot(k, run_id)
        ev = snapshot_event(run, last)
        yield ev
        if ev.final:
            return
    else:
        last = _parse_since(since)
        gap, state, newest = yield from _trimmed_past(k, run_id, last)
        if gap:
            last = yield from _resnapshot(k, run_id)
            if last is None:
                return
        elif state in FINAL_RUN_STATES and _id(newest) <= _id(last):
            return  # resumed after the end: nothing more will come
    stream = k.run_events(run_id)
    while True:
        reply = yield Batch(False, lambda p, last=last: p.xread({stream: last}, count=READ_COUNT, block=block_ms))
        entries = _entries(_ok(reply[0]))
        if not entries:
            state = records.s(_ok((yield Batch(False, lambda p: p.hget(k.run(run_id), "state")))[0]))
            if state is None:
                raise NotFound(f"run {run_id} expired while watched")
            continue
        if len(entries) >= READ_COUNT:
            gap, _, _ = yield from _trimmed_past(k, run_id, last)
            if gap:
                last = yield from _resnapshot(k, run_id)
                if last is None:
                    return
                continue
        for sid, fields in entries:
            last = records.s(sid) or last
            ev = records.event(sid, fields)
            if ev is None:
                continue
            yield ev
            if ev.type == "run_finished":
                return


def _resnapshot(k: Keys, run_id: str) -> Steps:
    """Deliver a ``gap`` snapshot; return the id to go on after, or None when the run has ended."""
    run, last = yield from snapshot(k, run_id)
    ev = snapshot_event(run, last, gap=True)
    yield ev
    return None if ev.final else last


def _entries(reply: Any) -> list[tuple[bytes, dict[bytes, bytes]]]:
    """XREAD's reply (RESP2 list or RESP3 dict) for our one stream."""
    if not reply:
        return []
    if isinstance(reply, dict):
        for v in reply.values():
            return list(v[0] if v and isinstance(v[0], list) else v)
        return []
    return list(reply[0][1])

