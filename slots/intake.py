"""Claim → take: how an entry gets into the slot's processing list and becomes a started attempt.

An idle slot claims with ``BLMOVE`` (interactive ready:hi first), then take.lua starts what it
got in one round trip: the job's stamp, its dependencies, the user's lock or the kind's semaphore
(``lock.py``), its attempt token and its busy state, and the job record comes back with the
answer. ``BLMOVE`` cannot run inside Lua, so the claim and the take are two steps; an entry left
between them is the one non-atomic gap (the supervisor or the reaper recovers it). A busy slot's
settle takes the next job in the same script (settle_take.lua): its take part is read here too
(``read``), so every take answer is turned into the slot's next step in one place.

What a take answers, and what becomes of it here:
- ``Taken`` with ``Started``: a ``Next`` for the slot to run;
- ``Taken`` with a park or an end at start: reported (``Finished``), nothing to run;
- ``Taken`` whose hash the decoder refuses: a ``Next`` carrying its outcome (failed,
  undecodable), settled without running so its lock is released;
- ``BadRecord`` (a hash take.lua cannot start: no user, kind or state, or an ``after`` that is no
  list of ids): dead-lettered with the decoder's reason; take.lua is the one script that starts a job;
- ``RawEntry``: a producer's raw JSON, adopted as a job (or dead-lettered);
- ``NoLease``: our host's lease is lapsing: the entry goes back, and nothing is claimed until
  the lease is renewed (``lock.Lock``); ``Empty``: the next claim goes straight to ``BLMOVE``.

Before its first claim the slot registers its list in ``proclists``; after any Redis error it
reconciles the list (anything in it between jobs is put back) before it claims again.
"""

from __future__ import annotations

import os
from typing import Callable

import msgspec
import redis

from tender_pool.store.config import Config
from tender_pool.store.keys import Keys
from tender_pool.store.outcomes import Requeue, Status
from tender_pool.store.error_kinds import ErrorKind
from tender_pool.store.records import JobError, JobRecord
from tender_pool.store.handler_io import Outcome
from tender_pool.slots.reports import AttemptEnd, Finished

from tender_pool.slots import faults
from tender_pool.slots.answers import (
    BadRecord,
    Empty,
    Ended,
    NoLease,
    Parked,
    RawEntry,
    Started,
    StartResult,
    Taken,
    TakeResult,
)
from tender_pool.slots.busy import BusyTracker
from tender_pool.slots.reports import Reporter
from tender_pool.slots.lock import Lock
from tender_pool.slots.queue import Queue, Undecodable, decode_job, decode_submit, dependency_cycle
from tender_pool.slots.retry import Retry


class Next(msgspec.Struct, frozen=True):
    """A started attempt, for the slot to run next: its job and what its start answered.
    ``outcome``: already decided, so it is settled without running (a job take.lua started
    whose hash the decoder refuses)."""

    job: JobRecord
    started: Started
    outcome: Outcome | None = None


