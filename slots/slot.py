"""One slot: the loop that takes one job at a time through claim → lock → run → settle → release.

Each step is one call into the module that owns it, in the order the code runs (``Slot.step``):

- claim (``intake.py``): BLMOVE an entry into our processing list, then take.lua starts it; the
  same script takes the user's lock or the kind's semaphore place (``lock.py``), so a claim's
  answer is a started attempt (``intake.Next``) or nothing to run;
- lock (``lock.py``): what the slot holds meanwhile (the busy marker; the lease a start needs);
- run (``attempt.py``): the kind's launch in its own process group, polled for cancel and fence;
- settle and release (``settle.py``): one fenced script records the outcome and frees the lock;
  a busy slot's settle also takes the next queued job (settle_take.lua), returned as the ``Next``
  the following step runs without claiming.

A slot is forked by the supervisor and builds everything it uses after the fork (Redis client,
logger, its job kinds); it never touches an inherited one. It dies with the supervisor (PDEATHSIG,
plus a getppid() check each loop, as gunicorn's workers do).

Redis errors: a claimed job's take, start and settle are retried with the same arguments
(``retry.py``: every script is safe to repeat), so a finished job is never thrown away; after any
Redis error, anywhere, the slot reconciles its processing list with what it runs (nothing, between
jobs) before claiming again, so an entry left behind by a lost reply or a failover is put back at
once instead of waiting for the deadline rule. Any other error is logged, and the loop backs off.

Signals (the handlers set flags; the loop acts, except where said):
- SIGTERM: drain — finish the current job, claim nothing more, exit 0.
- SIGUSR1: abort — kill the running attempt's group now and put the job back (an interruption, not
  a try), then exit 0. The supervisor sends it when ``drain_timeout`` runs out.
- SIGUSR2: the supervisor died (PDEATHSIG). The handler itself kills the job's and the kinds'
  groups and exits at once (the loop may be blocked in a child's wait); but an attempt whose
  handler has already exited is settled first (``_on_parent_death``).
"""

from __future__ import annotations

import gc
import os
import signal
import time

import redis
import setproctitle

from tender_pool.store import logs
from tender_pool.store.config import Config
from tender_pool.store.replication import NotReplicated, retry_delay
from tender_pool.slots.reports import Beat, Idle, Preloaded, SlotExit

from tender_pool.slots import faults, groups, kinds, runner
from tender_pool.slots.attempt import Attempt, Ran, exited
from tender_pool.slots.busy import BusyTracker
from tender_pool.slots.function_import import ImportProblem
from tender_pool.slots.reports import Reporter
from tender_pool.slots.intake import Intake, Next
from tender_pool.slots.lock import Lock
from tender_pool.slots.queue import Queue
from tender_pool.slots.retry import Retry
from tender_pool.slots.settle import Settle


class SlotBootError(Exception):
    """The slot cannot get ready to claim (a function handler's module does not import here)."""


