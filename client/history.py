"""Job history: finished jobs, filtered and paginated, newest first — ``Client.history``, behind
``tender-pool history`` and any admin page.

It reads only Redis, so history survives daemon restarts and costs no process memory. Every
terminal path goes through lib/terminal.lua's ``on_terminal``, which in the same atomic step writes the job id
with its finish ms to ``finished`` and to three indexes (``HistoryKeys``): ``finished:state:<state>``,
``finished:user:<user>``, ``finished:kind:<kind>``, which keep a page's cost flat as the retained
history grows. The job hashes expire after ``pool.result_retention``; the housekeeper keeps
``finished`` and the indexes to the same horizon (``store.history_index``).

How a page is answered (``query``):

- status (one or more states), user or kind alone, with or without end-time bounds (or no filter at
  all: ``finished``): a range read of that index (of the states' indexes, merged), ``total`` by
  ZCOUNT — a few round trips, whatever the history's size;
- two or more of them: their intersection, computed by Redis (ZINTER, read-only: the smallest
  index's size × the filters), then the bounds and the page;
- ``file`` or ``started_*``, which only the job hash tells: a walk of the hashes of the smallest
  candidate set above, ``BATCH`` at a time in pipelines; ``total`` counts every match, so it costs
  the candidates.

An index page's hashes are read and checked against the filter; if one disagrees (a job a run retry
reopened and has not ended again: run_retry.lua leaves it in the indexes until it does) the page is
answered by the walk, which is exact. ``total`` leaves out the entries whose hash has expired while
the sweep has not trimmed them yet (the oldest: hashes expire in finish order), as the walk does.

Bounds: ``*_after`` is inclusive, ``*_before`` exclusive; times are integer ms since the epoch (Redis
TIME, like everything stored).
"""

from __future__ import annotations

import datetime as _dt
import heapq
import itertools
import math
from typing import Callable, Iterator

import msgspec
import redis

from tender_pool.store.history_index import TERMINAL, HistoryKeys
from tender_pool.store.keys import Keys
from tender_pool.store.records import JobRecord

from tender_pool.client.errors import BadInput, Undecodable
from tender_pool.client.models import JobView
from tender_pool.client.records import decode_job

BATCH = 500
MAX_PAGE_SIZE = 1000


class HistoryFilter(msgspec.Struct, forbid_unknown_fields=True):
    status: list[str] = []  # job states (completed, failed, cancelled, skipped, dead); empty = any
    user: str | None = None
    kind: str | None = None
    file: str | None = None  # case-insensitive substring of payload.file
    job_id: str | None = None
    started_after: int | None = None
    started_before: int | None = None
    ended_after: int | None = None
    ended_before: int | None = None

    def __post_init__(self) -> None:
        """Refuse what can match nothing by mistake (``BadInput``; the CLI's exit 2): a state that
        is not a finished one (``running`` would silently list nothing), a time that is not a
        finite number (``inf`` reached Redis as a valid bound, or overflowed in ``parse_time``)."""
        for s in self.status:
            if s not in TERMINAL:
                raise BadInput(f"status {s!r}: not a finished state (one of {', '.join(sorted(TERMINAL))})")
        for name in ("started_after", "started_before", "ended_after", "ended_before"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)):
                raise BadInput(f"{name} {v!r}: not a finite time (ms since the epoch)")

    def matches(self, rec: JobRecord) -> bool:
        if self.status and rec.state.value not in self.status:
            return False
        if self.user is not None and rec.user != self.user:
            return False
        if self.kind is not None and rec.kind != self.kind:
            return False
        if self.file is not None:
            f = rec.payload.get("file") if isinstance(rec.payload, dict) else None
            if not isinstance(f, str) or self.file.lower() not in f.lower():
                return False
        if self.started_after is not None and (rec.started_at is None or rec.started_at < self.started_after):
            return False
        if self.started_before is not None and (rec.started_at is None or rec.started_at >= self.started_before):
            return False
        return True

    def indexes(self, hk: HistoryKeys) -> list[list[str]]:
        """Each filter an index answers, as the index keys whose union it is."""
        out = []
        if self.status:
            out.append([hk.state(s) for s in dict.fromkeys(self.status)])
        if self.user is not None:
            out.append([hk.user(self.user)])
        if self.kind is not None:
            out.append([hk.kind(self.kind)])
        return out

    @property
    def hash_only(self) -> bool:
        """A filter no index answers: only the job hash tells."""
        return self.file is not None or self.started_after is not None or self.started_before is not None


