"""Keeping the platform's own tables in step with the queue-wide event stream (``events``): consumer
groups (register, unregister, their lag), and the consume loop behind ``Client.consume`` /
``Client.aconsume``.

Why a consumer built on this misses no transition:
- The stream is trimmed by the housekeeper only (``supervisor/stream_trim.py``), and only below the
  oldest entry some group has not acknowledged, or not yet been delivered. A group that falls more
  than ``[events] max_backlog`` entries behind loses the oldest ones anyway (memory is bounded); the
  housekeeper then marks the group with a gap (``events:gap:<group>``, a ``Gap``). The loop checks
  that mark when it starts and every ``GAP_CHECK_S``, and answers it with ``resync(jobs)``: a
  snapshot of every job whose last event (``event_id``, kept in the job's hash) is at or after the
  first entry the group lost. Then it clears the mark (only if no newer drop replaced it).
- Entries are acknowledged after ``apply`` returns: a consumer killed between the two gets them
  again (from its own pending list when it comes back under the same name, or through
  ``XAUTOCLAIM`` by another consumer once they are ``claim_idle`` seconds old): at least once.
- Order: the stream id is a version. ``apply`` writes an event only if its id is newer than the
  one stored with the row (the README shows the SQL); a re-delivered or claimed-late event, or a
  snapshot older than the row, then changes nothing. That needs no coordination between consumers.
- A poison entry (``apply`` fails on it every time) does not stop the rest: after a failed batch
  the entries are applied one by one; one that failed ``park_after`` times is moved to
  ``events:parked:<group>`` (a ``Parked``) and acknowledged, and the log says so.

The loop is written once as a generator of steps (``follow.Batch`` for Redis, ``Apply`` and ``Resync``
for the caller's functions, ``Sleep``), driven by ``run`` (sync) or ``arun`` (asyncio), as ``follow``
drives a run's watcher, so the two cannot drift apart.
"""

from __future__ import annotations

import inspect
import logging
import time
from typing import Any, Callable, Generator, NamedTuple

import msgspec
import redis

from tender_pool.store.keys import Keys
from tender_pool.client.models import JobView

from tender_pool.client import records
from tender_pool.client.errors import BadInput, NotFound
from tender_pool.client.follow import Batch
from tender_pool.client.models import Event, Job

log = logging.getLogger("tender_pool.client.consumer")

GAP_CHECK_S = 5.0  # how often a running consumer looks for a gap mark
RESYNC_PAGE = 500  # job hashes read per round trip during a resync
FAIL_BACKOFF_S = (0.1, 5.0)  # after a failed apply: first and longest pause before trying again


class Gap(msgspec.Struct):
    """``events:gap:<group>``: the group lost entries older than ``first_kept`` to the cap; ``since`` is
    the first entry it still needed then (the resync covers jobs changed at or after it)."""

    since: str
    first_kept: str
    dropped: int
    at: int  # ms


class Parked(msgspec.Struct):
    """One entry of ``events:parked:<group>``: an entry ``apply`` failed on ``tries`` times."""

    id: str
    entry: str  # the entry's JSON body, as written
    error: str
    tries: int
    at: int  # ms


class GroupInfo(msgspec.Struct):
    """A consumer group's lag, for ``status``, ``events groups`` and the metrics."""

    group: str
    consumers: int
    lag: int  # entries not yet delivered to the group
    pending: int  # delivered, not acknowledged
    oldest_pending_age_s: float | None
    gap: bool
    parked: int
    last_delivered_id: str


class JobSnapshot(msgspec.Struct):
    """One job as a resync hands it over: ``job --json``'s fields, its run and item key (as its events
    carry them), and ``event_id``, the stream id of the job's last event (order it against events
    exactly as an event's ``id``; None for a job last changed before event ids were kept)."""

    job: Job
    run_id: str | None
    key: str | None
    event_id: str | None


class Apply(NamedTuple):
    events: list[Event]


class Resync(NamedTuple):
    jobs: list[JobSnapshot]


class Sleep(NamedTuple):
    seconds: float


Steps = Generator["Batch | Apply | Resync | Sleep", Any, Any]


def stream_id(v: str | bytes) -> tuple[int, int]:
    text = v.decode() if isinstance(v, bytes) else v
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


def _check_group(group: str) -> None:
    if not group or len(group) > 200 or any(c in group for c in "{}\r\n\t ") or not group.isprintable():
        raise BadInput(f"bad consumer group name {group!r}: 1-200 printable characters, no spaces or braces")


# --- groups ------------------------------------------------------------------------------------------

