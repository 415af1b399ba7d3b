"""What Redis says about the queue (``QueueProbe``), its runs (``RunTracker``) and about itself
(``redis_warnings``), for the status socket, ``status --redis``, ``Client.status``, /metrics and the
daemon's STATUS= line. Imports nothing of the daemon's extras (the client loads it).

The probe has a Redis client of its own with a short timeout (``PROBE_TIMEOUT_S``): it is read from
the status thread and the metrics server's threads, never from the supervisor's main loop, and a
slow Redis costs a status reply half a second, never a reaped slot. One internal lock makes it
thread-safe. A failed read is remembered for ``FAILURE_MEMO_S``: during an outage a burst of status
requests costs Redis (and each client) one timeout, not one each.
"""

from __future__ import annotations

import bisect
import threading
import time
from typing import Any

import msgspec
import redis

from tender_pool.store import scripts
from tender_pool.store.script_args import DepwaitsCountCall
from tender_pool.store.connection import connect

from tender_pool.client import consumer
from tender_pool.client.follow import trimmed_past
from tender_pool.store.history_index import HistoryKeys
from tender_pool.client.models import Counts

from tender_pool.store.config import Config
from tender_pool.store.keys import Keys
from tender_pool.client.status_protocol import ConsumerRow, RedisMemory, RunRow

PROBE_TIMEOUT_S = 0.5
FAILURE_MEMO_S = 1.0
WARNINGS_EVERY_S = 30.0
MEMORY_WARN_AT = 0.8  # of maxmemory (the contract)
# A refusal stays a problem this long: near maxmemory Redis refuses a write whenever the one before
# pushed it over, and accepts the next once memory fell back (19.9 of 20 MiB read "healthy" between
# refused submits). Long enough to outlast that flicker, short enough to clear soon after a fix.
REFUSAL_MEMO_S = 10.0


class QueueStats(msgspec.Struct):
    """The queue's figures, read in a few pipelines. ``depth`` is every unfinished job (the old
    pool's ``queue_depth``); the fields are the precise parts of it."""

    ready_hi: int = 0  # interactive: ready:hi's entries and the users' interactive backlogs (hibacklog)
    ready_lo: int = 0  # bulk: ready:lo's entries (its wake tokens not counted) and the users' backlogs
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


RUN_JOBS_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
RUN_SECONDS_BUCKETS = (1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)
ACTIVE = ("pending", "running")


class Observed(msgspec.Struct):
    """A histogram kept by hand (this module must not need prometheus_client): ``counts[i]`` counts
    the observations ``<= bounds[i]`` that exceeded ``bounds[i-1]``; the last slot is +Inf."""

    bounds: tuple[float, ...]
    counts: list[int]
    total: float = 0.0

    @classmethod
    def of(cls, bounds: tuple[float, ...]) -> "Observed":
        return cls(bounds, [0] * (len(bounds) + 1))

    def observe(self, v: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, v)] += 1
        self.total += v

    def cumulative(self) -> list[tuple[str, int]]:
        out, acc = [], 0
        for b, n in zip((*(str(float(b)) for b in self.bounds), "+Inf"), self.counts):
            acc += n
            out.append((b, acc))
        return out


