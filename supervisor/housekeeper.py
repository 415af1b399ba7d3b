"""The supervisor's housekeeping thread: every Redis write of the supervisor, off its main loop.

It owns: the host heartbeat, requeueing this host's dead slots' lists (handed over by the main loop),
the reaper (other hosts' dead lists, entries far past their deadline), retry promotion, the
lost-promotion sweep, history upkeep (``history_index``), result pruning and the event stream's
trimming (``stream_trim``). The main loop never waits for Redis: a slow or frozen Redis delays this
thread only, never reaping or respawning a slot.

Reclaim only on evidence of death, with a bounded delay:
- a slot of *this* supervisor that died: the main loop saw it (waitpid), killed its job tree, then
  handed its list here (``requeue_later``); this thread wakes at once and requeues it (ms later while
  Redis answers; as soon as Redis is back otherwise);
- a processing list whose owner host no longer heartbeats (its ``host:<id>`` key expired or names
  another incarnation): requeued within heartbeat × 3 + one reaper period — but only once every
  host has had a full key lifetime, with Redis reachable, to renew its key (``quiet_enough``): a
  Redis restart or freeze expires every key while nobody can write, and a key that expired then
  says nothing about its host. Such a judgement waits until that much time has passed since Redis
  came back (as this thread saw it, and by Redis's own uptime);
- an entry of a live owner far past its own hard deadline (stamp + the job's timeout + kill grace +
  ``STUCK_MARGIN``): requeued (remote) or, ours, its list handed to the main loop (``take_stuck``),
  which kills the slot; the death path then requeues it.
Every requeue is requeue.lua, which re-checks the owner atomically; two reapers racing are harmless,
the ``reaper`` lease only saves work. Whole lists (a dead slot's; every dead host's list found in a
pass, together) go through requeue_many.lua: requeue.lua's own text run per entry, 100 entries a call,
~200 a round trip (``Queue.requeue_lists_many``), so 10⁴ entries cost Redis the per-entry logic only,
not 10⁴ script calls, and many dead lists a few round trips, not a few each.

Threads: no lock is shared with the main loop. The main loop hands work over through two
``queue.SimpleQueue``s and an ``Event``; the counters here are written by this thread only. Forking a
slot while this thread is inside a Redis call or a log write is harmless: a slot builds its own Redis
client and logger after the fork and never touches this thread's (see ``forking``).
"""

from __future__ import annotations

import math
import os
import queue as _queue
import shutil
import threading
import time
from typing import Callable

import redis

from tender_pool.store import history_index
from tender_pool.store.replication import NOT_REPLICATED_RETRY_S, NotReplicated

from tender_pool.supervisor import stream_trim
from tender_pool.store.config import Config
from tender_pool.store.records import TERMINAL_STATES
from tender_pool.store.keys import Keys, Owner
from tender_pool.client.status_probe import redis_message

TERMINAL = frozenset(s.value for s in TERMINAL_STATES)
STUCK_MARGIN_S = 30.0
FULL_SCAN_EVERY_S = 60.0
RUN_QUEUE_AFTER_MS = 5000  # a run sealed this long ago and still queuing: its submitter may be gone
RUN_QUEUE_CALLS = 20  # queuing chunks a reap pass (each a few ms of Redis)
SWEEP_EVERY_S = 5.0


