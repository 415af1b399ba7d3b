"""What Redis says about the queue (``QueueProbe``) and about itself (``redis_warnings``), for the
status socket, ``status --redis``, /metrics and the daemon's STATUS= line.

The probe has a Redis client of its own with a short timeout (``PROBE_TIMEOUT_S``): it is read from
the status thread and the metrics server's threads, never from the supervisor's main loop, and a
slow Redis costs a status reply half a second, never a reaped slot. One internal lock makes it
thread-safe. A failed read is remembered for ``FAILURE_MEMO_S``: during an outage a burst of status
requests costs Redis (and each client) one timeout, not one each.
"""

from __future__ import annotations

import threading
import time

import msgspec
import redis

from tender_pool.slots import scripts
from tender_pool.slots.connection import connect

from .config import Config
from .keys import Keys

PROBE_TIMEOUT_S = 0.5
FAILURE_MEMO_S = 1.0
WARNINGS_EVERY_S = 30.0


class QueueStats(msgspec.Struct):
    """The queue's figures, read in a few pipelines. ``depth`` is every unfinished job (the old
    pool's ``queue_depth``); the fields are the precise parts of it."""

    ready_hi: int = 0
    ready_lo: int = 0
    processing: int = 0  # claimed by a slot (in a processing list), all hosts
    delayed: int = 0  # waiting out a retry backoff
    deferred_user: int = 0  # parked behind the user's lock
    deferred_dependency: int = 0  # parked until a dependency ends
    dead_letter: int = 0
    failed: int = 0  # failed jobs within the history retention

    @property
    def queued(self) -> int:
        return self.ready_hi + self.ready_lo

    @property
    def deferred(self) -> int:
        return self.deferred_user + self.deferred_dependency

    @property
    def depth(self) -> int:
        """Every unfinished job: queued, waiting (deferred or delayed) and running."""
        return self.queued + self.processing + self.delayed + self.deferred


