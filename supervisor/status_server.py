"""The status socket: protocol, what the supervisor answers, and the thread that serves it.

Protocol (version ``types.STATUS_PROTOCOL``): each frame is a 4-byte big-endian length and a JSON body
(msgspec), requests capped at ``REQUEST_CAP`` and replies at ``REPLY_CAP`` (gunicorn ctl's shape). One
request per connection: a read (``{"version": 1, "op": "status"}``) or a control request (scale, drain;
frames, versioning and the access rule in ``control``), decoded as ``control.Request``.

Thread, not the main selector: building a reply reads Redis (queue depth, deferred, dead letters,
failed) and /proc (CPU, RSS), and a slow or dead Redis must never stall the loop that reaps and
respawns slots ("the supervisor never blocks > 1 s"). The thread takes the supervisor's ``fork_lock``
while it handles a request, so no slot is ever forked while it is inside a Redis call or a log write;
its Redis client has a 0.5 s timeout, so the main loop's ``fork_lock.acquire(timeout=1)`` always wins
within a second. Reads of the supervisor's slot table from this thread are snapshots of plain
attributes (safe under the GIL; a row can be one report stale, never torn).

Fork safety: the listening socket would be inherited by every slot; ``close_after_fork`` closes it
in the child, so a dead supervisor's slots never keep its socket "alive".

Start-up (lesson 20): an existing socket file is ``connect()``ed first: a live daemon answering refuses
the start; a refused connection (stale file) is unlinked.
"""

from __future__ import annotations

import os
import select
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any, Callable

import msgspec
import psutil
import redis

from .config import Config
from .control import ControlReply, Request
from .keys import Keys
from .types import (
    STATUS_PROTOCOL,
    CountersView,
    HostSlots,
    QueueStats,
    SlotRow,
    SlotState,
    StatusReply,
    StatusRequest,
    StatusView,
    rfc3339,
)

REQUEST_CAP = 64 * 1024
REPLY_CAP = 16 * 1024 * 1024
PROBE_TIMEOUT_S = 0.5
DEADLINE_MARGIN_S = 5.0  # past timeout + kill_grace + this, a running job is "past its deadline"
_HDR = struct.Struct("!I")


# --- protocol ---------------------------------------------------------------------------------------


class ProtocolError(Exception):
    """A frame that is too large, truncated, or not the JSON we expect."""


def write_frame(sock: socket.socket, obj: Any) -> None:
    body = msgspec.json.encode(obj)
    sock.sendall(_HDR.pack(len(body)) + body)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 65536))
        if not chunk:
            raise ProtocolError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def read_frame(sock: socket.socket, cap: int) -> bytes:
    (n,) = _HDR.unpack(_recv_exact(sock, _HDR.size))
    if n > cap:
        raise ProtocolError(f"frame of {n} bytes exceeds the {cap}-byte cap")
    return _recv_exact(sock, n)


_CLOSE_IN_CHILD: list[Any] = []


def _close_inherited() -> None:
    for s in _CLOSE_IN_CHILD:
        try:
            s.close()
        except OSError:
            pass
    _CLOSE_IN_CHILD.clear()


os.register_at_fork(after_in_child=_close_inherited)


def close_after_fork(sock: Any) -> None:
    """Close ``sock`` in every process forked from here on (slots must not hold our listeners)."""
    _CLOSE_IN_CHILD.append(sock)


# --- what Redis says --------------------------------------------------------------------------------


