"""One slot: the claim → start (lock) → run → settle (release) loop, one job at a time.

A slot is forked by the supervisor and builds everything it uses after the fork (Redis client,
logger, its job kinds); it never touches an inherited one. It dies with the supervisor (PDEATHSIG,
plus a getppid() check each loop, as gunicorn's workers do).

Before its first claim it registers its processing list in ``proclists`` (so a reaper can always
find what it claims); while Redis is down it keeps beating and retries, and never claims unregistered.

What runs for a job is its kind's business (``kinds.py``): ``execute`` only launches what the kind
prepared, through ``runner``, and hands the result back to the kind to conclude.

Round trips per job: an idle slot blocks in BLMOVE, then take.lua starts what it got and returns
the job record (two round trips); a busy slot settles its job and starts the next queued one in
one step (settle_take.lua: one round trip per job). The slot → supervisor reports of a job go out
in one write: the previous job's ``Finished`` with the next one's ``Busy`` (after its spawn), or
``Finished`` with ``Idle``.

Redis errors: a lost connection or a timeout during start or settle is retried with the same
arguments (every script is safe to repeat), so a finished job is never thrown away; after any
Redis error, anywhere, the slot reconciles its processing list with what it runs (nothing, between
jobs) before claiming again, so an entry left behind by a lost reply or a failover is put back at
once instead of waiting for the deadline rule.

Signals (set a flag only; the loop acts):
- SIGTERM: drain — finish the current job, claim nothing more, exit 0.
- SIGUSR1: abort — kill the running attempt's group now and put the job back (an interruption, not
  a try), then exit 0. The supervisor sends it when ``drain_timeout`` runs out.
- SIGUSR2: the supervisor died (PDEATHSIG) — kill the job's and the kinds' groups, exit at once;
  but an attempt whose handler has already exited is settled first (``_on_parent_death``).
"""

from __future__ import annotations

import gc
import os
import signal
import time

import msgspec
import redis
import setproctitle

from tender_pool.store import logs
from tender_pool.store.config import Config
from tender_pool.store.keys import Keys
from tender_pool.store.error_kinds import ErrorKind
from tender_pool.store.handler_io import Outcome
from tender_pool.store.records import JobError, JobRecord
from tender_pool.store.types import (
    AttemptEnd,
    Beat,
    Busy,
    Finished,
    Idle,
    Preloaded,
    SlotExit,
)

from tender_pool.slots import faults, inputs, kinds, runner
from tender_pool.slots.busy import BusyTracker
from tender_pool.slots.progress import ProgressFeed
from tender_pool.store.replication import NotReplicated, retry_delay
from tender_pool.slots.function_import import ImportProblem
from tender_pool.slots.heartbeat import Reporter
from tender_pool.slots.queue import (
    BadRecord,
    Empty,
    Ended,
    NoLease,
    Parked,
    Queue,
    RawEntry,
    Run,
    SettleAnswer,
    SettleReply,
    StartResult,
    TakeArgs,
    TakeResult,
    Taken,
    Undecodable,
    Verdict,
    decode_job,
    decode_submit,
    dependency_cycle,
)

# Errors after which repeating the same call is right: the server may or may not have run it (a lost
# reply), and start.lua / settle.lua are safe to repeat. READONLY: we reached a demoted primary.
# NotReplicated: the write is on the primary but not yet on enough replicas; the retry (same token)
# is idempotent, and re-applies the write if a failover lost it.
RETRYABLE = (redis.ConnectionError, redis.TimeoutError, redis.exceptions.ReadOnlyError, NotReplicated)

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


class SlotBootError(Exception):
    """The slot cannot get ready to claim (a function handler's module does not import here)."""


