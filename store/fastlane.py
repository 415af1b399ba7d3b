"""The slot's hot-path lane (``FastLane``): a slot's per-job commands on one connection of their own,
past redis-py's per-command layers, that follows a failover (Sentinel or cluster) by itself, so a slot
lands on the new primary within ~0.1 s of its naming whatever back-off its caller sleeps. The hazards
it handles and the measurements behind its constants: ``docs/redis-connections.md``.
"""

from __future__ import annotations

import time
from typing import Any

import redis

try:  # redis-py's packer checks each argument in Python first (~10 µs of a 49-argument EVALSHA)
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # pragma: no cover - hiredis is a dependency (redis[hiredis])
    _hiredis_pack = None
from redis.cluster import RedisCluster
from redis.exceptions import AskError, ClusterError, MovedError, SlotNotCoveredError, TryAgainError

from tender_pool.store.cluster import ClusterMoving, refresh_slots
from tender_pool.store.replication import check_acked, replicas_needed
from tender_pool.store.sentinel import PrimaryMoved, primary_of

WAIT_SLICE_MS = 100  # the FastLane's WAIT slice: how late it notices a switch while it waits
FOLLOW_POLL_S = 0.1  # how often the FastLane asks the Sentinels while no primary can be reached
# … and for how long per call: less than the shortest silence a supervisor tolerates from a slot
# (3 × the smallest pool.heartbeat, 0.3 s), since a slot reports nothing while in a call.
FOLLOW_S = 0.8


def _key_of(command: tuple[Any, ...]) -> Any:
    """The first key of one of the FastLane's commands, or None for a keyless one."""
    name = str(command[0]).upper()
    if name in ("EVALSHA", "EVAL"):
        return command[3] if len(command) > 3 and int(command[2]) > 0 else None
    if name in ("SCRIPT", "WAIT", "CONFIG", "PING", "INFO", "CLUSTER", "TIME", "CLIENT"):
        return None
    return command[1] if len(command) > 1 else None


def _pack(conn: redis.Connection, commands: list[tuple[Any, ...]]) -> list[bytes]:
    """The RESP bytes of ``commands``: hiredis directly where every argument is one it takes
    (str, bytes, int, float), else redis-py's own packer (which raises its DataError for the rest)."""
    if _hiredis_pack is not None:
        try:
            return [b"".join(_hiredis_pack(c) for c in commands)]
        except TypeError:
            pass
    return conn.pack_commands(commands)


