"""The supervisor: forks slots, reaps them, respawns them, drains. It never runs a job, and its main
loop never talks to the network.

``run`` alternates ``wait`` (a selector over the slots' report pipes and the signal wake-up pipe; it
only sleeps until something happens, a second at most) and ``step(now)``, the whole loop body, which
uses only the clock it is given; unit tests call it with a fixed clock and fake process effects
(``forking.ProcessOps``). One step, in this order:
  1. signals (handlers only record them) and control requests queued by the status thread;
  2. every slot's pipe read to the end: a slot is judged on what it sent, never on what is queued;
  3. exited children reaped: a dead slot's job tree is killed here (local), then its processing list
     is handed to the housekeeper thread, which requeues it (Redis) at once; the table decides the
     respawn;
  4. liveness: a step long after the previous one (this process was stopped) restarts every silence
     window instead of judging; then slots silent for 3 heartbeats, or holding a list the
     housekeeper found stuck past its deadline, are SIGKILLed (their death is step 3's next time);
  5. drain progress, or respawns due;
  6. systemd (READY, STATUS=, WATCHDOG).
Where a slot's state changes: ``slot_table`` (every transition). Live changes: ``lifecycle``. Redis:
the housekeeper thread (``housekeeper``) for every supervisor write, the status thread for reads. The
loop shares no lock with those threads (``forking`` explains why fork needs none).

Exit codes: 0 after a drain, 1 when lists could not be requeued before giving up, 2 for a bad
config or a status socket in use, 3 when no slot can boot (every slot exited ``SlotExit.BOOT_ERROR``).
"""

from __future__ import annotations

import collections
import gc
import os
import select
import selectors
import signal
import socket as _socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import psutil
import redis
import setproctitle

from tender_pool.slots import faults, groups
from tender_pool.store.connection import connect
from tender_pool.slots.queue import Queue
from tender_pool.slots.slot import orphan_settle_s

from tender_pool.supervisor import control, forking, lifecycle
from tender_pool.store import logs, scripts
from tender_pool.store.config import Config, ConfigError, check_functions
from tender_pool.supervisor.archive_check import ArchiveCheck
from tender_pool.supervisor.embedded import EmbeddedError, EmbeddedRedis
from tender_pool.supervisor.forking import ProcessOps
from tender_pool.store.keys import Keys, Owner
from tender_pool.supervisor.notify import Announcer, Notifier
from tender_pool.supervisor.housekeeper import Housekeeper
from tender_pool.supervisor.slot_table import SlotProc, SlotTable
from tender_pool.supervisor.status_builder import StatusBuilder
from tender_pool.client.status_probe import QueueProbe
from tender_pool.supervisor.status_server import SocketInUse, StatusServer, close_after_fork
from tender_pool.client.status_protocol import STATUS_PROTOCOL, CountersView
from tender_pool.supervisor.counters import add_counters, tally
from tender_pool.slots.reports import Beat, Busy, Finished, SlotExit, SlotReport

if TYPE_CHECKING:  # imported by _observe, only with [metrics] listen set (prometheus_client)
    from tender_pool.supervisor.metrics import PoolMetrics

__all__ = ["Supervisor", "SlotProc", "Counters", "boot_id"]

QUEUE_PROBE_S = 5.0  # queue depth for STATUS=, read in the status thread (never the main loop)
LOOP_WAIT_S = 1.0  # the loop wakes at least this often
STALL_S = 2.0  # a step this long after the previous one: this process was stopped, not its slots
REPORT_BATCH_S = 0.005  # a step woken by slot reports alone comes at most this often (see wait)
READS_PER_STEP = 64  # 64 × 64 KiB per slot and step at most: a flood cannot hold the loop

# The supervisor's cumulative counters since start are the status JSON's own Struct (the status
# builder adds the housekeeper's reclaims when it reports them).
Counters = CountersView


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return _socket.gethostname()