class HistoryPage(msgspec.Struct):
    page: int
    page_size: int
    total: int
    items: list[JobView]


class _Window(msgspec.Struct, frozen=True):
    lo: str  # ZRANGEBYSCORE bounds: ended_after inclusive, ended_before exclusive
    hi: str
    after: int | None
    before: int | None

    def holds(self, score: float) -> bool:
        return (self.after is None or score >= self.after) and (self.before is None or score < self.before)


Row = tuple[bytes, float]  # (job id, finish ms)


def query(r: redis.Redis, keys: Keys, flt: HistoryFilter, page: int = 1, page_size: int = 20) -> HistoryPage:
    """One page (1-based) of finished jobs matching ``flt``, newest finish first. A page below 1 or
    a page size outside 1..``MAX_PAGE_SIZE`` is ``BadInput`` (as the CLI refuses them), not
    silently another page."""
    if isinstance(page, bool) or not isinstance(page, int) or page < 1:
        raise BadInput(f"page {page!r}: a whole number from 1")
    if isinstance(page_size, bool) or not isinstance(page_size, int) or not 1 <= page_size <= MAX_PAGE_SIZE:
        raise BadInput(f"page_size {page_size!r}: a whole number from 1 to {MAX_PAGE_SIZE}")
    lo_idx = (page - 1) * page_size
    w = _Window(str(flt.ended_after) if flt.ended_after is not None else "-inf",
                f"({flt.ended_before}" if flt.ended_before is not None else "+inf", flt.ended_after, flt.ended_before)
    if flt.job_id is not None:
        items, total = [], 0
        score = r.zscore(keys.finished, flt.job_id)
        if score is not None and w.holds(score):
            items, total = _walk(r, keys, flt, iter([[flt.job_id.encode()]]), lo_idx, page_size)
        return HistoryPage(page, page_size, total, items)
    dims = flt.indexes(HistoryKeys(keys))
    if len(dims) >= 2:
        if not flt.hash_only and w.after is None and w.before is None:
            got = _intersection_page(r, keys, flt, dims, lo_idx, page_size)
            if got is not None:
                return HistoryPage(page, page_size, got[1], got[0])
        # two or more indexed filters: their intersection, computed by Redis (ZINTER: the smallest
        # index's size × the number of filters), then the window, then the page (or the walk)
        rows = _intersection(r, dims, w)
        if not flt.hash_only:
            got = _page_of_rows(r, keys, flt, rows, lo_idx, page_size)
            if got is not None:
                return HistoryPage(page, page_size, got[1], got[0])
        items, total = _walk(r, keys, flt, _batches(iter(rows)), lo_idx, page_size)
        return HistoryPage(page, page_size, total, items)
    source = dims[0] if dims else [keys.finished]
    if not flt.hash_only:
        got = _from_index(r, keys, flt, source, w, lo_idx, page_size)
        if got is not None:
            return HistoryPage(page, page_size, got[1], got[0])
    items, total = _walk(r, keys, flt, _batches(_rows_desc(r, source, w)), lo_idx, page_size)
    return HistoryPage(page, page_size, total, items)


def _walk(r: redis.Redis, keys: Keys, flt: HistoryFilter, batches: Iterator[list[bytes]], lo_idx: int,
          page_size: int) -> tuple[list[JobView], int]:
    """Every candidate's hash, checked (the exact answer): a hash gone (expired, the sweep not there
    yet), undecodable or not finished is no match."""
    items: list[JobView] = []
    total = 0
    for ids in batches:
        p = r.pipeline(transaction=False)
        for jid in ids:
            p.hgetall(keys.job(jid.decode("utf-8", "replace")))
        for h in p.execute():
            rec = _finished_record(h, flt)
            if rec is None:
                continue
            if lo_idx <= total < lo_idx + page_size:
                items.append(JobView.of(rec))
            total += 1
    return items, total