class QueueProbe:
    """Queue figures from Redis on a client of its own with a short timeout. Thread-safe (one
    internal lock; callers that also hold ``fork_lock`` take it first).

    ``failed`` counts jobs in state failed among ``finished`` (history within retention). It is kept
    incrementally: each read looks only at ids finished since the last read, so its cost follows the
    job rate, not the history size; a first read after start catches up ``CATCH_UP`` ids at a time.
    """

    CATCH_UP = 5000

    def __init__(self, client: redis.Redis, keys: Keys, retention_s: float):
        from tender_pool.slots.queue import _script_text

        self.r = client
        self.k = keys
        self.retention_s = retention_s
        self.lock = threading.Lock()
        self._depwaits = client.register_script(_script_text("depwaits_count"))
        self._failed: dict[str, float] = {}  # failed job id → finish ms
        self._seen_ms = float("-inf")
        self._seen_at_max: set[str] = set()

    @classmethod
    def for_config(cls, cfg: Config, timeout: float = PROBE_TIMEOUT_S) -> "QueueProbe":
        from tender_pool.slots.queue import connect

        return cls(connect(cfg.redis.url, timeout), Keys(cfg.redis.prefix, cfg.pool.queue), cfg.pool.result_retention)

    def read(self) -> QueueStats:
        """Raises redis.RedisError when Redis is unreachable."""
        with self.lock:
            k = self.k
            p = self.r.pipeline(transaction=False)
            p.llen(k.ready_hi)
            p.llen(k.ready_lo)
            p.lpos(k.ready_lo, Keys.WAKE, count=0)
            p.llen(k.dead)
            p.zcard(k.delayed)
            p.hkeys(k.proclists)
            p.smembers(k.waitusers)
            p.smembers(k.depwaits)
            hi, lo, wakes, dead, delayed, procs, users, deps = p.execute()
            p = self.r.pipeline(transaction=False)
            for proc in procs:
                p.llen(proc)
            for u in users:
                p.llen(k.wait(u.decode("utf-8", "replace")))
            counts = p.execute() if (procs or users) else []
            dep_ids = [d.decode("utf-8", "replace") for d in deps]
            by_dep = int(self._depwaits(keys=[k.depwaits, *(k.deps(d) for d in dep_ids)], args=dep_ids)) if dep_ids else 0
            return QueueStats(
                ready_hi=hi,
                ready_lo=max(0, lo - len(wakes or [])),
                processing=sum(counts[: len(procs)]),
                delayed=delayed,
                deferred_user=sum(counts[len(procs) :]),
                deferred_dependency=by_dep,
                dead_letter=dead,
                failed=self._count_failed(),
            )

    def _count_failed(self) -> int:
        k = self.k
        lo = "-inf" if self._seen_ms == float("-inf") else self._seen_ms
        rows = self.r.zrangebyscore(k.finished, lo, "+inf", start=0, num=self.CATCH_UP, withscores=True)
        fresh = [(m.decode("utf-8", "replace"), s) for m, s in rows if m.decode("utf-8", "replace") not in self._seen_at_max]
        if fresh:
            p = self.r.pipeline(transaction=False)
            for jid, _ in fresh:
                p.hget(k.job(jid), "state")
            for (jid, score), state in zip(fresh, p.execute()):
                if state == b"failed":
                    self._failed[jid] = score
                else:
                    self._failed.pop(jid, None)  # the same id finished again, differently
                if score > self._seen_ms:
                    self._seen_ms, self._seen_at_max = score, set()
                if score == self._seen_ms:
                    self._seen_at_max.add(jid)
        cutoff = (time.time() - self.retention_s) * 1000
        for jid in [j for j, s in self._failed.items() if s < cutoff]:
            del self._failed[jid]
        return len(self._failed)


# --- what /proc says --------------------------------------------------------------------------------


def process_kind(name: str) -> str:
    """python / java / the process name: what an operator needs to know about a CPU hog."""
    n = name.lower()
    if "java" in n:
        return "java"
    if n.startswith("python") or n.startswith("pypy"):
        return "python"
    return name