class Slot:
    def __init__(
        self, cfg: Config, index: int, worker_id: str, proc: str, marker: str, report_fd: int, list_owner: str = "",
        runner_=runner, reap_orphans=groups.reap_orphans,
    ):
        self.cfg = cfg
        self.index = index
        self.worker_id = worker_id
        self.proc = proc  # this incarnation's processing list
        self.reporter = Reporter(report_fd)
        self.parent = os.getppid()
        self.stopping = False
        self.aborting = False
        self.orphaned = False  # the supervisor died (SIGUSR2 seen)
        self.log = logs.configure(f"slot{index}").bind(slot=worker_id)
        self.last_beat = 0.0
        self.beat_every = max(0.2, cfg.pool.heartbeat / 3)
        self.redis_errors = 0  # cumulative, sent with each Beat for tender_pool_redis_errors_total
        self.unreplicated = False  # retrying a write Redis ran but could not get replicated (sent with each Beat)
        self.next: Next | None = None  # started by the last settle_take, not yet run
        base_env = {k: v for k, v in os.environ.items() if k not in ("TENDER_POOL_FAULTS", "TENDER_POOL_FAULT_DIR")}
        self.kinds = kinds.build(cfg, base_env, log=self.log)
        self.q = Queue.for_config(cfg)
        self.busy = BusyTracker(self.q.r, self.q.k, worker_id, cfg, self.log, on_redis_error=self._redis_error)
        self.retry = Retry(self.log, self._redis_error, self._unreplicated, lambda s: self._sleep(s, finishing=True))
        self.lock = Lock(cfg, worker_id, self.q, self.busy, self.log, self._redis_error)
        self.intake = Intake(cfg, self.q, proc, list_owner, worker_id=worker_id, log=self.log, lock=self.lock,
                             retry=self.retry, reporter=self.reporter, busy=self.busy,
                             stopping=lambda: self.stopping, sleep=self._sleep)
        self.attempt = Attempt(cfg, self.q, self.kinds, worker_id=worker_id, marker=marker, log=self.log,
                               lock=self.lock, reporter=self.reporter, beat=self.beat, title=self.title,
                               aborting=lambda: self.aborting, orphaned=lambda: self.orphaned,
                               on_orphaned=self._on_parent_death, on_error=self._redis_error, runner=runner_,
                               reap_orphans=reap_orphans)
        self.settle = Settle(cfg, self.q, proc, self.kinds, worker_id=worker_id, log=self.log, lock=self.lock,
                             retry=self.retry, reporter=self.reporter, busy=self.busy, intake=self.intake,
                             title=self.title)
        self.preload()

    # --- the job's path ---------------------------------------------------------------------------

    def step(self, now: float) -> None:
        """One turn of the loop at monotonic time ``now``: run the job the last settle started, or
        claim one; then run it, settle it and release what it held."""
        nxt, self.next = self.next, None
        if nxt is None:
            self.beat(now=now)
            if self.reporter.congested:  # the supervisor is not reading: claim nothing until it does
                self._sleep(0.05)
                return
            nxt = self.intake.claim()  # claim → take (the lock, in the same script)
            if nxt is None:
                return
        self.next = self.work(nxt)

    def work(self, nxt: Next) -> Next | None:
        """Run one started attempt and settle it; the settle may start the next job (returned)."""
        if nxt.outcome is not None:  # decided at its start: settled without running
            return self.settle.settle(nxt, Ran(nxt.outcome, launched=False))
        if self.aborting:  # started by the last settle, not to be run: back to ready
            self.settle.put_back(nxt)
            return None
        self.lock.hold(nxt.started)
        try:
            ran = self.attempt.run(nxt)
            faults.checkpoint("before_ack")
            following = self.settle.settle(nxt, ran, take_next=self._may_take())
            self.attempt.settled(busy_next=following is not None)  # the attempt's step timings end here
            return following
        except BaseException:
            self.lock.drop(nxt.job.id)
            raise
        finally:
            self.attempt.unsettled = False
            self.attempt.sweep()  # (done by ``settled`` unless the settle raised) before anything else runs

    def _may_take(self) -> bool:
        """Whether the settle may start the next job: not when stopping, or when the supervisor is
        not reading our reports."""
        return not (self.stopping or self.reporter.congested or os.getppid() != self.parent)

    def put_back_next(self) -> None:
        if self.next is not None:
            nxt, self.next = self.next, None
            try:
                self.settle.put_back(nxt)
            except redis.RedisError as e:  # the reaper requeues it once our host key lapses
                self._redis_error(e)
                self.log.warning("put_back_failed", job_id=nxt.job.id, error=str(e))

    # --- process plumbing -------------------------------------------------------------------------

    def main(self) -> SlotExit:
        # The supervisor's death reaches us as SIGUSR2: kill the running job's group, then go. (A job
        # child is spawned without a PDEATHSIG of its own: posix_spawn cannot set one; see runner.)
        signal.signal(signal.SIGUSR2, self._on_parent_death)
        groups.set_pdeathsig(signal.SIGUSR2)
        if os.getppid() != self.parent:
            return SlotExit.OK
        groups.set_subreaper()
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C goes to the supervisor's decision
        signal.signal(signal.SIGUSR1, self._on_abort)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        self.title("idle")
        self.busy.clear_stale()
        self.reporter.send(Idle())
        backoff = 0.1
        # A job the last settle already started is run even when a SIGTERM came meanwhile (as one
        # that take.lua started before the flag was seen).
        while (not self.stopping or self.next is not None) and os.getppid() == self.parent:
            try:
                self.step(time.monotonic())
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
        settled first: exiting then would throw a finished attempt away, and the next supervisor
        would run the job again (``bench/soak_supervisor_kill.py``). The loop ends after that
        settle (``getppid`` changed; a next job the settle started is put back); an alarm bounds it
        (``orphan_settle_s``), and the next supervisor waits for us before it requeues our list
        (``daemon.Supervisor.cleanup_previous``)."""
        self.orphaned = True
        if self.attempt.spawning:
            return  # the attempt calls us again once the new child's pid is known, to kill it
        if self.attempt.unsettled or (self.attempt.child_pid and exited(self.attempt.child_pid)):
            self.stopping = True
            self.log.warning("supervisor_died_settling_first", job_pid=self.attempt.child_pid or None)
            signal.signal(signal.SIGALRM, self._on_orphan_timeout)
            signal.setitimer(signal.ITIMER_REAL, orphan_settle_s(self.cfg))
            return
        if self.attempt.child_pid:
            self.log.warning("supervisor_died_killing_attempt", job_pid=self.attempt.child_pid)
        self._die()

    def _on_orphan_timeout(self, *_: object) -> None:
        self.log.error("orphan_settle_timed_out", seconds=orphan_settle_s(self.cfg))
        self._die()

    def _die(self) -> None:
        lingering = self.attempt.lingering[0].pid if self.attempt.lingering else 0
        pgids = [self.attempt.child_pid, lingering, *(g for kind in self.kinds.values() for g in kind.groups())]
        for pgid in pgids:
            if pgid:
                groups.killpg(pgid, signal.SIGKILL)
        os._exit(SlotExit.ERROR)

    def _on_abort(self, *_: object) -> None:
        self.stopping = True
        self.aborting = True

    def title(self, what: str) -> None:
        setproctitle.setproctitle(f"tender-pool: slot {self.index} {what}")

    def beat(self, force: bool = False, now: float | None = None) -> None:
        """Report liveness (at most every ``beat_every`` unless forced) and write out any backlog
        (reports held for the next write go out with the next report, or with a due beat).
        ``now``: the loop's clock (monotonic), read here when not given."""
        now = time.monotonic() if now is None else now
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

    def _unreplicated(self, waiting: bool) -> None:
        """Whether a retried write waits for a replica: reported to the supervisor at once
        (``status``: "waiting for a replica to acknowledge"), and cleared by the next write that lands."""
        if waiting != self.unreplicated:
            self.unreplicated = waiting
            self.beat(force=True)

    def _redis_error(self, e: redis.RedisError) -> None:
        """Every Redis error, wherever it was caught: counted, and our list reconciled before the
        next claim (the error may have cost a reply whose effect we never saw)."""
        self.redis_errors += 1
        self.intake.reconcile_due = True


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
                kind.preload(tick=self.beat)  # beats while the platform's module imports
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


def orphan_settle_s(cfg: Config) -> float:
    """How long a slot whose supervisor died may take to settle an attempt that had already ended
    (then SIGALRM ends it); the next supervisor waits as long for it before requeueing its list.
    The host key's lifetime (3 heartbeats), at least ``kill_grace`` + 1 s: a settle on a loaded
    machine, or through a Redis failover, takes more than one round trip."""
    return max(cfg.pool.kill_grace + 1.0, 3 * cfg.pool.heartbeat)


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