class Housekeeper(threading.Thread):
    def __init__(
        self,
        cfg: Config,
        queue,  # slots.queue.Queue, built for this thread alone
        owner: Owner,
        log,
        slots_summary: Callable[[], bytes] | None = None,
    ):
        super().__init__(name="housekeeper", daemon=True)
        self.cfg = cfg
        self.q = queue
        self.k: Keys = queue.k
        self.host = cfg.pool.host_id
        self.owner = owner
        self.holder = owner.holder
        self.log = log
        self.stop_event = threading.Event()
        self.wake = threading.Event()  # set by requeue_later and stop: the loop runs at once
        self.inbox: _queue.SimpleQueue[tuple[str, str, str]] = _queue.SimpleQueue()  # (list, reason, slot)
        self.handed = 0  # requeues handed over (written by the main loop only)
        self.done = 0  # requeues finished (written by this thread only)
        self.retry: list[tuple[str, str, str]] = []  # taken from the inbox, not yet done (Redis down)
        self.stuck: _queue.SimpleQueue[str] = _queue.SimpleQueue()  # our lists past deadline, for the main loop
        self.last_ok = time.monotonic()  # when the last successful heartbeat write was SENT (the fence)
        self.lapsed = False  # a write found our host key gone: others may have reclaimed our lists
        self.last_loop = time.monotonic()  # last turn of the loop, Redis up or not: the daemon's watchdog
        self.taken_over: str | None = None  # the holder that took our host_id over (we must stop)
        self.redis_ok = True  # False while Redis does not answer (a refusal is ``refused``, not this)
        self.refused: tuple[float, str] | None = None  # (monotonic time, Redis's message): a write refused
        self.unreplicated: float | None = None  # since when our writes run but are not acknowledged (status warns)
        self.redis_lost = False  # a Redis call failed since the last successful turn
        self.redis_back_at = -math.inf  # when Redis answered again after that (monotonic)
        self.judging_deferred = False  # logged "reclaim_deferred_after_redis_outage" for this outage
        self._quiet: bool | None = None  # quiet_enough() of the current reap
        self.backoff_max = min(5.0, cfg.pool.heartbeat)  # retry at least once a heartbeat: renew fast
        self.last_full_scan = 0.0
        self.reclaimed = 0
        self.redis_errors = 0  # for tender_pool_redis_errors_total{component="housekeeper"}
        # for tender_pool_events_consumer_dropped_total{group}: entries a consumer group lost to the cap
        self.events_dropped: dict[str, int] = {}
        self.slots_summary = slots_summary  # StatusBuilder.host_summary: slots:<host> for status --redis
        self.hb_ttl_ms = int(cfg.pool.heartbeat * 3 * 1000)
        self._runs = None  # client.run_submit.RunWriter on this thread's connection, made on first use

    # --- the main loop's side ---------------------------------------------------------------------

    def requeue_later(self, proc: str, reason: str, slot: str = "") -> None:
        """Main loop: a slot of ours died and its job tree is already dead; put its list back."""
        self.handed += 1
        self.inbox.put((proc, reason, slot))
        self.wake.set()

    def pending(self) -> int:
        """Requeues handed over and not yet done (the main loop waits for them before exiting)."""
        return self.handed - self.done

    def take_stuck(self) -> set[str]:
        out = set()
        while True:
            try:
                out.add(self.stuck.get_nowait())
            except _queue.Empty:
                return out

    def stop(self) -> None:
        self.stop_event.set()
        self.wake.set()

    # --- this thread ------------------------------------------------------------------------------

    def run(self) -> None:
        """Requeues first, whenever woken; heartbeat every heartbeat/3 s; reap every heartbeat (capped
        at 1 s: a dead remote host's jobs come back within 3 heartbeats + 1 s); the waiter sweep, the
        history trim and result pruning every SWEEP_EVERY_S. An idle pool costs Redis a few commands
        per second, whatever is parked."""
        period = self.cfg.pool.heartbeat / 3
        backoff = period
        next_hb = next_reap = next_sweep = 0.0
        while not self.stop_event.is_set():
            now = self.last_loop = time.monotonic()
            try:
                if self.redis_lost:
                    self.q.r.ping()
                    self.redis_lost, self.redis_back_at = False, now
                    self.log.info("housekeeper_redis_back")
                self.requeue_own()
                if now >= next_hb:
                    self.heartbeat()
                    next_hb = now + period
                if now >= next_reap:
                    self.reap(now)
                    next_reap = now + min(1.0, self.cfg.pool.heartbeat)
                if now >= next_sweep:
                    self.sweep()
                    next_sweep = now + max(SWEEP_EVERY_S, 3 * self.cfg.pool.heartbeat)
                self.redis_ok, self.unreplicated = True, None
                backoff = period
            except NotReplicated as e:  # Redis answers and ran it; no replica acknowledged yet
                self.redis_errors += 1
                if self.unreplicated is None:
                    self.log.warning("housekeeper_not_replicated", error=str(e))
                self.unreplicated = time.monotonic()
                backoff = min(backoff * 2, NOT_REPLICATED_RETRY_S)
            except redis.ResponseError as e:  # Redis answered, refusing (OOM, MISCONF, …): not unreachable
                self.redis_errors += 1
                message = redis_message(e)
                if self.refused is None or self.refused[1] != message:
                    self.log.warning("housekeeper_redis_refused", error=message)
                self.refused = (time.monotonic(), message)
                # nobody's heartbeat may be landing either: keys that expire now say nothing of their
                # hosts, so judging waits as after an outage (``redis_back_at`` once a ping answers)
                self.redis_lost = True
                backoff = min(backoff * 2, self.backoff_max)
            except redis.RedisError as e:
                self.redis_errors += 1
                if self.redis_ok:
                    self.log.warning("housekeeper_redis_error", error=str(e))
                self.redis_ok, self.redis_lost = False, True
                backoff = min(backoff * 2, self.backoff_max)
            except Exception:
                self.log.exception("housekeeper_step_failed")
                backoff = min(backoff * 2, self.backoff_max)
            if backoff == period:
                wait = min(next_hb, next_reap) - time.monotonic()
            else:
                wait = backoff
            self.wake.wait(max(0.0, wait))
            self.wake.clear()

    def requeue_own(self) -> None:
        """Our dead slots' lists, in the order they died. A Redis error leaves the rest for the next
        turn (requeue.lua is idempotent per entry, so a half-done list is simply done again)."""
        while True:
            try:
                self.retry.append(self.inbox.get_nowait())
            except _queue.Empty:
                break
        while self.retry:
            proc, reason, slot = self.retry[0]
            try:
                res = self.q.requeue_list_many(proc, reason, **self._requeue_args())
            except redis.RedisError as e:
                self.log.warning("requeue_deferred_redis_down", list=proc, error=str(e))
                raise
            for job_id, verdict in res:
                if verdict in ("requeued", "failed", "raw"):
                    self.reclaimed += 1
                self.log.info("requeued", job_id=job_id, **self._identity(job_id), slot=slot or None, list=proc,
                              reason=reason, verdict=verdict)
            self.retry.pop(0)
            self.done += 1

    def _requeue_args(self) -> dict:
        return dict(crash_cap=self.cfg.pool.crash_cap, lock_ttl_ms=self.cfg.lock_ttl_ms,
                    retention_s=int(self.cfg.pool.result_retention))

    def _identity(self, job_id: str) -> dict:
        """kind, user, attempt for a log line about a job known here only by its id."""
        try:
            kind, user, attempts = self.q.r.hmget(self.k.job(job_id), "kind", "user", "attempts")
        except redis.RedisError:
            kind = user = attempts = None
        dec = lambda b: b.decode("utf-8", "replace") if b else None  # noqa: E731
        return dict(kind=dec(kind), user=dec(user), attempt=int(attempts) if attempts else None)

    def heartbeat(self) -> None:
        """Refresh the host key only while it is still ours. A takeover by a newer incarnation (this
        process stalled past the key's lifetime and another daemon started with our host_id) wins:
        the key is given back and ``taken_over`` tells the main loop to stop this daemon."""
        sent = time.monotonic()  # the fence counts from the send: the key lives PX from its arrival, later
        res = self.q.r.set(self.k.host(self.host), self.holder, px=self.hb_ttl_ms, get=True)
        cur = res.decode() if isinstance(res, bytes) else res
        if cur is None and not self.lapsed:
            # Our key had expired: to the other hosts we were dead, and a reaper may have requeued
            # our lists already (this thread or the whole daemon was stalled). The main loop fences.
            self.lapsed = True
            self.log.error("host_key_lapsed", host_id=self.host)
        if cur not in (None, self.holder):
            self.q.r.set(self.k.host(self.host), cur, px=self.hb_ttl_ms)
            if self.taken_over is None:
                self.log.error("host_id_taken_over", host_id=self.host, holder=cur)
                self.taken_over = cur
            return
        self.last_ok = sent
        if self.slots_summary is not None:  # the host's slot table, same lifetime as its heartbeat
            p = self.q.r.pipeline(transaction=False)
            p.set(self.k.host_slots(self.host), self.slots_summary(), px=self.hb_ttl_ms)
            p.zadd(self.k.hosts, {self.host: int(time.time() * 1000)})  # status's list of hosts to look up
            p.execute()

    def reap(self, now: float) -> None:
        r = self.q.r
        if not r.set(self.k.reaper, self.holder, nx=True, px=int(max(2000, self.cfg.pool.heartbeat * 1000))):
            if (r.get(self.k.reaper) or b"").decode() != self.holder:
                return
        self.q.promote_due()
        self.queue_runs()
        self._quiet: bool | None = None  # quiet_enough(), asked at most once per reap
        lists = {p.decode(): Owner.decode(v.decode()) for p, v in r.hgetall(self.k.proclists).items()}
        if now - self.last_full_scan > FULL_SCAN_EVERY_S:
            self.last_full_scan = now
            for name in r.scan_iter(match=self.k.proc_pattern, count=5000):  # ~1 ms of Redis a step
                n = name.decode()
                if n not in lists:
                    lists[n] = Owner.from_list_name(n)  # never registered: its owner is only its name
        # Every owner's host key in one round trip, not one per list (each requeue re-checks it anyway)
        hosts = sorted({owner.host for owner in lists.values()})
        held = {h: v.decode() if v else None for h, v in zip(hosts, r.mget([self.k.host(h) for h in hosts]))} \
            if hosts else {}
        dead: list[tuple[str, Owner, str]] = []
        for proc, owner in lists.items():
            self.check_list(proc, owner, now, held, dead)
        self.requeue_dead(dead)
        if self._quiet:
            self.judging_deferred = False
        for group, n in stream_trim.trim(r, self.k, self.cfg.events.max_backlog, self.log).lost.items():
            self.events_dropped[group] = self.events_dropped.get(group, 0) + n

    def queue_runs(self) -> None:
        """Go on queuing sealed runs whose submitter stopped half way (died, or its retries gave
        up): a bounded share a pass (``run_submit.queue_pending``; each chunk atomic, from the run's
        cursor, so a submitter still at it and this pass never queue a job twice)."""
        if self._runs is None:
            from tender_pool.client.run_submit import RunWriter
            from tender_pool.store import scripts

            r = self.q.r
            self._runs = RunWriter(r, self.k, scripts.register(r, "run_queue"), 0, 0, tries=1)
        from tender_pool.client.run_submit import queue_pending

        sec, usec = self.q.r.time()
        n = queue_pending(self._runs, self.cfg.pool.result_retention, RUN_QUEUE_AFTER_MS,
                          int(sec) * 1000 + int(usec) // 1000, RUN_QUEUE_CALLS)
        if n:
            self.log.info("run_queuing_resumed", chunks=n)

    def requeue_dead(self, lists: list[tuple[str, Owner, str]]) -> None:
        """Dead owners' lists ``(list, owner, the holder requeue.lua must not find in its host key)``,
        all together: read in one round trip, their entries requeued ~200 a round trip
        (``Queue.requeue_lists_many``), so a pass over many dead hosts' lists, most of them empty or
        holding one entry, costs a few round trips, not a few per list."""
        if not lists:
            return
        results = self.q.requeue_lists_many([(proc, owner.host, check) for proc, owner, check in lists], "crash",
                                            **self._requeue_args())
        for (proc, owner, _), pairs in zip(lists, results):
            encoded = owner.encode()
            for entry, verdict in pairs:
                if verdict in ("requeued", "failed", "raw"):
                    self.reclaimed += 1
                    self.log.warning("reclaimed", job_id=entry, list=proc, owner=encoded, verdict=verdict)

    def quiet_enough(self, now: float) -> bool:
        """May a missing host key be taken as its host's death? Only if every host has had, since
        Redis last came back, a whole key lifetime plus one retry interval to renew it."""
        if self._quiet is None:
            window = self.hb_ttl_ms / 1000 + self.backoff_max + self.cfg.pool.heartbeat / 3
            uptime = float(self.q.r.info("server").get("uptime_in_seconds", math.inf))
            self._quiet = now - self.redis_back_at >= window and uptime >= window
            if not self._quiet and not self.judging_deferred:
                self.judging_deferred = True
                self.log.warning("reclaim_deferred_after_redis_outage", wait_s=round(window, 1),
                                 redis_uptime_s=uptime)
        return self._quiet

    def sweep(self) -> None:
        """Promote waiters whose user nobody holds (a release lost with a crash); trim history
        (``finished`` and its indexes, ``history_index.trim``) and index what an older version finished
        (``history_index.catch_up``, a batch a sweep until done)."""
        r = self.q.r
        for user in r.smembers(self.k.waitusers):
            promoted = self.q.unstick(user.decode(), self.cfg.lock_ttl_ms)
            if promoted:
                self.log.warning("lost_promotion_fixed", user=user.decode(), job_id=promoted)
        cutoff_ms = int((time.time() - self.cfg.pool.result_retention) * 1000)
        # hosts silent for an hour leave status's list (a live one is back at its next heartbeat)
        r.zremrangebyscore(self.k.hosts, "-inf", int(time.time() * 1000) - max(3_600_000, 10 * self.hb_ttl_ms))
        history_index.trim(r, self.k, cutoff_ms)
        history_index.catch_up(r, self.k)
        self.prune_results(cutoff_ms / 1000)

    def prune_results(self, cutoff_s: float) -> None:
        """parse_markdown output lives in results_dir/<job id>/; the job record expires after
        result_retention, and so do its files (by the directory's last change)."""
        root = self.cfg.pool.results_dir
        try:
            entries = list(os.scandir(root))
        except OSError:
            return
        for e in entries:
            try:
                if e.is_dir(follow_symlinks=False) and e.stat(follow_symlinks=False).st_mtime < cutoff_s:
                    shutil.rmtree(e.path, ignore_errors=True)
                    self.log.info("result_expired", job_id=e.name)
            except OSError:
                continue

    def ours(self, owner: Owner) -> bool:
        return owner.host == self.host and owner.incarnation == self.owner.incarnation

    def check_list(self, proc: str, owner: Owner, now: float, held: dict[str, str | None] | None = None,
                   dead: list[tuple[str, Owner, str]] | None = None) -> None:
        """``held``: host id → its host key's value as read at the start of this pass (else read here).
        ``dead``: a dead owner's list is added to it, for ``requeue_dead`` (else requeued here)."""
        if held is not None and owner.host in held:
            current = held[owner.host]
        else:
            current = self.q.r.get(self.k.host(owner.host))
            current = current.decode() if current else None
        # Our own lists: we know we are alive even if our host key lapsed (this thread stalled past
        # its TTL under load). Judging them dead would requeue jobs our slots are running.
        alive = self.ours(owner) or owner.holds(current)
        args = self._requeue_args()
        if not alive and not self.quiet_enough(now):
            return  # its key may have expired while nobody could renew it: judge later
        if not alive:
            # requeue.lua re-checks that GET host:<host> is not the holder we judged dead (for a list
            # known only by name: that the host key is still what we just read)
            check = owner.holder if not owner.partial else (current or "-")
            if dead is None:
                self.requeue_dead([(proc, owner, check)])
            else:
                dead.append((proc, owner, check))
            return
        stamp_now, entries = self.q.stamp(proc)
        for entry, stamped in entries:
            job_id = entry.decode("utf-8", "replace")
            timeout_ms, state = self.q.r.hmget(self.k.job(job_id), "timeout_ms", "state")
            limit = int(timeout_ms) if timeout_ms else int(max(self.cfg.lock_ttl_ms, 0))
            if stamp_now - stamped <= limit + STUCK_MARGIN_S * 1000:
                continue
            if state is not None and state.decode() in TERMINAL:
                # a finished job's leftover copy (a lost reply, a failover): dropped, never re-run,
                # and no reason to kill the slot that holds the list (it may be busy with another job)
                verdict = self.q.requeue(proc, entry, "deadline", list_dead=False, stamp=stamped, **args)
                self.log.warning("leftover_entry_dropped", job_id=job_id, list=proc, state=state.decode(), verdict=verdict)
                continue
            if self.ours(owner):
                self.log.error("stuck_slot", job_id=job_id, list=proc, age_ms=stamp_now - stamped)
                self.stuck.put(proc)  # the main loop kills that slot; its death path requeues the list
            else:
                verdict = self.q.requeue(proc, entry, "deadline", list_dead=False, stamp=stamped, **args)
                self.reclaimed += verdict in ("requeued", "failed")
                self.log.error("reclaimed_past_deadline", job_id=job_id, list=proc, verdict=verdict)
