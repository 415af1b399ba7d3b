"""Run: one started attempt, from its kind's launch to its outcome.

What runs for a job is its kind's business (``kinds.py``): ``prepare`` makes the launch (argv, a
function to fork, or a fork server's start), the runner starts it in its own process group and
enforces the deadline, and the kind concludes the outcome from what the runner saw. While it runs,
the attempt polls its job once per ``lock.poll_every`` for a cancel or a lost token (fenced) and,
with a fence, our host's lease; the supervisor hears ``Busy`` once the child exists.

Hazards this module owns:
- ``child_pid``, ``spawning`` and ``unsettled`` are read by the slot's parent-death handler
  (SIGUSR2): a death during the spawn waits for the pid (``on_orphaned`` is called once it is
  known); a death after the handler exited settles first.
- ``runner`` (``spawn``, ``fork_call``, ``run``) and ``reap_orphans`` are the seam to the
  processes: tests give fakes and drive the slot without forking.
- A forked child that reported its outcome before exiting (``runner.RunResult.lingering``) is
  settled first and ended after (``sweep``): its exit's teardown runs beside the settle. ``sweep``
  runs before the slot runs anything else (``Slot.work``): the child's group is SIGKILLed, the child
  reaped and its orphans killed before the slot's next launch, as they were before its settle.
"""

from __future__ import annotations

import os
import time
from typing import Callable

import msgspec
import redis

from tender_pool.store.config import Config
from tender_pool.store.outcomes import Status, Stop
from tender_pool.store.error_kinds import ErrorKind
from tender_pool.store.records import JobError, JobRecord
from tender_pool.store.handler_io import Outcome
from tender_pool.slots.reports import Busy

from tender_pool.slots import groups, inputs, kinds, runner as runner_module
from tender_pool.slots.reports import Reporter
from tender_pool.slots.intake import Next
from tender_pool.slots.lock import Lock
from tender_pool.slots.progress import ProgressFeed
from tender_pool.slots.queue import Queue


class Ran(msgspec.Struct, frozen=True):
    """What one attempt came to, for its settle: the outcome, whether a handler process was
    started at all (``launched``), the input hash the attempt recorded (run items only: the hash
    skip trusts, ``inputs.py``; None otherwise) and its fd-3 progress figures."""

    outcome: Outcome
    launched: bool = True
    input_hash: str | None = None
    progress_events: int = 0
    progress_dropped: int = 0
    steps: dict[str, float] = {}  # the pool's steps up to the settle, seconds (``Steps``)


