"""The supervisor: forks slots, reaps them, respawns with backoff, requeues a dead slot's job, drains.

It never runs a job. Its main loop is one step at a time (``step``), waking at least once a second on
a selector over the slots' report pipes and the signal wake-up fd; signal handlers only record the
signal. It is a child subreaper, so whatever a dead slot's job left behind re-parents here and is
killed before that job is put back: a job never runs twice at once.

Slot state machine (transitions happen only in this module):
  STARTING → IDLE/BUSY (first report) → STOPPING (drain) → OFFLINE (exited)
  any → OFFLINE (died) → STARTING (respawn after backoff) | CRASH_LOOPING (3 fast deaths in a row;
  still respawned, but only every RESPAWN_MAX seconds)
  IDLE/BUSY → STOPPING (SIGTERM: scaled away = ``retiring``, config reload = ``recycle``, ``drain``
  request = ``paused``) → OFFLINE (finished its job and exited) → gone | STARTING at once | stays
  OFFLINE until ``scale``. A job is never killed to shrink, reload or drain the pool.

Live changes (SIGHUP, and control requests from the status socket) are applied here, in the main
loop; which config keys apply how is ``control``'s decision. systemd hears about all of it through
``notify`` (READY, STATUS, WATCHDOG, RELOADING, STOPPING).
"""

from __future__ import annotations

import os
import selectors
import signal
import socket as _socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import redis
import setproctitle

from tender_pool.slots import faults, runner
from tender_pool.slots.heartbeat import ReportReader
from tender_pool.slots.queue import Queue, connect

from . import control, logs
from .config import Config, ConfigError
from .embedded import EmbeddedError, EmbeddedRedis
from .keys import Keys
from .lifecycle import LiveChanges, _kill
from .metrics import PoolCollector, PoolMetrics
from .notify import Notifier
from .reaper import Housekeeper
from .status_server import QueueProbe, SocketInUse, StatusBuilder, StatusServer, close_after_fork
from .types import Beat, Busy, CountersView, Finished, Idle, SlotState

FAST_DEATH_S = 5.0  # a slot that dies sooner than this after spawning counts toward a crash loop
CRASH_LOOP_AFTER = 3
RESPAWN_MAX_S = 60.0
QUEUE_PROBE_S = 5.0  # queue depth for STATUS=, read in the status thread (never the main loop)


@dataclass
class SlotProc:
    index: int
    worker_id: str
    pid: int = 0
    seq: int = 0
    proc: str = ""
    state: SlotState = SlotState.OFFLINE
    read_fd: int = -1
    reader: ReportReader = field(default_factory=ReportReader)
    spawned_at: float = 0.0
    last_report: float = 0.0
    busy: Busy | None = None
    fast_deaths: int = 0
    respawn_at: float = 0.0
    restarts: int = 0
    retiring: bool = False  # scaled away: finishes its job, exits, is not respawned
    recycle: bool = False  # config reload: finishes its job, exits, is forked again at once


# The supervisor's cumulative counters since start are the status JSON's own Struct (the status
# server adds the housekeeper's reclaims when it reports them).
Counters = CountersView


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return _socket.gethostname()