def _finished_record(h: dict[bytes, bytes], flt: HistoryFilter) -> JobRecord | None:
    if not h:
        return None
    try:
        rec = decode_job(h)
    except Undecodable:
        return None
    return rec if rec.state.terminal and flt.matches(rec) else None


def _newest_first(row: Row) -> tuple[float, bytes]:
    """ZREVRANGEBYSCORE's order, for merging: score descending, then member descending."""
    return row[1], row[0]


def _rows_desc(r: redis.Redis, source: list[str], w: _Window) -> Iterator[Row]:
    """The union of ``source`` in the window, newest first, read ``BATCH`` at a time."""

    def one(key: str) -> Iterator[Row]:
        offset = 0
        while True:
            rows = r.zrevrangebyscore(key, w.hi, w.lo, start=offset, num=BATCH, withscores=True)
            yield from rows
            offset += len(rows)
            if len(rows) < BATCH:
                return

    if len(source) == 1:
        return one(source[0])
    return heapq.merge(*(one(k) for k in source), key=_newest_first, reverse=True)


def _batches(rows: Iterator[Row]) -> Iterator[list[bytes]]:
    batch: list[bytes] = []
    for member, _ in rows:
        batch.append(member)
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def _intersection(r: redis.Redis, dims: list[list[str]], w: _Window) -> list[Row]:
    """The ids in every filter's index (a filter of several keys: in one of them), in the window,
    newest first. An id has the same score in each index (one on_terminal wrote them)."""
    union, rest = dims[0], [d[0] for d in dims[1:]]  # only status is a union (indexes() puts it first)
    p = r.pipeline(transaction=False)
    for key in union:
        p.zinter([key, *rest], aggregate="MAX", withscores=True)
    rows = [row for part in p.execute() for row in part if w.holds(row[1])]
    rows.sort(key=_newest_first, reverse=True)
    return rows


def _intersection_page(r: redis.Redis, keys: Keys, flt: HistoryFilter, dims: list[list[str]], lo_idx: int,
                       page_size: int) -> tuple[list[JobView], int] | None:
    """Two or more indexed filters, no time bounds: ``total`` by ZINTERCARD (counted in Redis, nothing
    sent back), the page by walking the smallest filter's index newest first, each batch checked
    against the other filters' indexes (ZMSCORE), until the page is full. None when the smallest
    index's oldest hash has expired (the caller's ZINTER path leaves those out exactly)."""
    p = r.pipeline(transaction=False)
    for union in dims:
        for key in union:
            p.zcard(key)
    cards = iter(p.execute())
    sizes = [sum(next(cards) for _ in union) for union in dims]
    walk = sizes.index(min(sizes))
    others = dims[:walk] + dims[walk + 1:]
    for key in dims[walk]:
        if _expired(r, keys, lambda rank, key=key: (r.zrange(key, rank, rank) or [None])[0], 1):
            return None
    status, rest = dims[0], [d[0] for d in dims[1:]]  # only status is a union (indexes() puts it first)
    p = r.pipeline(transaction=False)
    for key in status:
        p.zintercard(1 + len(rest), [key, *rest])
    total = sum(p.execute())
    want = lo_idx + page_size
    found: list[Row] = []
    every = _rows_desc(r, dims[walk], _Window("-inf", "+inf", None, None))
    while len(found) < want:
        batch = list(itertools.islice(every, BATCH))
        if not batch:
            break
        members = [m for m, _ in batch]
        p = r.pipeline(transaction=False)
        for union in others:
            for key in union:
                p.zmscore(key, members)
        scores = iter(p.execute())
        keep = [True] * len(batch)
        for union in others:
            hit = [False] * len(batch)
            for _ in union:
                hit = [h or sc is not None for h, sc in zip(hit, next(scores))]
            keep = [k and h for k, h in zip(keep, hit)]
        found += [row for row, k in zip(batch, keep) if k]
    return _checked_page(r, keys, flt, found[lo_idx:want], total)