class Attempt:
    def __init__(self, cfg: Config, q: Queue, kinds_: dict, *, worker_id: str, marker: str, log, lock: Lock,
                 reporter: Reporter, beat: Callable[..., None], title: Callable[[str], None],
                 aborting: Callable[[], bool], orphaned: Callable[[], bool], on_orphaned: Callable[[], None],
                 on_error: Callable[[redis.RedisError], None], runner=runner_module,
                 reap_orphans: Callable[..., list[int]] = groups.reap_orphans):
        self.cfg = cfg
        self.q = q
        self.kinds = kinds_
        self.worker_id = worker_id
        self.marker = marker  # TENDER_POOL_OWNER value for every child
        self.log = log
        self.lock = lock
        self.reporter = reporter
        self.beat = beat
        self.title = title
        self.aborting = aborting
        self.orphaned = orphaned
        self.on_orphaned = on_orphaned
        self.on_error = on_error
        self.runner = runner
        self.reap_orphans = reap_orphans
        self.last_poll = 0.0
        self.child_pid = 0  # the running attempt's process (= its group), for the parent-death handler
        self.spawning = False  # between the spawn and child_pid: a parent death waits for the pid
        self.unsettled = False  # an attempt's handler has exited and its settle has not returned yet
        self.last: tuple[Next, Ran, Steps] | None = None  # the attempt run last, until ``settled``
        self.pending: tuple[Next, Ran, dict[str, float]] | None = None  # its steps, to record (``flush_steps``)
        # a child that reported its outcome, not reaped yet, and its job_ran line to log then (``sweep``)
        self.lingering: tuple[runner_module.Child, Callable[[list[int]], None]] | None = None

    def run(self, nxt: Next) -> Ran:
        """Run one attempt in its own process group; never raises for the job's own failures."""
        steps = Steps(nxt.started.started_ms)
        self.last = None
        ran = self._run(nxt, steps)
        self.flush_steps()  # not done yet if this attempt started no process
        self.last = (nxt, ran, steps)
        return ran

    def settled(self, busy_next: bool) -> None:
        """The slot has settled the attempt ``run`` returned last: its steps end here (``settle``) and
        go to its kind's ``record_steps``; with ``busy_next`` (the settle started the next job, which
        will run) that is done once the next attempt's child is running (``flush_steps``), off both
        jobs' way from start to settle; otherwise at once."""
        if self.last is None:  # settled without running (decided at its start)
            if not busy_next:
                self.flush_steps()
            return
        nxt, ran, steps = self.last
        self.last = None
        steps.mark("settle")
        self.sweep()
        self.pending = (nxt, ran, steps.done())
        if not busy_next or self.aborting():
            self.flush_steps()
            kind = self.kinds.get(nxt.job.kind)
            if kind is not None and ran.launched and not self.aborting():
                # Idle now: the next attempt's child is forked before the next claim. Not while a child
                # runs (a busy slot): on 2 cores that fork and its copy-on-write faults slowed the running
                # extraction more than they saved (bench/bench_doc_overhead.py: +7 ms a .doc).
                kind.ready_next()

    def sweep(self) -> None:
        """After the settle of an attempt whose child reported its outcome before exiting: end the
        child (``runner.end_reported``: its group SIGKILLed, its exit waited for and reaped; mostly
        it has exited already, its teardown having run beside the settle), kill and reap its orphans,
        and log its ``job_ran`` line (``sweep``: this step). The slot calls it before it runs anything
        else, settled or not (``Slot.work``). The wait is bounded (``LINGER_WAIT``): a child the
        kernel has not let go of by then is killed again and reaped by ``reap_orphans``, which waits
        for it no longer than for any orphan."""
        held, self.lingering = self.lingering, None
        if held is None:
            return
        child, log_ran = held
        if not self.runner.end_reported(child, LINGER_WAIT):
            self.log.warning("reported_child_not_gone", pid=child.pid, seconds=LINGER_WAIT)
        log_ran(self.reap_orphans(keep=self._keep()))

    def _keep(self) -> set[int]:
        return set().union(*(k.keep() for k in self.kinds.values()))

    def flush_steps(self) -> None:
        if self.pending is None:
            return
        nxt, ran, steps = self.pending
        self.pending = None
        kind = self.kinds.get(nxt.job.kind)
        if kind is None or not ran.launched:
            return
        try:
            kind.record_steps(nxt.job, nxt.started.attempt, ran.outcome, steps)
        except Exception:  # noqa: BLE001 - a diagnosis: never the job's or the slot's failure
            self.log.exception("record_steps_failed", job_id=nxt.job.id)

    def _run(self, nxt: Next, steps: "Steps") -> Ran:
        job, st = nxt.job, nxt.started
        log = self.log.bind(job_id=job.id, kind=job.kind, user=job.user, attempt=st.attempt)
        kind = self.kinds.get(job.kind)
        if kind is None:
            msg = f"no handler for kind {job.kind!r} on {self.worker_id}"
            return Ran(kinds.Rejected(JobError(ErrorKind.HANDLER_FAILED.value, msg)).outcome(), launched=False)
        try:
            launch = kind.prepare(job, st.attempt)
        except Exception as e:  # noqa: BLE001 - e.g. the JVM cannot start: the job's try, not the slot's end
            log.exception("prepare_failed")
            return Ran(Outcome(Status.FAILED, error=JobError(ErrorKind.HANDLER_FAILED.value, f"could not start: {e}")))
        if isinstance(launch, kinds.Rejected):
            log.info("input_rejected", error_kind=launch.error.kind, message=launch.error.message)
            return Ran(launch.outcome(), launched=False)
        recorded = None
        if job.input_hash is not None:  # a run item (skippable): hash what this attempt is about to read
            try:
                recorded = inputs.record(job.kind, job.payload, launch.file, each_chunk=self.beat)
            except inputs.InputChanging as e:
                log.warning("input_changing", file=launch.file, message=str(e))
                changing = kinds.Rejected(JobError(ErrorKind.HANDLER_FAILED.value, str(e)), final=False)
                return Ran(changing.outcome(), launched=False)
        steps.mark("prepare")
        busy = Busy(job.id, job.kind, job.user, launch.file, st.token, st.attempt, int(time.time() * 1000))
        self.title(f"busy {job.kind} job={job.id} user={job.user}")
        env = {"TENDER_POOL_JOB_ID": job.id, "TENDER_POOL_ATTEMPT": st.token, "TENDER_POOL_OWNER": self.marker}
        t0 = time.monotonic()
        self.spawning = True  # a parent death now would not know the child's pid: it waits for it
        try:
            if launch.start is not None:
                proc = launch.start({**launch.env, **env})
            elif launch.call is not None:
                proc = self.runner.fork_call(launch.call, {**launch.env, **env})
            else:
                assert launch.argv is not None
                proc = self.runner.spawn(launch.argv, {**launch.env, **env})
            busy.child_pid = self.child_pid = proc.pid
        finally:
            self.spawning = False
        steps.mark("spawn")
        if self.orphaned():
            self.on_orphaned()  # the supervisor died while we spawned: kill the new child, exit
        self.reporter.send(busy)  # one write: with the previous job's held Finished, if any
        self.flush_steps()  # the previous job's step timings, written while this one's child runs
        log.info("job_started", pid=proc.pid)
        progress = ProgressFeed(lambda ev: self._send_progress(job, st.token, ev))
        steps.mark("report")
        res = self.runner.run(
            proc,
            launch.stdin,
            deadline=t0 + kind.timeout,
            kill_grace=self.cfg.pool.kill_grace,
            marker=("TENDER_POOL_ATTEMPT", st.token),
            tick=lambda: self._tick(job, st.token),
            tick_every=self.lock.poll_every,
            beat=self.beat,
            progress=progress,
        )
        self.unsettled = True  # from here a parent death settles this attempt before the slot exits
        self.child_pid = 0
        steps.child(kind.child_steps(res), res.exited_at)
        if self.aborting() and res.stopped is None and res.returncode != 0:
            res.stopped = Stop.ABORT  # the supervisor stopped it (fence) while we were not looking: not a try
        outcome = kind.conclude(job, st.attempt, res)
        steps.mark("conclude")
        if recorded is not None and outcome.status != Status.INTERRUPTED and not _cancelled(outcome):
            changed = recorded.changed(each_chunk=self.beat)
            if changed:  # the result may be of either content: never stored under the hash
                log.warning("input_changed", file=launch.file, message=changed)
                kind.discard(job, st.attempt, outcome)
                outcome = Outcome(Status.FAILED, error=JobError(ErrorKind.HANDLER_FAILED.value, changed + "; retried"),
                                  signals=outcome.signals)
        ran_fields = dict(returncode=res.returncode, stopped=res.stopped, signals=res.signals, kill=res.kill,
                          seconds=round(time.monotonic() - t0, 4), outcome=outcome.status,
                          error_kind=outcome.error.kind if outcome.error else None)

        def log_ran(leftovers: list[int]) -> None:
            steps.mark("orphans" if res.lingering is None else "sweep")
            log.info("job_ran", leftovers=leftovers, **ran_fields, steps_ms=steps.ms())

        if res.lingering is not None:  # reaped, its orphans swept and its line logged after the settle
            self.lingering = (res.lingering, log_ran)
        else:
            log_ran(self.reap_orphans(keep=self._keep()))
            steps.mark("log")
        return Ran(outcome, True, recorded.hash if recorded is not None else None,
                   progress_events=progress.events, progress_dropped=progress.dropped, steps=steps.done())

    def _send_progress(self, job: JobRecord, token: str, event: dict) -> bool:
        """progress.lua on the FastLane; a Redis error drops the event (counted), never the job."""
        try:
            return self.q.progress(job, token, event)
        except redis.RedisError as e:
            self.on_error(e)
            return False

    def _tick(self, job: JobRecord, token: str) -> str | None:
        """The runner's poll: why to stop the attempt now (``Stop``), or None."""
        self.beat(force=True)
        if self.aborting():
            return Stop.ABORT
        now = time.monotonic()
        if now - self.last_poll < self.lock.poll_every:
            return None
        self.last_poll = now
        try:
            why = self.q.poll_attempt(job.id, token)
            if why is None and self.lock.lapsing():
                # Our host key expires before another poll plus a kill could finish: our supervisor
                # is not renewing it (stopped, starved) and cannot fence. Stop first, like the fence.
                self.log.error("lease_lapsing_stopping", job_id=job.id, attempt=token)
                return Stop.FENCED
            return why
        except redis.RedisError as e:
            self.on_error(e)
            return None


