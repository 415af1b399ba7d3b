"""The supervisor's housekeeping thread: host heartbeat, reaper, retry promotion, lost-promotion sweep.

Reclaim only on evidence of death, with a bounded delay:
- a slot of *this* supervisor that died: the supervisor's main loop saw it (waitpid) and requeued at
  once; the reaper is not involved;
- a processing list whose owner host no longer heartbeats (its ``host:<id>`` key expired or names
  another incarnation): requeued within heartbeat × 3 + one reaper period;
- an entry of a live owner far past its own hard deadline (stamp + the job's timeout + kill grace +
  ``STUCK_MARGIN``): requeued (remote) or its slot killed (ours, the death path then requeues).
Every requeue is requeue.lua, which re-checks the owner atomically; two reapers racing are harmless,
the ``reaper`` lease only saves work.

Fork safety: the main loop forks slots while this thread runs. The thread holds ``fork_lock`` for each
step, and the main loop takes it around ``fork()``, so a slot is never forked while this thread is in
the middle of a Redis call or a log write (a lock held at fork time stays held forever in the child).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from typing import Callable

import redis

from .config import Config
from .keys import Keys

STUCK_MARGIN_S = 30.0
FULL_SCAN_EVERY_S = 60.0
SWEEP_EVERY_S = 5.0


class Housekeeper(threading.Thread):
    def __init__(
        self,
        cfg: Config,
        queue,  # slots.queue.Queue, built for this thread alone
        holder: str,
        log,
        fork_lock: threading.Lock,
        kill_stuck: Callable[[str], None],
        slots_summary: Callable[[], bytes] | None = None,
    ):
        super().__init__(name="housekeeper", daemon=True)
        self.cfg = cfg
        self.q = queue
        self.k: Keys = queue.k
        self.host = cfg.pool.host_id
        self.holder = holder
        self.log = log
        self.fork_lock = fork_lock
        self.kill_stuck = kill_stuck  # main loop's callback: a list of ours is stuck
        self.stop_event = threading.Event()
        self.last_ok = time.monotonic()  # last successful heartbeat write
        self.last_loop = time.monotonic()  # last turn of the loop, Redis up or not: the daemon's watchdog
        self.redis_ok = True
        self.last_full_scan = 0.0
        self.reclaimed = 0
        self.redis_errors = 0  # for tender_pool_redis_errors_total{component="housekeeper"}
        self.slots_summary = slots_summary  # status_server.StatusBuilder.host_summary: slots:<host> for status --redis
        self.hb_ttl_ms = int(cfg.pool.heartbeat * 3 * 1000)

    def run(self) -> None:
        """Heartbeat every heartbeat/3 s; reap every heartbeat (capped at 1 s: a dead remote host's jobs
        come back within 3 heartbeats + 1 s); the waiter sweep and history trim every SWEEP_EVERY_S.
        An idle pool therefore costs Redis a few commands per second, whatever is parked."""
        period = self.cfg.pool.heartbeat / 3
        backoff = period
        next_hb = next_reap = next_sweep = 0.0
        while not self.stop_event.is_set():
            now = self.last_loop = time.monotonic()
            try:
                with self.fork_lock:
                    if now >= next_hb:
                        self.heartbeat()
                        next_hb = now + period
                    if now >= next_reap:
                        self.reap(now)
                        next_reap = now + min(1.0, self.cfg.pool.heartbeat)
                    if now >= next_sweep:
                        self.sweep()
                        next_sweep = now + max(SWEEP_EVERY_S, 3 * self.cfg.pool.heartbeat)
                self.redis_ok = True
                backoff = period
            except redis.RedisError as e:
                self.redis_errors += 1
                if self.redis_ok:
                    self.log.warning("housekeeper_redis_error", error=str(e))
                self.redis_ok = False
                backoff = min(backoff * 2, 5.0)
            except Exception:
                self.log.exception("housekeeper_step_failed")
                backoff = min(backoff * 2, 5.0)
            self.stop_event.wait(min(backoff, max(0.01, min(next_hb, next_reap) - time.monotonic())) if backoff == period else backoff)

    def heartbeat(self) -> None:
        """Refresh the host key only while it is still ours (a takeover by a newer incarnation wins)."""
        res = self.q.r.set(self.k.host(self.host), self.holder, px=self.hb_ttl_ms, get=True)
        cur = res.decode() if isinstance(res, bytes) else res
        if cur not in (None, self.holder):
            self.log.error("host_id_taken_over", host_id=self.host, holder=cur)
            self.q.r.set(self.k.host(self.host), cur, px=self.hb_ttl_ms)
            return
        self.last_ok = time.monotonic()
        if self.slots_summary is not None:  # the host's slot table, same lifetime as its heartbeat
            self.q.r.set(self.k.host_slots(self.host), self.slots_summary(), px=self.hb_ttl_ms)

    def reap(self, now: float) -> None:
        r = self.q.r
        if not r.set(self.k.reaper, self.holder, nx=True, px=int(max(2000, self.cfg.pool.heartbeat * 1000))):
            if (r.get(self.k.reaper) or b"").decode() != self.holder:
                return
        self.q.promote_due()
        lists = {p.decode(): v.decode() for p, v in r.hgetall(self.k.proclists).items()}
        if now - self.last_full_scan > FULL_SCAN_EVERY_S:
            self.last_full_scan = now
            for name in r.scan_iter(match=self.k.proc_pattern, count=500):
                n = name.decode()
                if n not in lists:
                    lists[n] = self._owner_from_name(n)
        for proc, owner in lists.items():
            self.check_list(proc, owner)

    def sweep(self) -> None:
        """Promote waiters whose user nobody holds (a release lost with a crash); trim history."""
        r = self.q.r
        for user in r.smembers(self.k.waitusers):
            promoted = self.q.unstick(user.decode(), self.cfg.lock_ttl_ms)
            if promoted:
                self.log.warning("lost_promotion_fixed", user=user.decode(), job_id=promoted)
        cutoff_ms = int((time.time() - self.cfg.pool.result_retention) * 1000)
        r.zremrangebyscore(self.k.finished, "-inf", cutoff_ms)
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

    def _owner_from_name(self, proc: str) -> str:
        # proc:<host>:<incarnation>:<slot>.<n> — an unregistered list: its owner is only its name
        parts = proc.split(":proc:", 1)[1].split(":")
        return f"{parts[0]}\t?{parts[1] if len(parts) > 1 else ''}"

    def check_list(self, proc: str, owner: str) -> None:
        host, _, holder = owner.partition("\t")
        current = self.q.r.get(self.k.host(host))
        current = current.decode() if current else None
        alive = current is not None and (current == holder or (holder.startswith("?") and current.startswith(holder[1:] + "|")))
        if host == self.host and (holder == self.holder or holder == f"?{self.holder.split('|')[0]}"):
            # Our own lists: we know we are alive even if our host key lapsed (this thread stalled past
            # its TTL under load). Judging them dead would requeue jobs our slots are running.
            alive = True
        args = dict(
            crash_cap=self.cfg.pool.crash_cap, lock_ttl_ms=self.cfg.lock_ttl_ms, retention_s=int(self.cfg.pool.result_retention)
        )
        if not alive:
            # requeue.lua re-checks that GET host:<host> is not the holder we judged dead
            check = holder if not holder.startswith("?") else (current or "-")
            for entry, verdict in self.q.requeue_list(proc, "crash", owner_host=host, owner_incarnation=check, **args):
                if verdict in ("requeued", "failed", "raw"):
                    self.reclaimed += 1
                    self.log.warning("reclaimed", job_id=entry, list=proc, owner=owner, verdict=verdict)
            return
        stamp_now, entries = self.q.stamp(proc)
        for entry, stamped in entries:
            job_id = entry.decode("utf-8", "replace")
            timeout_ms = self.q.r.hget(self.k.job(job_id), "timeout_ms")
            limit = int(timeout_ms) if timeout_ms else int(max(self.cfg.lock_ttl_ms, 0))
            if stamp_now - stamped <= limit + STUCK_MARGIN_S * 1000:
                continue
            if host == self.host and holder == self.holder:
                self.log.error("stuck_slot", job_id=job_id, list=proc, age_ms=stamp_now - stamped)
                self.kill_stuck(proc)
            else:
                verdict = self.q.requeue(proc, entry, "deadline", list_dead=False, **args)
                self.reclaimed += verdict in ("requeued", "failed")
                self.log.error("reclaimed_past_deadline", job_id=job_id, list=proc, verdict=verdict)
