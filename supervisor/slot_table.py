"""The slot table: each slot's process and what the supervisor wants of it; the one place both change.

A slot has a ``state`` (``SlotState``: what it is doing, what ``status`` shows) and an
``intent`` (what the supervisor wants of it). Only ``SlotTable``'s methods assign either; each
assignment carries a Supervisor-style ``# FROM -> TO`` comment. The table does no I/O of its own:
the one effect it has, signalling a slot, goes through the ``kill`` function it is given, so the
unit tests drive it (and the daemon's ``step``) with a fixed clock and no processes.

  OFFLINE --spawned--> STARTING --first report--> IDLE <--Busy/Idle--> BUSY
  STARTING/IDLE/BUSY --stop(intent): SIGTERM--> STOPPING (finishes its job, claims nothing more)
  any --exited--> OFFLINE, then, by intent:
    RUN      it died: respawned at once if a job killed it (the job's crash cap counts that, not
             the slot), else after a backoff that doubles with each fast death; CRASH_LOOPING after
             CRASH_LOOP_AFTER fast deaths in a row (still respawned, every RESPAWN_MAX_S at most);
             exit ``SlotExit.BOOT_ERROR``: CRASH_LOOPING with ``boot_error`` set, never respawned
             (a reload retries it)
    RECYCLE  the config changed: forked again at once, with the new config
    RETIRE   scaled away: removed from the table
    PAUSE    a ``drain`` request: stays OFFLINE until ``scale``
    DRAIN    the daemon is stopping: stays OFFLINE
A job is never killed to shrink, reload or pause the pool: those only ask (SIGTERM).

Threads: the status thread and the metrics scrape only read the table: ``snapshot()`` (a copy of
the list; each SlotProc attribute is one reference, read whole under the GIL), and, for a control
request's reply and ``status``'s draining flag, ``counted()`` and the ``draining``/``paused``
properties (``lifecycle.answer``, ``Supervisor._handle_request``). Every method that changes the
table is called by the supervisor's main loop only.
"""

from __future__ import annotations

import enum
import math
import signal
from dataclasses import dataclass, field
from typing import Callable

from tender_pool.slots.reports import ReportReader

from tender_pool.slots.reports import Beat, Busy, Finished, Idle, Preloaded, SlotExit, SlotReport

FAST_DEATH_S = 5.0  # a slot that dies sooner than this after spawning, not running a job, died "fast"
CRASH_LOOP_AFTER = 3  # fast deaths in a row that make a slot crash-looping
RESPAWN_MAX_S = 60.0


class SlotState(str, enum.Enum):
    """What a slot is doing, as ``status`` and the metrics show it (the diagram above)."""

    STARTING = "starting"
    IDLE = "idle"
    BUSY = "busy"
    STOPPING = "stopping"
    OFFLINE = "offline"
    CRASH_LOOPING = "crash-looping"


class Intent(enum.Enum):
    """What the supervisor wants of a slot. Every intent but RUN means "stop after your job"."""

    RUN = "run"
    RECYCLE = "recycle"
    RETIRE = "retire"
    PAUSE = "pause"
    DRAIN = "drain"


@dataclass
class SlotProc:
    """One slot position and its current process. ``index, worker_id, pid, state, busy,
    last_report, spawned_at, proc, boot_error`` are read by the status builder and metrics."""

    index: int
    worker_id: str
    pid: int = 0
    seq: int = 0  # incarnation number of this position: the processing list is ``proc:…:<index>.<seq>``
    proc: str = ""
    state: SlotState = SlotState.OFFLINE
    intent: Intent = Intent.RUN
    read_fd: int = -1
    reader: ReportReader = field(default_factory=ReportReader)
    spawned_at: float = 0.0
    last_report: float = 0.0
    heard_from: float = 0.0  # silence is measured from max(last_report, heard_from): see SlotTable.rebase
    busy: Busy | None = None
    fast_deaths: int = 0
    respawn_at: float = 0.0
    restarts: int = 0
    boot_error: str | None = None  # it exited BOOT_ERROR: why, for status; not respawned
    fenced: bool = False  # stopped by the fence: whatever way it ends, its job was interrupted, not crashed
    unreplicated: bool = False  # its last Beat: retrying a write no replica acknowledged yet (status warns)
    imports: dict[str, str] | None = None  # its function handlers' preload: name → "" or why not (Preloaded)

    @property
    def stopping(self) -> bool:
        """Asked to exit after its job: the one "is it stopping?" test."""
        return self.intent is not Intent.RUN

    def silent_for(self, now: float) -> float:
        return now - max(self.last_report, self.heard_from)


