"""Redis connections: the client every process builds for itself after fork (``connect``), the
slot's hot-path lane (``FastLane``), and acknowledged-means-replicated writes (``WAIT``).

A client is never inherited across ``fork``; each process calls ``connect`` once for each thread
that needs Redis.

``redis+sentinel://`` URLs resolve the primary through Sentinel, and follow a switch within
``RESOLVE_EVERY_S`` (hazards this module owns):
- redis-py asks Sentinel only when a connection (re)connects, and Sentinel drops the old primary's
  clients only when it converts it to a replica (~10 s after a planned failover): until then every
  write lands on the old primary and is discarded at its resync. So before handing out a connection
  (the pool) or sending a call (the FastLane) the primary is re-resolved at most every
  ``RESOLVE_EVERY_S``; a connection to any other address is dropped and reopened.
- Sentinels learn of a switch at different times (the leader first, the others from its hello
  messages ~2 s later): the primary is the one named by the highest ``config-epoch`` among the
  Sentinels that answer, not by the first to answer.
- A connection made lazily (``send_command`` on a fresh connection) bypassed
  ``SentinelManagedConnection.connect()`` and went to localhost:6379; ``_PrimaryConnection`` always
  resolves first.
- ``READONLY`` (we reached a demoted primary) and ``UNBLOCKED`` (a blocked BLMOVE on a primary being
  demoted) mean the command did not run: ``PrimaryMoved``, a ``ConnectionError``, so every existing
  retry path treats it as "reconnect"; the FastLane itself re-resolves and retries it once at once.

A write is acknowledged only once ``replicas`` replicas have it (``WAIT`` on the same connection,
pipelined with the write: one round trip); fewer within the timeout raises ``NotReplicated``, whose
``result`` is what the write returned on the primary (it ran there but may be lost in a failover).
"""

from __future__ import annotations

import time
from typing import Any, Callable

import redis
from redis.sentinel import MasterNotFoundError, Sentinel, SentinelConnectionPool, SentinelManagedConnection

from tender_pool.supervisor.config import parse_sentinel_url

RESOLVE_EVERY_S = 0.5  # how stale the primary's address may be: the bound on following a switch
SENTINEL_TIMEOUT_S = 0.5  # per Sentinel query; a dead Sentinel must not stall the hot path for long


class PrimaryMoved(redis.ConnectionError):
    """The server we reached is no longer the primary (``READONLY``, ``UNBLOCKED``): the command did
    not run; reconnect to the current primary and send it again."""


class NotReplicated(redis.RedisError):
    """A write ran on the primary but fewer than ``wanted`` replicas acknowledged it within the
    timeout: it is not acknowledged (a failover now may lose it). ``result`` is the write's reply."""

    def __init__(self, acked: int, wanted: int, timeout_ms: int, result: Any = None):
        self.acked, self.wanted, self.timeout_ms, self.result = acked, wanted, timeout_ms, result
        super().__init__(f"write reached {acked} of {wanted} replicas within {timeout_ms} ms")


def connect(url: str, socket_timeout: float = 5.0) -> redis.Redis:
    """A client for this process only. ``socket_timeout`` exceeds the claim's BLMOVE timeout so a
    blocked claim is never cut short, yet a dead server (failover) is noticed within seconds."""
    if url.startswith("redis+sentinel://"):
        return _sentinel(url, socket_timeout)
    kw: dict[str, Any] = dict(
        socket_timeout=socket_timeout, socket_connect_timeout=socket_timeout, health_check_interval=30
    )
    if not url.startswith("unix://"):
        kw["socket_keepalive"] = True  # TCP only; the Unix-socket connection class rejects it
    return redis.Redis.from_url(url, decode_responses=False, **kw)


def _sentinel(url: str, socket_timeout: float) -> redis.Redis:
    nodes, service, db = parse_sentinel_url(url)
    t = min(socket_timeout, SENTINEL_TIMEOUT_S)
    sentinels = _Sentinels(nodes, sentinel_kwargs={"socket_timeout": t, "socket_connect_timeout": t})
    return sentinels.master_for(
        service,
        connection_pool_class=_PrimaryPool,
        connection_class=_PrimaryConnection,
        socket_timeout=socket_timeout,
        socket_connect_timeout=socket_timeout,
        socket_keepalive=True,
        db=db,
    )


