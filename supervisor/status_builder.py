"""What the supervisor answers on its status socket (``StatusBuilder``), and its slot table as a Redis
value for ``status --redis`` (``host_summary``, ``clear_host``).

The builder gets only the pieces of the supervisor it reads, each passed in: a callable returning
the slot table, the counters, a ``QueueProbe``, the housekeeper, the draining flag. It runs in the
status thread (and ``host_summary`` in the housekeeper's); the slot table it reads belongs to the
main loop, so it takes a snapshot list and reads plain attributes (safe under the GIL: a row can be
one report stale, never torn).

Health: ``problems`` (each makes ``status`` exit 1) are a slot offline, crash-looping or unable to
boot, a job past its deadline, Redis unreachable (only when it does not answer), Redis refusing
writes (its own message: out of memory, MISCONF, …), a results or state directory that cannot be
written; ``warnings`` (exit code unchanged) are Redis settings that can lose jobs silently and
Redis memory past 80 % of maxmemory.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable

import msgspec
import redis

from tender_pool.store.config import Config
from tender_pool.supervisor.control import Request
from tender_pool.store.keys import Keys
from tender_pool.supervisor.procstat import ProcSampler
from tender_pool.client.status_probe import REFUSAL_MEMO_S, QueueProbe, QueueStats, redis_message
from tender_pool.client.status_protocol import HandlerRow, HostSlots, SlotRow, StatusReply, StatusView, consumer_problems
from tender_pool.client.models import rfc3339
from tender_pool.client.status_protocol import STATUS_PROTOCOL, CountersView
from tender_pool.supervisor.slot_table import SlotState

DEADLINE_MARGIN_S = 5.0  # past timeout + kill_grace + this, a running job is "past its deadline"
STORAGE_EVERY_S = 5.0  # directories are checked at most this often (a status storm costs no I/O)


def unwritable(path: str) -> str | None:
    """Why the pool could not write a file under ``path`` (a directory it may still have to
    create), or None. Judged without writing: the nearest existing ancestor must be a directory we
    may write, on a file system that is writable and has space left."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    if not p.is_dir():
        return f"{p} is not a directory"
    try:
        st = os.statvfs(p)
    except OSError as e:
        return f"cannot stat: {e.strerror}"
    if st.f_flag & os.ST_RDONLY:
        return "read-only file system"
    if not os.access(p, os.W_OK | os.X_OK):
        return "not writable by the daemon's user"
    if st.f_bavail == 0:
        return "file system full (no space left)"
    if st.f_files and st.f_favail == 0:
        return "file system full (no free inodes)"
    return None


def storage_problems(cfg: Config) -> list[str]:
    """One problem per results or state directory jobs could not write to (every attempt would
    fail with ``storage``)."""
    out = []
    for key, path in (("pool.results_dir", cfg.pool.results_dir), ("pool.state_dir", cfg.pool.state_dir)):
        why = unwritable(path) if path else None
        if why:
            out.append(f"{key} {path}: {why}")
    return out


def clear_host(client: redis.Redis, keys: Keys, host_id: str, incarnation: str) -> bool:
    """Delete ``slots:<host>`` if it is still this incarnation's table (a newer daemon with the same
    host_id may already have written its own). Called once at a clean exit, after the housekeeper
    stopped, so ``status --redis`` stops showing the host at once instead of 3 heartbeats later.
    Returns whether it deleted. Raises redis.RedisError."""
    key = keys.host_slots(host_id)
    with client.pipeline() as p:
        try:
            p.watch(key)
            raw = p.get(key)
            if raw is None:
                return False
            try:
                if msgspec.json.decode(raw, type=HostSlots).incarnation != incarnation:
                    return False
            except (msgspec.DecodeError, msgspec.ValidationError):
                pass  # unreadable: nobody's table, safe to drop
            p.multi()
            p.delete(key)
            p.execute()
            return True
        except redis.WatchError:
            return False


def handler_rows(cfg: Config, slots: list) -> list[HandlerRow]:
    """Every kind the config declares, with each slot's preload of the function handlers (the
    ``imports`` its ``Preloaded`` report carried; ``slots`` as for StatusBuilder). With no slots
    (no daemon answered) the imports are unknown."""
    rows = [HandlerRow("parse_markdown", "builtin", "extract", cfg.extract.timeout, cfg.extract.per_user)]
    present = [s for s in slots if s.pid or getattr(s, "boot_error", None)]
    for name in sorted(cfg.handlers):
        h = cfg.handlers[name]
        if h.function is None:
            rows.append(HandlerRow(name, "command", h.runs, h.timeout or 0.0, h.per_user))
            continue
        imports = {s.worker_id: (getattr(s, "imports", None) or {}).get(name) for s in present}
        states = set(imports.values())
        imported = (False if states - {"", None} else None if None in states or not imports else True)
        rows.append(HandlerRow(name, "function", h.runs, h.timeout or 0.0, h.per_user, list(h.path), h.after_fork,
                               imported, imports))
    return rows


