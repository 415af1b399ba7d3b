"""One slot: the claim → start (lock) → run → settle (release) loop, one job at a time.

A slot is forked by the supervisor and builds everything it uses after the fork (Redis client,
logger); it never touches an inherited one. It dies with the supervisor (PDEATHSIG, plus a getppid()
check each loop, as gunicorn's workers do).

Signals (set a flag only; the loop acts):
- SIGTERM: drain — finish the current job, claim nothing more, exit 0.
- SIGUSR1: abort — kill the running attempt's group now and put the job back (an interruption, not
  a try), then exit 0. The supervisor sends it when ``drain_timeout`` runs out.
"""

from __future__ import annotations

import os
import signal
import time

import redis
import setproctitle

from tender_pool.supervisor import logs
from tender_pool.supervisor.config import Config
from tender_pool.supervisor.keys import Keys
from tender_pool.supervisor.types import (
    Beat,
    Busy,
    ErrorKind,
    Finished,
    Idle,
    JobError,
    JobRecord,
    Outcome,
)

from . import faults, handlers, runner
from .busy import BusyTracker
from .heartbeat import Reporter
from .queue import Queue, Started, Undecodable, _s, connect, decode_submit


class Slot:
    def __init__(self, cfg: Config, index: int, worker_id: str, proc: str, owner: str, report_fd: int):
        self.cfg = cfg
        self.index = index
        self.worker_id = worker_id
        self.proc = proc  # this incarnation's processing list
        self.owner = owner  # TENDER_POOL_OWNER marker value for every child
        self.reporter = Reporter(report_fd)
        self.parent = os.getppid()
        self.stopping = False
        self.aborting = False
        self.retention = int(cfg.pool.result_retention)
        self.lock_ttl = cfg.lock_ttl_ms
        self.log = logs.configure(f"slot{index}").bind(slot=worker_id)
        self.q: Queue | None = None
        self.last_beat = 0.0
        self.beat_every = max(0.2, cfg.pool.heartbeat / 3)
        self.last_cancel_poll = 0.0
        self.child_pid = 0  # the running attempt's process (= its group), for the parent-death handler
        self.jvm_docs = 0
        self.jvm = None  # the slot's warm POI JVM (extract.jvm.WarmJvm), started on the first .doc/.xls
        self.base_env = {k: v for k, v in os.environ.items() if k not in ("TENDER_POOL_FAULTS", "TENDER_POOL_FAULT_DIR")}
        self.redis_errors = 0  # cumulative, sent with each Beat for tender_pool_redis_errors_total

    # --- process plumbing -------------------------------------------------------------------------

    def main(self) -> int:
        # The supervisor's death reaches us as SIGUSR2: kill the running job's group, then go. (A job
        # child is spawned without a PDEATHSIG of its own: posix_spawn cannot set one; see runner.)
        signal.signal(signal.SIGUSR2, self._on_parent_death)
        runner.set_pdeathsig(signal.SIGUSR2)
        if os.getppid() != self.parent:
            return 0
        runner.set_subreaper()
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C goes to the supervisor's decision
        signal.signal(signal.SIGUSR1, self._on_abort)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        self.title("idle")
        self.q = Queue(connect(self.cfg.redis.url, self.cfg.redis.socket_timeout), Keys(self.cfg.redis.prefix, self.cfg.pool.queue))
        self.busy = BusyTracker(self.q.r, self.q.k, self.worker_id, self.cfg, self.log)
        self.busy.clear_stale()
        self.reporter.send(Idle())
        backoff = 0.1
        while not self.stopping and os.getppid() == self.parent:
            try:
                self.step()
                backoff = 0.1
            except redis.RedisError as e:
                self.log.warning("redis_error", error=str(e), retry_in=backoff)
                self.redis_errors += 1
                self._sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                self._recover_own()
            except Exception:
                self.log.exception("slot_step_failed")
                self._sleep(backoff)
                backoff = min(backoff * 2, 5.0)
        self.busy.clear_stale()
        if self.jvm is not None:
            self.jvm.close()
        self.log.info("slot_exit", stopping=self.stopping)
        return 0

    def _on_term(self, *_: object) -> None:
        self.stopping = True

    def _on_parent_death(self, *_: object) -> None:
        for pgid in (self.child_pid, self.jvm.pid if self.jvm is not None else None):
            if pgid:
                runner._killpg(pgid, signal.SIGKILL)
        os._exit(1)

    def _on_abort(self, *_: object) -> None:
        self.stopping = True
        self.aborting = True

    def title(self, what: str) -> None:
        setproctitle.setproctitle(f"tender-pool: slot {self.index} {what}")

    def beat(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self.last_beat >= self.beat_every:
            self.last_beat = now
            self.reporter.send(Beat(redis_errors=self.redis_errors))

    def _sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self.stopping and time.monotonic() < end:
            self.beat()
            time.sleep(min(0.1, end - time.monotonic()) if end > time.monotonic() else 0)

    # --- the job's path ---------------------------------------------------------------------------

    def step(self) -> None:
        assert self.q is not None
        self.beat()
        entry = self.q.claim(self.proc, self.cfg.pool.claim_timeout)
        if entry is None:
            return
        faults.checkpoint("after_claim")
        if entry == Keys.WAKE.encode():
            self.q.drop_wake(self.proc)
            return
        if self.stopping:
            self.q.requeue(self.proc, entry, "unclaim", list_dead=False, **self._requeue_args())
            return
        job = self.load(entry)
        if job is None:
            return
        started = self.start(job)
        faults.checkpoint("after_stamp")
        if started.action != "run":
            self.report_not_run(job, started)
            return
        # start.lua wrote the busy state in the same step that gave us the user's lock; settle.lua
        # clears it (guarded by job id). Only an exception on the way needs a separate clean-up.
        self.busy.started(started.attempt, started.started_ms, started.created_ms)
        try:
            outcome = self.execute(job, started)
            faults.checkpoint("before_ack")
            self.settle(job, started, outcome)
        except BaseException:
            self.busy.clear(job.id)
            raise

    def load(self, entry: bytes) -> JobRecord | None:
        """The claimed entry's job, or None after adopting / dead-lettering a raw entry."""
        assert self.q is not None
        try:
            job_id = entry.decode("utf-8")
            h = self.q.read_job(job_id) if len(entry) < 512 else {}
        except UnicodeDecodeError:
            h = {}
        try:
            if not h:
                req = decode_submit(entry)  # a raw message from a producer that can only LPUSH
                if req.kind not in self.cfg.kinds:
                    raise Undecodable(f"unknown kind {req.kind!r}")
                new_id = self.q.adopt(self.proc, entry, req)
                self.log.info("adopted_raw_entry", job_id=new_id, kind=req.kind, user=req.user, attempt=None)
                return None
            from .queue import decode_job

            return decode_job(h)
        except Undecodable as e:
            self.q.deadletter(self.proc, entry, str(e), self.retention)
            self.log.warning(
                "dead_letter", job_id=_s(entry), entry=entry[:200].decode("utf-8", "replace"), reason=str(e),
                kind=None, user=None, attempt=None,
            )
            self.reporter.send(Finished(kind="?", outcome="dead", error_kind="undecodable"))
            return None

    def start(self, job: JobRecord) -> Started:
        assert self.q is not None
        timeout = self.cfg.handler_timeout(job.kind) or self.cfg.extract.timeout
        args = dict(
            worker=self.worker_id,
            timeout_ms=int((timeout + self.cfg.pool.kill_grace) * 1000),
            lock_ttl_ms=self.lock_ttl,
            retention_s=self.retention,
            max_waits=self.cfg.pool.max_waits,
            busy=self.busy.state_json(job),
            busy_ttl_ms=self.busy.ttl_ms,
        )
        suffix = os.urandom(6).hex()
        for attempt in range(20):  # a lost reply is retried with the same suffix: start.lua is idempotent then
            try:
                return self.q.start(self.proc, job, suffix=suffix, **args)  # type: ignore[arg-type]
            except redis.ConnectionError as e:
                self.log.warning("start_retry", job_id=job.id, kind=job.kind, user=job.user, attempt=None, error=str(e))
                self._sleep(min(0.1 * 2**attempt, 5.0))
        raise redis.ConnectionError("start.lua: Redis unreachable")

    def report_not_run(self, job: JobRecord, st: Started) -> None:
        detail = st.detail or []
        if st.action == "parked":
            self.log.info("parked", job_id=job.id, kind=job.kind, user=job.user, attempt=job.attempts,
                          reason=detail[0] if detail else "", on=detail[1] if len(detail) > 1 else None)
            self.busy.note_parked(detail[0] if detail else "", detail[1] if len(detail) > 1 else "")
            self.reporter.send(Finished(kind=job.kind, outcome="parked", error_kind=detail[0] if detail else None))
        elif st.action == "ended":
            self.log.info("ended_at_start", job_id=job.id, kind=job.kind, user=job.user, attempt=job.attempts,
                          state=detail[0], error_kind=detail[1], message=detail[2])
            self.reporter.send(Finished(kind=job.kind, outcome=detail[0], error_kind=detail[1]))
        else:
            self.log.info("start_skipped", job_id=job.id, action=st.action, detail=detail)

    def execute(self, job: JobRecord, st: Started) -> Outcome:
        """Run one attempt in its own process group; never raises for the job's own failures."""
        log = self.log.bind(job_id=job.id, kind=job.kind, user=job.user, attempt=st.attempt)
        try:
            path = handlers.input_file(job, self.cfg)
        except handlers.InputRejected as e:
            log.info("input_rejected", error_kind=e.error.kind, message=e.error.message)
            return Outcome("failed", error=e.error, final=True, ran=False)
        timeout = self.cfg.handler_timeout(job.kind)
        argv = handlers.command_for(job.kind, self.cfg)
        extracting = job.kind == "parse_markdown"
        if extracting and path is None:
            msg = "parse_markdown needs payload.file"
            return Outcome("failed", error=JobError(ErrorKind.FILE_NOT_FOUND.value, msg), final=True, ran=False)
        if timeout is None or (argv is None and not extracting):
            msg = f"no handler for kind {job.kind!r} on {self.worker_id}"
            return Outcome("failed", error=JobError(ErrorKind.HANDLER_FAILED.value, msg), final=True, ran=False)
        busy = Busy(job.id, job.kind, job.user, path, st.token, st.attempt, int(time.time() * 1000))
        self.reporter.send(busy)
        self.title(f"busy {job.kind} job={job.id} user={job.user}")
        env = {"TENDER_POOL_JOB_ID": job.id, "TENDER_POOL_ATTEMPT": st.token, "TENDER_POOL_OWNER": self.owner}
        t0 = time.monotonic()
        if extracting:
            assert path is not None
            from tender_pool.extract.api import preload

            preload(path)  # import the format's reader here, so the forked child starts warm
            jvm = self._warm_jvm() if handlers.is_ole(path) else None
            out_dir = os.path.join(self.cfg.pool.results_dir, job.id)
            stem = f"attempt-{st.attempt}"
            heap = self.cfg.extract.jvm_heap
            proc = runner.fork_call(
                lambda: handlers.extraction_child(path, out_dir, stem, timeout, heap, jvm), env
            )
        else:
            assert argv is not None
            proc = runner.spawn(argv, {**self.base_env, **env})
        busy.child_pid = self.child_pid = proc.pid
        self.reporter.send(busy)
        log.info("job_started", pid=proc.pid)
        res = runner.run(
            proc,
            b"" if extracting else handlers.handler_stdin(job, st.attempt),
            deadline=t0 + timeout,
            kill_grace=self.cfg.pool.kill_grace,
            marker=("TENDER_POOL_ATTEMPT", st.token),
            tick=lambda: self._tick(job, st.token),
            tick_every=min(1.0, self.beat_every),
        )
        self.child_pid = 0
        if extracting and self.jvm is not None and (res.stopped or res.returncode not in (0, 3)):
            self.jvm.kill()  # it may be mid-document: never hand it to the next job
        keep = {self.jvm.pid} if self.jvm is not None and self.jvm.pid else set()
        leftovers = runner.reap_orphans(keep=keep)
        outcome = handlers.outcome_of(res, timeout)
        if extracting and outcome.result is not None:
            outcome.result = outcome.result["value"]  # parse_markdown's result is the JobOutput itself
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
        return outcome

    JVM_RECYCLE_AFTER = 200

    def _warm_jvm(self):
        """The slot's warm JVM, started here (not in the job's child) so it outlives the job; recycled
        every JVM_RECYCLE_AFTER documents (the count is kept here: the child's copy is discarded)."""
        from tender_pool.extract.jvm import WarmJvm

        if self.jvm is None:
            self.jvm = WarmJvm(heap=self.cfg.extract.jvm_heap, kill_grace=self.cfg.pool.kill_grace)
        if self.jvm_docs >= self.JVM_RECYCLE_AFTER:
            self.jvm.kill()
            self.jvm_docs = 0
        self.jvm_docs += 1
        self.jvm.ensure_started()
        return self.jvm

    def _tick(self, job: JobRecord, token: str) -> str | None:
        self.beat(force=True)
        if self.aborting:
            return "abort"
        now = time.monotonic()
        if now - self.last_cancel_poll < 1.0:
            return None
        self.last_cancel_poll = now
        try:
            assert self.q is not None
            return self.q.poll_attempt(job.id, token)
        except redis.RedisError:
            return None

    def settle(self, job: JobRecord, st: Started, outcome: Outcome) -> None:
        """Record the outcome and release the lock, in one fenced script; retried until Redis takes it."""
        assert self.q is not None
        pool = self.cfg.pool
        backoff_ms = 0
        counts_try = False
        if outcome.status == "completed":
            verdict = "completed"
        elif outcome.status == "interrupted":
            verdict = "requeue"
        else:
            assert outcome.error is not None
            kind = outcome.error.kind
            # A try is a business failure of a handler that ran; rejections before the run are not.
            counts_try = outcome.ran
            retryable = not outcome.final and kind in (ErrorKind.HANDLER_FAILED.value, ErrorKind.BAD_OUTPUT.value)
            if retryable and job.tries + 1 < pool.max_tries:
                verdict = "retry"
                backoff_ms = int(min(pool.retry_backoff * 2**job.tries, pool.retry_backoff_max) * 1000)
            else:
                verdict = "failed"
        if outcome.error and outcome.error.kind == ErrorKind.CANCELLED.value:
            verdict = "cancelled"
        for attempt in range(1000):
            try:
                ok, promoted = self.q.settle(
                    self.proc,
                    job,
                    st.token,
                    verdict,
                    result=outcome.result,
                    error=outcome.error,
                    lock_ttl_ms=self.lock_ttl,
                    retention_s=self.retention,
                    backoff_ms=backoff_ms,
                    counts_try=counts_try,
                    worker=self.worker_id,
                )
                break
            except redis.ConnectionError as e:
                self.log.warning("settle_retry", job_id=job.id, kind=job.kind, user=job.user, attempt=st.attempt, error=str(e))
                self._sleep(min(0.1 * 2**attempt, 5.0))
        else:  # pragma: no cover
            raise redis.ConnectionError("settle: Redis unreachable")
        self.log.info("settled", job_id=job.id, kind=job.kind, user=job.user, attempt=st.attempt,
                      verdict=verdict if ok else "fenced", promoted=promoted or None)
        self.reporter.send(
            Finished(
                kind=job.kind,
                outcome={"retry": "retried", "requeue": "interrupted"}.get(verdict, verdict) if ok else "fenced",
                error_kind=outcome.error.kind if outcome.error else None,
                killed=outcome.signals,
                **self.busy.finished_fields(job, outcome),
            )
        )
        self.reporter.send(Idle())
        self.title("idle")

    # --- recovery of our own list after a connection error ----------------------------------------

    def _requeue_args(self) -> dict:
        return dict(crash_cap=self.cfg.pool.crash_cap, lock_ttl_ms=self.lock_ttl, retention_s=self.retention)

    def _recover_own(self) -> None:
        """A claim whose reply was lost leaves an entry in our list that we never saw: put it back."""
        assert self.q is not None
        try:
            for entry in self.q.r.lrange(self.proc, 0, -1):
                self.q.requeue(self.proc, entry, "unclaim", list_dead=False, **self._requeue_args())
        except redis.RedisError:
            pass


def slot_main(cfg: Config, index: int, worker_id: str, proc: str, owner: str, report_fd: int) -> int:
    return Slot(cfg, index, worker_id, proc, owner, report_fd).main()