class _Sentinels(Sentinel):
    """The primary is the highest ``config-epoch`` any answering Sentinel names; the answer is
    cached for ``RESOLVE_EVERY_S`` (one round of Sentinel queries per process per interval)."""

    def __init__(self, *a: Any, **kw: Any):
        super().__init__(*a, **kw)
        self._cached: tuple[str, int] | None = None
        self._at = 0.0

    def discover_master(self, service_name: str, fresh: bool = False) -> tuple[str, int]:
        now = time.monotonic()
        if not fresh and self._cached is not None and now - self._at < RESOLVE_EVERY_S:
            return self._cached
        best: dict | None = None
        errors = []
        for s in self.sentinels:
            try:
                state = s.sentinel_master(service_name)
            except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError) as e:
                errors.append(repr(e))
                continue
            if self.check_master_state(state, service_name):
                if best is None or state["config-epoch"] > best["config-epoch"]:
                    best = state
        if best is None:
            self._cached = None
            raise MasterNotFoundError(f"No master found for {service_name!r} {'; '.join(errors)}".rstrip())
        self._cached, self._at = (best["ip"], int(best["port"])), now
        return self._cached

    def invalidate(self) -> None:
        """The primary we reached says it is not one: ask the Sentinels again on the next use."""
        self._cached = None


class _PrimaryConnection(SentinelManagedConnection):
    """A Sentinel-managed connection that resolves the primary however it is opened, and reports a
    demoted primary as ``PrimaryMoved``."""

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if not self._sock:  # the base class would connect to its default host (localhost:6379)
            self.connect()
        super().send_packed_command(command, check_health)

    def read_response(self, *a: Any, **kw: Any) -> Any:
        try:
            return super().read_response(*a, **kw)
        except redis.ConnectionError as e:
            if "previous master is now a slave" in str(e):  # the base class's READONLY translation
                raise self._moved("READONLY") from None
            raise
        except redis.ResponseError as e:
            if str(e).startswith("UNBLOCKED"):
                self.disconnect()
                raise self._moved(str(e)) from None
            raise

    def _moved(self, why: str) -> PrimaryMoved:
        manager = self.connection_pool.sentinel_manager
        if isinstance(manager, _Sentinels):
            manager.invalidate()
        return PrimaryMoved(f"{self.host}:{self.port} is no longer the primary ({why})")


class _PrimaryPool(SentinelConnectionPool):
    """Before handing out a connection, re-resolve the primary (cached, so at most one Sentinel round
    per ``RESOLVE_EVERY_S``): on a change the idle connections are dropped (redis-py's proxy does
    that) and a busy one is dropped when it comes back (``owns_connection``)."""

    def get_connection(self, *a: Any, **kw: Any):
        self.get_master_address()
        return super().get_connection(*a, **kw)


def primary_resolver(client: redis.Redis) -> Callable[[bool], tuple[str, int]] | None:
    """For a Sentinel client: ``resolve(fresh) -> (host, port)`` of the primary now; else None."""
    pool = client.connection_pool
    if not isinstance(pool, SentinelConnectionPool):
        return None
    manager, service = pool.sentinel_manager, pool.service_name

    def resolve(fresh: bool = False) -> tuple[str, int]:
        if isinstance(manager, _Sentinels):
            addr = manager.discover_master(service, fresh=fresh)
        else:
            addr = manager.discover_master(service)
        pool.get_master_address()  # let the pool drop its idle connections to an old primary too
        return addr

    return resolve


def _check_acked(acked: Any, wanted: int, timeout_ms: int, result: Any) -> None:
    if int(acked) < wanted:
        raise NotReplicated(int(acked), wanted, timeout_ms, result)


