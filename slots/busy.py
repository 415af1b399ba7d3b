"""A slot's busy state in Redis (``busy:<worker id>``) and the per-attempt figures its reports carry.

Owns three rules of the observability issue:
- the state is written only once the slot holds the user's lock (lib/attempt.lua ``start_job`` writes it in
  the step that takes the lock: take.lua and settle_take.lua build it from the job record, take.lua
  from ``state_json``), with the job's Redis-TIME start, so ``status --redis`` and an admin page
  never show a job as running on a slot that is still waiting for its user;
- it is cleared the moment the attempt ends, by settle.lua (and busy_clear.lua on an exception),
  which compare the job id: a late clean-up of an old attempt cannot erase the state of the next
  job the same slot already started; settle_take.lua replaces it with the next job's state in the
  same step (or clears it, the same way, when nothing was queued);
- it is cleared unconditionally at slot start and stop (a worker id is reused by each incarnation of
  the slot, and a duplicate live host_id is refused at start, so nobody else owns it), and it expires
  after the longest job timeout + 120 s, so a crash never leaves a permanent "busy".

Observability must never break a job: every Redis error here is logged and swallowed.

Hazard: built in the slot process after the fork, on the slot's own Redis client.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

import msgspec
import redis

from tender_pool.store.config import Config
from tender_pool.store.keys import Keys
from tender_pool.store.outcomes import Status
from tender_pool.store.records import BusyState, JobRecord
from tender_pool.store.handler_io import Outcome

from tender_pool.store import scripts

BUSY_MARGIN_S = 120.0
_enc = msgspec.json.Encoder()


def busy_ttl_ms(cfg: Config) -> int:
    """Longest job timeout + 120 s: past that no attempt can still be running."""
    longest = max([cfg.extract.timeout, *(h.timeout for h in cfg.handlers.values())])
    return int((longest + BUSY_MARGIN_S) * 1000)


class BusyTracker:
    def __init__(
        self, client: redis.Redis, keys: Keys, worker_id: str, cfg: Config, log: Any,
        on_redis_error: Callable[[redis.RedisError], None] | None = None,
    ):
        self.r = client
        self.k = keys
        self.worker_id = worker_id
        self.key = keys.busy(worker_id)
        self.ttl_ms = busy_ttl_ms(cfg)
        self.log = log
        self.on_redis_error = on_redis_error or (lambda e: None)  # the slot counts and reconciles
        self._clear = scripts.register(client, "busy_clear")["busy_clear"]
        self._reset_attempt()

    def _reset_attempt(self) -> None:
        self.t0: float | None = None
        self.started_ms = 0
        self.created_ms = -1
        self.attempt = 0

    # --- Redis state ------------------------------------------------------------------------------

    def clear_stale(self) -> None:
        """At slot start and stop: whatever a previous incarnation of this slot left is stale."""
        try:
            self.r.delete(self.key)
        except redis.RedisError as e:
            self.log.warning("busy_state_clear_failed", error=str(e))
            self.on_redis_error(e)

    def state_json(self, job: JobRecord) -> bytes:
        """The busy state take.lua writes once it gives the slot the user's lock (it fills in the
        attempt and the Redis-TIME ``started_at``): no extra round trip per job. (take.lua and
        settle_take.lua build the same object in Lua: the job is only known there.)"""
        st = BusyState(
            worker=self.worker_id,
            pid=os.getpid(),
            kind=job.kind,
            job_id=job.id,
            user=job.user,
            file=_file_of(job),
            attempt=0,
        )
        return _enc.encode(st)

    def started(self, attempt: int, started_ms: int, created_ms: int) -> None:
        """take.lua returned ``run``: remember this attempt's figures for its Finished report."""
        self._reset_attempt()
        self.t0 = time.monotonic()
        self.attempt = attempt
        self.started_ms, self.created_ms = started_ms, created_ms

    def clear(self, job_id: str) -> bool:
        """Guarded: deletes only while the state still names ``job_id``. True when deleted."""
        try:
            return bool(self._clear(keys=[self.key], args=[job_id]))
        except redis.RedisError as e:
            self.log.warning("busy_state_clear_failed", job_id=job_id, error=str(e))
            self.on_redis_error(e)
            return False

    def note_parked(self, reason: str, detail: str) -> None:
        """A job parked behind dependency ``detail``: index that id in ``depwaits`` so the status
        and metrics can count dependents without a SCAN (pruned by the reader when the list is gone)."""
        if reason != "dependency" or not detail:
            return
        try:
            self.r.sadd(self.k.depwaits, detail)
        except redis.RedisError as e:
            self.log.warning("depwaits_write_failed", dependency=detail, error=str(e))
            self.on_redis_error(e)

    # --- figures for the Finished report ----------------------------------------------------------

    def finished_fields(self, job: JobRecord, outcome: Outcome) -> dict[str, Any]:
        """Keyword arguments for ``types.Finished``: duration, queue wait (first attempt only) and,
        for a completed parse_markdown job, the extraction figures: pages and format from its result,
        the input's size from a stat (the slot never reads the document itself)."""
        out: dict[str, Any] = {}
        if self.t0 is not None:
            out["duration_s"] = round(time.monotonic() - self.t0, 6)
        if self.attempt == 1 and self.created_ms >= 0 and self.started_ms >= self.created_ms:
            out["queue_wait_s"] = (self.started_ms - self.created_ms) / 1000.0
        if job.kind == "parse_markdown" and outcome.status == Status.COMPLETED:
            res = outcome.result or {}
            try:
                size = os.path.getsize(_file_of(job) or "")
            except OSError:
                size = 0
            out.update(pages=int(res.get("pages") or 0), input_bytes=size, format=res.get("format"))
        return out


def _file_of(job: JobRecord) -> str | None:
    f = job.payload.get("file") if isinstance(job.payload, dict) else None
    return f if isinstance(f, str) else None