def register(r: Any, k: Keys, group: str) -> bool:
    """``XGROUP CREATE events <group> 0 MKSTREAM``: the group starts at the stream's first entry.
    False if it existed already."""
    _check_group(group)
    try:
        r.xgroup_create(k.events, group, id="0", mkstream=True)
    except redis.ResponseError as e:
        if "BUSYGROUP" in str(e):
            return False
        raise
    return True


def unregister(r: Any, k: Keys, group: str) -> bool:
    """``XGROUP DESTROY`` and the group's gap and parked keys. False if there was no such group."""
    _check_group(group)
    try:
        gone = r.xgroup_destroy(k.events, group)
    except redis.ResponseError as e:
        if "no such key" in str(e).lower():
            gone = 0
        else:
            raise
    r.delete(k.events_gap(group), k.events_parked(group))
    return bool(gone)


def groups(r: Any, k: Keys, now_ms: int | None = None) -> list[GroupInfo]:
    """Every consumer group of the queue-wide stream with its lag: three round trips whatever the
    number of groups (``XINFO GROUPS``; then each group's ``XPENDING`` summary, gap mark and parked
    count; the stream's length for groups whose lag Redis cannot tell)."""
    try:
        raw = r.xinfo_groups(k.events)
    except redis.ResponseError as e:
        if "no such key" in str(e).lower():
            return []
        raise
    if not raw:
        return []
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    p = r.pipeline(transaction=False)
    names = [records.s(g["name"]) or "" for g in raw]
    for name in names:
        p.xpending(k.events, name)
        p.exists(k.events_gap(name))
        p.llen(k.events_parked(name))
    p.xlen(k.events)
    replies = p.execute()
    xlen = replies[-1]
    out = []
    for i, (g, name) in enumerate(zip(raw, names)):
        pend, gap, parked = replies[3 * i: 3 * i + 3]
        oldest = pend.get("min") if pend else None
        age = max(0.0, (now_ms - stream_id(oldest)[0]) / 1000) if oldest else None
        lag = g.get("lag")
        if lag is None:  # Redis cannot count it (entries deleted inside the range): at most the length
            lag = xlen
        out.append(GroupInfo(group=name, consumers=int(g.get("consumers", 0)), lag=int(lag),
                             pending=int(pend.get("pending", 0)) if pend else 0, oldest_pending_age_s=age,
                             gap=bool(gap), parked=int(parked),
                             last_delivered_id=records.s(g.get("last-delivered-id")) or "0-0"))
    return out


# --- resync ------------------------------------------------------------------------------------------

def snapshot(h: dict[bytes, bytes]) -> JobSnapshot | None:
    """A job hash → its snapshot; None for one that does not decode (a dead letter's leftovers)."""
    try:
        rec = records.decode_job(h)
    except Exception:
        return None
    return JobSnapshot(job=JobView.of(rec), run_id=rec.run, key=rec.key, event_id=records.s(h.get(b"event_id")))


def _resync(k: Keys, since: str) -> Steps:
    """Every job hash whose ``event_id`` is at or after ``since`` (or has none: written before event
    ids were kept), in pages of ``RESYNC_PAGE``, handed to ``resync``. A SCAN of the job hashes:
    the whole retention, read once per gap — the rare path, never the hot one. A run job without an
    event id whose run is still being written (``staging``: an unsealed run, nothing of it queued or
    announced) is left out: it may never exist for the platform."""
    floor = stream_id(since)
    cursor = 0
    while True:
        scanned = yield Batch(False, lambda p, c=cursor: p.scan(c, match=k.job_pattern, count=RESYNC_PAGE))
        cursor, names = _ok(scanned[0])
        if names:
            hashes = yield Batch(False, lambda p, ns=names: [p.hgetall(n) for n in ns])
            keep = []
            for h in hashes:
                if isinstance(h, Exception) or not h:
                    continue
                ev = h.get(b"event_id")
                if ev and stream_id(ev) < floor:
                    continue
                keep.append(h)
            runs = sorted({records.s(h[b"run"]) for h in keep if not h.get(b"event_id") and h.get(b"run")})
            staging: set[str] = set()
            if runs:
                flags = yield Batch(False, lambda p, rs=runs: [p.hget(k.run(r), "staging") for r in rs])
                staging = {r for r, f in zip(runs, flags) if f and not isinstance(f, Exception)}
            jobs = [snap for h in keep
                    if not (not h.get(b"event_id") and records.s(h.get(b"run")) in staging)
                    and (snap := snapshot(h)) is not None]
            if jobs:
                yield Resync(jobs)
        if int(cursor) == 0:
            return


def _ok(v: Any) -> Any:
    if isinstance(v, Exception):
        raise v
    return v


# --- the loop ----------------------------------------------------------------------------------------