class ProcSampler:
    """CPU% (since the previous sample, psutil's ``cpu_percent(None)``) and RSS of the slots and their
    jobs' trees. ``sample`` runs about once a second in the status thread, so a request gets a
    one-second CPU figure without sleeping."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._procs: dict[int, psutil.Process] = {}
        self.stats: dict[int, tuple[float, int, str]] = {}  # pid → (cpu %, rss, name)
        self.trees: dict[int, list[int]] = {}  # root pid → pids of root + descendants

    def sample(self, roots: list[int]) -> None:
        with self.lock:
            seen: dict[int, psutil.Process] = {}
            stats: dict[int, tuple[float, int, str]] = {}
            trees: dict[int, list[int]] = {}
            for root in roots:
                try:
                    rp = self._procs.get(root) or psutil.Process(root)
                    members = [rp, *rp.children(recursive=True)]
                except psutil.Error:
                    continue
                pids = []
                for proc in members:
                    proc = self._procs.get(proc.pid, proc)
                    try:
                        with proc.oneshot():
                            stats[proc.pid] = (proc.cpu_percent(None), proc.memory_info().rss, proc.name())
                    except psutil.Error:
                        continue
                    seen[proc.pid] = proc
                    pids.append(proc.pid)
                trees[root] = pids
            self._procs, self.stats, self.trees = seen, stats, trees

    def usage(self, pid: int | None) -> tuple[float | None, int | None]:
        s = self.stats.get(pid or -1)
        return (round(s[0], 1), s[1]) if s else (None, None)

    def tree_usage(self, root: int | None) -> tuple[float | None, int | None, str | None]:
        pids = self.trees.get(root or -1)
        if not pids:
            return None, None, None
        rows = [self.stats[p] for p in pids if p in self.stats]
        heavy = max(rows, key=lambda r: (r[0], r[1]))
        return round(sum(r[0] for r in rows), 1), sum(r[1] for r in rows), process_kind(heavy[2])


# --- the reply --------------------------------------------------------------------------------------


class StatusBuilder:
    """Builds ``StatusView`` from the supervisor's slot table, its counters and Redis. Needs only
    these pieces of the supervisor, passed in, not the supervisor itself."""

    def __init__(
        self,
        cfg: Config,
        slots: list,  # daemon.SlotProc, owned and mutated by the main loop
        counters: CountersView,
        probe: QueueProbe,
        housekeeper: Callable[[], Any],
        draining: Callable[[], bool],
        incarnation: str,
    ):
        self.cfg = cfg
        self.slots = slots
        self.counters = counters
        self.probe = probe
        self.housekeeper = housekeeper
        self.draining = draining
        self.incarnation = incarnation
        self.sampler = ProcSampler()
        self.started = time.monotonic()
        self.last_stats: QueueStats | None = None
        self.redis_errors = 0

    def roots(self) -> list[int]:
        out = []
        for s in self.slots:
            if s.pid:
                out.append(s.pid)
            if s.busy and s.busy.child_pid:
                out.append(s.busy.child_pid)
        return out

    def tick(self) -> None:
        self.sampler.sample(self.roots())

    def rows(self, now: float, wall_ms: int) -> list[SlotRow]:
        if any(r not in self.sampler.trees for r in self.roots()):
            self.sampler.sample(self.roots())  # a job started since the last tick
        rows = []
        for s in list(self.slots):
            b = s.busy
            cpu, rss = self.sampler.usage(s.pid) if s.pid else (None, None)
            row = SlotRow(id=s.worker_id, pid=s.pid or None, state=s.state.value, cpu_percent=cpu, rss_bytes=rss)
            if s.pid:
                row.heartbeat_age_s = round(max(0.0, now - s.last_report), 3)
            if b is not None and s.pid:
                row.kind, row.job_id, row.user, row.file = b.kind, b.job_id, b.user, b.file
                row.started_at = rfc3339(b.started_ms)
                row.elapsed_s = round(max(0, wall_ms - b.started_ms) / 1000, 3)
                row.tree_cpu_percent, row.tree_rss_bytes, row.heaviest = self.sampler.tree_usage(b.child_pid)
            rows.append(row)
        return rows

    def build(self) -> StatusView:
        now, wall_ms = time.monotonic(), int(time.time() * 1000)
        rows = self.rows(now, wall_ms)
        house = self.housekeeper()
        draining = self.draining()
        stats: QueueStats | None
        try:
            stats = self.probe.read()
            redis_ok = house.redis_ok if house is not None else True
        except redis.RedisError:
            stats, redis_ok = None, False
            self.redis_errors += 1
        self.last_stats = stats
        problems = []
        if not redis_ok:
            problems.append("redis unreachable")
        for s, row in zip(self.slots, rows):
            if row.state == SlotState.CRASH_LOOPING.value:
                problems.append(f"{row.id} crash-looping")
            elif row.state == SlotState.OFFLINE.value and not draining:
                problems.append(f"{row.id} offline")
            if row.kind and row.elapsed_s is not None:
                limit = (self.cfg.handler_timeout(row.kind) or self.cfg.extract.timeout) + self.cfg.pool.kill_grace
                if row.elapsed_s > limit + DEADLINE_MARGIN_S:
                    problems.append(f"{row.id} job {row.job_id} past its deadline ({row.elapsed_s:.0f} s > {limit:g} s)")
        states = [r.state for r in rows]
        busy = states.count(SlotState.BUSY.value)
        offline = sum(st in (SlotState.OFFLINE.value, SlotState.CRASH_LOOPING.value) for st in states)
        c = self.counters
        depth = stats.depth if stats else None
        return StatusView(
            version=STATUS_PROTOCOL,
            configured=len(rows),
            online=len(rows) - offline,
            busy=busy,
            idle=states.count(SlotState.IDLE.value),
            offline=offline,
            queue_depth=depth,
            waiting=max(0, depth - busy) if depth is not None else None,
            deferred=stats.deferred if stats else None,
            dead_letter=stats.dead_letter if stats else None,
            failed=stats.failed if stats else None,
            redis_ok=redis_ok,
            counters=msgspec.structs.replace(c, reclaimed=c.reclaimed + (house.reclaimed if house is not None else 0)),
            slots=rows,
            host_id=self.cfg.pool.host_id,
            pid=os.getpid(),
            uptime_s=round(now - self.started, 1),
            draining=draining,
            problems=problems,
        )

    def host_summary(self) -> bytes:
        """``slots:<host>`` for ``status --redis``; called by the housekeeper with each heartbeat."""
        rows = self.rows(time.monotonic(), int(time.time() * 1000))
        return msgspec.json.encode(
            HostSlots(self.cfg.pool.host_id, self.incarnation, os.getpid(), int(time.time() * 1000), rows)
        )

    def handle(self, req: StatusRequest | Request) -> StatusReply:
        if req.version != STATUS_PROTOCOL:
            return StatusReply(STATUS_PROTOCOL, False, error=f"protocol version {req.version} not supported")
        if req.op != "status":
            return StatusReply(STATUS_PROTOCOL, False, error=f"unknown request {req.op!r} (read requests: status; "
                               'control requests carry "control": 1)')
        return StatusReply(STATUS_PROTOCOL, True, status=self.build())


# --- the server -------------------------------------------------------------------------------------


class SocketInUse(Exception):
    """Another live daemon answers on our status socket."""


def check_existing(path: str) -> None:
    """Refuse if a live daemon answers on ``path``; unlink a stale socket file."""
    if not os.path.lexists(path):
        return
    from .status_client import StatusUnavailable, request

    try:
        reply = request(path, timeout=1.0)
    except StatusUnavailable as e:
        if e.listening:
            raise SocketInUse(f"something listens on {path} but does not answer ({e.reason})") from None
        os.unlink(path)
        return
    pid = reply.status.pid if reply.status else "?"
    raise SocketInUse(f"in use by a live daemon (pid {pid})")


class StatusServer(threading.Thread):
    def __init__(self, path: str, handle: Callable[[Request], StatusReply | ControlReply], fork_lock: threading.Lock,
                 log: Any, tick: Callable[[], None] | None = None, group: str = ""):
        super().__init__(name="status", daemon=True)
        self.path = path
        self.group = group  # status.group: who, besides the daemon's user, may read and control
        self.handle = handle
        self.fork_lock = fork_lock
        self.log = log
        self.on_tick = tick
        self.sock: socket.socket | None = None
        self.stop_event = threading.Event()

    def open(self) -> None:
        """Bind (mode 0660, group ``status.group`` if set; directory created). Raises SocketInUse.
        The mode is the access check for control requests: connecting needs write permission."""
        Path(self.path).parent.mkdir(parents=True, exist_ok=True, mode=0o750)
        check_existing(self.path)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(self.path)
        os.chmod(self.path, 0o660)
        if self.group:
            import grp

            os.chown(self.path, -1, grp.getgrnam(self.group).gr_gid)
        s.listen(16)
        self.sock = s
        close_after_fork(s)

    def run(self) -> None:
        assert self.sock is not None
        next_tick = 0.0
        while not self.stop_event.is_set():
            try:
                ready, _, _ = select.select([self.sock], [], [], 1.0)
            except (OSError, ValueError):
                return  # closed by close()
            if ready:
                self.serve_one()
            if self.on_tick and time.monotonic() >= next_tick:
                next_tick = time.monotonic() + 1.0
                try:
                    with self.fork_lock:
                        self.on_tick()
                except Exception:
                    self.log.exception("status_tick_failed")

    def serve_one(self) -> None:
        assert self.sock is not None
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(1.0)  # a client that stalls costs this thread a second, never the main loop
            try:
                try:
                    req = msgspec.json.decode(read_frame(conn, REQUEST_CAP), type=Request)
                except (msgspec.DecodeError, msgspec.ValidationError) as e:
                    write_frame(conn, StatusReply(STATUS_PROTOCOL, False, error=f"bad request: {e}"))
                    return
                with self.fork_lock:
                    reply = self.handle(req)
                write_frame(conn, reply)
            except (OSError, ProtocolError) as e:
                self.log.info("status_client_dropped", error=str(e))
            except Exception:
                self.log.exception("status_request_failed")

    def close(self) -> None:
        self.stop_event.set()
        if self.sock is not None:
            try:
                self.sock.close()
            finally:
                try:
                    os.unlink(self.path)
                except OSError:
                    pass
