"""The status socket's protocol: frames, and the Structs they carry. Used by both ends (the server
thread in ``status_server`` and the CLI's ``status_client``), so neither imports the other.

A frame is a 4-byte big-endian length and a msgspec JSON body (gunicorn ctl's shape). Requests are
capped at ``REQUEST_CAP`` and replies at ``REPLY_CAP``; a peer that announces more is cut off
before anything is allocated. One request per connection: a read (``{"version": 1, "op":
"status"}``) or a control request (``control.Request`` with ``"control": 1``), then the reply.

``StatusView`` is ``status --json``: the contract's fields first, then ours. ``HostSlots`` is the
same table as a Redis value (``slots:<host>``) for ``status --redis``.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

import msgspec

from tender_pool.client.models import Counts

STATUS_PROTOCOL = 1
REQUEST_CAP = 64 * 1024
REPLY_CAP = 16 * 1024 * 1024
HEADER = struct.Struct("!I")


class ProtocolError(Exception):
    """A frame that is too large, truncated, or not the JSON we expect."""


def encode_frame(obj: Any) -> bytes:
    body = msgspec.json.encode(obj)
    return HEADER.pack(len(body)) + body


def write_frame(sock: socket.socket, obj: Any) -> None:
    sock.sendall(encode_frame(obj))


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 65536))
        if not chunk:
            raise ProtocolError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def read_frame(sock: socket.socket, cap: int) -> bytes:
    """One frame's body from a blocking socket (the client's side)."""
    (n,) = HEADER.unpack(_recv_exact(sock, HEADER.size))
    if n > cap:
        raise ProtocolError(f"frame of {n} bytes exceeds the {cap}-byte cap")
    return _recv_exact(sock, n)


class FrameBuffer:
    """Incremental reader for a non-blocking socket (the server's side): ``feed`` the bytes as they
    arrive; ``body`` is set once the whole frame is in. Raises ProtocolError past ``cap``."""

    def __init__(self, cap: int):
        self.cap = cap
        self.buf = bytearray()
        self.need: int | None = None
        self.body: bytes | None = None

    def feed(self, data: bytes) -> None:
        self.buf += data
        if self.need is None and len(self.buf) >= HEADER.size:
            (self.need,) = HEADER.unpack(self.buf[: HEADER.size])
            if self.need > self.cap:
                raise ProtocolError(f"frame of {self.need} bytes exceeds the {self.cap}-byte cap")
        if self.need is not None and len(self.buf) >= HEADER.size + self.need:
            if len(self.buf) > HEADER.size + self.need:
                raise ProtocolError("bytes after the request frame (one request per connection)")
            self.body = bytes(self.buf[HEADER.size :])


# --- what the frames carry --------------------------------------------------------------------------


class StatusRequest(msgspec.Struct, forbid_unknown_fields=True):
    """A read request: ``op`` = "status" (``status``) or "handlers" (``handlers``)."""

    version: int
    op: str


class SlotRow(msgspec.Struct):
    """One row of ``status``: the contract's slot fields, in its order."""

    id: str
    pid: int | None
    state: str
    kind: str | None = None
    job_id: str | None = None
    user: str | None = None
    file: str | None = None
    started_at: str | None = None
    elapsed_s: float | None = None
    heartbeat_age_s: float | None = None
    cpu_percent: float | None = None
    rss_bytes: int | None = None
    tree_cpu_percent: float | None = None
    tree_rss_bytes: int | None = None
    heaviest: str | None = None
    jvm_rss_bytes: int | None = None  # the slot's warm POI JVM, when it runs one (not in rss_bytes)


class RunRow(msgspec.Struct):
    """One active run (pending or running) in ``status``: the contract's ``runs`` fields."""

    id: str
    user: str
    kind: str
    counts: Counts


class RedisMemory(msgspec.Struct):
    """``redis_memory`` in ``status``: Redis's ``used_memory``, ``maxmemory`` (0: no limit) and
    ``maxmemory-policy``, from INFO."""

    used_bytes: int
    maxmemory_bytes: int
    policy: str


class ConsumerRow(msgspec.Struct):
    """A consumer group of the queue-wide event stream (``status``'s ``consumers``): entries not yet
    delivered, delivered and not acknowledged, the oldest of those's age, and whether it lost entries
    to ``[events] max_backlog`` (a problem until its consumer has resynced)."""

    group: str
    lag: int
    pending: int
    oldest_pending_age_s: float | None
    gap: bool


def consumer_problems(rows: list[ConsumerRow] | None) -> list[str]:
    return [f"consumer group {c.group} lost events past [events] max_backlog (gap): its consumer must resync"
            for c in rows or [] if c.gap]


class CountersView(msgspec.Struct):
    """The supervisor's counters since it started (``status``'s ``counters``)."""

    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    deferred: int = 0
    reclaimed: int = 0
    timed_out: int = 0
    killed: int = 0
    slot_restarts: int = 0


class StatusView(msgspec.Struct, kw_only=True):
    """``status --json``. ``queue_depth`` is every unfinished job (queued, waiting and running: the old
    pool's meaning), ``waiting`` = depth − busy (an estimate, as it always was); the precise figures
    stand beside them: ``queued`` (ready to claim), ``running`` (claimed, all hosts), ``delayed``
    (retry backoff), ``deferred`` (parked behind a user's lock or a dependency). Queue figures are
    null when Redis is down; ``error`` is set (and the counts null) when no daemon answered.
    ``warnings`` (Redis persistence off, an evicting policy) leave the exit code alone; ``problems``
    make it 1. ``runs``: the newest active (pending or running) runs with their counts, at most 20;
    ``runs_active`` counts them all. Every list here is bounded whatever Redis holds (slots by the
    config, problems by the slots, warnings by the checks), so a reply always fits ``REPLY_CAP``."""

    version: int = STATUS_PROTOCOL
    configured: int
    online: int | None = None
    busy: int | None = None
    idle: int | None = None
    offline: int | None = None
    queue_depth: int | None = None
    waiting: int | None = None
    queued: int | None = None
    running: int | None = None
    delayed: int | None = None
    deferred: int | None = None
    dead_letter: int | None = None
    failed: int | None = None
    redis_ok: bool | None = None
    counters: CountersView | None = None
    slots: list[SlotRow] = []
    runs: list[RunRow] | None = None  # the newest active runs (at most 20), newest first; null when Redis is down
    runs_active: int | None = None  # every active run (``runs`` lists the newest of them)
    consumers: list[ConsumerRow] | None = None  # consumer groups of the event stream; null when Redis is down
    redis_memory: RedisMemory | None = None  # null when Redis does not answer
    host_id: str | None = None
    pid: int | None = None
    uptime_s: float | None = None
    draining: bool = False
    problems: list[str] = []
    warnings: list[str] = []
    error: str | None = None

    @classmethod
    def unreachable(cls, configured: int, host_id: str | None, error: str) -> "StatusView":
        """What ``status --json`` prints when no daemon answers: still the whole shape."""
        return cls(configured=configured, host_id=host_id, error=error)


class HandlerRow(msgspec.Struct):
    """One job kind in ``tender-pool handlers --json`` (the ``handlers`` read request): what it
    runs, its limits and, for a function handler, each slot's import of it (``imports``: slot id →
    "" imported, the reason it did not, or null when that slot has not reported yet) and
    ``imported``: true once every slot did, false if one could not, null otherwise (and for the
    kinds that import nothing)."""

    kind: str
    type: str  # "builtin" (parse_markdown) | "command" | "function"
    runs: str  # the function's "module:qualname", the command's argv joined, or "extract"
    timeout: float
    per_user: int
    path: list[str] = []
    after_fork: str | None = None
    imported: bool | None = None
    imports: dict[str, str | None] = {}


class StatusReply(msgspec.Struct):
    version: int
    ok: bool
    status: StatusView | None = None
    error: str | None = None
    handlers: list[HandlerRow] | None = None  # the reply to a "handlers" read request


class HostSlots(msgspec.Struct):
    """``slots:<host>`` in Redis, refreshed with the host heartbeat: what ``status --redis`` shows."""

    host_id: str
    incarnation: str
    pid: int
    at_ms: int
    slots: list[SlotRow]


# --- control frames: sent by `tender-pool scale|drain`, checked by supervisor/control.py ---------------

CONTROL_VERSION = 1
CONTROL_OPS = ("scale", "drain")


class Request(msgspec.Struct, forbid_unknown_fields=True):
    """Any frame a client sends: a read (``control`` absent) or a control request."""

    version: int
    op: str
    control: int | None = None
    workers: int | None = None


class ControlReply(msgspec.Struct):
    version: int
    ok: bool
    message: str = ""
    error: str | None = None