class Slot:
    def __init__(
        self, cfg: Config, index: int, worker_id: str, proc: str, marker: str, report_fd: int, list_owner: str = ""
    ):
        self.cfg = cfg
        self.index = index
        self.worker_id = worker_id
        self.proc = proc  # this incarnation's processing list
        self.marker = marker  # TENDER_POOL_OWNER value for every child
        self.list_owner = list_owner  # keys.Owner, encoded: our proclists value ("" = registered for us)
        self.reporter = Reporter(report_fd)
        self.parent = os.getppid()
        self.stopping = False
        self.aborting = False
        self.retention = int(cfg.pool.result_retention)
        self.lock_ttl = cfg.lock_ttl_ms
        self.log = logs.configure(f"slot{index}").bind(slot=worker_id)
        self.last_beat = 0.0
        self.beat_every = max(0.2, cfg.pool.heartbeat / 3)
        self.last_cancel_poll = 0.0
        # The running attempt's poll: its job (cancel, token) and, with a fence, the host's lease —
        # an attempt stops once the host key has less left than one more poll plus a kill.
        self.poll_every = min(1.0, max(0.2, cfg.pool.heartbeat / 3))
        fence_on = bool(cfg.pool.fence)
        self.lease_min_ms = int((cfg.pool.kill_grace + self.poll_every + 0.1) * 1000) if fence_on else 0
        self.child_pid = 0  # the running attempt's process (= its group), for the parent-death handler
        self.spawning = False  # between the spawn and child_pid: a parent death waits for the pid
        self.unsettled = False  # an attempt's handler has exited and its settle has not returned yet
        self.orphaned = False  # the supervisor died (SIGUSR2 seen)
        self.progress: ProgressFeed | None = None  # the running attempt's fd-3 feed
        base_env = {k: v for k, v in os.environ.items() if k not in ("TENDER_POOL_FAULTS", "TENDER_POOL_FAULT_DIR")}
        self.kinds = kinds.build(cfg, base_env, log=self.log)
        self.q = Queue.for_config(cfg)
        self.busy = BusyTracker(self.q.r, self.q.k, worker_id, cfg, self.log, on_redis_error=self._redis_error)
        self.redis_errors = 0  # cumulative, sent with each Beat for tender_pool_redis_errors_total
        self.unreplicated = False  # retrying a write Redis ran but could not get replicated (sent with each Beat)
        self.reconcile_due = True  # before the first claim: a previous incarnation may have left entries
        self.take_args = take_args(cfg, worker_id, self.busy.ttl_ms, self._take_lease_ms())
        self.next: tuple[JobRecord, Run] | None = None  # started by the last settle_take, not yet run
        self.lease_lapsed = False  # a take found our host's lease too short: claim nothing until renewed
        self.queue_empty = False  # the last take found nothing: go straight to the blocking BLMOVE
        self.preload()

    def preload(self) -> None:
        """Import every function handler's module now, once, before the first claim: each attempt
        is then a fork of this process with the module already in it. The supervisor hears how
        each went (``Preloaded``, for ``tender-pool handlers``); a failure is a boot error: the
        config check imported it, so this slot's environment differs, and respawning cannot help."""
        imports: dict[str, str] = {}
        failed: SlotBootError | None = None
        for name, kind in self.kinds.items():
            if not isinstance(kind, kinds.FunctionKind):
                continue
            t0 = time.monotonic()
            try:
                kind.preload()
                imports[name] = ""
                self.log.info("function_imported", kind=name, function=kind.handler.function,
                              seconds=round(time.monotonic() - t0, 3))
            except ImportProblem as e:
                imports[name] = str(e)
                self.log.error("function_import_failed", kind=name, function=kind.handler.function, error=str(e),
                               exc_info=e.__cause__ or e)
                failed = failed or SlotBootError(f"handlers.{name}.function: {kind.handler.function}: {e}")
            self.beat(force=True)  # a slow import must not make the slot look silent
        if imports:
            self.reporter.send(Preloaded(imports))
            self.reporter.flush()
        if failed is not None:
            raise failed
        if imports:  # as the supervisor does before forking slots: the platform's objects become
            gc.collect()  # permanent, so no collection here or in an attempt's child walks (and
            gc.freeze()  # so copies) their pages

    def _take_lease_ms(self) -> int:
        """What our lease must have left for a take to start a job: enough for one more poll after
        the one that would stop it (``lease_min_ms``), so a job never starts only to be fenced at
        once; capped at 1.5 heartbeats, below the 2 a renewed key always has left (0: no fence)."""
        if not self.lease_min_ms:
            return 0
        hb_ms = self.cfg.pool.heartbeat * 1000
        return int(max(self.lease_min_ms, min(self.lease_min_ms + self.poll_every * 1000, 1.5 * hb_ms)))

    # --- process plumbing -------------------------------------------------------------------------

    def main(self) -> SlotExit:
        # The supervisor's death reaches us as SIGUSR2: kill the running job's group, then go. (A job
        # child is spawned without a PDEATHSIG of its own: posix_spawn cannot set one; see runner.)
        signal.signal(signal.SIGUSR2, self._on_parent_death)
        runner.set_pdeathsig(signal.SIGUSR2)
        if os.getppid() != self.parent:
            return SlotExit.OK
        runner.set_subreaper()
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C goes to the supervisor's decision
        signal.signal(signal.SIGUSR1, self._on_abort)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        self.title("idle")
        self.busy.clear_stale()
        self.reporter.send(Idle())
        backoff = 0.1
        # A job the last settle already started is run even when a SIGTERM came meanwhile (as one
        # that start.lua started before the flag was seen).
        while (not self.stopping or self.next is not None) and os.getppid() == self.parent:
            try:
                self.step()
                backoff = 0.1
            except redis.RedisError as e:
                self._redis_error(e)
                if isinstance(e, NotReplicated):  # Redis answers: see retry_delay
                    backoff = min(backoff, retry_delay(0, e))
                self.log.warning("redis_error", error=str(e), retry_in=backoff)
                self._sleep(backoff)
                backoff = min(backoff * 2, 5.0)
            except Exception:
                self.log.exception("slot_step_failed")
                self._sleep(backoff)
                backoff = min(backoff * 2, 5.0)
        self.put_back_next()
        self.busy.clear_stale()
        for kind in self.kinds.values():
            kind.close()
        self.reporter.flush()
        self.log.info("slot_exit", stopping=self.stopping)
        return SlotExit.OK

    def _on_term(self, *_: object) -> None:
        self.stopping = True

    def _on_parent_death(self, *_: object) -> None:
        """The supervisor died. A running attempt is killed with its group and the slot exits at
        once; the next supervisor requeues our list (an interruption). But an attempt whose handler
        has already exited (its pid a zombie or reaped, or its outcome on the way to the settle) is
        settled first: exiting then threw a finished attempt away, and the next supervisor ran the
        job again (issue 17 item 14, ``bench/soak_supervisor_kill.py``). The loop ends after that
        settle (``getppid`` changed; a next job the settle started is put back); an alarm bounds it
        (``orphan_settle_s``), and the next supervisor waits for us before it requeues our list
        (``daemon.Supervisor.cleanup_previous``)."""
        self.orphaned = True
        if self.spawning:
            return  # execute() calls us again once the new child's pid is known, to kill it
        if self.unsettled or (self.child_pid and _exited(self.child_pid)):
            self.stopping = True
            self.log.warning("supervisor_died_settling_first", job_pid=self.child_pid or None)
            signal.signal(signal.SIGALRM, self._on_orphan_timeout)
            signal.setitimer(signal.ITIMER_REAL, orphan_settle_s(self.cfg))
            return
        if self.child_pid:
            self.log.warning("supervisor_died_killing_attempt", job_pid=self.child_pid)
        self._die()

    def _on_orphan_timeout(self, *_: object) -> None:
        self.log.error("orphan_settle_timed_out", seconds=orphan_settle_s(self.cfg))
        self._die()

    def _die(self) -> None:
        groups = [self.child_pid, *(g for kind in self.kinds.values() for g in kind.groups())]
        for pgid in groups:
            if pgid:
                runner.killpg(pgid, signal.SIGKILL)
        os._exit(SlotExit.ERROR)

    def _on_abort(self, *_: object) -> None:
        self.stopping = True
        self.aborting = True

    def title(self, what: str) -> None:
        setproctitle.setproctitle(f"tender-pool: slot {self.index} {what}")

    def beat(self, force: bool = False) -> None:
        """Report liveness (at most every ``beat_every`` unless forced) and write out any backlog
        (reports held for the next write go out with the next report, or with a due beat)."""
        now = time.monotonic()
        due = force or now - self.last_beat >= self.beat_every
        if due or not self.reporter.held:
            self.reporter.flush()
        if due:
            self.last_beat = now
            self.reporter.send(Beat(redis_errors=self.redis_errors, unreplicated=self.unreplicated))

    def _sleep(self, seconds: float, *, finishing: bool = False) -> None:
        """Wait while beating. Idle waits end early on a stop request; ``finishing`` waits (a claimed
        job's start or settle being retried) do not: a retry loop that stopped sleeping would spin
        without beats and get the slot killed as silent, and its finished job run again."""
        end = time.monotonic() + seconds
        while (finishing or not self.stopping) and time.monotonic() < end:
            self.beat()
            time.sleep(min(0.1, end - time.monotonic()) if end > time.monotonic() else 0)

    def _retry_wait(self, attempt: int, e: redis.RedisError, cap: float = 5.0) -> None:
        """The sleep between retries of a claimed job's start or settle (``retry_delay``); a
        ``NotReplicated`` one is reported to the supervisor at once (``status``: "waiting for a
        replica to acknowledge"), and cleared by the next write that lands."""
        self._unreplicated(isinstance(e, NotReplicated))
        self._sleep(retry_delay(attempt, e, cap), finishing=True)

    def _unreplicated(self, waiting: bool) -> None:
        if waiting != self.unreplicated:
            self.unreplicated = waiting
            self.beat(force=True)

    def _redis_error(self, e: redis.RedisError) -> None:
        """Every Redis error, wherever it was caught: counted, and our list reconciled before the
        next claim (the error may have cost a reply whose effect we never saw)."""
        self.redis_errors += 1
        self.reconcile_due = True

    # --- the job's path ---------------------------------------------------------------------------

    def step(self) -> None:
        if self.next is not None:  # started by the last settle_take: run it now
            job, st = self.next
            self.next = None
            if self.aborting:
                self.put_back(job, st)
            else:
                self.run(job, st)
            return
        self.beat()
        if self.reporter.congested:  # the supervisor is not reading: claim nothing until it does
            self._sleep(0.05)
            return
        if self.list_owner and not self.registered():
            return
        if self.reconcile_due:
            self.reconcile()
        if self.lease_lapsed and not self.lease_renewed():
            self._sleep(self.poll_every)
            return
        entry = self.q.claim(self.proc, self.cfg.pool.claim_timeout, interactive_first=not self.queue_empty)
        self.queue_empty = False
        if entry is None:
            return
        faults.checkpoint("after_claim")
        if self.stopping:
            if entry == Keys.WAKE.encode():
                self.q.drop_wake(self.proc)  # a wake token only tells a claiming slot to look at ready:hi
            else:
                self.q.requeue(self.proc, entry, "unclaim", list_dead=False, **self._requeue_args())
            return
        if not entry:  # an empty id from a producer's bug: to take.lua b"" would mean "take the next one"
            self.load(entry, {})  # dead-lettered as undecodable
            return
        started = self.taken(self.take(entry))  # take.lua drops a wake token and claims instead
        if started is not None:
            self.run(*started)

    def run(self, job: JobRecord, st: Run) -> None:
        """Run one started attempt and settle it; the settle may start the next job (``self.next``)."""
        # start_job wrote the busy state in the same step that gave us the user's lock; settle clears
        # it (guarded by job id) or the next start replaces it. Only an exception needs a clean-up.
        self.busy.started(st.attempt, st.started_ms, st.created_ms)
        try:
            outcome, launched, input_hash = self.execute(job, st)
            faults.checkpoint("before_ack")
            self.next = self.settle(job, st, outcome, launched, take_next=self._may_take(), input_hash=input_hash)
        except BaseException:
            self.busy.clear(job.id)
            raise
        finally:
            self.unsettled = False

    def lease_renewed(self) -> bool:
        """After a take refused for a lapsing lease: whether our supervisor has renewed it since
        (one PTTL per poll interval until then; nothing at all in the steady state)."""
        try:
            if self.q.lease_left_ms(self.cfg.pool.host_id) < self.take_args.min_lease_ms:
                return False
        except redis.RedisError as e:
            self._redis_error(e)
            return False
        self.log.info("lease_renewed_claiming")
        self.lease_lapsed = False
        return True

    def _may_take(self) -> bool:
        """Whether the settle may start the next job: not when stopping, or when the supervisor is
        not reading our reports."""
        return not (self.stopping or self.reporter.congested or os.getppid() != self.parent)

    def take(self, entry: bytes = b"") -> TakeResult:
        """take.lua for ``entry`` (claimed by BLMOVE), retried with the same token suffix after a
        lost reply (the retry adopts what our list holds)."""
        suffix = os.urandom(6).hex()
        for attempt in range(20):
            try:
                taken = self.q.take(self.proc, self.take_args, suffix, entry, retry=attempt > 0)
                self._unreplicated(False)
                return taken
            except RETRYABLE as e:
                self._redis_error(e)
                self.log.warning("start_retry", job_id=entry[:200].decode("utf-8", "replace"), kind=None, user=None,
                                 attempt=None, error=str(e))
                self._retry_wait(attempt, e)  # the entry is claimed: see _sleep
        raise redis.ConnectionError("take.lua: Redis unreachable")

    def taken(self, t: TakeResult) -> tuple[JobRecord, Run] | None:
        """What a take answered → the started job to run, or None (nothing queued, no lease, a raw
        entry adopted or dead-lettered, a job parked or ended at its start: each reported here)."""
        if isinstance(t, Empty):
            self.queue_empty = True
            return None
        if isinstance(t, NoLease):
            if t.entry:  # claimed by our BLMOVE (or found by a retry), not started by us: back to ready
                self.q.requeue(self.proc, t.entry, "unclaim", list_dead=False, **self._requeue_args())
            if not self.lease_lapsed:
                self.log.error("lease_lapsing_not_claiming", lease_min_ms=self.take_args.min_lease_ms)
            self.lease_lapsed = True
            return None
        if isinstance(t, RawEntry):
            self.load(t.entry, {})
            return None
        if isinstance(t, BadRecord):
            job = self.load(t.entry, t.record)
            if job is None:
                return None
            started = self.start(job)  # decodable after all: start it with every key given
            faults.checkpoint("after_stamp")
            if not isinstance(started, Run):
                self.report_not_run(job, started)
                return None
            return job, started
        assert isinstance(t, Taken)
        try:
            job = decode_job(t.record)
        except Undecodable as e:
            self.undecodable_started(t, str(e))
            return None
        faults.checkpoint("after_stamp")
        if not isinstance(t.started, Run):
            self.report_not_run(job, t.started)
            return None
        return job, t.started

    def undecodable_started(self, t: Taken, reason: str) -> None:
        """take.lua started a job whose hash the decoder refuses (a hand-edited hash): fail it,
        fenced as any attempt, so its lock is released."""
        rec = {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in t.record.items()}
        job = JobRecord(id=t.entry.decode("utf-8", "replace"), kind=rec.get("kind", "?"), user=rec.get("user", ""),
                        payload={}, run=rec.get("run") or None)
        self.log.warning("dead_letter", job_id=job.id, entry=job.id, reason=reason, kind=job.kind, user=job.user,
                         attempt=None)
        if isinstance(t.started, Run):
            err = JobError(ErrorKind.UNDECODABLE.value, reason)
            self.settle(job, t.started, Outcome("failed", error=err, final=True, ran=False), launched=False)

    def put_back(self, job: JobRecord, st: Run) -> None:
        """A job the last settle started, not to be run (abort): back to ready, its start taken back."""
        self.settle(job, st, Outcome("interrupted", ran=False), launched=False)

    def put_back_next(self) -> None:
        if self.next is not None:
            job, st = self.next
            self.next = None
            try:
                self.put_back(job, st)
            except redis.RedisError as e:  # the reaper requeues it once our host key lapses
                self._redis_error(e)
                self.log.warning("put_back_failed", job_id=job.id, error=str(e))

    def registered(self) -> bool:
        """Register our processing list in ``proclists`` once, before the first claim."""
        try:
            self.q.register_list(self.proc, self.list_owner)
        except redis.RedisError as e:
            self._redis_error(e)
            self.log.warning("list_register_retry", list=self.proc, error=str(e))
            self._sleep(0.5)
            return False
        self.log.info("list_registered", list=self.proc)
        self.list_owner = ""
        return True

    def load(self, entry: bytes, h: dict[bytes, bytes]) -> JobRecord | None:
        """The claimed entry's job from its hash ``h`` (as take.lua read it; empty: none), or None
        after adopting / dead-lettering a raw entry."""
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
            return decode_job(h)
        except Undecodable as e:
            self.q.deadletter(self.proc, entry, str(e), self.retention)
            shown = entry[:200].decode("utf-8", "replace")
            self.log.warning(
                "dead_letter", job_id=shown, entry=shown, reason=str(e), kind=None, user=None, attempt=None
            )
            self.reporter.send(Finished(kind="?", outcome=AttemptEnd.DEAD, error_kind=ErrorKind.UNDECODABLE.value))
            return None

    def start(self, job: JobRecord) -> StartResult:
        timeout = self.cfg.handler_timeout(job.kind) or self.cfg.extract.timeout
        args = dict(
            worker=self.worker_id,
            timeout_ms=int((timeout + self.cfg.pool.kill_grace) * 1000),
            lock_ttl_ms=self.lock_ttl,
            retention_s=self.retention,
            max_waits=self.cfg.pool.max_waits,
            busy=self.busy.state_json(job),
            busy_ttl_ms=self.busy.ttl_ms,
            per_user=self.cfg.per_user(job.kind),
        )
        suffix = os.urandom(6).hex()
        for attempt in range(20):  # a lost reply is retried with the same suffix: start.lua is idempotent then
            try:
                started = self.q.start(self.proc, job, suffix=suffix, **args)  # type: ignore[arg-type]
                self._unreplicated(False)
                return started
            except RETRYABLE as e:
                self._redis_error(e)
                self.log.warning("start_retry", job_id=job.id, kind=job.kind, user=job.user, attempt=None, error=str(e))
                self._retry_wait(attempt, e)
        raise redis.ConnectionError("start.lua: Redis unreachable")

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
        else:  # Stale, Missing: another entry or nobody owns it; nothing to count
            self.log.info("start_skipped", job_id=job.id, result=type(st).__name__.lower(),
                          state=getattr(st, "state", None))

    def execute(self, job: JobRecord, st: Run) -> tuple[Outcome, bool, str | None]:
        """Run one attempt in its own process group; never raises for the job's own failures.
        Returns the outcome, whether a handler process was started at all, and the input hash the
        attempt recorded (run items only: the hash skip trusts, ``inputs.py``; None otherwise)."""
        log = self.log.bind(job_id=job.id, kind=job.kind, user=job.user, attempt=st.attempt)
        kind = self.kinds.get(job.kind)
        if kind is None:
            msg = f"no handler for kind {job.kind!r} on {self.worker_id}"
            return kinds.Rejected(JobError(ErrorKind.HANDLER_FAILED.value, msg)).outcome(), False, None
        try:
            launch = kind.prepare(job, st.attempt)
        except Exception as e:  # noqa: BLE001 - e.g. the JVM cannot start: the job's try, not the slot's end
            log.exception("prepare_failed")
            failed = Outcome("failed", error=JobError(ErrorKind.HANDLER_FAILED.value, f"could not start: {e}"))
            return failed, True, None
        if isinstance(launch, kinds.Rejected):
            log.info("input_rejected", error_kind=launch.error.kind, message=launch.error.message)
            return launch.outcome(), False, None
        recorded = None
        if job.input_hash is not None:  # a run item (skippable): hash what this attempt is about to read
            try:
                recorded = inputs.record(job.kind, job.payload, launch.file, each_chunk=self.beat)
            except inputs.InputChanging as e:
                log.warning("input_changing", file=launch.file, message=str(e))
                changing = kinds.Rejected(JobError(ErrorKind.HANDLER_FAILED.value, str(e)), final=False)
                return changing.outcome(), False, None
        busy = Busy(job.id, job.kind, job.user, launch.file, st.token, st.attempt, int(time.time() * 1000))
        self.title(f"busy {job.kind} job={job.id} user={job.user}")
        env = {"TENDER_POOL_JOB_ID": job.id, "TENDER_POOL_ATTEMPT": st.token, "TENDER_POOL_OWNER": self.marker}
        t0 = time.monotonic()
        self.spawning = True  # a parent death now would not know the child's pid: it waits for it
        try:
            if launch.start is not None:
                proc = launch.start({**launch.env, **env})
            elif launch.call is not None:
                proc = runner.fork_call(launch.call, {**launch.env, **env})
            else:
                assert launch.argv is not None
                proc = runner.spawn(launch.argv, {**launch.env, **env})
            busy.child_pid = self.child_pid = proc.pid
        finally:
            self.spawning = False
        if self.orphaned:
            self._on_parent_death()  # the supervisor died while we spawned: kill the new child, exit
        self.reporter.send(busy)  # one write: with the previous job's held Finished, if any
        log.info("job_started", pid=proc.pid)
        self.progress = ProgressFeed(lambda ev: self._send_progress(job, st.token, ev))
        res = runner.run(
            proc,
            launch.stdin,
            deadline=t0 + kind.timeout,
            kill_grace=self.cfg.pool.kill_grace,
            marker=("TENDER_POOL_ATTEMPT", st.token),
            tick=lambda: self._tick(job, st.token),
            tick_every=min(1.0, self.beat_every),
            beat=self.beat,
            progress=self.progress,
        )
        self.unsettled = True  # from here a parent death settles this attempt before the slot exits
        self.child_pid = 0
        if self.aborting and res.stopped is None and res.returncode != 0:
            res.stopped = "abort"  # the supervisor stopped it (fence) while we were not looking: not a try
        outcome = kind.conclude(job, st.attempt, res)
        if recorded is not None and outcome.status != "interrupted" and not _cancelled(outcome):
            changed = recorded.changed(each_chunk=self.beat)
            if changed:  # the result may be of either content: never stored under the hash
                log.warning("input_changed", file=launch.file, message=changed)
                kind.discard(job, st.attempt, outcome)
                outcome = Outcome("failed", error=JobError(ErrorKind.HANDLER_FAILED.value, changed + "; retried"),
                                  signals=outcome.signals)
        keep = set().union(*(k.keep() for k in self.kinds.values()))
        leftovers = runner.reap_orphans(keep=keep)
        log.info(
            "job_ran",
            returncode=res.returncode,
            stopped=res.stopped,
            signals=res.signals,
            kill=res.kill,
            leftovers=leftovers,
            seconds=round(time.monotonic() - t0, 4),
            outcome=outcome.status,
            error_kind=outcome.error.kind if outcome.error else None,
        )
        return outcome, True, recorded.hash if recorded is not None else None

    def _send_progress(self, job: JobRecord, token: str, event: dict) -> bool:
        """progress.lua on the FastLane; a Redis error drops the event (counted), never the job."""
        try:
            return self.q.progress(job, token, event)
        except redis.RedisError as e:
            self._redis_error(e)
            return False

    def _tick(self, job: JobRecord, token: str) -> str | None:
        self.beat(force=True)
        if self.aborting:
            return "abort"
        now = time.monotonic()
        if now - self.last_cancel_poll < self.poll_every:
            return None
        self.last_cancel_poll = now
        try:
            why = self.q.poll_attempt(job.id, token)
            if why is None and self.lease_min_ms and self.q.lease_left_ms(self.cfg.pool.host_id) < self.lease_min_ms:
                # Our host key expires before another poll plus a kill could finish: our supervisor
                # is not renewing it (stopped, starved) and cannot fence. Stop first, like the fence.
                self.log.error("lease_lapsing_stopping", job_id=job.id, attempt=token)
                return "fenced"
            return why
        except redis.RedisError as e:
            self._redis_error(e)
            return None

    def verdict(self, job: JobRecord, outcome: Outcome) -> tuple[Verdict, int]:
        """The settle verdict for an outcome, and the retry backoff in ms."""
        pool = self.cfg.pool
        if outcome.status == "completed":
            return Verdict.COMPLETED, 0
        if outcome.status == "interrupted":
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

    def settle(
        self, job: JobRecord, st: Run, outcome: Outcome, launched: bool = True, take_next: bool = False,
        input_hash: str | None = None,
    ) -> tuple[JobRecord, Run] | None:
        """Record the outcome and release the lock, in one fenced script; retried until Redis takes it.
        With ``take_next`` the same script starts the next queued job (settle_take.lua): returned,
        for the caller to run. ``input_hash``: what the attempt recorded of its input, stored with a
        completed run item (and its ``done:`` key) in place of the submit-time one."""
        verdict, backoff_ms = self.verdict(job, outcome)
        if outcome.inline is not None and verdict is Verdict.COMPLETED:
            try:
                self.q.keep_markdown(job.id, st.attempt, outcome.inline, self.retention)
            except redis.RedisError as e:  # the file stays; settle below retries on its own
                self._redis_error(e)
                self.log.warning("inline_result_not_kept", job_id=job.id, error=str(e))
        lost_reply = False
        suffix = os.urandom(6).hex() if take_next else ""
        taken: TakeResult | None = None
        common = dict(
            result=outcome.result,
            error=outcome.error,
            backoff_ms=backoff_ms,
            counts_try=outcome.ran and outcome.status == "failed",  # a business failure of a handler that ran
            launched=launched,
            input_hash=input_hash,
        )
        for attempt in range(1000):
            try:
                if take_next:
                    reply, taken = self.q.settle_take(self.proc, job, st.token, verdict, self.take_args, suffix,
                                                      retry=lost_reply, **common)  # type: ignore[arg-type]
                else:
                    reply = self.q.settle(self.proc, job, st.token, verdict, lock_ttl_ms=self.lock_ttl,
                                          retention_s=self.retention, worker=self.worker_id,
                                          **common)  # type: ignore[arg-type]
                self._unreplicated(False)
                break
            except RETRYABLE as e:
                lost_reply = True
                self._redis_error(e)
                self.log.warning("settle_retry", job_id=job.id, kind=job.kind, user=job.user, attempt=st.attempt,
                                 error=str(e))
                self._retry_wait(attempt, e)
        else:  # pragma: no cover
            raise redis.ConnectionError("settle: Redis unreachable")
        if isinstance(taken, Taken) and isinstance(taken.started, Run):
            faults.checkpoint("after_settle_take")  # settled and the next attempt started, not spawned
        if not reply.answer and lost_reply and self._landed(job, st, verdict, outcome, launched):
            reply = SettleReply(SettleAnswer.OK, "")  # our first try did it; only its reply was lost
            self.log.info("settle_reply_lost", job_id=job.id, kind=job.kind, user=job.user, attempt=st.attempt,
                          verdict=verdict.value)
        if not reply.answer:
            self.kinds[job.kind].discard(job, st.attempt, outcome)  # never publish a fenced attempt's files
        self.log.info("settled", job_id=job.id, kind=job.kind, user=job.user, attempt=st.attempt,
                      verdict=verdict.value if reply.answer else "fenced", promoted=reply.promoted or None)
        finished = Finished(
            kind=job.kind,
            outcome=_ENDS[verdict] if reply.answer else AttemptEnd.FENCED,
            error_kind=outcome.error.kind if outcome.error else None,
            killed=outcome.signals,
            progress_events=self.progress.events if self.progress else 0,
            progress_dropped=self.progress.dropped if self.progress else 0,
            **self.busy.finished_fields(job, outcome),
        )
        self.progress = None
        self.reporter.send(finished, hold=True)  # goes out with the next report: one write per job
        nxt = self.taken(taken) if taken is not None else None
        if nxt is None:
            self.reporter.send(Idle())
            self.title("idle")
        return nxt

    def _landed(self, job: JobRecord, st: Run, verdict: Verdict, outcome: Outcome, launched: bool) -> bool:
        """After a retried settle answered ``fenced``: does the job show that our first try landed?
        No newer attempt started (``attempts`` is still ours) and the state is what we asked for."""
        for attempt in range(20):
            try:
                state, attempts, error_kind = self.q.attempt_end(job.id)
                break
            except RETRYABLE as e:
                self._redis_error(e)
                self._retry_wait(attempt, e, cap=2.0)
        else:
            return False
        ours = st.attempt if launched else st.attempt - 1
        same_error = outcome.error is None or error_kind == outcome.error.kind
        return attempts == ours and state == _LANDED_STATE[verdict] and same_error

    # --- our own list -----------------------------------------------------------------------------

    def _requeue_args(self) -> dict:
        return dict(crash_cap=self.cfg.pool.crash_cap, lock_ttl_ms=self.lock_ttl, retention_s=self.retention)

    def reconcile(self) -> None:
        """Between jobs our list must be empty: anything in it is an entry whose claim reply was lost,
        or an attempt whose settle a failover undid. Put each back (an interruption, not a crash)."""
        try:
            entries = self.q.r.lrange(self.proc, 0, -1)
            for entry in entries:
                verdict = self.q.requeue(self.proc, entry, "unclaim", list_dead=False, **self._requeue_args())
                self.log.warning("reconciled_entry", entry=entry[:200].decode("utf-8", "replace"), verdict=verdict)
        except redis.RedisError as e:
            self.redis_errors += 1
            self.log.warning("reconcile_failed", error=str(e))
            return
        self.reconcile_due = False