class RunTracker:
    """The active runs, and the runs that ended since this process started (for metrics), kept
    incrementally so a read costs what changed plus a bounded amount, never the number of runs:

    - once, at the first read, every run of the ``runs`` index is looked at (its state, in
      pipelines of ``CHECK_BATCH``);
    - then only the queue's ``events`` stream is tailed from where the last read stopped, for
      ``run_started`` (a new run, or a retried one reopening) and ``run_finished`` (an end: its final
      state, job count and time from creation);
    - each read re-reads the newest active runs until ``SHOWN`` of them are confirmed active (their
      counts are what ``status`` shows), and ``SWEEP`` more of the rest in turn, so a run that ended
      without an event we saw (expired unsealed, deleted by hand) drops out of the count in time;
    - if trimming overtook the tail (``follow.trimmed_past``), the index is walked again.

    ``rows`` (newest first, at most ``SHOWN``) and ``count`` are what a read found: 49,157 open runs
    made a 17.6 MB status reply when every one was listed. Every host's probe sees every run of the
    queue: aggregate the run metrics with ``max`` across hosts, not ``sum``. Not thread-safe by
    itself (``QueueProbe``'s lock guards it)."""

    TAIL_BATCH = 5000
    TAIL_MAX = 200_000  # per read; the rest next time
    SHOWN = 20  # the contract: ``runs`` lists at most the 20 newest active runs
    SWEEP = 1000  # other active runs re-checked per read
    CHECK_BATCH = 2000  # HMGETs per pipeline

    def __init__(self, client: redis.Redis, keys: Keys):
        self.r = client
        self.k = keys
        self.last_id: str | None = None  # None: not synced yet
        self.active: dict[str, float] = {}  # run id -> created (ms), every active run
        self.rows: list[RunRow] = []  # the newest active runs, newest first, at most SHOWN
        self.ended: dict[str, int] = {}  # final state → runs that reached it
        self.jobs = Observed.of(RUN_JOBS_BUCKETS)
        self.seconds = Observed.of(RUN_SECONDS_BUCKETS)
        self._sweep_at = 0

    @property
    def count(self) -> int:
        return len(self.active)

    def read(self) -> list[RunRow]:
        """The newest active runs, newest first (at most ``SHOWN``). Raises redis.RedisError."""
        if self.last_id is None or self._trimmed():
            self._sync()
        else:
            self._tail()
        self._refresh()
        return self.rows

    def _trimmed(self) -> bool:
        try:
            info = self.r.xinfo_stream(self.k.events)
        except redis.ResponseError:  # no stream yet
            return False
        return trimmed_past(info, self.last_id or "0-0")

    def _sync(self) -> None:
        """Every run of the index: the active ones kept, none counted as ended."""
        last = self.r.xrevrange(self.k.events, "+", "-", count=1)
        self.last_id = last[0][0].decode() if last else "0-0"
        self.active = {rid.decode("utf-8", "replace"): created
                       for rid, created in self.r.zrange(self.k.runs, 0, -1, withscores=True)}
        ids = list(self.active)
        for i in range(0, len(ids), self.CHECK_BATCH):
            self._check(ids[i:i + self.CHECK_BATCH])

    def _check(self, ids: list[str]) -> None:
        """Drop the runs of ``ids`` that are no longer active: one pipeline."""
        p = self.r.pipeline(transaction=False)
        for rid in ids:
            p.hget(self.k.run(rid), "state")
        for rid, state in zip(ids, p.execute()):
            if (state or b"").decode() not in ACTIVE:
                self.active.pop(rid, None)

    def _tail(self) -> None:
        read = 0
        ended: list[tuple[str, str, int]] = []
        started: set[str] = set()
        while read < self.TAIL_MAX:
            reply = self.r.xread({self.k.events: self.last_id}, count=self.TAIL_BATCH)
            entries = reply[0][1] if reply else []
            for sid, fields in entries:
                raw = fields.get(b"e") or b""
                if b'"run_' in raw:
                    ev = _run_event(raw)
                    if ev is not None:
                        etype, rid, state, total = ev
                        if etype == "run_started":
                            started.add(rid)
                        elif etype == "run_finished":
                            started.discard(rid)
                            self.active.pop(rid, None)
                            ended.append((rid, state, total))
            if entries:
                self.last_id = entries[-1][0].decode()
            read += len(entries)
            if len(entries) < self.TAIL_BATCH:
                break
        new = [rid for rid in started if rid not in self.active]
        if new:  # their creation time orders them (a retried run reopens with its old one)
            p = self.r.pipeline(transaction=False)
            for rid in new:
                p.zscore(self.k.runs, rid)
            for rid, created in zip(new, p.execute()):
                self.active[rid] = created if created is not None else time.time() * 1000
        if ended:
            p = self.r.pipeline(transaction=False)
            for rid, _, _ in ended:
                p.hmget(self.k.run(rid), "created_at", "finished_at")
            for (rid, state, total), (created, finished) in zip(ended, p.execute()):
                self.ended[state] = self.ended.get(state, 0) + 1
                self.jobs.observe(total)
                if created and finished:
                    self.seconds.observe(max(0, int(finished) - int(created)) / 1000)

    def _refresh(self) -> None:
        """The newest ``SHOWN`` active runs' user, kind and counts (dropping any found no longer
        active on the way), then ``SWEEP`` of the others re-checked: a bounded cost per read."""
        newest = sorted(self.active, key=lambda rid: (self.active[rid], rid), reverse=True)
        rows: list[RunRow] = []
        at = 0
        while len(rows) < self.SHOWN and at < len(newest):
            batch = newest[at:at + 2 * self.SHOWN]
            at += len(batch)
            p = self.r.pipeline(transaction=False)
            for rid in batch:
                p.hmget(self.k.run(rid), "state", "user", "kind", "total", *COUNT_NAMES)
            for rid, v in zip(batch, p.execute()):
                state = v[0].decode() if v[0] else None
                if state not in ACTIVE:
                    self.active.pop(rid, None)
                elif len(rows) < self.SHOWN:
                    n = [int(x) if x else 0 for x in v[3:]]
                    rows.append(RunRow(rid, (v[1] or b"").decode("utf-8", "replace"),
                                       (v[2] or b"").decode("utf-8", "replace"), Counts(*n)))
        self.rows = rows
        rest = newest[at:]
        if rest:
            start = self._sweep_at % len(rest)
            self._check((rest[start:] + rest[:start])[: self.SWEEP])
            self._sweep_at = start + self.SWEEP