class Consumer:
    """The state of one consume loop; ``steps()`` is the loop. ``stop`` (a callable) ends it between
    two reads (at most ``block_ms`` after it turns true)."""

    def __init__(self, k: Keys, group: str, consumer: str, *, batch: int, block_ms: int, claim_idle: float,
                 park_after: int, resync: bool, stop: Callable[[], bool] | None = None):
        _check_group(group)
        _check_group(consumer)
        if not 1 <= batch <= 10_000:
            raise BadInput(f"batch {batch}: 1 to 10000 entries")
        if not 0 <= block_ms <= 3_600_000:
            raise BadInput(f"block_ms {block_ms}: 0 to 3600000")
        if not 0 < claim_idle < 86_400:
            raise BadInput(f"claim_idle {claim_idle}: a positive number of seconds under a day")
        if park_after < 1:
            raise BadInput(f"park_after {park_after}: at least 1")
        self.k, self.group, self.consumer = k, group, consumer
        self.batch, self.block_ms, self.claim_idle_ms = batch, block_ms, int(claim_idle * 1000)
        self.park_after, self.has_resync = park_after, resync
        self.stop = stop or (lambda: False)
        self.failures: dict[str, int] = {}
        self.own_pending = True  # read our own pending entries first (a restart under the same name)
        self.pending_from = "0"
        self.backoff = 0.0
        self.next_gap_check = 0.0
        self.next_claim = 0.0
        self.applied = 0  # events applied and acknowledged (tests, examples)
        self.parked = 0

    def steps(self) -> Steps:
        k, g = self.k, self.group
        yield Batch(False, lambda p: p.xgroup_create(k.events, g, id="0", mkstream=True))  # BUSYGROUP: fine
        while not self.stop():
            now = time.monotonic()
            if now >= self.next_gap_check:
                self.next_gap_check = now + GAP_CHECK_S
                yield from self._check_gap()
            if now >= self.next_claim:
                self.next_claim = now + max(0.5, self.claim_idle_ms / 2000)
                got = yield Batch(False, lambda p: p.xautoclaim(k.events, g, self.consumer, self.claim_idle_ms,
                                                                "0-0", count=self.batch))
                claimed = _ok(got[0])
                entries = claimed[1] if claimed else []
                if entries:
                    yield from self._handle(entries)
            if self.own_pending:  # our pending entries, oldest first, after pending_from
                got = yield Batch(False, lambda p: p.xreadgroup(g, self.consumer, {k.events: self.pending_from},
                                                                count=self.batch))
            else:
                got = yield Batch(False, lambda p: p.xreadgroup(g, self.consumer, {k.events: ">"},
                                                                count=self.batch, block=self.block_ms or None))
            entries = _entries(_ok(got[0]))
            if self.own_pending:
                if not entries:
                    self.own_pending, self.pending_from = False, "0"
                    continue
                self.pending_from = records.s(entries[-1][0]) or "0"
            if entries:
                yield from self._handle(entries)

    def _check_gap(self) -> Steps:
        k, g = self.k, self.group
        got = yield Batch(False, lambda p: p.get(k.events_gap(g)))
        raw = _ok(got[0])
        if not raw:
            return
        gap = msgspec.json.decode(raw, type=Gap)
        if not self.has_resync:
            log.error("events_gap_without_resync group=%s since=%s dropped=%d: pass resync= to recover",
                      g, gap.since, gap.dropped)
            return
        log.warning("events_gap_resync group=%s since=%s dropped=%d", g, gap.since, gap.dropped)
        yield from _resync(k, gap.since)
        # clear the mark only if no newer drop replaced it meanwhile
        yield Batch(True, lambda p: _delete_if(p, k.events_gap(g), raw))

    def _handle(self, entries: list[tuple[bytes, dict]]) -> Steps:
        events, ids, bad = [], [], []
        for sid, fields in entries:
            if not fields:  # deleted from the stream after delivery: nothing to apply
                bad.append((sid, None))
                continue
            ev = records.event(sid, fields)
            if ev is None:
                bad.append((sid, fields))
            else:
                events.append(ev)
                ids.append(sid)
        for sid, fields in bad:  # an entry that is not an event: park it at once, never retry
            if fields is not None:
                yield from self._park(sid, fields, "not an event", 1)
            else:
                yield Batch(False, lambda p, s=sid: p.xack(self.k.events, self.group, s))
        if not events:
            return
        err = yield Apply(events)
        if err is None:
            yield from self._ack(ids)
            return
        log.warning("events_apply_failed group=%s consumer=%s entries=%d error=%r", self.group, self.consumer,
                    len(events), err)
        # one by one: the entries that apply go on, the failing one is retried (and parked in the end)
        raw, ok, failing = dict(entries), [], 0
        for ev, sid in zip(events, ids):
            e = (yield Apply([ev])) if len(events) > 1 else err
            if e is None:
                ok.append(sid)
                continue
            tries = self.failures[ev.id] = self.failures.get(ev.id, 0) + 1
            if tries >= self.park_after:
                yield from self._park(sid, raw[sid], repr(e), tries)
            else:
                failing += 1
        yield from self._ack(ok)
        if failing:
            self.own_pending, self.pending_from = True, "0"  # re-read what failed, after a pause
            self.backoff = min(FAIL_BACKOFF_S[1], max(FAIL_BACKOFF_S[0], self.backoff * 2))
            yield Sleep(self.backoff)

    def _ack(self, ids: list) -> Steps:
        if not ids:
            return
        yield Batch(False, lambda p: p.xack(self.k.events, self.group, *ids))
        self.applied += len(ids)
        self.backoff = 0.0
        for sid in ids:
            self.failures.pop(records.s(sid) or "", None)

    def _park(self, sid: bytes, fields: dict, error: str, tries: int) -> Steps:
        k, g = self.k, self.group
        body = fields.get(b"e", b"")
        parked = Parked(id=records.s(sid) or "", entry=body.decode("utf-8", "replace"), error=error[:2000],
                        tries=tries, at=int(time.time() * 1000))
        yield Batch(True, lambda p: (p.rpush(k.events_parked(g), msgspec.json.encode(parked)),
                                     p.xack(k.events, g, sid)))
        self.failures.pop(parked.id, None)
        self.parked += 1
        log.error("events_entry_parked group=%s id=%s tries=%d error=%s", g, parked.id, tries, error)


