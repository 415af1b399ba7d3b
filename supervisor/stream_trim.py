"""Trimming the queue-wide event stream (``events``), by the housekeeper, off the slots' hot path.

The Lua steps append to ``events`` without ``MAXLEN``: what may go depends on the consumer groups,
and that is not something every job transition should work out. Once a reaper period this decides:
- no consumer group: keep the newest ``NO_GROUP_MAXLEN`` entries (``MAXLEN ~``), as before groups
  existed: a stream nobody reads stays bounded;
- groups: drop only entries below the oldest one some group still needs — its oldest pending entry
  (delivered, not acknowledged), else the first after its last-delivered id (``XTRIM MINID``);
- and never keep more than ``max_backlog`` entries: past that the oldest go anyway (an abandoned
  group must not fill Redis). Each group that needed some of them is marked with a gap
  (``events:gap:<group>``, ``client.consumer.Gap``), which its consumer answers with a resync; the
  drop is logged with the group and the ids lost, and counted per group (``lost``, for the metric
  ``tender_pool_events_consumer_dropped_total``).

A group created between the ``XINFO GROUPS`` read and the trim at id 0 can see its first entries trimmed
as if it had been created a moment later: it never applied anything before them, so it missed nothing
it had promised to read.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec
import redis

from tender_pool.client.consumer import Gap, stream_id

from tender_pool.store.keys import Keys

NO_GROUP_MAXLEN = 100_000


class TrimReport(msgspec.Struct):
    dropped: int = 0  # entries some group had not acknowledged, dropped by the cap
    gaps: list[str] = []  # groups marked with a gap by this pass
    lost: dict[str, int] = {}  # group -> entries of this pass's drop it still needed (at most ``dropped``)


def _next_id(sid: str) -> str:
    ms, seq = stream_id(sid)
    return f"{ms}-{seq + 1}"


def trim(r: Any, k: Keys, max_backlog: int, log: Any = None) -> TrimReport:
    try:
        raw = r.xinfo_groups(k.events)
    except redis.ResponseError as e:
        if "no such key" in str(e).lower():
            return TrimReport()
        raise
    if not raw:
        r.xtrim(k.events, maxlen=min(NO_GROUP_MAXLEN, max_backlog), approximate=True)
        return TrimReport()
    p = r.pipeline(transaction=False)
    names = [g["name"].decode() if isinstance(g["name"], bytes) else g["name"] for g in raw]
    for name in names:
        p.xpending(k.events, name)
    pend = p.execute()
    need: dict[str, str] = {}  # group -> the first entry it still needs
    for g, name, pe in zip(raw, names, pend):
        last = g.get("last-delivered-id") or b"0-0"
        last = last.decode() if isinstance(last, bytes) else last
        first_needed = _next_id(last)
        if pe and pe.get("pending") and pe.get("min"):
            m = pe["min"].decode() if isinstance(pe["min"], bytes) else pe["min"]
            if stream_id(m) < stream_id(first_needed):
                first_needed = m
        need[name] = first_needed
    keep_from = min(need.values(), key=stream_id)
    r.xtrim(k.events, minid=keep_from, approximate=True)
    length = r.xlen(k.events)
    if length <= max_backlog:
        return TrimReport()
    r.xtrim(k.events, maxlen=max_backlog, approximate=False)
    head = r.xrange(k.events, count=1)
    if not head:
        return TrimReport()
    first_kept = head[0][0].decode() if isinstance(head[0][0], bytes) else head[0][0]
    report = TrimReport(dropped=length - max_backlog)
    now = int(time.time() * 1000)
    for name, first_needed in need.items():
        if stream_id(first_needed) >= stream_id(first_kept):
            continue
        gk = k.events_gap(name)
        old = r.get(gk)
        since = msgspec.json.decode(old, type=Gap).since if old else first_needed  # the earliest loss stays
        lost = length - max_backlog
        gap = Gap(since=since, first_kept=first_kept, dropped=lost + (msgspec.json.decode(old, type=Gap).dropped
                                                                      if old else 0), at=now)
        r.set(gk, msgspec.json.encode(gap))
        report.gaps.append(name)
        report.lost[name] = lost
        if log is not None:
            log.error("events_dropped_for_group", group=name, first_needed=first_needed, first_kept=first_kept,
                      dropped=lost, max_backlog=max_backlog)
    return report


__all__ = ["trim", "TrimReport", "NO_GROUP_MAXLEN"]