COUNT_NAMES = ("queued", "waiting", "running", "completed", "failed", "cancelled", "skipped")


class _RunEvent(msgspec.Struct):
    type: str
    run_id: str | None = None
    state: str | None = None
    counts: dict[str, Any] | None = None


def _run_event(raw: bytes) -> tuple[str, str, str, int] | None:
    try:
        ev = msgspec.json.decode(raw, type=_RunEvent)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    if ev.type not in ("run_started", "run_finished") or not ev.run_id:
        return None
    total = (ev.counts or {}).get("total", 0)
    return ev.type, ev.run_id, ev.state or "", int(total) if isinstance(total, int) else 0


class QueueProbe:
    """Queue figures from Redis, in two pipelines whose cost does not grow with the queue or the
    history: list lengths, ZCARD, ZCOUNT of the failed index (``finished:state:failed`` over the
    retention window: lib/terminal.lua's ``on_terminal`` keeps it, the housekeeper's
    ``history_index.trim`` trims it), wake tokens looked for only near ready:lo's pop end
    (``WAKE_SCAN``), and one LLEN per user with parked jobs and per user with queued jobs of either
    class (their backlogs: ``inready`` and ``inready:hi`` name them).
    """

    # Wake tokens are pushed at ready:lo's pop end and taken by the next claim: one is found this
    # far from it or not at all (a token deeper than this, behind as many newer pushes to the pop
    # end while no slot claimed, would be counted as a queued job until a slot takes it).
    WAKE_SCAN = 10_000

    def __init__(self, client: redis.Redis, keys: Keys, retention_s: float):
        self.r = client
        self.k = keys
        self.hk = HistoryKeys(keys)
        self.retention_s = retention_s
        self.lock = threading.Lock()
        self._depwaits = scripts.register(client, "depwaits_count")["depwaits_count"]
        self._failure: tuple[float, redis.RedisError] | None = None
        self._warnings: tuple[float, list[str]] | None = None
        self.run_tracker = RunTracker(client, keys)
        self.runs: list[RunRow] = []  # the newest active runs as of the last successful read (at most 20)
        self.runs_active = 0  # every active run, as of the same read
        self.consumers: list[ConsumerRow] = []  # the event stream's consumer groups, same read
        self.memory: RedisMemory | None = None  # as of the last read
        self.refused: tuple[float, str] | None = None  # (monotonic time, Redis's message) of the last refusal

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
                self.runs = list(self.run_tracker.read())
                self.runs_active = self.run_tracker.count
                self.consumers = [ConsumerRow(g.group, g.lag, g.pending, g.oldest_pending_age_s, g.gap)
                                  for g in consumer.groups(self.r, self.k)]
                self._check_writes()
            except redis.RedisError as e:
                self._failure = (time.monotonic(), e)
                raise
            self._failure = None
            return stats

    def _read(self) -> QueueStats:
        k = self.k
        cutoff_ms = int((time.time() - self.retention_s) * 1000)
        p = self.r.pipeline(transaction=False)
        p.llen(k.ready_hi)
        p.llen(k.ready_lo)
        p.lpos(k.ready_lo, Keys.WAKE, rank=-1, count=0, maxlen=self.WAKE_SCAN)
        p.llen(k.dead)
        p.zcard(k.delayed)
        p.hkeys(k.proclists)
        p.smembers(k.waitusers)
        p.smembers(k.depwaits)
        p.hkeys(k.inready)
        p.hkeys(k.inready_hi)
        p.zcount(self.hk.state("failed"), cutoff_ms, "+inf")
        hi, lo, wakes, dead, delayed, procs, users, deps, fair_users, hi_users, failed = p.execute()
        p = self.r.pipeline(transaction=False)
        for proc in procs:
            p.llen(proc)
        for u in users:
            p.llen(k.wait(u.decode("utf-8", "replace")))
        for u in fair_users:
            p.llen(k.backlog(u.decode("utf-8", "replace")))
        for u in hi_users:
            p.llen(k.hibacklog(u.decode("utf-8", "replace")))
        counts = p.execute() if (procs or users or fair_users or hi_users) else []
        n_procs, n_waits = len(procs), len(procs) + len(users)
        n_lo = n_waits + len(fair_users)
        dep_ids = [d.decode("utf-8", "replace") for d in deps]
        by_dep = 0
        if dep_ids:
            call = DepwaitsCountCall(depwaits=k.depwaits, deps=[k.deps(d) for d in dep_ids], ids=dep_ids)
            by_dep = int(self._depwaits(keys=call.keys(), args=call.args()))
        return QueueStats(
            ready_hi=hi + sum(counts[n_lo:]),
            ready_lo=max(0, lo - len(wakes or [])) + sum(counts[n_waits:n_lo]),
            processing=sum(counts[:n_procs]),
            delayed=delayed,
            deferred_user=sum(counts[n_procs:n_waits]),
            deferred_dependency=by_dep,
            dead_letter=dead,
            failed=failed,
        )

    def _check_writes(self) -> None:
        """``memory`` from INFO, and whether Redis refuses a write now (``write_refusal``)."""
        self.memory = redis_memory(self.r)
        refused = write_refusal(self.r, self.k.write_check)
        if refused is not None:
            self.refused = (time.monotonic(), refused)

    def note_refusal(self, message: str) -> None:
        """A write of ours that Redis refused (the housekeeper's heartbeat, say): a problem for
        ``REFUSAL_MEMO_S``, like one the probe saw itself."""
        with self.lock:
            self.refused = (time.monotonic(), message)

    def memory_health(self) -> tuple[list[str], list[str]]:
        """(problems, warnings) about Redis's memory and writes, as of the last read: a refusal within
        ``REFUSAL_MEMO_S`` (Redis's own message), memory past ``MEMORY_WARN_AT`` of maxmemory."""
        with self.lock:
            problems, warnings = [], []
            if self.refused is not None and time.monotonic() - self.refused[0] < REFUSAL_MEMO_S:
                problems.append(f"Redis refuses writes: {self.refused[1]}")
            warning = memory_warning(self.memory) if self.memory is not None else None
            if warning:
                warnings.append(warning)
            return problems, warnings

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