@dataclass
class Exit:
    """What the table concluded from a slot's exit, for the daemon's log line and counters."""

    clean: bool  # we asked it to stop and it exited 0
    reason: str  # for requeue.lua: "drain" (not a crash) or "crash"
    how: str  # "exit 1", "signal 9"
    removed: bool = False
    restarted: bool = False  # counts as a restart (a death, not a planned respawn)
    respawn_in: float | None = None  # None: not respawned (gone, paused, draining, boot error)
    crash_looping: bool = False
    boot_error: bool = False
    job_death: bool = False  # it died running a job: the job's crash cap counts it, not the slot


def describe(code: int) -> str:
    """``os.waitstatus_to_exitcode`` result → "exit N" / "signal N"."""
    return f"exit {code}" if code >= 0 else f"signal {-code}"


BOOT_ERROR_TEXT = "exited BOOT_ERROR before its first claim (config or environment); see its slot_boot_failed log line"


class SlotTable:
    def __init__(self, host_id: str, count: int, kill: Callable[[int, int], None]):
        self.host_id = host_id
        self.kill = kill  # os.kill with ESRCH as "already gone"; a fake in unit tests
        self.seqs: dict[int, int] = {}  # last list sequence of removed positions (list names stay unique)
        self.slots: list[SlotProc] = [self._new(i) for i in range(1, count + 1)]
        self.target = count  # live slot count: the config's, or the last `scale N`
        self.mode = Intent.RUN  # the intent new slots get: RUN, PAUSE (drain request) or DRAIN (stopping)

    def _new(self, index: int) -> SlotProc:
        return SlotProc(index, f"{self.host_id}-slot{index}", seq=self.seqs.get(index, 0))

    # --- queries (any thread may call snapshot; the rest are the main loop's) -------------------------

    def snapshot(self) -> list[SlotProc]:
        return list(self.slots)

    def live(self) -> list[SlotProc]:
        return [s for s in self.slots if s.pid]

    def by_pid(self, pid: int) -> SlotProc | None:
        return next((s for s in self.slots if s.pid == pid), None)

    def counted(self) -> list[SlotProc]:
        """The slots that make up the pool's size (retiring ones are on their way out)."""
        return [s for s in self.slots if s.intent is not Intent.RETIRE]

    def due(self, now: float) -> list[SlotProc]:
        return [s for s in self.slots if not s.pid and s.intent is Intent.RUN and now >= s.respawn_at]

    def next_due(self, now: float) -> float:
        """Seconds until the next respawn is due (inf when none is waiting)."""
        waits = [s.respawn_at - now for s in self.slots if not s.pid and s.intent is Intent.RUN]
        return max(0.0, min(waits, default=math.inf))

    @property
    def draining(self) -> bool:
        return self.mode is Intent.DRAIN

    @property
    def paused(self) -> bool:
        return self.mode is Intent.PAUSE

    def none_can_boot(self) -> bool:
        """Every slot meant to run failed at boot and none is running: the daemon gives up (exit 3)."""
        want = [s for s in self.slots if s.intent is Intent.RUN]
        return bool(want) and all(s.boot_error and not s.pid for s in want)

    # --- a slot's life ------------------------------------------------------------------------------

    def spawned(self, s: SlotProc, pid: int, read_fd: int, now: float) -> None:
        # OFFLINE/CRASH_LOOPING -> STARTING
        s.pid, s.read_fd, s.reader = pid, read_fd, ReportReader()
        s.state, s.busy, s.boot_error, s.unreplicated, s.imports = SlotState.STARTING, None, None, False, None
        s.spawned_at = s.last_report = s.heard_from = now

    def new_list(self, s: SlotProc, name: Callable[[int], str]) -> None:
        """Before a fork: the new process gets a processing list of its own (a fresh sequence)."""
        s.seq += 1
        s.proc = name(s.seq)

    def fork_failed(self, s: SlotProc, now: float) -> None:
        s.respawn_at = now + 1.0  # stays OFFLINE; tried again in a second

    def on_report(self, s: SlotProc, rep: SlotReport, now: float) -> None:
        s.last_report = now
        if isinstance(rep, (Busy, Finished)):
            s.unreplicated = False  # a start or settle landed, so replicated
        if isinstance(rep, Beat):
            s.unreplicated = rep.unreplicated
        if isinstance(rep, Busy):
            # IDLE/STARTING -> BUSY (or STOPPING, if asked to stop: it still finishes this job)
            s.busy, s.state = rep, SlotState.STOPPING if s.stopping else SlotState.BUSY
        elif isinstance(rep, Idle):
            s.busy = None
            if s.state in (SlotState.STARTING, SlotState.BUSY):
                s.state = SlotState.IDLE  # STARTING/BUSY -> IDLE
        elif isinstance(rep, Finished):
            s.fast_deaths = 0  # good work: whatever killed it before is behind it
        elif isinstance(rep, Beat) and s.state is SlotState.STARTING:
            s.state = SlotState.IDLE  # STARTING -> IDLE
        elif isinstance(rep, Preloaded):
            s.imports = dict(rep.imports)

    def stop(self, s: SlotProc, intent: Intent) -> None:
        """Ask ``s`` to exit after its current job, then do what ``intent`` says."""
        s.intent = intent
        if s.pid:
            if s.state is not SlotState.STOPPING:
                s.state = SlotState.STOPPING  # STARTING/IDLE/BUSY -> STOPPING
            self.kill(s.pid, signal.SIGTERM)

    def fence(self) -> list[SlotProc]:
        """This host lost its lease (no heartbeat write for ``pool.fence``): every slot running a job
        kills it now (SIGUSR1: the attempt's group TERM, kill_grace, KILL; the job is put back as an
        interruption) and exits, to be forked again at once. Idle slots are left alone."""
        out = []
        for s in self.slots:
            if s.pid and s.busy is not None and s.intent is Intent.RUN:
                s.intent, s.fenced = Intent.RECYCLE, True
                s.state = SlotState.STOPPING  # BUSY -> STOPPING (fenced), then forked again at once
                self.kill(s.pid, signal.SIGUSR1)
                out.append(s)
        return out

    def exited(self, s: SlotProc, code: int, now: float) -> Exit:
        """``s``'s process was reaped (``code`` as from ``os.waitstatus_to_exitcode``). The caller
        has already killed its job tree and read its last reports."""
        asked = s.stopping
        clean = asked and code == SlotExit.OK
        job_death = s.busy is not None and not asked
        # A fenced slot may be killed as silent while blocked on the unreachable Redis: its job was
        # still stopped by the pool (an interruption), not crashed by itself.
        interrupted = clean or s.intent is Intent.DRAIN or s.fenced
        ex = Exit(clean=clean, reason="drain" if interrupted else "crash", how=describe(code), job_death=job_death)
        s.fenced = False
        s.pid, s.busy, s.read_fd, s.unreplicated = 0, None, -1, False
        s.state = SlotState.OFFLINE  # any -> OFFLINE
        if s.intent is Intent.RETIRE:
            self.slots.remove(s)  # OFFLINE -> gone (scaled away)
            self.seqs[s.index] = s.seq
            ex.removed = True
            return ex
        if s.intent in (Intent.PAUSE, Intent.DRAIN):
            return ex  # stays OFFLINE: paused until `scale`, or the daemon is stopping
        if s.intent is Intent.RECYCLE and clean:
            s.intent, s.respawn_at = Intent.RUN, now  # OFFLINE -> STARTING at once, with the new config
            ex.respawn_in = 0.0
            return ex
        s.intent = Intent.RUN  # a recycled slot that did not exit cleanly died: the death path below
        if code == SlotExit.BOOT_ERROR:
            why = next((f"handlers.{k}: {v}" for k, v in sorted((s.imports or {}).items()) if v), BOOT_ERROR_TEXT)
            s.state, s.boot_error, s.respawn_at = SlotState.CRASH_LOOPING, why, math.inf  # OFFLINE -> CRASH_LOOPING
            ex.boot_error = ex.crash_looping = True
            return ex
        ex.restarted = True
        s.restarts += 1
        if job_death:
            delay = 0.0  # its job killed it: the job's crash cap (requeue.lua) deals with the job
        else:
            s.fast_deaths = s.fast_deaths + 1 if now - s.spawned_at < FAST_DEATH_S else 0
            delay = 0.0 if s.fast_deaths == 0 else min(0.5 * 2 ** (s.fast_deaths - 1), RESPAWN_MAX_S)
        if s.fast_deaths >= CRASH_LOOP_AFTER and not job_death:
            s.state = SlotState.CRASH_LOOPING  # OFFLINE -> CRASH_LOOPING (respawned after the delay)
            ex.crash_looping = True
        s.respawn_at = now + delay
        ex.respawn_in = delay
        return ex

    # --- liveness -----------------------------------------------------------------------------------

    def silent(self, now: float, limit: float) -> list[SlotProc]:
        return [s for s in self.slots if s.pid and s.silent_for(now) > limit]

    def killed(self, s: SlotProc, now: float) -> None:
        """SIGKILL a wedged slot; the death path follows through waitpid. One kill per silence."""
        s.heard_from = now
        self.kill(s.pid, signal.SIGKILL)

    def rebase(self, now: float) -> None:
        """The supervisor itself did not run for a while (SIGSTOP, swap, a stalled host): what it
        missed says nothing about its slots. Start every silence window again from ``now``."""
        for s in self.slots:
            s.heard_from = max(s.heard_from, now)

    # --- the pool's shape ---------------------------------------------------------------------------

    def scale(self, n: int) -> tuple[list[str], list[str]]:
        """Grow: new slots (or a retiring one taken back: it finishes, exits, is forked again).
        Shrink: retire the surplus, offline then idle slots first, busy ones last; a retiring slot
        gets SIGTERM, finishes its current job and exits. Returns (slots kept, slots retiring)."""
        self.target = n
        keep = self.counted()
        if len(keep) < n:
            for s in self.slots:
                if s.intent is Intent.RETIRE and len(keep) < n:
                    s.intent = Intent.RECYCLE  # retiring -> recycled: exits after its job, forked again
                    keep.append(s)
            used = {s.index for s in self.slots}
            i = 1
            while len(keep) < n:
                if i not in used:
                    s = self._new(i)
                    s.intent = self.mode  # new -> OFFLINE; spawned by the loop unless paused
                    self.slots.append(s)
                    keep.append(s)
                    used.add(i)
                i += 1
            self.slots.sort(key=lambda s: s.index)
        elif len(keep) > n:
            rank = {SlotState.OFFLINE: 0, SlotState.CRASH_LOOPING: 0, SlotState.STARTING: 1, SlotState.IDLE: 1}
            for s in sorted(keep, key=lambda s: (rank.get(s.state, 2), -s.index))[: len(keep) - n]:
                if s.pid:
                    self.stop(s, Intent.RETIRE)  # -> STOPPING -> OFFLINE -> removed, in exited()
                else:
                    self.slots.remove(s)  # OFFLINE -> gone
                    self.seqs[s.index] = s.seq
        return [s.worker_id for s in self.counted()], [s.worker_id for s in self.slots if s.intent is Intent.RETIRE]

    def pause(self) -> None:
        """A `drain` request: every slot finishes its job and exits; none is respawned until `resume`."""
        self.mode = Intent.PAUSE
        for s in self.slots:
            if s.intent is not Intent.RETIRE:
                self.stop(s, Intent.PAUSE)

    def resume(self) -> None:
        """`scale` after a `drain` request: offline slots are spawned again; one still finishing
        its job is forked again once it exits."""
        self.mode = Intent.RUN
        for s in self.slots:
            if s.intent is Intent.PAUSE:
                s.intent = Intent.RECYCLE if s.pid else Intent.RUN

    def recycle(self, now: float) -> list[str]:
        """The slots' config changed: each running slot exits after its job and is forked again;
        one that failed at boot gets another chance at once."""
        out = []
        for s in self.slots:
            if s.intent is not Intent.RUN:
                continue  # retiring, paused or draining: it is going away anyway
            if s.pid:
                self.stop(s, Intent.RECYCLE)
                out.append(s.worker_id)
            elif s.boot_error:
                s.boot_error, s.fast_deaths, s.respawn_at = None, 0, now
                s.state = SlotState.OFFLINE  # CRASH_LOOPING -> OFFLINE, spawned by the loop
                out.append(s.worker_id)
        return out

    def drain(self) -> None:
        """The daemon is stopping: every slot finishes its job and exits; nothing is respawned."""
        self.mode = Intent.DRAIN
        for s in self.slots:
            self.stop(s, Intent.DRAIN)

    def signal_all(self, sig: int) -> None:
        """Drain time is up (SIGUSR1: slots kill their job and put it back) or a second stop signal
        (SIGKILL: their jobs go back through the death path). States follow from the exits."""
        for s in self.live():
            self.kill(s.pid, sig)