class Intake:
    def __init__(self, cfg: Config, q: Queue, proc: str, list_owner: str, *, worker_id: str, log, lock: Lock,
                 retry: Retry, reporter: Reporter, busy: BusyTracker, stopping: Callable[[], bool],
                 sleep: Callable[[float], None]):
        self.cfg = cfg
        self.q = q
        self.proc = proc  # this incarnation's processing list
        self.list_owner = list_owner  # keys.Owner, encoded: our proclists value ("" = registered for us)
        self.worker_id = worker_id
        self.log = log
        self.lock = lock
        self.retry = retry
        self.reporter = reporter
        self.busy = busy
        self.stopping = stopping
        self.sleep = sleep  # an idle wait: ends early on a stop request
        self.retention = int(cfg.pool.result_retention)
        self.reconcile_due = True  # before the first claim: a previous incarnation may have left entries
        self.queue_empty = False  # the last take found nothing: go straight to the blocking BLMOVE

    def claim(self) -> Next | None:
        """Claim one entry and start it: the started attempt to run, or None (nothing claimed, or
        what was claimed is parked, ended, adopted, dead-lettered or put back: each reported)."""
        if self.list_owner and not self.registered():
            return None
        if self.reconcile_due:
            self.reconcile()
        if self.lock.lapsed and not self.lock.renewed():
            self.sleep(self.lock.poll_every)
            return None
        entry = self.q.claim(self.proc, self.cfg.pool.claim_timeout, interactive_first=not self.queue_empty)
        self.queue_empty = False
        if entry is None:
            return None
        faults.checkpoint("after_claim")
        if self.stopping():
            if entry == Keys.WAKE.encode():
                self.q.drop_wake(self.proc)  # a wake token only tells a claiming slot to look at ready:hi
            else:
                self.unclaim(entry)
            return None
        if not entry:  # an empty id from a producer's bug: to take.lua b"" would mean "take the next one"
            self.load(entry, {})  # dead-lettered as undecodable
            return None
        return self.read(self.take(entry))  # take.lua drops a wake token and claims instead

    def take(self, entry: bytes) -> TakeResult:
        """take.lua for ``entry`` (claimed by BLMOVE), retried with the same token suffix after a
        lost reply (the retry adopts what our list holds)."""
        suffix = os.urandom(6).hex()
        shown = entry[:200].decode("utf-8", "replace")
        return self.retry.call(lambda retry: self.q.take(self.proc, self.lock.args, suffix, entry, retry=retry),
                               what="take.lua", tries=20, event="start_retry", job_id=shown, kind=None, user=None,
                               attempt=None)

    def read(self, t: TakeResult) -> Next | None:
        """What a take answered (take.lua's, or settle_take.lua's take part) → the next attempt."""
        if isinstance(t, Empty):
            self.queue_empty = True
            return None
        if isinstance(t, NoLease):
            if t.entry:  # claimed by our BLMOVE (or found by a retry), not started by us: back to ready
                self.unclaim(t.entry)
            self.lock.refused()
            return None
        if isinstance(t, RawEntry):
            self.load(t.entry, {})
            return None
        if isinstance(t, BadRecord):  # no user, kind or state, or an `after` that is no list of ids
            self.load(t.entry, t.record)
            return None
        assert isinstance(t, Taken)
        try:
            job = decode_job(t.record)
        except Undecodable as e:
            return self.undecodable(t, str(e))
        faults.checkpoint("after_stamp")
        if not isinstance(t.started, Started):
            self.report_not_run(job, t.started)
            return None
        return Next(job, t.started)

    def undecodable(self, t: Taken, reason: str) -> Next | None:
        """take.lua started a job whose hash the decoder refuses (a hand-edited hash): it is to be
        failed, fenced as any attempt, so its lock is released."""
        rec = {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in t.record.items()}
        job = JobRecord(id=t.entry.decode("utf-8", "replace"), kind=rec.get("kind", "?"), user=rec.get("user", ""),
                        payload={}, run=rec.get("run") or None)
        self.log.warning("dead_letter", job_id=job.id, entry=job.id, reason=reason, kind=job.kind, user=job.user,
                         attempt=None)
        if not isinstance(t.started, Started):
            return None
        err = JobError(ErrorKind.UNDECODABLE.value, reason)
        return Next(job, t.started, Outcome(Status.FAILED, error=err, final=True, ran=False))

    def report_not_run(self, job: JobRecord, st: StartResult) -> None:
        if isinstance(st, Parked):
            self.log.info("parked", job_id=job.id, kind=job.kind, user=job.user, attempt=job.attempts,
                          reason=st.reason, on=st.on)
            self.busy.note_parked(st.reason, st.on)
            self.reporter.send(Finished(kind=job.kind, outcome=AttemptEnd.PARKED, park_reason=st.reason))
        elif isinstance(st, Ended):
            self.log.info("ended_at_start", job_id=job.id, kind=job.kind, user=job.user, attempt=job.attempts,
                          state=st.state, error_kind=st.error_kind, message=st.message)
            self.reporter.send(Finished(kind=job.kind, outcome=AttemptEnd(st.state), error_kind=st.error_kind))
        else:  # Stale: another entry owns it; nothing to count
            self.log.info("start_skipped", job_id=job.id, result=type(st).__name__.lower(),
                          state=getattr(st, "state", None))

    def load(self, entry: bytes, h: dict[bytes, bytes]) -> None:
        """A claimed entry take.lua did not start: a producer's raw entry (``h`` empty: no job hash)
        is adopted as a job, or dead-lettered; a job hash take.lua cannot start (``h``, as it read
        it) is dead-lettered, with the decoder's reason where it has one."""
        try:
            if not h:
                req = decode_submit(entry)  # a raw message from a producer that can only LPUSH
                if req.kind not in self.cfg.kinds:
                    raise Undecodable(f"unknown kind {req.kind!r}")
                cycle = dependency_cycle(self.q, req)
                if cycle:
                    raise Undecodable(f"dependency_cycle: {' -> '.join(cycle)}")
                new_id = self.q.adopt(self.proc, entry, req)
                self.log.info("adopted_raw_entry", job_id=new_id, kind=req.kind, user=req.user, attempt=None)
                return None
            decode_job(h)  # raises with the decoder's reason, where it finds one
            raise Undecodable("job hash without a state: take.lua starts only a hash with user, kind and state")
        except Undecodable as e:
            self.q.deadletter(self.proc, entry, str(e), self.retention)
            shown = entry[:200].decode("utf-8", "replace")
            self.log.warning(
                "dead_letter", job_id=shown, entry=shown, reason=str(e), kind=None, user=None, attempt=None
            )
            self.reporter.send(Finished(kind="?", outcome=AttemptEnd.DEAD, error_kind=ErrorKind.UNDECODABLE.value))
            return None

    # --- our own list ---------------------------------------------------------------------------

    def unclaim(self, entry: bytes) -> str:
        """An entry we claimed but will not start: back to ready (an interruption, not a crash)."""
        return self.q.requeue(self.proc, entry, Requeue.UNCLAIM, list_dead=False, crash_cap=self.cfg.pool.crash_cap,
                              lock_ttl_ms=self.lock.ttl_ms, retention_s=self.retention)

    def registered(self) -> bool:
        """Register our processing list in ``proclists`` once, before the first claim."""
        try:
            self.q.register_list(self.proc, self.list_owner)
        except redis.RedisError as e:
            self.retry.on_error(e)
            self.log.warning("list_register_retry", list=self.proc, error=str(e))
            self.sleep(0.5)
            return False
        self.log.info("list_registered", list=self.proc)
        self.list_owner = ""
        return True

    def reconcile(self) -> None:
        """Between jobs our list must be empty: anything in it is an entry whose claim reply was lost,
        or an attempt whose settle a failover undid. Put each back (an interruption, not a crash)."""
        try:
            for entry in self.q.r.lrange(self.proc, 0, -1):
                verdict = self.unclaim(entry)
                self.log.warning("reconciled_entry", entry=entry[:200].decode("utf-8", "replace"), verdict=verdict)
        except redis.RedisError as e:
            self.retry.on_error(e)
            self.log.warning("reconcile_failed", error=str(e))
            return
        self.reconcile_due = False