# redis-py turns the reply's code into the exception's class and drops it from the message; put it
# back so the problem reads as Redis wrote it ("OOM command not allowed when used memory > ...").
_ERROR_CODES = ((redis.exceptions.OutOfMemoryError, "OOM"), (redis.exceptions.ReadOnlyError, "READONLY"))


def redis_message(e: redis.ResponseError) -> str:
    """An error reply as Redis wrote it."""
    for cls, code in _ERROR_CODES:
        if isinstance(e, cls):
            return f"{code} {e}"
    return str(e)


def write_refusal(client: redis.Redis, key: str) -> str | None:
    """Redis's message when it refuses a write now (out of memory under ``noeviction``, MISCONF after
    a failed save, NOREPLICAS, a replica's READONLY), else None. ``LPUSHX`` on a key that never
    exists: a write command Redis vets like any other, which changes nothing when accepted.
    Raises redis.RedisError when Redis does not answer."""
    try:
        client.lpushx(key, "")
    except redis.ResponseError as e:
        return redis_message(e)
    return None


def redis_memory(client: redis.Redis) -> RedisMemory:
    """``redis_memory`` from INFO memory. Raises redis.RedisError when Redis does not answer."""
    info = client.info("memory")
    return RedisMemory(int(info.get("used_memory", 0)), int(info.get("maxmemory", 0)),
                       str(info.get("maxmemory_policy", "noeviction")))


def memory_warning(mem: RedisMemory) -> str | None:
    """A warning once Redis holds more than ``MEMORY_WARN_AT`` of its maxmemory (none without one)."""
    if mem.maxmemory_bytes <= 0 or mem.used_bytes < MEMORY_WARN_AT * mem.maxmemory_bytes:
        return None
    mib = 1024 * 1024
    return (f"Redis memory at {100 * mem.used_bytes / mem.maxmemory_bytes:.0f} % of maxmemory "
            f"({mem.used_bytes / mib:.1f} of {mem.maxmemory_bytes / mib:.1f} MiB, policy {mem.policy}): "
            "writes are refused once it is full")