LINGER_WAIT = 1.0  # s: how long ``sweep`` waits for a reported child's exit, once SIGKILLed


class Steps:
    """The pool's own time around one attempt: consecutive steps, in seconds, from the job's start
    stamp (take.lua's Redis TIME, ``started_ms``) to the settle's reply, each ending where the next
    begins on the slot's monotonic clock, so they add up to the attempt's whole claim → stored (plus
    the settle reply's way back). ``take``: start stamp → the slot runs it (wall clock against Redis's;
    0 if the clocks disagree); ``prepare`` (the kind's launch, an input hash); ``spawn`` (fork or
    posix_spawn, or the order to a child forked ahead); ``report`` (Busy to the supervisor, the previous
    job's steps written, log); then the run, split at the child's own marks where the kind has them
    (parse_markdown: ``child_start``, ``extract``, ``write``; clamped to the slot's timeline: the child
    runs beside the slot, so a step is the part of the slot's wait it ended) and at the exit as the
    runner saw it (``exit`` or ``run``, then ``reap``: pipes drained and closed, the child waited for;
    a forked child's ``exit`` ends at its report, and its ``reap`` waits for nothing);
    ``conclude`` (the kind's reading of the output: decoding, the Markdown read back for the inline
    copy; an input re-hash); ``orphans`` (reap_orphans); ``log``; ``settle`` (``Attempt.settled``).
    A forked child that reported has no ``orphans`` and ``log`` before the settle but ``sweep`` after
    it (its end, reap_orphans, the job_ran line: ``Attempt.sweep``), not part of claim → stored."""

    def __init__(self, started_ms: int):
        self.last = time.monotonic()
        self.steps: dict[str, float] = {}
        if started_ms > 0:
            self.steps["take"] = max(0.0, time.time() - started_ms / 1000)

    def mark(self, name: str) -> None:
        """Step ``name`` ends now."""
        now = time.monotonic()
        self.steps[name] = self.steps.get(name, 0.0) + now - self.last
        self.last = now

    def child(self, marks: list[tuple[str, float]], exited_at: float | None) -> None:
        """The run (the last mark → now), split at the child's marks and at its end as ``run`` saw it:
        its exit, or a forked child's report of its exit code (``RunResult.exited_at``)."""
        end = time.monotonic()
        t = self.last
        for name, at in marks:
            at = min(max(at, t), end)
            self.steps[name] = at - t
            t = at
        if exited_at is not None:
            at = min(max(exited_at, t), end)
            self.steps["exit" if marks else "run"] = at - t
            t = at
        self.steps["reap" if exited_at is not None else "run"] = end - t
        self.last = end

    def done(self) -> dict[str, float]:
        return dict(self.steps)

    def ms(self) -> dict[str, float]:
        return {k: round(v * 1000, 2) for k, v in self.steps.items()}


def _cancelled(outcome: Outcome) -> bool:
    return outcome.error is not None and outcome.error.kind == ErrorKind.CANCELLED.value


def exited(pid: int) -> bool:
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
