"""Settle → release: record an attempt's outcome and free what it held, in one fenced script.

settle.lua records the verdict (completed, failed, cancelled, retry after a backoff, or requeue:
an interruption) only while the attempt's token still owns the job, and in the same step releases
the user's lock or the kind's semaphore place (handing it to the user's next waiter) and clears
the slot's busy state. A busy slot settles with settle_take.lua instead: the same settle, then a
take of what is already queued (never a wait), so the steady state is one round trip per job; its
take part is read by ``intake.Intake.read`` into the ``Next`` attempt this returns.

Hazards this module owns:
- A lost reply: the settle is retried with the same arguments (``retry.Retry``) until Redis takes
  it, so a finished job is never thrown away; a retry that answers ``fenced`` may be our own first
  try having landed, which the job's state and attempt count tell (``_landed``).
- A fenced attempt's files are discarded (never published); its ``Finished`` says ``FENCED``.
- The slot → supervisor reports of a job go out in one write: ``Finished`` is held for the next
  report (the next job's ``Busy``, or ``Idle``).
"""

from __future__ import annotations

import os
from typing import Callable

import redis

from tender_pool.store.config import Config
from tender_pool.store.outcomes import Status
from tender_pool.store.error_kinds import ErrorKind
from tender_pool.store.records import JobRecord
from tender_pool.store.handler_io import Outcome
from tender_pool.slots.reports import AttemptEnd, Finished, Idle

from tender_pool.slots import faults
from tender_pool.slots.answers import SettleAnswer, SettleReply, Started, Taken, TakeResult, Verdict
from tender_pool.slots.attempt import Ran
from tender_pool.slots.busy import BusyTracker
from tender_pool.slots.reports import Reporter
from tender_pool.slots.intake import Intake, Next
from tender_pool.slots.lock import Lock
from tender_pool.slots.queue import Queue
from tender_pool.slots.retry import Retry

_ENDS = {
    Verdict.COMPLETED: AttemptEnd.COMPLETED,
    Verdict.FAILED: AttemptEnd.FAILED,
    Verdict.CANCELLED: AttemptEnd.CANCELLED,
    Verdict.RETRY: AttemptEnd.RETRIED,
    Verdict.REQUEUE: AttemptEnd.INTERRUPTED,
}
# What the job hash shows once a settle with this verdict landed (for a reply lost on the way back)
_LANDED_STATE = {
    Verdict.COMPLETED: "completed",
    Verdict.FAILED: "failed",
    Verdict.CANCELLED: "cancelled",
    Verdict.RETRY: "queued",
    Verdict.REQUEUE: "queued",
}