class Supervisor(LiveChanges):
    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.log = logs.configure("supervisor")
        self.keys = Keys(cfg.redis.prefix, cfg.pool.queue)
        self.incarnation = os.urandom(4).hex()
        self.holder = f"{self.incarnation}|{boot_id()}|{os.getpid()}"
        self.owner_prefix = f"{cfg.pool.host_id}:{self.incarnation}"
        self.slots = [SlotProc(i, f"{cfg.pool.host_id}-slot{i}") for i in range(1, cfg.pool.worker_count + 1)]
        self.counters = Counters()
        self.signals: list[int] = []
        self.draining = False
        self.drain_deadline = 0.0
        self.aborted = False
        self.kill_at = 0.0
        self.fork_lock = threading.Lock()
        self.stuck: set[str] = set()
        self.pending_requeue: list[tuple[str, str]] = []  # (list, reason) not yet requeued (Redis down)
        self.sel = selectors.DefaultSelector()
        self.q: Queue | None = None
        self.house: Housekeeper | None = None
        self.metrics = PoolMetrics(cfg.kinds)  # observability: counted from slot reports, served in run()
        self.status: StatusServer | None = None
        self.builder: StatusBuilder | None = None
        self.notify = Notifier()  # takes $NOTIFY_SOCKET out of the environment slots inherit
        self.ready = False  # READY=1 sent (once all slots reported and Redis answered)
        self.last_ping = 0.0
        self.status_sent, self.status_sent_at = "", 0.0
        self.status_note = ""  # sticky part of STATUS=: a rejected reload, keys waiting for a restart
        self.queue_depth: int | None = None  # for STATUS=, refreshed by the status thread
        self.queue_probed_at = 0.0
        self.target = cfg.pool.worker_count  # live slot count: the config's, or the last `scale N`
        self.paused = False  # a `drain` request: slots finished and exited, nothing claims until `scale`
        self.controls: list[control.Command] = []  # from the status thread, applied by the main loop
        self.wake_fd = -1  # the signal wake-up pipe; the status thread writes to it too
        self.seqs: dict[int, int] = {}  # last list sequence of removed slot indexes (names stay unique)
        self.embedded: EmbeddedRedis | None = None

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
        runner.set_subreaper()
        rfd, wfd = os.pipe()
        os.set_blocking(rfd, False)
        os.set_blocking(wfd, False)
        signal.set_wakeup_fd(wfd, warn_on_full_buffer=False)
        self.wake_fd = wfd
        if self.notify.sock is not None:
            close_after_fork(self.notify.sock)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, self._on_signal)
        self.sel.register(rfd, selectors.EVENT_READ, None)
        self.q = Queue(connect(self.cfg.redis.url, self.cfg.redis.socket_timeout), self.keys)
        builder = self._observability()
        try:
            assert self.status is not None
            self.status.open()  # refuses beside a live daemon on the same socket
        except (SocketInUse, OSError) as e:
            print(f"config: status.socket: {self.cfg.status.socket}: {e}", flush=True, file=__import__("sys").stderr)
            return 2
        if self.cfg.embedded_redis:  # before any thread of ours exists (it is forked with a preexec_fn)
            self.embedded = EmbeddedRedis(self.cfg.embedded_redis, self.log.bind(component="embedded_redis"))
            try:
                self.embedded.start()
            except EmbeddedError as e:
                self.status.close()
                print(f"config: redis.url: embedded: {e}", flush=True, file=sys.stderr)
                return 2
        backoff = 0.2
        while True:  # Redis down at start: wait for it (systemd's start timeout bounds this), don't crash
            try:
                self.claim_host()
                break
            except ConfigError as e:
                print(f"config: {e}", flush=True, file=sys.stderr)
                return 2
            except redis.RedisError as e:
                self.log.warning("redis_unreachable_at_start", url=self.cfg.redis.url, error=str(e), retry_in=backoff)
                if any(sig in self.signals for sig in (signal.SIGTERM, signal.SIGINT)):
                    return 1
                if self.embedded is not None:
                    self.reap_children(time.monotonic())
                    self.embedded.restart_due(time.monotonic())
                self.notify.status(f"waiting for Redis at {self.cfg.redis.url}: {e}")
                time.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
        self.cleanup_previous()
        self.house = Housekeeper(
            self.cfg,
            Queue(connect(self.cfg.redis.url, self.cfg.redis.socket_timeout), self.keys),
            self.holder,
            self.log.bind(component="housekeeper"),
            self.fork_lock,
            self.stuck.add,
            slots_summary=builder.host_summary,
        )
        self.house.start()
        self.status.start()
        self._serve_metrics()
        self.log.info(
            "supervisor_started",
            host_id=self.cfg.pool.host_id,
            incarnation=self.incarnation,
            slots=len(self.slots),
            config=self.cfg.source,
        )
        self._check_jvm_archive()
        self._prepare_fork()
        while True:
            code = self.step(time.monotonic())
            if code is not None:
                self.house.stop_event.set()
                self.status.close()
                self.metrics.stop()
                self.log.info("supervisor_exit", code=code)
                return code

    def _observability(self) -> StatusBuilder:
        """Status socket and metrics: both read the slot table and counters, and Redis through one
        short-timeout probe (see status_server's docstring for the thread and fork_lock rules)."""
        probe = QueueProbe.for_config(self.cfg)
        builder = StatusBuilder(
            self.cfg, self.slots, self.counters, probe, lambda: self.house, lambda: self.draining or self.paused,
            self.incarnation,
        )
        self.builder = builder

        def tick() -> None:  # status thread, under fork_lock: /proc samples, and the queue for STATUS=
            builder.tick()
            if self.notify.enabled and time.monotonic() - self.queue_probed_at >= QUEUE_PROBE_S:
                self.queue_probed_at = time.monotonic()
                try:
                    self.queue_depth = probe.read().depth
                except redis.RedisError:
                    self.queue_depth = None

        self.status = StatusServer(
            self.cfg.status.socket, self._handle_request, self.fork_lock, self.log.bind(component="status"), tick,
            group=self.cfg.status.group,
        )
        self.metrics.registry.register(
            PoolCollector(self.metrics, self.slots, self.counters, probe, lambda: self.house, self.fork_lock,
                          lambda: builder.redis_errors)
        )
        return builder

    def _serve_metrics(self) -> None:
        try:
            addr = self.metrics.serve(self.cfg.metrics.listen)
        except OSError as e:  # the pool runs without /metrics rather than not at all
            self.log.error("metrics_listen_failed", listen=self.cfg.metrics.listen, error=str(e))
            return
        if addr:
            self.log.info("metrics_listening", address=f"{addr[0]}:{addr[1]}")

    def _check_jvm_archive(self) -> None:
        """Before any slot exists (so no waitpid(-1) or orphan sweep can take the check's processes):
        `jvm/build.sh --check` (~0.3 s when current) rebuilds a stale AppCDS archive. Not fatal: a
        stale or missing archive only makes the JVM start slower, and .docx/.pdf need no JVM."""
        if not self.cfg.extract.check_archive:
            return
        t0 = time.monotonic()
        try:
            from tender_pool.extract.jvm import check_archive

            ok = check_archive(rebuild=True, timeout=120)
        except Exception as e:  # noqa: BLE001 - a missing JDK must not stop the pool
            self.log.warning("jvm_archive_check_failed", error=str(e))
            return
        log = self.log.info if ok else self.log.warning
        log("jvm_archive_checked", usable=ok, seconds=round(time.monotonic() - t0, 3))

    def _prepare_fork(self) -> None:
        """Import what a slot runs before forking any, then freeze the GC: the slots then share those
        pages copy-on-write instead of each importing its own copy, and a collection in a slot does
        not write to (and so copy) every inherited object. Idle PSS of 5 processes is the target."""
        import gc

        import tender_pool.slots.busy  # noqa: F401
        import tender_pool.slots.slot  # noqa: F401

        gc.collect()
        gc.freeze()

    def claim_host(self) -> None:
        """Refuse to start beside a live daemon with our host_id (a copy-pasted environment)."""
        assert self.q is not None
        key = self.keys.host(self.cfg.pool.host_id)
        ttl = int(self.cfg.pool.heartbeat * 3 * 1000)
        if self.q.r.set(key, self.holder, nx=True, px=ttl):
            return
        cur = (self.q.r.get(key) or b"").decode()
        _, boot, pid = (cur.split("|") + ["", "", ""])[:3]
        if boot == boot_id() and pid.isdigit() and not _is_tender_pool(int(pid)):
            self.q.r.set(key, self.holder, px=ttl)  # our own predecessor on this machine, dead
            return
        where = f"pid {pid} on this machine" if boot == boot_id() else "another machine"
        raise ConfigError("pool.host_id", self.cfg.pool.host_id, f"already used by a live daemon ({where})")

    def cleanup_previous(self) -> None:
        """A predecessor on this host (killed, crashed) may have left job processes and lists."""
        killed = runner.sweep_marker("TENDER_POOL_OWNER", f"{self.cfg.pool.host_id}:", prefix=True)
        if killed:
            self.log.warning("killed_leftovers_of_previous_incarnation", pids=killed)
        assert self.q is not None
        for proc, owner in list(self.q.r.hgetall(self.keys.proclists).items()):
            host, _, holder = owner.decode().partition("\t")
            if host == self.cfg.pool.host_id and holder != self.holder:
                self.requeue_list(proc.decode(), "crash")

    # --- the loop ---------------------------------------------------------------------------------

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.signals.append(signum)

    def step(self, now: float) -> int | None:
        for key, _ in self.sel.select(timeout=self._timeout(now)):
            if key.data is None:
                try:
                    os.read(key.fd, 4096)  # wake-up bytes; the signals themselves are in self.signals
                except BlockingIOError:
                    pass
            else:
                self._read_reports(key.data)
        while self.signals:
            self.handle_signal(self.signals.pop(0))
        while self.controls and not self.draining:
            self.apply_control(self.controls.pop(0))
        now = time.monotonic()
        self.reap_children(now)
        self.retry_pending()
        self.check_liveness(now)
        if self.embedded is not None:
            self.embedded.restart_due(now)
        if self.draining:
            code = self.drain_step(now)
            self.notify_step(now)
            return code
        if not self.paused:
            self.spawn_due(now)
        self.notify_step(now)
        return None

    def _timeout(self, now: float) -> float:
        t = 1.0
        for s in self.slots:
            if s.state == SlotState.OFFLINE and s.respawn_at > now:
                t = min(t, s.respawn_at - now)
        return max(0.0, t)

    def handle_signal(self, signum: int) -> None:
        if signum == signal.SIGCHLD:
            return
        if signum in (signal.SIGTERM, signal.SIGINT):
            if self.draining:
                self.log.warning("second_stop_signal_killing_now")
                self.abort_all(kill=True)
                return
            self.start_drain()
        elif signum == signal.SIGHUP:
            self.reload()

    def start_drain(self) -> None:
        self.draining = True
        self.drain_deadline = time.monotonic() + self.cfg.pool.drain_timeout
        self.log.info("draining", timeout=self.cfg.pool.drain_timeout)
        self.notify.stopping(self.status_text())
        for s in self.slots:
            if s.pid:
                s.state = SlotState.STOPPING
                _kill(s.pid, signal.SIGTERM)

    def abort_all(self, kill: bool) -> None:
        """Drain time is up (SIGUSR1: slots kill their job and requeue it themselves) or a second
        signal came (SIGKILL the slots; their jobs go back through the death path)."""
        self.aborted = True
        self.kill_at = time.monotonic() + (0 if kill else self.cfg.pool.kill_grace + 5)
        for s in self.slots:
            if s.pid:
                _kill(s.pid, signal.SIGKILL if kill else signal.SIGUSR1)

    def drain_step(self, now: float) -> int | None:
        live = [s for s in self.slots if s.pid]
        if not live and not self.pending_requeue:
            return 0
        if not live and self.pending_requeue and now > self.drain_deadline + 30:
            self.log.error("exit_with_unrequeued_lists", lists=self.pending_requeue)
            return 1  # the lists stay registered; the next start or another host's reaper requeues them
        if not self.aborted and now >= self.drain_deadline:
            self.log.warning("drain_timeout_aborting_jobs")
            self.abort_all(kill=False)
        elif self.aborted and now >= self.kill_at:
            for s in live:
                _kill(s.pid, signal.SIGKILL)
        return None

    # --- slots ------------------------------------------------------------------------------------

    def new_slot(self, index: int) -> SlotProc:
        return SlotProc(index, f"{self.cfg.pool.host_id}-slot{index}", seq=self.seqs.get(index, 0))

    def spawn_due(self, now: float) -> None:
        for s in self.slots:
            if s.pid == 0 and now >= s.respawn_at:
                self.spawn(s, now)

    def spawn(self, s: SlotProc, now: float) -> None:
        assert self.q is not None
        s.seq += 1
        s.proc = self.keys.proc(self.cfg.pool.host_id, self.incarnation, s.index, s.seq)
        try:  # registered before the slot can claim into it, so a reaper can always find it
            self.q.r.hset(self.keys.proclists, s.proc, f"{self.cfg.pool.host_id}\t{self.holder}")
        except redis.RedisError as e:
            self.log.warning("spawn_deferred_redis_down", slot=s.worker_id, error=str(e))
            self.metrics.redis_error()
            s.respawn_at = now + 1.0
            return
        rfd, wfd = os.pipe()
        if not self.fork_lock.acquire(timeout=1.0):
            os.close(rfd)
            os.close(wfd)
            s.respawn_at = now + 0.1
            return
        try:
            pid = os.fork()
        except OSError:
            self.fork_lock.release()
            raise
        if pid:
            self.fork_lock.release()
        else:  # --- in the slot ---
            code = 1
            try:
                os.close(rfd)
                signal.set_wakeup_fd(-1)
                for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
                    signal.signal(sig, signal.SIG_DFL)
                from tender_pool.slots.slot import slot_main

                code = slot_main(
                    self.cfg, s.index, s.worker_id, s.proc, f"{self.owner_prefix}:{s.index}", wfd
                )
            except BaseException:
                import traceback

                traceback.print_exc()
            finally:
                os._exit(code)
        os.close(wfd)
        os.set_blocking(rfd, False)
        s.pid, s.read_fd, s.reader = pid, rfd, ReportReader()
        s.state, s.spawned_at, s.last_report, s.busy = SlotState.STARTING, now, now, None
        self.sel.register(rfd, selectors.EVENT_READ, s)
        self.log.info("slot_spawned", slot=s.worker_id, pid=pid, list=s.proc)

    def _read_reports(self, s: SlotProc) -> None:
        try:
            data = os.read(s.read_fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.sel.unregister(s.read_fd)
            os.close(s.read_fd)
            s.read_fd = -1
            return
        s.last_report = time.monotonic()
        for rep in s.reader.feed(data):
            if isinstance(rep, Busy):
                stopping = self.draining or self.paused or s.retiring or s.recycle
                s.busy, s.state = rep, SlotState.BUSY if not stopping else SlotState.STOPPING
                if rep.child_pid:
                    faults.checkpoint("supervisor_busy")
            elif isinstance(rep, Idle):
                s.busy = None
                if s.state in (SlotState.STARTING, SlotState.BUSY):
                    s.state = SlotState.IDLE
            elif isinstance(rep, Finished):
                self._count(rep)
            elif isinstance(rep, Beat):
                self.metrics.on_beat(s.pid, rep.redis_errors)
                if s.state == SlotState.STARTING:
                    s.state = SlotState.IDLE

    def _count(self, rep: Finished) -> None:
        self.metrics.on_finished(rep)
        c = self.counters
        if rep.outcome == "completed":
            c.succeeded += 1
        elif rep.outcome in ("failed", "cancelled", "dead"):
            c.failed += 1
        elif rep.outcome == "retried":
            c.retried += 1
        elif rep.outcome == "parked":
            c.deferred += 1
        if rep.error_kind == "timeout" and rep.outcome != "parked":
            c.timed_out += 1
        if rep.killed:
            c.killed += 1

    def reap_children(self, now: float) -> None:
        by_pid = {s.pid: s for s in self.slots if s.pid}
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.embedded is not None and pid == self.embedded.pid:
                self.embedded.on_exit(status, now)
                continue
            s = by_pid.get(pid)
            if s is None:
                continue  # an orphan of a dead slot's job, killed in on_slot_exit; now reaped
            self.on_slot_exit(s, status, now)

    def on_slot_exit(self, s: SlotProc, status: int, now: float) -> None:
        """Kill what is left of the slot's job first, then put its job back, then respawn."""
        if s.read_fd >= 0:
            self._read_reports(s)  # last words: a Finished report may still be in the pipe
            if s.read_fd >= 0:
                self.sel.unregister(s.read_fd)
                os.close(s.read_fd)
                s.read_fd = -1
        stopped = self.draining or self.paused or s.retiring or s.recycle  # we asked it to exit
        clean = os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 and stopped
        how = f"exit {os.WEXITSTATUS(status)}" if os.WIFEXITED(status) else f"signal {os.WTERMSIG(status)}"
        busy = s.busy
        if busy and busy.child_pid:
            runner._killpg(busy.child_pid, signal.SIGKILL)
        faults.checkpoint("mid_requeue")
        swept = runner.sweep_marker("TENDER_POOL_OWNER", f"{self.owner_prefix}:{s.index}")
        keep = {x.pid for x in self.slots if x.pid and x is not s}
        if self.embedded is not None and self.embedded.pid:
            keep.add(self.embedded.pid)  # our Redis is our child too, not a dead job's leftover
        orphans = runner.reap_orphans(keep=keep)
        reason = "drain" if (self.draining or clean) else "crash"
        self.requeue_list(s.proc, reason)
        log = self.log.warning if not clean else self.log.info
        self.metrics.forget_slot(s.pid)
        log(
            "slot_exited",
            slot=s.worker_id,
            pid=s.pid,
            how=how,
            job_id=busy.job_id if busy else None,
            kind=busy.kind if busy else None,
            user=busy.user if busy else None,
            attempt=busy.attempt if busy else None,
            killed=sorted(set(swept) | set(orphans)),
        )
        s.pid, s.busy, s.state = 0, None, SlotState.OFFLINE
        recycle, s.recycle = s.recycle, False
        if s.retiring and s in self.slots:
            self.slots.remove(s)  # OFFLINE → gone (scaled away)
            self.seqs[s.index] = s.seq
        if self.draining or s.retiring or self.paused:
            return
        if recycle and clean:
            s.respawn_at = now  # OFFLINE → STARTING at once, with the reloaded config
            return
        self.counters.slot_restarts += 1
        s.restarts += 1
        if now - s.spawned_at < FAST_DEATH_S:
            s.fast_deaths += 1
        else:
            s.fast_deaths = 0
        delay = 0.0 if s.fast_deaths == 0 else min(0.5 * 2 ** (s.fast_deaths - 1), RESPAWN_MAX_S)
        if s.fast_deaths >= CRASH_LOOP_AFTER:
            s.state = SlotState.CRASH_LOOPING
            self.log.error("slot_crash_looping", slot=s.worker_id, fast_deaths=s.fast_deaths, respawn_in=delay)
        s.respawn_at = now + delay

    def requeue_list(self, proc: str, reason: str) -> None:
        assert self.q is not None
        try:
            res = self.q.requeue_list(
                proc,
                reason,
                crash_cap=self.cfg.pool.crash_cap,
                lock_ttl_ms=self.cfg.lock_ttl_ms,
                retention_s=int(self.cfg.pool.result_retention),
            )
        except redis.RedisError as e:
            self.log.warning("requeue_deferred_redis_down", list=proc, error=str(e))
            self.metrics.redis_error()
            if (proc, reason) not in self.pending_requeue:
                self.pending_requeue.append((proc, reason))
            return
        for job_id, verdict in res:
            if verdict in ("requeued", "failed", "raw"):
                self.counters.reclaimed += 1
            self.log.info("requeued", job_id=job_id, **self._identity(job_id, proc), list=proc, reason=reason, verdict=verdict)

    def _identity(self, job_id: str, proc: str) -> dict:
        """kind, user, slot, attempt for a log line about a job the supervisor only knows by id."""
        slot = next((s.worker_id for s in self.slots if s.proc == proc), None)
        try:
            assert self.q is not None
            kind, user, attempts = self.q.r.hmget(self.keys.job(job_id), "kind", "user", "attempts")
        except redis.RedisError:
            kind = user = attempts = None
        dec = lambda b: b.decode("utf-8", "replace") if b else None  # noqa: E731
        return dict(kind=dec(kind), user=dec(user), slot=slot, attempt=int(attempts) if attempts else None)

    def retry_pending(self) -> None:
        pending, self.pending_requeue = self.pending_requeue, []
        for proc, reason in pending:
            self.requeue_list(proc, reason)

    def check_liveness(self, now: float) -> None:
        """A slot whose reports stopped for 3 heartbeats is wedged: kill it (the death path follows)."""
        limit = 3 * self.cfg.pool.heartbeat
        stuck, self.stuck = self.stuck, set()
        for s in self.slots:
            if not s.pid:
                continue
            if now - s.last_report > limit or s.proc in stuck:
                self.log.error("slot_unresponsive_killing", slot=s.worker_id, pid=s.pid, silent_s=round(now - s.last_report, 1))
                _kill(s.pid, signal.SIGKILL)
                s.last_report = now  # one kill per silence; waitpid brings the death


def _is_tender_pool(pid: int) -> bool:
    try:
        return "tender-pool" in " ".join(psutil.Process(pid).cmdline()) or "tender-pool" in psutil.Process(pid).name()
    except psutil.Error:
        return False
