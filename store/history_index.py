"""The history indexes' upkeep: what keeps ``finished`` and its indexes as long as the retention and
no longer (``trim``), and what indexes a history written before the indexes existed (``catch_up``).
Only the housekeeper's sweep calls them; the client's ``history`` reads the same keys
(``HistoryKeys``), so their names are built here, once.

Every terminal path goes through lib/terminal.lua's ``on_terminal``, which in the same atomic step writes the
job id with its finish ms to ``finished`` and to three indexes: ``finished:state:<state>``,
``finished:user:<user>``, ``finished:kind:<kind>``, and keeps in ``finished:trim``, per index, a
score at or below its oldest entry. The job hashes expire after ``pool.result_retention``; the
sweep drops the same horizon from ``finished`` and from every index, visiting only the indexes that
hold something that old.
"""

from __future__ import annotations

import redis

from tender_pool.store.keys import Keys
from tender_pool.store.records import TERMINAL_STATES

TRIM_BATCH = 5000  # indexes visited per trim step (the rest: the next sweep)
TRIM_STEP = 20000  # a trim step removes the TRIM_STEP + 1 oldest entries (and any tied with the last)
TRIM_STEPS = 10  # steps a sweep
CATCH_UP_BATCH = 10000  # finished ids indexed per sweep while an older history is being indexed
DONE = b"done"
TERMINAL = frozenset(s.value for s in TERMINAL_STATES)


class HistoryKeys:
    """The history indexes' names, built on ``finished``'s as lib/terminal.lua's ``on_terminal`` builds them
    (same hash tag). ``member`` names an index inside ``finished:trim``: ``state:<s>``,
    ``user:<u>``, ``kind:<k>``."""

    def __init__(self, keys: Keys):
        self.keys = keys
        self.finished = keys.finished
        self.trim = keys.finished_trim
        self.catch_up = keys.finished_catch_up

    def of(self, member: str | bytes) -> str:
        return self.keys.finished_index(member.decode() if isinstance(member, bytes) else member)

    def state(self, state: str) -> str:
        return self.of(f"state:{state}")

    def user(self, user: str) -> str:
        return self.of(f"user:{user}")

    def kind(self, kind: str) -> str:
        return self.of(f"kind:{kind}")


def trim(r: redis.Redis, keys: Keys, cutoff_ms: int, steps: int = TRIM_STEPS) -> int:
    """Drop every entry finished at or before ``cutoff_ms`` from ``finished`` and from the indexes
    (the housekeeper's sweep; the job hashes expire by themselves). Costs O(log n + removed) per
    index that holds something that old: ``finished:trim`` says which, so an idle user's index is
    not visited until its entries age out. A backlog (the daemon was down for long, or the
    retention was shortened) goes ``TRIM_STEP`` entries a step, at most ``steps`` steps a call, so
    no single command holds Redis for long. Returns the entries removed from ``finished``."""
    hk = HistoryKeys(keys)
    removed = 0
    for _ in range(steps):
        nth = r.zrangebyscore(keys.finished, "-inf", cutoff_ms, start=TRIM_STEP, num=1, withscores=True)
        upto = int(nth[0][1]) if nth else cutoff_ms
        removed += int(r.zremrangebyscore(keys.finished, "-inf", upto))
        _trim_indexes(r, hk, upto)
        if upto >= cutoff_ms:
            break
    return removed


def _trim_indexes(r: redis.Redis, hk: HistoryKeys, upto: int) -> None:
    due = r.zrangebyscore(hk.trim, "-inf", upto, start=0, num=TRIM_BATCH)
    if not due:
        return
    p = r.pipeline(transaction=False)
    for m in due:
        p.zremrangebyscore(hk.of(m), "-inf", upto)
        p.zrange(hk.of(m), 0, 0, withscores=True)
    res = p.execute()
    p = r.pipeline(transaction=False)
    empty = []
    for m, first in zip(due, res[1::2]):
        if first:
            # the new oldest: never above a concurrent on_terminal's entry (scores only grow)
            p.zadd(hk.trim, {m: first[0][1]}, xx=True)
        else:
            empty.append(m)
    p.execute()
    if empty:
        _forget(r, hk, empty)


def _forget(r: redis.Redis, hk: HistoryKeys, members: list[bytes]) -> None:
    """Drop emptied indexes from ``finished:trim``, unless one gets an entry meanwhile (WATCH: then
    the next sweep sees it again, and finds its oldest)."""
    names = [hk.of(m) for m in members]
    with r.pipeline() as p:
        try:
            p.watch(*names)
            if p.exists(*names):
                return
            p.multi()
            p.zrem(hk.trim, *members)
            p.execute()
        except redis.WatchError:
            pass


def catch_up(r: redis.Redis, keys: Keys, batch: int = CATCH_UP_BATCH) -> bool:
    """Index, oldest first, the ``finished`` entries written before the indexes existed (a pool
    upgraded in place), ``batch`` per call from the housekeeper's sweep, then remember it is done
    (one GET a sweep from then on). Re-indexing an entry on_terminal already indexed changes
    nothing. Returns True once done."""
    hk = HistoryKeys(keys)
    mark = r.get(hk.catch_up)
    if mark == DONE:
        return True
    since = mark.decode() if mark else "-inf"
    rows = r.zrangebyscore(keys.finished, since, "+inf", start=0, num=batch, withscores=True)
    p = r.pipeline(transaction=False)
    for jid, _ in rows:
        p.hmget(keys.job(jid.decode("utf-8", "replace")), "state", "user", "kind")
    fields = p.execute() if rows else []
    p = r.pipeline(transaction=False)
    for (jid, score), (state, user, kind) in zip(rows, fields):
        if not (state and user and kind) or state.decode() not in TERMINAL:
            continue  # expired, reopened by a run retry, or a record history cannot decode
        members = [f"state:{state.decode()}", f"user:{user.decode()}", f"kind:{kind.decode()}"]
        for m in members:
            p.zadd(hk.of(m), {jid: score})
        p.zadd(hk.trim, dict.fromkeys(members, score), lt=True)
    if len(rows) < batch:
        p.set(hk.catch_up, DONE)
    else:
        # from the last score again (inclusive: ties at a batch's end are not skipped); a batch of
        # one single ms moves on past it
        last, first = rows[-1][1], rows[0][1]
        p.set(hk.catch_up, repr(int(last) if last != first else int(last) + 1))
    p.execute()
    return len(rows) < batch