class Settle:
    def __init__(self, cfg: Config, q: Queue, proc: str, kinds_: dict, *, worker_id: str, log, lock: Lock,
                 retry: Retry, reporter: Reporter, busy: BusyTracker, intake: Intake,
                 title: Callable[[str], None]):
        self.cfg = cfg
        self.q = q
        self.proc = proc
        self.kinds = kinds_
        self.worker_id = worker_id
        self.log = log
        self.lock = lock
        self.retry = retry
        self.reporter = reporter
        self.busy = busy
        self.intake = intake
        self.title = title
        self.retention = int(cfg.pool.result_retention)

    def verdict(self, job: JobRecord, outcome: Outcome) -> tuple[Verdict, int]:
        """The settle verdict for an outcome, and the retry backoff in ms."""
        pool = self.cfg.pool
        if outcome.status == Status.COMPLETED:
            return Verdict.COMPLETED, 0
        if outcome.status == Status.INTERRUPTED:
            return Verdict.REQUEUE, 0
        assert outcome.error is not None
        if outcome.error.kind == ErrorKind.CANCELLED.value:
            return Verdict.CANCELLED, 0
        try:
            retried = ErrorKind(outcome.error.kind).retried
        except ValueError:
            retried = False
        if retried and not outcome.final and job.tries + 1 < pool.max_tries:
            return Verdict.RETRY, int(min(pool.retry_backoff * 2**job.tries, pool.retry_backoff_max) * 1000)
        return Verdict.FAILED, 0

    def settle(self, nxt: Next, ran: Ran, take_next: bool = False) -> Next | None:
        """Record the outcome and release the lock, in one fenced script; retried until Redis takes it.
        With ``take_next`` the same script starts the next queued job (settle_take.lua): returned,
        for the slot to run. ``ran.input_hash``: what the attempt recorded of its input, stored with
        a completed run item (and its ``done:`` key) in place of the submit-time one."""
        job, st, outcome = nxt.job, nxt.started, ran.outcome
        verdict, backoff_ms = self.verdict(job, outcome)
        common = dict(
            result=outcome.result,
            error=outcome.error,
            backoff_ms=backoff_ms,
            counts_try=outcome.ran and outcome.status == Status.FAILED,  # a business failure of a handler that ran
            launched=ran.launched,
            input_hash=ran.input_hash,
            # the inline copy of a parse_markdown result, kept by the same script that completes the job
            markdown=(st.attempt, outcome.inline) if outcome.inline is not None and verdict is Verdict.COMPLETED
            else None,
        )
        suffix = os.urandom(6).hex() if take_next else ""
        lost_reply = False

        def once(retry: bool) -> tuple[SettleReply, TakeResult | None]:
            nonlocal lost_reply
            lost_reply = lost_reply or retry
            if take_next:
                return self.q.settle_take(self.proc, job, st.token, verdict, self.lock.args, suffix, retry=retry,
                                          **common)  # type: ignore[arg-type]
            return self.q.settle(self.proc, job, st.token, verdict, lock_ttl_ms=self.lock.ttl_ms,
                                 retention_s=self.retention, worker=self.worker_id,
                                 **common), None  # type: ignore[arg-type]

        reply, taken = self.retry.call(once, what="settle", tries=1000, event="settle_retry", job_id=job.id,
                                       kind=job.kind, user=job.user, attempt=st.attempt)
        if isinstance(taken, Taken) and isinstance(taken.started, Started):
            faults.checkpoint("after_settle_take")  # settled and the next attempt started, not spawned
        if not reply.answer and lost_reply and self._landed(nxt, verdict, outcome, ran.launched):
            reply = SettleReply(SettleAnswer.OK, "")  # our first try did it; only its reply was lost
            self.log.info("settle_reply_lost", job_id=job.id, kind=job.kind, user=job.user, attempt=st.attempt,
                          verdict=verdict.value)
        if not reply.answer:
            self.kinds[job.kind].discard(job, st.attempt, outcome)  # never publish a fenced attempt's files
        self.log.info("settled", job_id=job.id, kind=job.kind, user=job.user, attempt=st.attempt,
                      verdict=verdict.value if reply.answer else "fenced", promoted=reply.promoted or None)
        self.release(job, ran, _ENDS[verdict] if reply.answer else AttemptEnd.FENCED)
        following = self.intake.read(taken) if taken is not None else None
        if following is None:
            self.reporter.send(Idle())
            self.title("idle")
        return following

    def release(self, job: JobRecord, ran: Ran, end: AttemptEnd) -> None:
        """The attempt's end, for the supervisor: held for the next report (one write per job)."""
        outcome = ran.outcome
        finished = Finished(
            kind=job.kind,
            outcome=end,
            error_kind=outcome.error.kind if outcome.error else None,
            killed=outcome.signals,
            progress_events=ran.progress_events,
            progress_dropped=ran.progress_dropped,
            **self.busy.finished_fields(job, outcome),
        )
        self.reporter.send(finished, hold=True)

    def put_back(self, nxt: Next) -> None:
        """A job the last settle started, not to be run (abort): back to ready, its start taken back."""
        self.settle(nxt, Ran(Outcome(Status.INTERRUPTED, ran=False), launched=False))

    def _landed(self, nxt: Next, verdict: Verdict, outcome: Outcome, launched: bool) -> bool:
        """After a retried settle answered ``fenced``: does the job show that our first try landed?
        No newer attempt started (``attempts`` is still ours) and the state is what we asked for."""
        try:
            state, attempts, error_kind = self.retry.call(lambda _: self.q.attempt_end(nxt.job.id), what="attempt_end",
                                                          tries=20, cap=2.0, write=False)
        except redis.ConnectionError:
            return False
        ours = nxt.started.attempt if launched else nxt.started.attempt - 1
        same_error = outcome.error is None or error_kind == outcome.error.kind
        return attempts == ours and state == _LANDED_STATE[verdict] and same_error