def _delete_if(p: Any, key: str, value: bytes) -> None:
    p.eval("if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
           1, key, value)


def _entries(reply: Any) -> list[tuple[bytes, dict]]:
    if not reply:
        return []
    if isinstance(reply, dict):  # RESP3
        return [e for entries in reply.values() for e in (entries[0] if entries and isinstance(entries[0], list) else entries)]
    return [e for _stream, entries in reply for e in entries]


# --- drivers -----------------------------------------------------------------------------------------

def _batch(r: Any, step: Batch) -> list:
    p = r.pipeline(transaction=step.transaction)
    step.queue(p)
    return p


def run(r: Any, c: Consumer, apply: Callable[[list[Event]], Any],
        resync: Callable[[list[JobSnapshot]], Any] | None) -> None:
    steps = c.steps()
    reply: Any = None
    while True:
        try:
            step = steps.send(reply)
        except StopIteration:
            return
        reply = None
        if isinstance(step, Batch):
            reply = _execute(_batch(r, step))
        elif isinstance(step, Apply):
            try:
                apply(step.events)
            except Exception as e:  # the caller's code: report it to the loop, which retries / parks
                reply = e
        elif isinstance(step, Resync):
            resync(step.jobs)  # type: ignore[misc]  # a failing resync ends the loop: the mark stays
        else:
            time.sleep(step.seconds)


async def arun(r: Any, c: Consumer, apply: Callable[[list[Event]], Any],
               resync: Callable[[list[JobSnapshot]], Any] | None) -> None:
    import asyncio

    steps = c.steps()
    reply: Any = None
    while True:
        try:
            step = steps.send(reply)
        except StopIteration:
            return
        reply = None
        if isinstance(step, Batch):
            p = _batch(r, step)
            reply = await p.execute(raise_on_error=False)
            reply = _busygroup_ok(reply)
        elif isinstance(step, Apply):
            try:
                out = apply(step.events)
                if inspect.isawaitable(out):
                    await out
            except Exception as e:
                reply = e
        elif isinstance(step, Resync):
            out = resync(step.jobs)  # type: ignore[misc]
            if inspect.isawaitable(out):
                await out
        else:
            await asyncio.sleep(step.seconds)


def _execute(p: Any) -> list:
    return _busygroup_ok(p.execute(raise_on_error=False))


def _busygroup_ok(replies: list) -> list:
    """The loop creates its group on start; an existing one answers BUSYGROUP: not an error."""
    out = []
    for x in replies:
        if isinstance(x, redis.ResponseError) and "BUSYGROUP" in str(x):
            x = True
        elif isinstance(x, (redis.ConnectionError, redis.TimeoutError)):
            raise x
        out.append(x)
    return out


__all__ = ["Consumer", "GroupInfo", "Gap", "Parked", "JobSnapshot", "register", "unregister", "groups",
           "run", "arun", "stream_id", "NotFound"]