def _page_of_rows(r: redis.Redis, keys: Keys, flt: HistoryFilter, rows: list[Row], lo_idx: int,
                  page_size: int) -> tuple[list[JobView], int] | None:
    """A page of ``rows`` (newest first, already filtered by the indexes): their expired tail left
    out of the total; None when a page entry's hash disagrees (the caller walks)."""
    n = len(rows)
    valid = n - _expired(r, keys, lambda rank: rows[n - 1 - rank][0] if rank < n else None, n)
    return _checked_page(r, keys, flt, rows[lo_idx:min(valid, lo_idx + page_size)], valid)


def _checked_page(r: redis.Redis, keys: Keys, flt: HistoryFilter, rows: list[Row],
                  total: int) -> tuple[list[JobView], int] | None:
    p = r.pipeline(transaction=False)
    for member, _ in rows:
        p.hgetall(keys.job(member.decode("utf-8", "replace")))
    items = []
    for h in p.execute() if rows else []:
        rec = _finished_record(h, flt)
        if rec is None:
            return None
        items.append(JobView.of(rec))
    return items, total


def _from_index(r: redis.Redis, keys: Keys, flt: HistoryFilter, union: list[str], w: _Window, lo_idx: int,
                page_size: int) -> tuple[list[JobView], int] | None:
    """A page read off one filter's index (the union of its keys), or None when a page entry's hash
    disagrees with it (the caller walks instead). Two round trips when nothing has expired."""
    want = lo_idx + page_size
    single = len(union) == 1
    p = r.pipeline(transaction=False)
    for key in union:
        p.zcount(key, w.lo, w.hi)
        p.zrevrangebyscore(key, w.hi, w.lo, start=lo_idx if single else 0, num=page_size if single else want,
                           withscores=True)
    res = p.execute()
    counts, tops = res[0::2], res[1::2]
    valid = []
    for key, n in zip(union, counts):

        def oldest(rank: int, key: str = key) -> bytes | None:
            m = r.zrangebyscore(key, w.lo, w.hi, start=rank, num=1)
            return m[0] if m else None

        valid.append(n - _expired(r, keys, oldest, n))
    if single:
        rows = tops[0][: max(0, min(page_size, valid[0] - lo_idx))]
    else:
        # each key's own valid (unexpired) entries only, then newest first over the union
        merged = heapq.merge(*(t[:v] for t, v in zip(tops, valid)), key=_newest_first, reverse=True)
        rows = list(merged)[lo_idx:want]
    return _checked_page(r, keys, flt, rows, sum(valid))


def _expired(r: redis.Redis, keys: Keys, oldest: Callable[[int], bytes | None], n: int) -> int:
    """How many of ``n`` entries, oldest first (``oldest(rank)`` is the id at that rank), have no job
    hash left: expired, not trimmed yet. Hashes expire in finish order, so those are a prefix: one
    EXISTS when there are none (the usual case), else found by doubling then bisecting (a few round
    trips, whatever the sweep's lag)."""

    def gone(rank: int) -> bool:
        m = oldest(rank)
        return m is None or not r.exists(keys.job(m.decode("utf-8", "replace")))

    if n == 0 or not gone(0):
        return 0
    lo, hi = 0, 1  # gone(lo) holds; look for the first rank that is not gone
    while hi < n and gone(hi):
        lo, hi = hi, min(n, hi * 2)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if gone(mid):
            lo = mid
        else:
            hi = mid
    return hi


def parse_time(text: str) -> int:
    """RFC 3339 / ISO 8601 (naive = UTC), a date, or epoch seconds → ms. Raises ValueError, with
    what was wrong as its message: ``inf``, ``nan`` and ``1e400`` (a float's infinity) are numbers
    but no time."""
    t = text.strip()
    try:
        secs = float(t)
    except ValueError:
        secs = None
    if secs is not None:
        if not math.isfinite(secs):
            raise ValueError("not a finite time")
        return int(round(secs * 1000))
    try:
        d = _dt.datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError("an RFC 3339 time, a date, or epoch seconds") from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=_dt.timezone.utc)
    return int(d.timestamp() * 1000)