class StatusBuilder:
    """Builds ``StatusView`` from the supervisor's slot table, its counters and Redis.

    ``slots`` is a zero-arg callable returning the slot objects (attributes ``index, worker_id, pid,
    state, busy, last_report, spawned_at``, optionally ``boot_error``)."""

    def __init__(
        self,
        cfg: Config,
        slots: Callable[[], list],
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
        self._storage: tuple[float, list[str]] | None = None

    @staticmethod
    def roots(slots: list) -> list[int]:
        out = []
        for s in slots:
            if s.pid:
                out.append(s.pid)
            if s.busy and s.busy.child_pid:
                out.append(s.busy.child_pid)
        return out

    def tick(self) -> None:
        self.sampler.sample(self.roots(list(self.slots())))

    def rows(self, now: float, wall_ms: int, slots: list | None = None) -> list[SlotRow]:
        slots = list(self.slots()) if slots is None else slots
        roots = self.roots(slots)
        if any(r not in self.sampler.trees for r in roots):
            self.sampler.sample(roots)  # a job started since the last tick
        rows = []
        for s in slots:
            b = s.busy
            cpu, rss = self.sampler.usage(s.pid) if s.pid else (None, None)
            row = SlotRow(id=s.worker_id, pid=s.pid or None, state=s.state.value, cpu_percent=cpu, rss_bytes=rss)
            if s.pid:
                row.heartbeat_age_s = round(max(0.0, now - s.last_report), 3)
                row.jvm_rss_bytes = self.sampler.jvm_rss(s.pid, exclude=b.child_pid if b is not None else None)
            if b is not None and s.pid:
                row.kind, row.job_id, row.user, row.file = b.kind, b.job_id, b.user, b.file
                row.started_at = rfc3339(b.started_ms)
                row.elapsed_s = round(max(0, wall_ms - b.started_ms) / 1000, 3)
                row.tree_cpu_percent, row.tree_rss_bytes, row.heaviest = self.sampler.tree_usage(b.child_pid)
            rows.append(row)
        return rows

    def jvm_rss(self) -> dict[str, int]:
        """Worker id → its warm JVM's RSS, from the last /proc sample (for the metrics scrape)."""
        out = {}
        for s in list(self.slots()):
            b = s.busy
            rss = self.sampler.jvm_rss(s.pid, exclude=b.child_pid if b is not None else None) if s.pid else None
            if rss is not None:
                out[s.worker_id] = rss
        return out

    def storage_problems(self) -> list[str]:
        now = time.monotonic()
        if self._storage is None or now - self._storage[0] >= STORAGE_EVERY_S:
            self._storage = (now, storage_problems(self.cfg))
        return self._storage[1]

    def problems(self, slots: list, rows: list[SlotRow], redis_ok: bool, draining: bool) -> list[str]:
        out = [] if redis_ok else ["redis unreachable"]
        for s, row in zip(slots, rows):
            boot_error = getattr(s, "boot_error", None)
            if boot_error:
                out.append(f"{row.id} cannot boot: {boot_error}")
            elif row.state == SlotState.CRASH_LOOPING.value:
                out.append(f"{row.id} crash-looping")
            elif row.state == SlotState.OFFLINE.value and not draining:
                out.append(f"{row.id} offline")
            if row.kind and row.elapsed_s is not None:
                limit = (self.cfg.handler_timeout(row.kind) or self.cfg.extract.timeout) + self.cfg.pool.kill_grace
                if row.elapsed_s > limit + DEADLINE_MARGIN_S:
                    out.append(f"{row.id} job {row.job_id} past its deadline ({row.elapsed_s:.0f} s > {limit:g} s)")
        return out + self.storage_problems()

    def unreplicated(self, slots: list, house: Any) -> str | None:
        """The warning while writes run on the primary but too few replicas acknowledge them (slots
        and the housekeeper retry them, ``NotReplicated``): after a planned failover with one
        replica, until Sentinel re-attaches the old primary, the pool would otherwise look idle."""
        n = sum(1 for s in slots if getattr(s, "unreplicated", False))
        house_waits = house is not None and getattr(house, "unreplicated", None) is not None
        if not n and not house_waits:
            return None
        who = f"{n} slot(s)" if n else "the housekeeper"
        return (f"waiting for a replica to acknowledge: {who} retrying writes the primary ran but fewer than "
                f"{self.cfg.redis.wait_replicas} replica(s) acknowledged (redis.wait_replicas); "
                "they resume once a replica is attached")

    def build(self) -> StatusView:
        now, wall_ms = time.monotonic(), int(time.time() * 1000)
        slots = list(self.slots())
        rows = self.rows(now, wall_ms, slots)
        house = self.housekeeper()
        draining = self.draining()
        stats: QueueStats | None
        warnings: list[str] = []
        redis_problems: list[str] = []
        try:
            stats = self.probe.read()
            redis_ok = house.redis_ok if house is not None else True
            redis_problems, warnings = self.probe.memory_health()
            warnings = warnings + self.probe.warnings()
        except redis.ResponseError as e:  # Redis answered: not "unreachable"
            stats, redis_ok = None, house.redis_ok if house is not None else True
            redis_problems = [f"Redis answered status's read with an error: {redis_message(e)}"]
            self.redis_errors += 1
        except redis.RedisError:
            stats, redis_ok = None, False
            self.redis_errors += 1
        refused = getattr(house, "refused", None)  # the heartbeat's own write, refused
        if refused is not None and time.monotonic() - refused[0] < REFUSAL_MEMO_S and redis_ok:
            if not any(p.startswith("Redis refuses writes") for p in redis_problems):
                redis_problems.append(f"Redis refuses writes: {refused[1]}")
        self.last_stats = stats
        waiting = self.unreplicated(slots, house)
        if waiting:
            warnings = [waiting, *warnings]
        states = [r.state for r in rows]
        busy = states.count(SlotState.BUSY.value)
        offline = sum(st in (SlotState.OFFLINE.value, SlotState.CRASH_LOOPING.value) for st in states)
        c = self.counters
        return StatusView(
            version=STATUS_PROTOCOL,
            configured=len(rows),
            online=len(rows) - offline,
            busy=busy,
            idle=states.count(SlotState.IDLE.value),
            offline=offline,
            queue_depth=stats.depth if stats else None,
            waiting=max(0, stats.depth - busy) if stats else None,
            queued=stats.queued if stats else None,
            running=stats.processing if stats else None,
            delayed=stats.delayed if stats else None,
            deferred=stats.deferred if stats else None,
            dead_letter=stats.dead_letter if stats else None,
            failed=stats.failed if stats else None,
            redis_ok=redis_ok,
            counters=msgspec.structs.replace(c, reclaimed=c.reclaimed + (house.reclaimed if house is not None else 0)),
            slots=rows,
            runs=list(self.probe.runs) if stats else None,
            runs_active=self.probe.runs_active if stats else None,
            consumers=list(self.probe.consumers) if stats else None,
            host_id=self.cfg.pool.host_id,
            pid=os.getpid(),
            uptime_s=round(now - self.started, 1),
            draining=draining,
            redis_memory=self.probe.memory if stats else None,
            problems=redis_problems + self.problems(slots, rows, redis_ok, draining) + consumer_problems(
                self.probe.consumers if stats else None),
            warnings=warnings,
        )

    def host_summary(self) -> bytes:
        """``slots:<host>`` for ``status --redis``; called by the housekeeper with each heartbeat."""
        rows = self.rows(time.monotonic(), int(time.time() * 1000))
        return msgspec.json.encode(
            HostSlots(self.cfg.pool.host_id, self.incarnation, os.getpid(), int(time.time() * 1000), rows)
        )

    def clear_host(self) -> bool:
        """At a clean exit, after the housekeeper stopped: drop this host's table from Redis now
        (``clear_host``). Best effort: an unreachable Redis lets the key expire by itself."""
        try:
            return clear_host(self.probe.r, self.probe.k, self.cfg.pool.host_id, self.incarnation)
        except redis.RedisError:
            return False

    def handle(self, req: Request) -> StatusReply:
        if req.version != STATUS_PROTOCOL:
            return StatusReply(STATUS_PROTOCOL, False, error=f"protocol version {req.version} not supported")
        if req.op == "handlers":
            return StatusReply(STATUS_PROTOCOL, True, handlers=handler_rows(self.cfg, self.slots()))
        if req.op != "status":
            return StatusReply(STATUS_PROTOCOL, False, error=f"unknown request {req.op!r} (read requests: status, "
                               'handlers; control requests carry "control": 1)')
        return StatusReply(STATUS_PROTOCOL, True, status=self.build())