def _cancelled(outcome: Outcome) -> bool:
    return outcome.error is not None and outcome.error.kind == ErrorKind.CANCELLED.value


def orphan_settle_s(cfg: Config) -> float:
    """How long a slot whose supervisor died may take to settle an attempt that had already ended
    (then SIGALRM ends it); the next supervisor waits as long for it before requeueing its list.
    The host key's lifetime (3 heartbeats), at least ``kill_grace`` + 1 s: a settle on a loaded
    machine, or through a Redis failover, takes more than one round trip."""
    return max(cfg.pool.kill_grace + 1.0, 3 * cfg.pool.heartbeat)


def _exited(pid: int) -> bool:
    """Has the attempt ``pid`` exited? A zombie is looked at without reaping it (WNOWAIT: the runner
    reaps it and reads its status); no such child means the runner has reaped it already, or that
    it is the fork server's child (a function attempt), whose state /proc tells."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped by the runner, or not ours (a fork server's child): ask /proc
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                return f.read().rpartition(b")")[2].split()[0] in (b"Z", b"X")
        except (OSError, IndexError):
            return True


def take_args(cfg: Config, worker_id: str, busy_ttl: int, min_lease_ms: int = 0) -> TakeArgs:
    """take.lua's constant arguments for this slot: per kind the timeout (+ kill grace) stamped on
    an attempt and its per_user rule; "*" for a kind this slot does not know (start.lua's defaults:
    the extraction timeout, the user's lock), which ``execute`` then fails as having no handler."""
    grace = cfg.pool.kill_grace
    limits = {
        kind: [int(((cfg.handler_timeout(kind) or cfg.extract.timeout) + grace) * 1000), cfg.per_user(kind)]
        for kind in ("parse_markdown", *cfg.handlers)
    }
    limits["*"] = [int((cfg.extract.timeout + grace) * 1000), 1]
    return TakeArgs(
        worker=worker_id,
        pid=os.getpid(),
        lock_ttl_ms=cfg.lock_ttl_ms,
        retention_s=int(cfg.pool.result_retention),
        max_waits=cfg.pool.max_waits,
        busy_ttl_ms=busy_ttl,
        limits=msgspec.json.encode(limits),
        host_key=Keys(cfg.redis.prefix, cfg.pool.queue).host(cfg.pool.host_id) if min_lease_ms else "",
        min_lease_ms=min_lease_ms,
    )


def slot_main(
    cfg: Config, index: int, worker_id: str, proc: str, marker: str, report_fd: int, list_owner: str = ""
) -> SlotExit:
    """The slot process's body. ``list_owner`` (an encoded ``keys.Owner``) is registered in
    ``proclists`` for ``proc`` before the first claim ("" while the supervisor still does it).
    A failure to build the slot exits ``BOOT_ERROR``: respawning cannot fix it."""
    try:
        slot = Slot(cfg, index, worker_id, proc, marker, report_fd, list_owner)
    except SlotBootError:  # logged where it happened, and reported to the supervisor
        return SlotExit.BOOT_ERROR
    except Exception:  # noqa: BLE001 - config, imports, environment: say why, and exit with the code
        import traceback

        traceback.print_exc()
        return SlotExit.BOOT_ERROR
    return slot.main()