class Supervisor:
    def __init__(self, cfg: Config, ops: ProcessOps | None = None, notifier: Notifier | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.cfg = cfg
        self.clock = clock
        self.log = logs.configure("supervisor")
        self.keys = Keys(cfg.redis.prefix, cfg.pool.queue)
        self.incarnation = os.urandom(4).hex()
        self.owner = Owner(cfg.pool.host_id, self.incarnation, boot_id(), os.getpid())
        self.marker = f"{cfg.pool.host_id}:{self.incarnation}"  # TENDER_POOL_OWNER prefix of our jobs
        self.ops = ops or ProcessOps(cfg, self.marker, self.owner.encode())
        self.table = SlotTable(cfg.pool.host_id, cfg.pool.worker_count, self.ops.kill)
        self.counters = Counters()
        self.signals: collections.deque[int] = collections.deque()
        self.controls: collections.deque[control.Command] = collections.deque()  # status thread → loop
        self.drain_deadline = 0.0
        self.aborted = False
        self.fenced_at: float | None = None  # when the fence last fired (None: armed)
        self.fence_kills: list[tuple[float, Busy]] = []  # (SIGKILL due, attempt) after a fence's SIGTERM
        self.kill_at = 0.0
        self.exit_code = 0  # what a finished drain returns: 0, or 3 when no slot could boot
        self.last_step = 0.0  # clock of the previous step: the stall check, and wait's batching of reports
        self.sel = selectors.DefaultSelector()
        self.wake_r, self.wake_fd = os.pipe()  # signal wake-up pipe; the status thread writes to it too
        for fd in (self.wake_r, self.wake_fd):
            os.set_blocking(fd, False)
        self.sel.register(self.wake_r, selectors.EVENT_READ, None)
        self.house: Housekeeper | None = None
        self.metrics: PoolMetrics | None = None  # counted from slot reports and served once _observe built it
        self.status: StatusServer | None = None
        self.builder: StatusBuilder | None = None
        self.notify = notifier or Notifier()  # takes $NOTIFY_SOCKET out of the environment slots inherit
        self.announcer = Announcer(self.notify)
        self.status_note = ""  # sticky part of STATUS=: a rejected reload, keys waiting for a restart
        self.queue_depth: int | None = None  # for STATUS=, refreshed by the status thread
        self.queue_probed_at = 0.0
        self.embedded: EmbeddedRedis | None = None
        self.pending_reload: lifecycle.PendingReload | None = None  # SIGHUP waiting for its import check
        self.archive_check: ArchiveCheck | None = None  # the JVM archive check, while it runs

    @property
    def slots(self) -> list[SlotProc]:
        return self.table.slots

    # --- start-up ---------------------------------------------------------------------------------

    def run(self) -> int:
        """The daemon's life; whatever way it ends, the embedded Redis (if any) is stopped last, after
        every slot is gone and its list requeued."""
        try:
            return self._run()
        finally:
            if self.embedded is not None:
                self.embedded.stop()
            self.notify.close()

    def _run(self) -> int:
        setproctitle.setproctitle("tender-pool: supervisor")
        try:  # before anything starts: a function handler that does not import refuses the config
            check_functions(self.cfg)
        except ConfigError as e:
            print(f"config: {e}", flush=True, file=sys.stderr)
            return 2
        groups.set_subreaper()
        signal.set_wakeup_fd(self.wake_fd, warn_on_full_buffer=False)
        if self.notify.sock is not None:
            close_after_fork(self.notify.sock)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, self._on_signal)
        builder = self._observability()
        try:
            assert self.status is not None
            self.status.open()  # refuses beside a live daemon on the same socket
        except (SocketInUse, OSError) as e:
            print(f"config: status.socket: {self.cfg.status.socket}: {e}", flush=True, file=sys.stderr)
            return 2
        if self.cfg.embedded_redis:  # before any thread of ours exists (it is forked with a preexec_fn)
            self.embedded = EmbeddedRedis(self.cfg.embedded_redis, self.log.bind(component="embedded_redis"))
            try:
                self.embedded.start()
            except EmbeddedError as e:
                self.status.close()
                print(f"config: redis.url: embedded: {e}", flush=True, file=sys.stderr)
                return 2
        r = connect(self.cfg.redis.url, self.cfg.redis.socket_timeout)  # start-up only; the loop has none
        backoff = 0.2
        while True:  # Redis down at start: wait for it (systemd's start timeout bounds this), don't crash
            try:
                self.claim_host(r)
                break
            except ConfigError as e:
                print(f"config: {e}", flush=True, file=sys.stderr)
                return 2
            except redis.RedisError as e:
                self.log.warning("redis_unreachable_at_start", url=self.cfg.redis.url, error=str(e), retry_in=backoff)
                if any(sig in self.signals for sig in (signal.SIGTERM, signal.SIGINT)):
                    return 1
                if self.embedded is not None:
                    self.reap_children(self.clock())
                    self.embedded.restart_due(self.clock())
                self.notify.status(f"waiting for Redis at {self.cfg.redis.url}: {e}")
                time.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
        self.house = Housekeeper(
            self.cfg,
            Queue(connect(self.cfg.redis.url, self.cfg.redis.socket_timeout), self.keys),
            self.owner,
            self.log.bind(component="housekeeper"),
            slots_summary=builder.host_summary,
        )
        try:
            self.cleanup_previous(r)
        except ConfigError as e:
            print(f"config: {e}", flush=True, file=sys.stderr)
            return 2
        r.close()
        self._observe(builder)
        self.log.info(
            "supervisor_started",
            host_id=self.cfg.pool.host_id,
            incarnation=self.incarnation,
            slots=len(self.table.slots),
            config=self.cfg.source,
        )
        self._prepare_fork()
        self.last_step = self.clock()
        while True:
            self.wait(self.timeout(self.clock()))
            code = self.step(self.clock())
            if code is not None:
                if self.archive_check is not None:
                    self.archive_check.stop()
                self.house.stop()
                self.house.join(timeout=2 * self.cfg.redis.socket_timeout)
                if code == 0 and self.builder is not None:  # a clean stop: out of `status --redis` at once
                    self.builder.clear_host()
                self.status.close()
                if self.metrics is not None:
                    self.metrics.stop()
                self.log.info("supervisor_exit", code=code)
                return code

    def _observability(self) -> StatusBuilder:
        """Status socket and metrics: both read the slot table (``snapshot``) and counters, and Redis
        through one short-timeout probe, in their own threads. The socket is made here (a live daemon
        on it refuses the start); its thread and /metrics start in ``_observe``."""
        probe = QueueProbe.for_config(self.cfg)
        builder = StatusBuilder(
            self.cfg, self.table.snapshot, self.counters, probe, lambda: self.house,
            lambda: self.table.draining or self.table.paused, self.incarnation,
        )
        self.builder = builder

        def tick() -> None:  # status thread: /proc samples, and the queue depth for STATUS=
            builder.tick()
            if self.notify.enabled and time.monotonic() - self.queue_probed_at >= QUEUE_PROBE_S:
                self.queue_probed_at = time.monotonic()
                try:
                    self.queue_depth = probe.read().depth
                except redis.RedisError:
                    self.queue_depth = None

        self.status = StatusServer(self.cfg.status.socket, self._handle_request, self.log.bind(component="status"),
                                   tick, group=self.cfg.status.group)
        return builder

    def _observe(self, builder: StatusBuilder) -> None:
        """What only the supervisor runs: the housekeeper and status threads, /metrics, the JVM
        archive check. prometheus_client is imported here, and only when ``[metrics] listen`` is set
        (a restart changes it; the bench config has none): no slot needs it.
        Started before the slots are forked: started after, the first job starts 30-40 ms sooner
        (``bench/bench_boot.py``), but what they allocate then lands in pages the slots share and
        copies them: idle PSS +1.2 to +2.3 MiB with /metrics on (docs/benchmarks.md, "Boot")."""
        assert self.house is not None and self.status is not None
        self.house.start()
        self.status.start()
        if self.cfg.metrics.listen:
            from tender_pool.supervisor.metrics import PoolCollector, PoolMetrics

            self.metrics = PoolMetrics(self.cfg.kinds)
            self.metrics.registry.register(
                PoolCollector(self.metrics, self.table.snapshot, self.counters, builder.probe, lambda: self.house,
                              lambda: builder.redis_errors, jvm_rss=builder.jvm_rss)
            )
            self._serve_metrics(self.metrics)
        if self.cfg.extract.check_archive:
            self.archive_check = ArchiveCheck(self._wake).start()

    def _serve_metrics(self, metrics: PoolMetrics) -> None:
        try:
            addr = metrics.serve(self.cfg.metrics.listen)
        except OSError as e:  # the pool runs without /metrics rather than not at all
            self.log.error("metrics_listen_failed", listen=self.cfg.metrics.listen, error=str(e))
            return
        if addr:
            self.log.info("metrics_listening", address=f"{addr[0]}:{addr[1]}")

    def finish_archive_check(self) -> None:
        """The JVM archive check (supervisor/archive_check.py), once its thread is done: say what it found."""
        check = self.archive_check
        if check is None or not check.done.is_set():
            return
        self.archive_check = None
        if check.error is not None:
            self.log.warning("jvm_archive_check_failed", error=check.error)
            return
        log = self.log.info if check.usable else self.log.warning
        log("jvm_archive_checked", usable=check.usable, seconds=round(check.seconds, 3))

    def _prepare_fork(self) -> None:
        """Import what a slot runs before forking any, then freeze the GC: the slots then share those
        pages copy-on-write instead of each importing its own copy, and a collection in a slot does
        not write to (and so copy) every inherited object. Idle PSS of 5 processes is the target.
        (Importing first also keeps a slot from needing an import lock a thread might hold.)"""
        import tender_pool.slots.busy  # noqa: F401
        import tender_pool.slots.slot  # noqa: F401

        # The Lua texts (``scripts.text``, cached): built here once, not in each slot from the files
        # (~40 KB each for take, settle, settle_take, with their parts), so the slots share them.
        for name in scripts.NAMES:
            scripts.text(name)
        for name in scripts.BATCHES:
            scripts.batch_text(name)

        # Only the young generations are collected: the start-up's garbage is there (20-34 objects);
        # a full collection found none besides (0 of ~46,000 objects) for 20-30 ms of CPU.
        gc.collect(1)
        gc.freeze()

    def claim_host(self, r: redis.Redis) -> None:
        """Refuse to start beside a live daemon with our host_id (a copy-pasted environment)."""
        key = self.keys.host(self.cfg.pool.host_id)
        ttl = int(self.cfg.pool.heartbeat * 3 * 1000)
        if r.set(key, self.owner.holder, nx=True, px=ttl):
            return
        cur = Owner.of_holder(self.cfg.pool.host_id, (r.get(key) or b"").decode())
        if cur.boot_id == self.owner.boot_id and cur.pid and not _is_tender_pool(cur.pid):
            r.set(key, self.owner.holder, px=ttl)  # our own predecessor on this machine, dead
            return
        where = f"pid {cur.pid} on this machine" if cur.boot_id == self.owner.boot_id else "another machine"
        raise ConfigError("pool.host_id", self.cfg.pool.host_id, f"already used by a live daemon ({where})")

    def cleanup_previous(self, r: redis.Redis) -> None:
        """A predecessor on this host (killed, crashed) may have left job processes and lists: kill
        the processes now, hand the lists to the housekeeper (it requeues them once started)."""
        assert self.house is not None
        ours = [(p.decode(), Owner.decode(v.decode())) for p, v in r.hgetall(self.keys.proclists).items()]
        ours = [(p, o) for p, o in ours if o.host == self.owner.host and o.holder != self.owner.holder]
        for _, o in ours:
            # A predecessor that is alive on this machine (stalled past its key's lifetime, so our
            # SET NX won): never kill its jobs; give the host key back and refuse to start.
            if o.boot_id == self.owner.boot_id and o.pid and o.pid != os.getpid() and _is_tender_pool(o.pid):
                self._release_host(r)
                raise ConfigError("pool.host_id", self.cfg.pool.host_id,
                                  f"already used by a live daemon (pid {o.pid} on this machine)")
        # Its slots got their PDEATHSIG: one whose attempt had already ended settles it before it
        # exits (slot.Slot._on_parent_death). Requeueing their lists first would run that job again;
        # and a slot still alive could spawn a job after the marker sweep below. So wait for them
        # (bounded by their own alarm, then SIGKILL), then sweep, then requeue.
        dead = {o.pid for _, o in ours if o.boot_id == self.owner.boot_id and o.pid and o.pid != os.getpid()}
        slots = forking.previous_slots(dead) if dead else []
        if slots:
            t0 = time.monotonic()
            stuck = forking.await_exit(slots, orphan_settle_s(self.cfg) + 0.5)
            self.log.info("previous_slots_exited", pids=slots, killed=stuck,
                          seconds=round(time.monotonic() - t0, 3))
        killed = groups.sweep_marker("TENDER_POOL_OWNER", f"{self.cfg.pool.host_id}:", prefix=True)
        if killed:
            self.log.warning("killed_leftovers_of_previous_incarnation", pids=killed)
        for proc, _ in ours:
            self.house.requeue_later(proc, "crash")

    def _release_host(self, r: redis.Redis) -> None:
        """Delete the host key if it still names us (WATCH: never someone else's)."""
        key = self.keys.host(self.cfg.pool.host_id)
        with r.pipeline() as p:
            try:
                p.watch(key)
                if (p.get(key) or b"").decode() == self.owner.holder:
                    p.multi()
                    p.delete(key)
                    p.execute()
            except redis.WatchError:
                pass

    # --- the loop ---------------------------------------------------------------------------------

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.signals.append(signum)

    def timeout(self, now: float) -> float:
        t = min(LOOP_WAIT_S, self.table.next_due(now))
        if self.cfg.pool.fence and self.house is not None and self.fenced_at is None:
            t = min(t, max(0.0, self.house.last_ok + self.cfg.pool.fence - now))
        for due, _ in self.fence_kills:
            t = min(t, max(0.0, due - now))
        return t

    def wait(self, timeout: float) -> None:
        """Sleep until a pipe has something, a signal or control request arrives, or ``timeout``.
        Reads nothing: ``step`` does, so it never depends on what this call saw (an interrupted
        wait — SIGSTOP/SIGCONT makes epoll_wait return early — simply means an earlier step)."""
        ready = self.sel.select(timeout)
        if ready and all(key.data is not None for key, _ in ready):
            # Only slot reports (a job started or ended, a beat): at 1000 jobs/s a whole step per
            # report was the supervisor's main cost. Let a few gather, but never sit on a signal
            # (SIGCHLD of a dead slot) or a control request: those come through the wake pipe.
            gap = REPORT_BATCH_S - (self.clock() - self.last_step)
            if gap > 0:
                select.select([self.wake_r], [], [], gap)

    def step(self, now: float) -> int | None:
        """One turn of the loop at time ``now`` (see the module docstring). An exit code ends the run."""
        self._drain_wake()
        while self.signals:
            self.handle_signal(self.signals.popleft(), now)
        while self.controls and not self.table.draining:
            lifecycle.apply_control(self.table, self.controls.popleft(), self.log)
        self.finish_reload(now)
        self.finish_archive_check()
        for s in self.table.live():
            self.read_reports(s, now)
        self.reap_children(now)
        self.check_fence(now)
        self.check_liveness(now)
        if self.embedded is not None:
            self.embedded.restart_due(now)
        if self.house is not None and self.house.taken_over and not self.table.draining:
            # another daemon runs with our host_id and has taken our lists over: our slots' jobs
            # are its now. Kill them at once (not a drain) and exit.
            self.log.error("host_id_taken_over_stopping", holder=self.house.taken_over)
            self.exit_code = 1
            self.start_drain(now)
            self.abort(now, kill=True)
        if not self.table.draining:
            for s in self.table.due(now):
                self.spawn(s, now)
            if self.table.none_can_boot():
                self.log.error("no_slot_can_boot", slots=[s.worker_id for s in self.table.slots],
                               exit_code=int(SlotExit.BOOT_ERROR))
                self.exit_code = int(SlotExit.BOOT_ERROR)
                self.start_drain(now)
        code = self.drain_step(now) if self.table.draining else None
        self.notify_step(now)
        return code

    def _drain_wake(self) -> None:
        try:
            while os.read(self.wake_r, 4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def handle_signal(self, signum: int, now: float) -> None:
        if signum == signal.SIGCHLD:
            return
        if signum in (signal.SIGTERM, signal.SIGINT):
            if self.table.draining:
                self.log.warning("second_stop_signal_killing_now")
                self.abort(now, kill=True)
                return
            self.start_drain(now)
        elif signum == signal.SIGHUP:
            self.notify.reloading()
            res = lifecycle.reload(self.cfg, self.table, self.log, now, wake=self._wake)
            if isinstance(res, lifecycle.PendingReload):
                self.pending_reload = res  # a newer SIGHUP replaces an older pending one
                return
            self.pending_reload = None
            self.status_note = res.note
            self.notify.ready(self.status_text())

    def finish_reload(self, now: float) -> None:
        """A pending reload whose function handlers' import check has ended: adopt or reject it."""
        pending = self.pending_reload
        if pending is None:
            return
        if self.table.draining:
            self.pending_reload = None  # stopping anyway: nothing to adopt
            return
        res = lifecycle.finish(self.cfg, self.table, pending, self.log, now)
        if res is not None:
            self.pending_reload = None
            self.status_note = res.note
            self.notify.ready(self.status_text())

    def _wake(self) -> None:
        try:
            os.write(self.wake_fd, b"r")
        except OSError:
            pass  # pipe full: the loop is awake anyway, and wakes each second regardless

    def start_drain(self, now: float) -> None:
        self.drain_deadline = now + self.cfg.pool.drain_timeout
        self.log.info("draining", timeout=self.cfg.pool.drain_timeout)
        self.table.drain()
        self.notify.stopping(self.status_text())

    def abort(self, now: float, kill: bool) -> None:
        """Drain time is up (SIGUSR1: slots kill their job and requeue it themselves) or a second
        signal came (SIGKILL the slots; their jobs go back through the death path)."""
        self.aborted = True
        self.kill_at = now + (0 if kill else self.cfg.pool.kill_grace + 5)
        self.table.signal_all(signal.SIGKILL if kill else signal.SIGUSR1)

    def drain_step(self, now: float) -> int | None:
        live = self.table.live()
        pending = self.house.pending() if self.house is not None else 0
        if not live and not pending:
            return self.exit_code
        if not live and now > self.drain_deadline + 30:
            self.log.error("exit_with_unrequeued_lists", pending=pending)
            return 1  # the lists stay registered; the next start or another host's reaper requeues them
        if not self.aborted and now >= self.drain_deadline:
            self.log.warning("drain_timeout_aborting_jobs")
            self.abort(now, kill=False)
        elif self.aborted and now >= self.kill_at:
            self.table.signal_all(signal.SIGKILL)
        return None

    # --- slots ------------------------------------------------------------------------------------

    def spawn(self, s: SlotProc, now: float) -> None:
        self.table.new_list(s, lambda seq: self.keys.proc(self.cfg.pool.host_id, self.incarnation, s.index, seq))
        others = [x.read_fd for x in self.table.slots if x.read_fd >= 0]
        try:
            pid, rfd = self.ops.fork(s, others)
        except OSError as e:  # EAGAIN, ENOMEM: try again in a second
            self.log.error("fork_failed", slot=s.worker_id, error=str(e))
            self.table.fork_failed(s, now)
            return
        self.table.spawned(s, pid, rfd, now)
        self.sel.register(rfd, selectors.EVENT_READ, s)
        self.log.info("slot_spawned", slot=s.worker_id, pid=pid, list=s.proc)

    def read_reports(self, s: SlotProc, now: float) -> None:
        """Everything ``s`` has sent so far (up to READS_PER_STEP chunks), applied at ``now``."""
        for _ in range(READS_PER_STEP):
            if s.read_fd < 0:
                return
            try:
                data = os.read(s.read_fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._close_pipe(s)
                return
            for rep in s.reader.feed(data):
                self.on_report(s, rep, now)

    def _close_pipe(self, s: SlotProc) -> None:
        if s.read_fd >= 0:
            self.sel.unregister(s.read_fd)
            os.close(s.read_fd)
            s.read_fd = -1

    def on_report(self, s: SlotProc, rep: SlotReport, now: float) -> None:
        self.table.on_report(s, rep, now)
        if isinstance(rep, Finished):
            add_counters(self.counters, tally(rep))
            if self.metrics is not None:
                self.metrics.on_finished(rep)
        elif isinstance(rep, Beat):
            if self.metrics is not None:
                self.metrics.on_beat(s.pid, rep.redis_errors)
        elif isinstance(rep, Busy) and rep.child_pid:
            faults.checkpoint("supervisor_busy")

    def reap_children(self, now: float) -> None:
        while True:
            pid, status = self.ops.waitpid()
            if pid == 0:
                return
            if self.embedded is not None and pid == self.embedded.pid:
                self.embedded.on_exit(status, now)
                continue
            s = self.table.by_pid(pid)
            if s is not None:
                self.on_slot_exit(s, status, now)
            # else: an orphan of a dead slot's job, killed in on_slot_exit; now reaped

    def on_slot_exit(self, s: SlotProc, status: int, now: float) -> None:
        """Its last reports first, then kill what is left of its job, then hand its list to the
        housekeeper (requeue), then the table's verdict (respawn, remove, stay offline)."""
        self.read_reports(s, now)  # last words: a Finished report may still be in the pipe
        self._close_pipe(s)
        pid, busy = s.pid, s.busy
        keep = {x.pid for x in self.table.live() if x is not s}
        if self.pending_reload is not None and self.pending_reload.pid:
            keep.add(self.pending_reload.pid)  # a reload's import check, not a dead job's leftover
        if self.embedded is not None and self.embedded.pid:
            keep.add(self.embedded.pid)  # our Redis is our child too, not a dead job's leftover
        if self.archive_check is not None and self.archive_check.pid:
            keep.add(self.archive_check.pid)  # the JVM archive check, not a dead job's leftover
        killed = self.ops.kill_job_tree(s, busy, keep)
        faults.checkpoint("mid_requeue")
        ex = self.table.exited(s, os.waitstatus_to_exitcode(status), now)
        # logged before the requeue is handed over: the line's time bounds the killed attempt's end
        # (its group was SIGKILLed above) before any re-run of its job can start
        (self.log.info if ex.clean else self.log.warning)(
            "slot_exited",
            slot=s.worker_id,
            pid=pid,
            how=ex.how,
            job_id=busy.job_id if busy else None,
            kind=busy.kind if busy else None,
            user=busy.user if busy else None,
            attempt=busy.attempt if busy else None,
            killed=killed,
            respawn_in=ex.respawn_in,
        )
        assert self.house is not None
        self.house.requeue_later(s.proc, ex.reason, s.worker_id)
        if self.metrics is not None:
            self.metrics.forget_slot(pid)
        if ex.restarted:
            self.counters.slot_restarts += 1
        if ex.boot_error:
            self.log.error("slot_boot_failed_not_respawned", slot=s.worker_id, pid=pid,
                           hint="fix the config or environment, then reload (SIGHUP) or restart")
        elif ex.crash_looping:
            self.log.error("slot_crash_looping", slot=s.worker_id, fast_deaths=s.fast_deaths, respawn_in=ex.respawn_in)

    def check_fence(self, now: float) -> None:
        """The lease: once our last successful heartbeat write was sent ``pool.fence`` ago (or a
        write found our key expired), other hosts may reclaim our jobs soon, so ours stop first. Once
        per lapse; a new successful write re-arms it."""
        house, fence = self.house, self.cfg.pool.fence
        for due, busy in [k for k in self.fence_kills if k[0] <= now]:
            self.fence_kills.remove((due, busy))
            swept = self.ops.stop_attempt(busy, signal.SIGKILL)
            self.log.info("fence_killed", job_id=busy.job_id, attempt=busy.attempt, swept=swept)
        if house is None or not fence:
            return
        if self.fenced_at is not None and house.last_ok > self.fenced_at and not house.lapsed:
            self.fenced_at = None  # heartbeats flow again
        if self.fenced_at is not None or self.table.draining:
            return
        if now - house.last_ok > fence or house.lapsed:
            fenced = self.table.fence()
            self.fenced_at = now
            house.lapsed = False
            # The slots are told (SIGUSR1), but one may be blocked in a Redis call to the unreachable
            # server for up to socket_timeout: the supervisor stops the attempts itself, TERM now,
            # KILL (group and marker) kill_grace later, from this loop, never waiting.
            for s in fenced:
                if s.busy is not None:
                    self.ops.stop_attempt(s.busy, signal.SIGTERM)
                    self.fence_kills.append((now + self.cfg.pool.kill_grace, s.busy))
            self.log.error("fenced", since_last_heartbeat_s=round(now - house.last_ok, 2), fence_s=fence,
                           jobs=[s.busy.job_id for s in fenced if s.busy], slots=[s.worker_id for s in fenced])

    def check_liveness(self, now: float) -> None:
        """A slot whose reports stopped for 3 heartbeats is wedged, and one holding a list the
        housekeeper found stuck past its deadline is too: kill it (the death path follows). Judged
        only on fresh reads: after a stall of this process, every silence window starts again."""
        if now - self.last_step > STALL_S and self.last_step:
            self.log.warning("supervisor_stalled", seconds=round(now - self.last_step, 1))
            self.table.rebase(now)
        self.last_step = now
        limit = 3 * self.cfg.pool.heartbeat
        stuck = self.house.take_stuck() if self.house is not None else set()
        for s in self.table.live():
            silent = s.silent_for(now) > limit
            if silent or s.proc in stuck:
                self.log.error("slot_unresponsive_killing" if silent else "slot_stuck_killing", slot=s.worker_id,
                               pid=s.pid, silent_s=round(now - s.last_report, 1), list=s.proc)
                self.table.killed(s, now)

    # --- status thread and systemd ---------------------------------------------------------------

    def _handle_request(self, req: control.Request):
        """Status thread: reads go to the status builder; control requests are checked, queued for
        the main loop (which owns the slot table) and answered at once."""
        assert self.builder is not None
        if req.control is None:
            return self.builder.handle(req)
        cmd = control.check(req)
        if isinstance(cmd, str):
            return control.ControlReply(STATUS_PROTOCOL, False, error=cmd)
        if self.table.draining:
            return control.ControlReply(STATUS_PROTOCOL, False, error="the daemon is stopping")
        reply = lifecycle.answer(self.table, cmd)
        self.controls.append(cmd)
        try:
            os.write(self.wake_fd, b"c")
        except OSError:
            pass  # pipe full: the loop is awake anyway, and wakes each second regardless
        return reply

    def status_text(self) -> str:
        return lifecycle.status_text(self.table, self.queue_depth, self.status_note)

    def housekeeper_healthy(self, now: float) -> bool:
        """The housekeeper thread is alive and went round its loop within the watchdog window (a
        Redis outage does not count: its calls fail within redis.socket_timeout and it backs off;
        a call that hangs, a deadlock or a dead thread does)."""
        h = self.house
        return h is not None and h.is_alive() and now - h.last_loop < self.notify.watchdog_s

    def notify_step(self, now: float) -> None:
        if not self.notify.enabled:
            return
        slots = self.table.slots
        reported = bool(slots) and all(s.state.value in ("idle", "busy") for s in slots)
        self.announcer.step(now, self.status_text(), reported, self.table.draining, self.housekeeper_healthy(now),
                            self.log)


def _is_tender_pool(pid: int) -> bool:
    try:
        return "tender-pool" in " ".join(psutil.Process(pid).cmdline()) or "tender-pool" in psutil.Process(pid).name()
    except psutil.Error:
        return False