class FastLane:
    """One dedicated connection for a slot's per-job commands (claim, job read, start, settle),
    skipping redis-py's per-command layers (retry wrapper, pool checkout, observability hooks): they
    cost ~80 µs of CPU per command, about half a no-op job's CPU in the slot. Errors are the same
    redis exceptions; a broken connection is dropped and reopened on the next call. One thread only.

    With Sentinel, the primary is re-resolved before a call when the last answer is older than
    ``sentinel.RESOLVE_EVERY_S``; ``switches`` counts the times the lane moved to another primary (a
    caller re-checks what it holds, e.g. running attempts' tokens, when it changes).
    """

    def __init__(self, client: redis.Redis):
        self.cluster = client if isinstance(client, RedisCluster) else None
        if self.cluster is None:
            self.pool = client.connection_pool
            self.conn = self.pool.make_connection()
        self.primary = primary_of(client)
        self.shas: dict[str, bytes] = {}
        self.switches = 0
        self._addr: tuple[str, int] | None = None
        self._slot: int | None = None  # cluster: the hash slot of the keys sent so far
        self._stale = False  # cluster: re-read the slot map before the next call

    def _ready(self, fresh: bool = False, leaving: tuple[str, int] | None = None) -> None:
        """Connected, and (Sentinel) to the primary as of at most ``sentinel.RESOLVE_EVERY_S`` ago. When no
        primary can be reached (none named, the named one refuses connections, or it is
        ``leaving``: it answered READONLY), keep asking the Sentinels every ``FOLLOW_POLL_S`` for up
        to ``FOLLOW_S``: the lane follows a switch within ``FOLLOW_POLL_S`` of the Sentinels naming
        the new primary if it comes by then, whatever back-off its caller sleeps between calls."""
        conn = self.conn
        if self.primary is None:
            if not getattr(conn, "_sock", None):
                conn.connect()
            return
        give_up = time.monotonic() + min(conn.socket_timeout or FOLLOW_S, FOLLOW_S)
        while True:
            try:
                self._connect_primary(fresh, leaving)
                return
            except redis.ConnectionError:
                conn.disconnect()
                if time.monotonic() + FOLLOW_POLL_S > give_up:
                    raise
                time.sleep(FOLLOW_POLL_S)
                fresh = True

    def _connect_primary(self, fresh: bool, leaving: tuple[str, int] | None) -> None:
        conn = self.conn
        addr = self.primary.addr(fresh)  # type: ignore[union-attr]
        if addr == leaving:
            raise PrimaryMoved(f"{addr[0]}:{addr[1]} is still named but is no longer the primary")
        if getattr(conn, "_sock", None) and (conn.host, conn.port) == addr:
            return
        conn.disconnect()
        conn.connect()
        if self._addr is not None and (conn.host, conn.port) != self._addr:
            self.switches += 1
        self._addr = (conn.host, conn.port)

    def _exchange(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """Send ``commands`` in one write on the current connection and read every reply. A Redis
        error reply to one of them (NOSCRIPT, a script error) is raised after all replies are read,
        so the connection stays in step; anything else drops the connection."""
        conn = self.conn
        try:
            conn.send_packed_command(_pack(conn, commands))
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

    def _ready_cluster(self, slot: int | None) -> None:
        """Connected to the master owning ``slot`` as the client's slot map says (re-read first after
        a lost connection or a CLUSTERDOWN); keyless commands go where the last keyed one went."""
        cluster = self.cluster
        assert cluster is not None
        nm = cluster.nodes_manager
        if self._stale:
            refresh_slots(cluster)
            self._stale = False
        try:
            node = nm.get_node_from_slot(slot) if slot is not None else None
        except SlotNotCoveredError as e:
            self._stale = True
            raise ClusterMoving(str(e)) from None
        if node is None:
            if self._addr is not None:
                if not getattr(self.conn, "_sock", None):
                    self.conn.connect()
                return
            node = cluster.get_default_node()
        addr = (node.host, int(node.port))
        if self._addr == addr and getattr(self.conn, "_sock", None):
            return
        if self._addr is not None:
            self.conn.disconnect()
        if self._addr != addr:
            self.conn = cluster.get_redis_connection(node).connection_pool.make_connection()
        self.conn.connect()
        if self._addr is not None and self._addr != addr:
            self.switches += 1
        self._addr = addr

    def _send_cluster(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """One exchange with the master owning the commands' slot; on MOVED (a failover made it a
        replica; nothing ran) the slot map takes the new owner from the reply and the commands go
        there once more. A cluster that cannot serve the slot now is ``ClusterMoving``."""
        assert self.cluster is not None
        for c in commands:
            key = _key_of(c)
            if key is not None:
                self._slot = self.cluster.keyslot(key)
                break
        for attempt in (0, 1):
            try:
                self._ready_cluster(self._slot)
                return self._exchange(commands)
            except AskError as e:  # ASK: the slot is migrating; not followed (one queue, one slot)
                if attempt or not isinstance(e, MovedError):
                    raise ClusterMoving(f"{type(e).__name__}: {e}") from None
                self.cluster.nodes_manager.move_slot(e)
            except (ClusterError, TryAgainError) as e:
                self._stale = True
                raise ClusterMoving(f"{type(e).__name__}: {e}") from None
            except redis.ResponseError as e:
                if not str(e).startswith("UNBLOCKED"):  # a blocked call on a master being demoted
                    raise
                self.conn.disconnect()
                self._stale = True
                if attempt:
                    raise ClusterMoving(str(e)) from None
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                self._stale = True
                raise
        raise AssertionError("unreachable")

    def _send(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        if self.cluster is not None:
            return self._send_cluster(commands)
        self._ready()
        try:
            return self._exchange(commands)
        except PrimaryMoved:  # nothing ran: follow the switch now and send once more
            self._ready(fresh=True, leaving=self._addr)
            return self._exchange(commands)

    def call(self, *args: Any) -> Any:
        return self._send([args])[0]

    def script(
        self, text: str, keys: list[str], args: list[Any], *, replicas: int = 0, timeout_ms: int = 1000
    ) -> Any:
        """EVALSHA (loading the script when the server lacks it); with ``replicas`` > 0, ``WAIT``
        for ``replicas_needed`` replicas in the same round trip, and ``NotReplicated`` when fewer
        acknowledged within ``timeout_ms``."""
        sha = self.shas.get(text)
        if sha is None:
            sha = self.shas[text] = self.call("SCRIPT", "LOAD", text)
        need = replicas_needed(self.primary, replicas)
        cmds: list[tuple[Any, ...]] = [("EVALSHA", sha, len(keys), *keys, *args)]
        deadline = time.monotonic() + timeout_ms / 1000
        if need > 0:
            cmds.append(("WAIT", need, min(timeout_ms, WAIT_SLICE_MS)))
        try:
            replies = self._send(cmds)
        except redis.exceptions.NoScriptError:  # the server restarted (or is a new primary) without it
            self.shas.pop(text, None)
            return self.script(text, keys, args, replicas=replicas, timeout_ms=timeout_ms)
        if need > 0:
            self._wait_rest(int(replies[1]), need, deadline, timeout_ms, replies[0])
        return replies[0]

    def _wait_rest(self, acked: int, need: int, deadline: float, timeout_ms: int, result: Any) -> None:
        """WAIT goes in slices of ``WAIT_SLICE_MS`` on the write's connection (WAIT counts this
        connection's last write). Between slices the Sentinels are asked afresh (only while a WAIT
        falls short, which is what a failover looks like from here): a switch ends the wait at
        once, since a write left on a replaced primary will never be acknowledged, and the caller's
        retry (idempotent) goes to the new one."""
        while acked < need:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0 or (self.primary is not None and self.primary.addr(fresh=True) != self._addr):
                break
            acked = int(self._exchange([("WAIT", need, min(left_ms, WAIT_SLICE_MS))])[0])
        check_acked(acked, need, timeout_ms, result)
