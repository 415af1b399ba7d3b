"""Job history: finished jobs, filtered and paginated, newest first — ``Client.history``, behind
``tender-pool history`` and any admin page.

It reads only Redis: the ``finished`` zset (job id → finish ms, written by every terminal path in
lib.lua's ``on_terminal``) and the job hashes, which expire after ``pool.result_retention`` while the
housekeeper trims the zset to the same horizon. So history survives daemon restarts and costs no
process memory. The end-time filters are zset score ranges (cheap); the others are applied to the
hashes, fetched ``BATCH`` at a time in pipelines. ``total`` counts every match, so a page of a
very wide query walks the whole retention window: narrow with ended_after/ended_before.

Bounds: ``*_after`` is inclusive, ``*_before`` exclusive; times are integer ms since the epoch (Redis
TIME, like everything stored).
"""

from __future__ import annotations

import datetime as _dt

import msgspec
import redis

from tender_pool.supervisor.keys import Keys
from tender_pool.supervisor.types import JobRecord, JobView

from .errors import Undecodable
from .records import decode_job

BATCH = 500
MAX_PAGE_SIZE = 1000


class HistoryFilter(msgspec.Struct, forbid_unknown_fields=True):
    status: list[str] = []  # job states (completed, failed, cancelled, skipped, dead); empty = any
    user: str | None = None
    file: str | None = None  # case-insensitive substring of payload.file
    job_id: str | None = None
    started_after: int | None = None
    started_before: int | None = None
    ended_after: int | None = None
    ended_before: int | None = None

    def matches(self, rec: JobRecord) -> bool:
        if self.status and rec.state.value not in self.status:
            return False
        if self.user is not None and rec.user != self.user:
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


class HistoryPage(msgspec.Struct):
    page: int
    page_size: int
    total: int
    items: list[JobView]


def query(r: redis.Redis, keys: Keys, flt: HistoryFilter, page: int = 1, page_size: int = 20) -> HistoryPage:
    """One page (1-based) of finished jobs matching ``flt``, newest finish first."""
    page = max(1, page)
    page_size = max(1, min(page_size, MAX_PAGE_SIZE))
    lo_idx, hi_idx = (page - 1) * page_size, page * page_size
    hi = f"({flt.ended_before}" if flt.ended_before is not None else "+inf"
    lo = str(flt.ended_after) if flt.ended_after is not None else "-inf"
    items: list[JobView] = []
    total = 0

    def consider(ids: list[bytes]) -> None:
        nonlocal total
        p = r.pipeline(transaction=False)
        for jid in ids:
            p.hgetall(keys.job(jid.decode("utf-8", "replace")))
        for h in p.execute():
            if not h:
                continue  # expired hash, zset not trimmed yet
            try:
                rec = decode_job(h)
            except Undecodable:
                continue
            if not rec.state.terminal or not flt.matches(rec):
                continue
            if lo_idx <= total < hi_idx:
                items.append(JobView.of(rec))
            total += 1

    if flt.job_id is not None:
        score = r.zscore(keys.finished, flt.job_id)
        if score is not None and (flt.ended_after is None or score >= flt.ended_after) and (
            flt.ended_before is None or score < flt.ended_before
        ):
            consider([flt.job_id.encode()])
        return HistoryPage(page, page_size, total, items)
    offset = 0
    while True:
        ids = r.zrevrangebyscore(keys.finished, hi, lo, start=offset, num=BATCH)
        if not ids:
            break
        consider(ids)
        offset += len(ids)
        if len(ids) < BATCH:
            break
    return HistoryPage(page, page_size, total, items)


def parse_time(text: str) -> int:
    """RFC 3339 / ISO 8601 (naive = UTC), a date, or epoch seconds → ms. Raises ValueError."""
    t = text.strip()
    try:
        return int(round(float(t) * 1000))
    except ValueError:
        pass
    d = _dt.datetime.fromisoformat(t.replace("Z", "+00:00"))
    if d.tzinfo is None:
        d = d.replace(tzinfo=_dt.timezone.utc)
    return int(d.timestamp() * 1000)
