"""Client side of the status socket, and the Redis-only view for ``status --redis``.

Every failure names the socket it tried and why (a bare "Timed out" tells an operator nothing).

The Redis view judges every host by its ``host:<host>`` key, the same evidence the reaper uses: a
slot table or a busy state is shown only while its host's supervisor heartbeats with the incarnation
that wrote it. So a killed host drops out within 3 heartbeats, busy states included (they would
otherwise live until their own TTL, the longest job timeout + 2 minutes), and a cleanly stopped
host at once (it deletes its table at exit: ``status_builder.clear_host``).
"""

from __future__ import annotations

import socket
import time

import msgspec
import redis

from tender_pool.store.config import Config
from tender_pool.client.status_protocol import CONTROL_VERSION, ControlReply, Request
from tender_pool.store.keys import Owner
from tender_pool.client.status_probe import QueueProbe, QueueStats, redis_message, redis_warnings
from tender_pool.client.status_protocol import (
    REPLY_CAP,
    STATUS_PROTOCOL,
    ConsumerRow,
    HostSlots,
    ProtocolError,
    RedisMemory,
    RunRow,
    SlotRow,
    StatusReply,
    StatusRequest,
    StatusView,
    read_frame,
    write_frame,
    consumer_problems,
)
from tender_pool.store.records import BusyState


class StatusUnavailable(Exception):
    """No answer on the socket. ``listening`` is True when something accepted the connection."""

    def __init__(self, path: str, reason: str, listening: bool = False):
        self.path, self.reason, self.listening = path, reason, listening
        super().__init__(f"no daemon answers on {path}: {reason}")


def request(path: str, op: str = "status", timeout: float = 3.0) -> StatusReply:
    body = _roundtrip(path, StatusRequest(version=STATUS_PROTOCOL, op=op), timeout)
    try:
        return msgspec.json.decode(body, type=StatusReply)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise StatusUnavailable(path, f"unexpected reply: {e}", listening=True) from None


def control(path: str, op: str, workers: int | None = None, timeout: float = 3.0) -> ControlReply:
    """One control request (scale, drain). A refusal is ``ok=False`` with ``error``; no answer at
    all (including "permission denied": not in the socket's group) raises StatusUnavailable."""
    frame = Request(version=STATUS_PROTOCOL, op=op, control=CONTROL_VERSION, workers=workers)
    body = _roundtrip(path, frame, timeout)
    try:
        return msgspec.json.decode(body, type=ControlReply)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise StatusUnavailable(path, f"unexpected reply: {e}", listening=True) from None


def _connect(s: socket.socket, path: str, deadline: float) -> None:
    """``connect``, retried while the daemon's listen backlog is full (EAGAIN on a Unix socket: the
    daemon is busy, not gone) until ``deadline``."""
    while True:
        try:
            return s.connect(path)
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


def _roundtrip(path: str, frame: StatusRequest | Request, timeout: float) -> bytes:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        try:
            _connect(s, path, time.monotonic() + timeout)
        except FileNotFoundError:
            raise StatusUnavailable(path, "no such socket (is the daemon running?)") from None
        except ConnectionRefusedError:
            raise StatusUnavailable(path, "connection refused (stale socket)") from None
        except PermissionError:
            raise StatusUnavailable(path, "permission denied (not the daemon's user or in the socket's group)") from None
        except socket.timeout:
            raise StatusUnavailable(path, f"connect timed out after {timeout:g} s (daemon overloaded?)") from None
        except OSError as e:
            raise StatusUnavailable(path, e.strerror or str(e)) from None
        try:
            write_frame(s, frame)
            body = read_frame(s, REPLY_CAP)
        except socket.timeout:
            raise StatusUnavailable(path, f"timed out after {timeout:g} s", listening=True) from None
        except (OSError, ProtocolError) as e:
            raise StatusUnavailable(path, str(e), listening=True) from None
    finally:
        s.close()
    return body


class RedisView(msgspec.Struct):
    """``status --redis --json``: every live host's slot table from its heartbeat, the busy states
    of live hosts' slots, and the queue figures (``queue_depth`` and ``waiting`` as in ``status``;
    ``queue`` has the precise parts). ``busy`` counts only live hosts' entries."""

    version: int
    redis_ok: bool
    queue: QueueStats | None
    queue_depth: int | None
    waiting: int | None
    hosts: list[HostSlots]
    busy: list[BusyState]
    warnings: list[str] = []
    error: str | None = None
    runs: list[RunRow] | None = None  # the newest active runs, at most 20 (``status``'s ``runs``)
    runs_active: int | None = None
    consumers: list[ConsumerRow] | None = None
    hosts_total: int | None = None  # hosts that heartbeat lately; ``hosts`` shows the newest MAX_HOSTS
    redis_memory: RedisMemory | None = None
    problems: list[str] = []  # Redis refusing writes (its message)


# ``hosts`` is trimmed after an hour of silence, but nothing bounds how many hosts a queue has: the
# Redis view shows the newest this many (and says how many there are), so its reply stays bounded.
MAX_HOSTS = 200


def host_of_worker(worker_id: str) -> str:
    """Worker ids are ``<host_id>-slot<N>`` (config.py)."""
    return worker_id.rpartition("-slot")[0]