def wait_replicated(
    client: redis.Redis, replicas: int, timeout_ms: int, write: Callable[[Any], Any]
) -> list[Any]:
    """The redis-py path: ``write(pipe)`` queues the write(s) on a pipeline (e.g. a registered
    Script called with ``client=pipe``), ``WAIT replicas timeout_ms`` follows on the same connection
    (WAIT counts the replicas that have this connection's last write), one round trip. Returns the
    writes' replies; raises ``NotReplicated`` (carrying them) when too few replicas acknowledged."""
    with client.pipeline(transaction=False) as pipe:
        write(pipe)
        if replicas <= 0:
            return pipe.execute()
        pipe.execute_command("WAIT", replicas, timeout_ms)
        *results, acked = pipe.execute()
    _check_acked(acked, replicas, timeout_ms, results)
    return results


class FastLane:
    """One dedicated connection for a slot's per-job commands (claim, job read, start, settle),
    skipping redis-py's per-command layers (retry wrapper, pool checkout, observability hooks): they
    cost ~80 µs of CPU per command, about half a no-op job's CPU in the slot. Errors are the same
    redis exceptions; a broken connection is dropped and reopened on the next call. One thread only.

    With Sentinel, the primary is re-resolved before a call when the last answer is older than
    ``RESOLVE_EVERY_S``; ``switches`` counts the times the lane moved to another primary (a caller
    re-checks what it holds, e.g. running attempts' tokens, when it changes).
    """

    def __init__(self, client: redis.Redis):
        self.pool = client.connection_pool
        self.conn = self.pool.make_connection()
        self.resolve = primary_resolver(client)
        self.shas: dict[str, bytes] = {}
        self.switches = 0
        self._addr: tuple[str, int] | None = None

    def _ready(self, fresh: bool = False) -> None:
        """Connected, and (Sentinel) to the primary as of at most ``RESOLVE_EVERY_S`` ago."""
        conn = self.conn
        connected = bool(getattr(conn, "_sock", None))  # redis-py's own "connected" test
        if self.resolve is not None:
            try:
                addr = self.resolve(fresh)
            except redis.ConnectionError:  # no primary now (failover in progress): the call fails
                conn.disconnect()
                raise
            if connected and (conn.host, conn.port) != addr:
                conn.disconnect()
                connected = False
        if not connected:
            conn.connect()
            if self.resolve is not None:
                if self._addr is not None and (conn.host, conn.port) != self._addr:
                    self.switches += 1
                self._addr = (conn.host, conn.port)

    def _roundtrip(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """Send ``commands`` in one write and read every reply. A Redis error reply to one of them
        (NOSCRIPT, a script error) is raised after all replies are read, so the connection stays
        in step; anything else drops the connection."""
        self._ready()
        conn = self.conn
        try:
            if len(commands) == 1:
                conn.send_command(*commands[0])
            else:
                conn.send_packed_command(conn.pack_commands(commands))
            replies, error = [], None
            for _ in commands:
                try:
                    replies.append(conn.read_response())
                except redis.ConnectionError:
                    raise
                except redis.ResponseError as e:
                    error = error or e
                    replies.append(e)
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            conn.disconnect()
            raise
        if error is not None:
            raise error
        return replies

    def _send(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        try:
            return self._roundtrip(commands)
        except PrimaryMoved:  # nothing ran: follow the switch now and send once more
            self._ready(fresh=True)
            return self._roundtrip(commands)

    def call(self, *args: Any) -> Any:
        return self._send([args])[0]

    def script(
        self, text: str, keys: list[str], args: list[Any], *, replicas: int = 0, timeout_ms: int = 1000
    ) -> Any:
        """EVALSHA (loading the script when the server lacks it); with ``replicas`` > 0, ``WAIT
        replicas timeout_ms`` in the same round trip, and ``NotReplicated`` when fewer acknowledged."""
        sha = self.shas.get(text)
        if sha is None:
            sha = self.shas[text] = self.call("SCRIPT", "LOAD", text)
        cmds: list[tuple[Any, ...]] = [("EVALSHA", sha, len(keys), *keys, *args)]
        if replicas > 0:
            cmds.append(("WAIT", replicas, timeout_ms))
        try:
            replies = self._send(cmds)
        except redis.exceptions.NoScriptError:  # the server restarted (or is a new primary) without it
            self.shas.pop(text, None)
            return self.script(text, keys, args, replicas=replicas, timeout_ms=timeout_ms)
        if replicas > 0:
            _check_acked(replies[1], replicas, timeout_ms, replies[0])
        return replies[0]