class QueueProbe:
    """Queue figures from Redis.

    ``failed`` counts jobs in state failed among ``finished`` (history within retention). It is kept
    incrementally: each read looks only at ids finished since the last read, so its cost follows the
    job rate, not the history size; a first read after start catches up ``CATCH_UP`` ids at a time.
    """

    CATCH_UP = 5000

    def __init__(self, client: redis.Redis, keys: Keys, retention_s: float):
        self.r = client
        self.k = keys
        self.retention_s = retention_s
        self.lock = threading.Lock()
        self._depwaits = scripts.register(client, "depwaits_count")["depwaits_count"]
        self._failed: dict[str, float] = {}  # failed job id → finish ms
        self._seen_ms = float("-inf")
        self._seen_at_max: set[str] = set()
        self._failure: tuple[float, redis.RedisError] | None = None
        self._warnings: tuple[float, list[str]] | None = None

    @classmethod
    def for_config(cls, cfg: Config, timeout: float = PROBE_TIMEOUT_S) -> "QueueProbe":
        return cls(connect(cfg.redis.url, timeout), Keys(cfg.redis.prefix, cfg.pool.queue), cfg.pool.result_retention)

    def read(self) -> QueueStats:
        """Raises redis.RedisError when Redis is unreachable (or was, less than FAILURE_MEMO_S ago)."""
        with self.lock:
            if self._failure is not None and time.monotonic() - self._failure[0] < FAILURE_MEMO_S:
                raise self._failure[1]
            try:
                stats = self._read()
            except redis.RedisError as e:
                self._failure = (time.monotonic(), e)
                raise
            self._failure = None
            return stats

    def _read(self) -> QueueStats:
        k = self.k
        p = self.r.pipeline(transaction=False)
        p.llen(k.ready_hi)
        p.llen(k.ready_lo)
        p.lpos(k.ready_lo, Keys.WAKE, count=0)
        p.llen(k.dead)
        p.zcard(k.delayed)
        p.hkeys(k.proclists)
        p.smembers(k.waitusers)
        p.smembers(k.depwaits)
        hi, lo, wakes, dead, delayed, procs, users, deps = p.execute()
        p = self.r.pipeline(transaction=False)
        for proc in procs:
            p.llen(proc)
        for u in users:
            p.llen(k.wait(u.decode("utf-8", "replace")))
        counts = p.execute() if (procs or users) else []
        dep_ids = [d.decode("utf-8", "replace") for d in deps]
        by_dep = int(self._depwaits(keys=[k.depwaits, *(k.deps(d) for d in dep_ids)], args=dep_ids)) if dep_ids else 0
        return QueueStats(
            ready_hi=hi,
            ready_lo=max(0, lo - len(wakes or [])),
            processing=sum(counts[: len(procs)]),
            delayed=delayed,
            deferred_user=sum(counts[len(procs) :]),
            deferred_dependency=by_dep,
            dead_letter=dead,
            failed=self._count_failed(),
        )

    def _count_failed(self) -> int:
        k = self.k
        lo = "-inf" if self._seen_ms == float("-inf") else self._seen_ms
        rows = self.r.zrangebyscore(k.finished, lo, "+inf", start=0, num=self.CATCH_UP, withscores=True)
        fresh = [(m.decode("utf-8", "replace"), s) for m, s in rows if m.decode("utf-8", "replace") not in self._seen_at_max]
        if fresh:
            p = self.r.pipeline(transaction=False)
            for jid, _ in fresh:
                p.hget(k.job(jid), "state")
            for (jid, score), state in zip(fresh, p.execute()):
                if state == b"failed":
                    self._failed[jid] = score
                else:
                    self._failed.pop(jid, None)  # the same id finished again, differently
                if score > self._seen_ms:
                    self._seen_ms, self._seen_at_max = score, set()
                if score == self._seen_ms:
                    self._seen_at_max.add(jid)
        cutoff = (time.time() - self.retention_s) * 1000
        for jid in [j for j, s in self._failed.items() if s < cutoff]:
            del self._failed[jid]
        return len(self._failed)

    def warnings(self) -> list[str]:
        """``redis_warnings`` at most every WARNINGS_EVERY_S (a server's settings rarely change);
        an unreachable Redis gives no warnings here (it is a problem, reported apart)."""
        with self.lock:
            now = time.monotonic()
            if self._warnings is not None and now - self._warnings[0] < WARNINGS_EVERY_S:
                return self._warnings[1]
            try:
                found = redis_warnings(self.r)
            except redis.RedisError:
                return self._warnings[1] if self._warnings else []
            self._warnings = (now, found)
            return found


EVICTING_EXEMPT = ("noeviction",)


def redis_warnings(client: redis.Redis) -> list[str]:
    """Settings of the Redis server that can lose jobs without any error: persistence off (no AOF
    and no RDB save points: a restart empties the queue) and an evicting ``maxmemory-policy`` (under
    memory pressure Redis deletes job hashes, locks and processing lists). The daemon logs these at
    start; ``status`` lists them under ``warnings``. Servers that forbid CONFIG (managed Redis) are
    judged by INFO alone. Raises redis.RedisError when Redis is unreachable."""
    out = []
    info = client.info("persistence")
    aof = bool(int(info.get("aof_enabled", 0)))
    if not aof:
        try:
            save = client.config_get("save").get("save", "")
        except redis.ResponseError:  # CONFIG renamed or forbidden: RDB save points unknown
            save = None
        if save is not None and not str(save).strip():
            out.append("Redis persistence is off (no AOF, no RDB save points): a Redis restart loses every job")
    policy = client.info("memory").get("maxmemory_policy", "noeviction")
    if policy not in EVICTING_EXEMPT:
        out.append(f"Redis maxmemory-policy is {policy}: under memory pressure Redis evicts job records, locks "
                   "and processing lists (use noeviction)")
    return out