def redis_view(cfg: Config) -> RedisView:
    """What Redis alone knows (another host, or the daemon down)."""
    return read_redis_view(QueueProbe.for_config(cfg, timeout=cfg.redis.socket_timeout), cfg.redis.url)


def read_redis_view(probe: QueueProbe, url: str) -> RedisView:
    """``redis_view`` through a probe the caller keeps (``Client.status``)."""
    r, k = probe.r, probe.k
    try:
        stats = probe.read()
        # The hosts that heartbeat lately (``hosts``), their slot tables, the busy states of the slots
        # those name: three reads whatever the keyspace holds (a SCAN walked all of it: 0.4 s at
        # 2 × 10⁵ keys, seconds at 2 × 10⁶)
        listed = sorted(x.decode("utf-8", "replace") for x in r.zrevrange(k.hosts, 0, MAX_HOSTS - 1))
        hosts_total = r.zcard(k.hosts)
        tables = _decode_all(r, [k.host_slots(h) for h in listed], HostSlots)
        states = _decode_all(r, [k.busy(row.id) for t in tables for row in t.slots], BusyState)
        names = sorted({t.host_id for t in tables} | {host_of_worker(b.worker) for b in states})
        holders = dict(zip(names, r.mget([k.host(n) for n in names]) if names else []))
        problems, warnings = probe.memory_health()
        warnings = warnings + redis_warnings(r)
    except redis.ResponseError as e:  # it answered: not unreachable
        return RedisView(STATUS_PROTOCOL, True, None, None, None, [], [],
                         error=f"Redis at {url} answered with an error: {redis_message(e)}")
    except redis.RedisError as e:
        return RedisView(STATUS_PROTOCOL, False, None, None, None, [], [], error=f"Redis unreachable at {url}: {e}")
    hosts, busy = live_hosts(tables, states, holders)
    if hosts_total > MAX_HOSTS:
        warnings = [*warnings, f"{hosts_total} hosts heartbeat lately: the {MAX_HOSTS} newest are shown"]
    return RedisView(STATUS_PROTOCOL, True, stats, stats.depth, max(0, stats.depth - len(busy)), hosts, busy, warnings,
                     runs=list(probe.runs), runs_active=probe.runs_active, consumers=list(probe.consumers),
                     hosts_total=hosts_total, redis_memory=probe.memory, problems=problems)


def as_status(view: RedisView) -> StatusView:
    """The Redis view in ``status --json``'s shape, every live host's slots together (a busy state
    fills in its slot's job); ``counters``, ``pid``, ``uptime_s`` and ``host_id`` are null: no
    supervisor was asked. ``problems`` are the slots offline or crash-looping, Redis refusing writes,
    or Redis down (only when it does not answer)."""
    if not view.redis_ok:
        return StatusView(configured=0, redis_ok=False, problems=["redis unreachable"], error=view.error)
    if view.queue is None:
        return StatusView(configured=0, redis_ok=True, problems=[view.error or "no queue figures"], error=view.error)
    busy = {b.worker: b for b in view.busy}
    rows: list[SlotRow] = []
    for host in view.hosts:
        for row in host.slots:
            b = busy.get(row.id)
            if b is not None and not row.job_id:
                row = msgspec.structs.replace(row, kind=b.kind, job_id=b.job_id, user=b.user, file=b.file)
            rows.append(row)
    states = [r.state for r in rows]
    offline = sum(st in ("offline", "crash-looping") for st in states)
    n_busy = states.count("busy")
    q = view.queue
    return StatusView(
        configured=len(rows), online=len(rows) - offline, busy=n_busy, idle=states.count("idle"), offline=offline,
        queue_depth=q.depth, waiting=max(0, q.depth - n_busy), queued=q.queued, running=q.processing,
        delayed=q.delayed, deferred=q.deferred, dead_letter=q.dead_letter, failed=q.failed, redis_ok=True,
        slots=rows, runs=view.runs, runs_active=view.runs_active, consumers=view.consumers,
        redis_memory=view.redis_memory,
        problems=view.problems + [f"{r.id} {r.state}" for r in rows if r.state in ("offline", "crash-looping")]
        + consumer_problems(view.consumers),
        warnings=view.warnings,
    )


def _decode_all(r: redis.Redis, keys: list[str], typ: type) -> list:
    out = []
    for raw in r.mget(keys) if keys else []:
        if raw:
            try:
                out.append(msgspec.json.decode(raw, type=typ))
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
    return out


def live_hosts(tables: list[HostSlots], states: list[BusyState],
               holders: dict[str, bytes | None]) -> tuple[list[HostSlots], list[BusyState]]:
    """The tables whose host key names their incarnation, and the busy states of those hosts'
    slots (a state whose slot the live table shows with another pid is a previous incarnation's)."""
    def incarnation(host: str) -> str | None:
        raw = holders.get(host)
        return Owner.of_holder(host, raw.decode("utf-8", "replace")).incarnation if raw else None

    hosts = [t for t in tables if incarnation(t.host_id) == t.incarnation]
    pids = {row.id: row.pid for t in hosts for row in t.slots}
    busy = [b for b in states if incarnation(host_of_worker(b.worker)) is not None
            and pids.get(b.worker, b.pid) == b.pid]
    return hosts, busy
