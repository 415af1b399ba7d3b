"""Redis connections: the client every process builds for itself after fork (``connect``), the
slot's hot-path lane (``FastLane``), and acknowledged-means-it-survives-a-failover writes (``WAIT``).

A client is never inherited across ``fork``; each process calls ``connect`` once for each thread
that needs Redis.

``redis+sentinel://`` URLs resolve the primary through Sentinel (hazards this module owns):
- redis-py asks Sentinel only when a connection (re)connects, and Sentinel drops the old primary's
  clients only when it converts it to a replica (~10 s after a planned failover). So before
  handing out a connection (the pool) or sending a call (the FastLane) the primary is re-resolved
  at most every ``RESOLVE_EVERY_S``; a connection to any other address is dropped and reopened.
- Sentinels learn of a switch at different times, and the failover leader keeps naming the old
  primary (with the new ``config-epoch``, flag ``failover_in_progress``) until it has re-pointed
  every replica, ~1 s after the others name the new one: the answer ranked first by ``_rank``
  (newest epoch, then not the leader's in-progress view) wins, not the first to answer.
- redis-py retries a refused connection 10 times with back-off (~4 s): a dead Sentinel made every
  resolution that slow. Sentinel queries are not retried.
- A connection made lazily (``send_command`` on a fresh connection) bypassed
  ``SentinelManagedConnection.connect()`` and went to localhost:6379; ``_PrimaryConnection`` always
  resolves first.
- ``READONLY`` (we reached a demoted primary) and ``UNBLOCKED`` (a blocked BLMOVE on a primary being
  demoted) mean the command did not run: ``PrimaryMoved``, a ``ConnectionError``, so every existing
  retry path treats it as "reconnect"; the FastLane itself follows the switch and sends it again.
- While no primary can be reached (SIGKILLed: refused, then none named until the promotion), the
  FastLane keeps asking the Sentinels every ``FOLLOW_POLL_S`` for up to ``FOLLOW_S`` per call, so
  it lands on the new primary within ~0.1 s of its naming whatever back-off its caller sleeps.

Acknowledged means replicated (``WAIT`` on the write's connection, pipelined with it: one round
trip); fewer replicas within the timeout raise ``NotReplicated``, whose ``result`` is what the
write returned on the primary (it ran there but may be lost in a failover). How many: with
Sentinel, every replica it could promote (``_replicas_to_wait_for``), at least ``replicas``.
Why not ``replicas`` alone (measured, tests/reliability/test_failover_daemon.py, 2 replicas,
WAIT 1): Sentinel promotes replica A (``REPLICAOF NO ONE``) ~1 s before it re-points replica B
and ~2 s before ``+switch-master``; meanwhile the old primary still takes writes and B, still its
replica, acknowledges them; B then re-syncs from A and they are gone: 73-130 of ~160 acknowledged
jobs lost per planned failover. No Sentinel names A during that window (the leader notices the
promotion at its next INFO, ~1 s), so neither checking after the WAIT that the server is still the
named primary, nor a ``+switch-master`` subscription, nor re-resolving faster closes it; the old
primary's own replica list cannot tell a promoted replica from a crashed one. Waiting for every
replica Sentinel could promote does: A left the old primary when it was promoted, so no write
there is acknowledged afterwards (refused, and retried by the callers on the new primary:
enqueue by id, start by token suffix, settle by token), and after a SIGKILL whichever replica
Sentinel picks has every acknowledged write. Measured with it: 0 lost, 0 re-run, both kinds.
The cost: a replica that dies (or lags past ``wait_timeout``) stalls acknowledgements until
Sentinel marks it ``s_down`` (``down-after-milliseconds``), and each write waits for the slowest
replica. During a failover writes are refused rather than acknowledged, for ~2 s (planned); the
WAIT goes in ``WAIT_SLICE_MS`` slices that re-ask the Sentinels, so a refused writer moves to the
new primary within ~0.1 s of its naming instead of after the whole ``wait_timeout``.

``redis+cluster://`` URLs give redis-py's ``RedisCluster`` (``_Cluster``). Every key of a queue
carries the hash tag ``{<queue>}``, so all of a queue's commands, scripts and pipelines go to the
one master owning that slot (hazards this module owns):
- The server-wide commands without keys our readers send (INFO, CONFIG GET, PING, SCAN, TIME)
  would go to redis-py's default node, or to every master (SCAN): a process serves one queue, so
  they go to the master of the slot of the first key the client sent (``_Home``), whose memory,
  persistence and processing lists are the queue's.
- The cluster's transient answers (CLUSTERDOWN while a failover is under way, TRYAGAIN, a MOVED
  redis-py gave up following, a slot not covered yet) mean the command did not run: they are raised
  as ``ClusterMoving``, a ``ConnectionError``, so every retry path treats them as "reconnect".
- WAIT counts the replicas of the connection's own server: a write to be acknowledged goes with its
  WAIT on one connection to the slot's master (``wait_replicated``, the FastLane), not through the
  cluster pipeline, which sends a keyless WAIT to some other node.
- The FastLane holds one plain connection to the slot's master: on MOVED (a ``CLUSTER FAILOVER``
  made the master a replica) it takes the new owner from the reply, reconnects and sends again
  (nothing ran); after a lost connection it re-reads the slot map before the next call.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import redis

try:  # redis-py's packer checks each argument in Python first (~10 µs of a 49-argument EVALSHA)
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # pragma: no cover - hiredis is a dependency (redis[hiredis])
    _hiredis_pack = None
from redis.backoff import NoBackoff
from redis.commands.core import CoreCommands
from redis.cluster import ClusterNode, ClusterPipeline, RedisCluster
from redis.exceptions import (
    AskError,
    ClusterError,
    MovedError,
    RedisClusterException,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.retry import Retry
from redis.sentinel import MasterNotFoundError, Sentinel, SentinelConnectionPool, SentinelManagedConnection

from tender_pool.store.config import parse_cluster_url, parse_sentinel_url

RESOLVE_EVERY_S = 0.5  # how stale the primary's address may be: the bound on following a switch
SENTINEL_TIMEOUT_S = 0.5  # per Sentinel query; a dead Sentinel must not stall the hot path for long
WAIT_SLICE_MS = 100
FOLLOW_POLL_S = 0.1  # how often the FastLane asks the Sentinels while no primary can be reached
# … and for how long per call: less than the shortest silence a supervisor tolerates from a slot
# (3 × the smallest pool.heartbeat, 0.3 s), since a slot reports nothing while in a call.
FOLLOW_S = 0.8  # the FastLane's WAIT slice: how late it notices a switch while it waits


class PrimaryMoved(redis.ConnectionError):
    """The server we reached is no longer the primary (``READONLY``, ``UNBLOCKED``): the command did
    not run; reconnect to the current primary and send it again."""


class ClusterMoving(redis.ConnectionError):
    """The cluster could not run the command now (CLUSTERDOWN during a failover, TRYAGAIN, MOVED past
    redis-py's retries, the slot served by no node yet): it did not run; retry after a back-off."""


# ClusterDownError and MasterDownError are ClusterErrors; MovedError is an AskError.
_CLUSTER_TRANSIENT = (ClusterError, TryAgainError, AskError, SlotNotCoveredError)


class NotReplicated(redis.RedisError):
    """A write ran on the primary but fewer than ``wanted`` replicas acknowledged it within the
    timeout: it is not acknowledged (a failover now may lose it). ``result`` is the write's reply."""

    def __init__(self, acked: int, wanted: int, timeout_ms: int, result: Any = None):
        self.acked, self.wanted, self.timeout_ms, self.result = acked, wanted, timeout_ms, result
        super().__init__(f"write reached {acked} of {wanted} replicas within {timeout_ms} ms")


# Back-off after ``NotReplicated``: the primary answers, and the first write a replica can
# acknowledge again ends the stall (a planned failover with one replica: the old primary re-attached
# as the new one's replica, ~11 s), so the retries stay this close together however long it lasts;
# each retry is one round trip and a WAIT, nothing Redis has to work for. Measured before: a
# doubling back-off capped at 5 s resumed starts 5 s after that moment (16.3 s pause for 11 s).
NOT_REPLICATED_RETRY_S = 0.5


def retry_delay(attempt: int, error: BaseException, cap: float = 5.0) -> float:
    """The sleep before retry ``attempt + 1`` of an idempotent write after ``error``: doubling from
    0.1 s up to ``cap`` while Redis does not answer (no point hammering it), at most
    ``NOT_REPLICATED_RETRY_S`` while it answers but cannot get the write replicated yet."""
    delay = min(0.1 * 2**attempt, cap)
    return min(delay, NOT_REPLICATED_RETRY_S) if isinstance(error, NotReplicated) else delay


try:  # our version, given: redis-py 8 otherwise reads the package metadata for every new connection
    # (~0.8 ms of CPU and ~1 MiB of copied pages a slot, in idle PSS: bench_pool 65.7 → 62 MiB)
    from redis.driver_info import DriverInfo

    _DRIVER: dict[str, Any] = {"driver_info": DriverInfo(lib_version=redis.__version__)}
except ImportError:  # pragma: no cover - redis-py < 7 takes the older keyword
    _DRIVER = {"lib_version": redis.__version__}


def connect(url: str, socket_timeout: float = 5.0) -> redis.Redis:
    """A client for this process only. ``socket_timeout`` exceeds the claim's BLMOVE timeout so a
    blocked claim is never cut short, yet a dead server (failover) is noticed within seconds."""
    if url.startswith("redis+sentinel://"):
        return _sentinel(url, socket_timeout)
    if url.startswith("redis+cluster://"):
        return _cluster(url, socket_timeout)  # type: ignore[return-value]
    kw: dict[str, Any] = dict(
        socket_timeout=socket_timeout, socket_connect_timeout=socket_timeout, health_check_interval=30
    )
    if not url.startswith("unix://"):
        kw["socket_keepalive"] = True  # TCP only; the Unix-socket connection class rejects it
    return redis.Redis.from_url(url, decode_responses=False, **_DRIVER, **kw)


def _sentinel(url: str, socket_timeout: float) -> redis.Redis:
    nodes, service, db = parse_sentinel_url(url)
    t = min(socket_timeout, SENTINEL_TIMEOUT_S)
    # No retries on a Sentinel query (redis-py retries a refused connection 10 times with back-off,
    # ~4 s): a dead Sentinel must cost one refused connection per resolution, not stall it.
    sentinels = _Sentinels(
        nodes, sentinel_kwargs={"socket_timeout": t, "socket_connect_timeout": t, "retry": Retry(NoBackoff(), 0),
                                **_DRIVER}
    )
    return sentinels.master_for(
        service,
        connection_pool_class=_PrimaryPool,
        connection_class=_PrimaryConnection,
        socket_timeout=socket_timeout,
        socket_connect_timeout=socket_timeout,
        socket_keepalive=True,
        db=db,
        **_DRIVER,
    )


def _cluster(url: str, socket_timeout: float) -> "_Cluster":
    return _Cluster(
        startup_nodes=[ClusterNode(h, p) for h, p in parse_cluster_url(url)],
        decode_responses=False,
        socket_timeout=socket_timeout,
        socket_connect_timeout=socket_timeout,
        socket_keepalive=True,
        health_check_interval=30,
        **_DRIVER,
    )


# Keyless commands about "the server" that must reach the queue's own master (``_Home``).
_HOME_COMMANDS = frozenset({"INFO", "CONFIG GET", "PING", "SCAN", "TIME", "DBSIZE", "MEMORY STATS", "LASTSAVE"})


def _command_name(args: tuple[Any, ...]) -> str:
    name = str(args[0]).upper() if args else ""
    if len(args) > 1 and name in ("CONFIG", "MEMORY", "SCRIPT", "CLUSTER", "CLIENT"):
        return f"{name} {str(args[1]).upper()}"
    return name


class _Home:
    """The hash slot of the queue a cluster client serves: learned from the first key it sends,
    shared by the client and its pipelines."""

    def __init__(self) -> None:
        self.slot: int | None = None

    def learn(self, client: RedisCluster, args: tuple[Any, ...]) -> None:
        # no commands_parser yet: redis-py's __init__ is still sending its COMMAND
        if self.slot is not None or not args or not hasattr(client, "commands_parser"):
            return
        name = str(args[0]).upper()
        if name in ("COMMAND", "CLUSTER", "SCRIPT", "WAIT", "CLIENT") or _command_name(args) in _HOME_COMMANDS:
            return
        if name in ("EVAL", "EVALSHA") and (len(args) < 4 or int(args[2]) == 0):
            return  # no keys: redis-py would pick a random slot
        try:
            self.slot = client.determine_slot(*args)
        except (RedisClusterException, redis.RedisError, ValueError, TypeError):
            pass

    def node(self, client: RedisCluster) -> ClusterNode | None:
        return None if self.slot is None else client.nodes_manager.get_node_from_slot(self.slot)


class _Cluster(RedisCluster):
    """redis-py's cluster client for one queue: keyless server commands go to the queue's master
    (``_Home``), the cluster's transient errors are ``ClusterMoving``, and ``pipeline()`` is a
    transaction unless told otherwise, as for ``redis.Redis`` (our WATCH/MULTI callers rely on it;
    every key of a queue is in one slot, which a cluster transaction requires)."""

    def __init__(self, *a: Any, **kw: Any):
        self._home = _Home()  # before redis-py's __init__, which already sends COMMAND
        super().__init__(*a, **kw)

    def execute_command(self, *args: Any, **kw: Any) -> Any:
        home = self._home
        try:
            if "target_nodes" not in kw:
                if home.slot is None:
                    home.learn(self, args)
                elif _command_name(args) in _HOME_COMMANDS:
                    kw["target_nodes"] = home.node(self)
            return super().execute_command(*args, **kw)
        except _CLUSTER_TRANSIENT as e:
            raise ClusterMoving(f"{type(e).__name__}: {e}") from None

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> ClusterPipeline:
        p = super().pipeline(True if transaction is None else transaction, shard_hint)
        p.__class__ = _ClusterPipeline  # redis-py builds it; we only wrap its execute()
        p._home = self._home
        return p

    def scan_iter(self, *a: Any, **kw: Any) -> Any:
        """SCAN the queue's master only (redis-py walks every master)."""
        node = self._home.node(self)
        if node is not None and "target_nodes" not in kw:
            return self.get_redis_connection(node).scan_iter(*a, **kw)
        return super().scan_iter(*a, **kw)


class _ClusterPipeline(ClusterPipeline):
    _home: _Home

    def scan(self, cursor: int = 0, match: Any = None, count: int | None = None, _type: str | None = None,
             **kw: Any) -> Any:
        """Queued like any command (redis-py blocks SCAN in a cluster pipeline); ``execute`` sends it
        to the queue's master. Answers ``(cursor, keys)`` as ``redis.Redis.scan`` does."""
        args: list[Any] = ["SCAN", cursor]
        if match is not None:
            args += ["MATCH", match]
        if count is not None:
            args += ["COUNT", count]
        if _type is not None:
            args += ["TYPE", _type]
        return self.execute_command(*args, **kw)

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        """Keyless server commands queued here (a consumer's resync SCAN) go to the queue's master
        too: redis-py refuses a SCAN in a pipeline, which it would send to every master."""
        queue = self._execution_strategy.command_queue
        home = self._home
        for c in queue:
            if home.slot is not None:
                break
            home.learn(self, c.args)
        try:
            if home.slot is not None:
                for c in queue:
                    if "target_nodes" not in c.options and _command_name(c.args) in _HOME_COMMANDS:
                        c.options["target_nodes"] = home.node(self)
            return super().execute(raise_on_error)
        except _CLUSTER_TRANSIENT as e:
            raise ClusterMoving(f"{type(e).__name__}: {e}") from None


class _Sentinels(Sentinel):
    """The primary is the best-ranked answer of the Sentinels that answer (``_rank``), cached for
    ``RESOLVE_EVERY_S`` together with how many replicas a write to it must reach (``_replicas``:
    the most any naming Sentinel counts, or the primary has online if more): one round of queries
    per process per interval."""

    def __init__(self, *a: Any, **kw: Any):
        super().__init__(*a, **kw)
        self._cached: tuple[str, int] | None = None
        self._replicas = 0
        self._at = 0.0
        self._nodes: dict[tuple[str, int], redis.Redis] = {}

    def discover_master(self, service_name: str, fresh: bool = False) -> tuple[str, int]:
        now = time.monotonic()
        if not fresh and self._cached is not None and now - self._at < RESOLVE_EVERY_S:
            return self._cached
        answers: list[tuple[Any, dict]] = []
        errors = []
        for s in self.sentinels:
            try:
                state = s.sentinel_master(service_name)
            except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError) as e:
                errors.append(repr(e))
                continue
            if self.check_master_state(state, service_name):
                answers.append((s, state))
        if not answers:
            self._cached = None
            raise MasterNotFoundError(f"No master found for {service_name!r} {'; '.join(errors)}".rstrip())
        best = max((state for _, state in answers), key=_rank)
        addr = (best["ip"], int(best["port"]))
        replicas = 0
        for s, state in answers:  # every Sentinel that names this primary: the most replicas any counts
            if (state["ip"], int(state["port"])) != addr:
                continue
            try:
                replicas = max(replicas, _replicas_to_wait_for(s.sentinel_slaves(service_name), addr))
            except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
                continue
        self._cached, self._replicas, self._at = addr, max(replicas, self._online_replicas(addr)), now
        return addr

    def _online_replicas(self, addr: tuple[str, int]) -> int:
        """Replicas the primary itself has online now. A Sentinel refreshes a replica's link status
        from its INFO only every 10 s, so right after a replica (re)synced it may still list it as
        not linked: counting what the primary sees keeps the WAIT from missing it meanwhile."""
        try:
            info = self._node(addr).info("replication")
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
            return 0
        return sum(1 for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)
                   and v.get("state") == "online")

    def _node(self, addr: tuple[str, int]) -> redis.Redis:
        if self._nodes.get(addr) is None:
            self._nodes = {addr: redis.Redis(addr[0], addr[1], **self.sentinel_kwargs)}
        return self._nodes[addr]

    def replicas_to_wait_for(self, service_name: str) -> int:
        """Replicas of the current primary that any Sentinel could promote (``_replicas_to_wait_for``)."""
        self.discover_master(service_name)
        return self._replicas

    def invalidate(self) -> None:
        """The primary we reached says it is not one: ask the Sentinels again on the next use."""
        self._cached = None


def _rank(state: dict) -> tuple[int, bool]:
    """Newest configuration first; at equal ``config-epoch``, an answer that is not the failover
    leader's. The leader keeps naming the old primary (flag ``failover_in_progress``, the new epoch)
    until every replica is re-pointed, while the others already name the new one at that epoch."""
    return int(state["config-epoch"]), "failover_in_progress" not in str(state.get("flags", ""))


def _replicas_to_wait_for(replicas: list[dict], primary: tuple[str, int]) -> int:
    """How many of ``primary``'s replicas (as one Sentinel lists them) a write must reach before it
    can survive any failover: every one Sentinel might promote. Counted: a replica that is not
    down (``s_down``/``o_down``) and either replicates (``role-reported`` slave, link ok) or was
    promoted away from ``primary`` (flag ``promoted``, or role master with its last master =
    ``primary``): while that one runs as the new primary, ``primary``'s writes cannot reach it
    and are refused. Not counted: a down replica (Sentinel will not promote it), one not yet linked
    (it has no data to promote), and a stale old primary that Sentinel lists under the new one
    until it converts it (role master, never a replica of ``primary``). ``disconnected`` alone is
    no reason: the promotion itself kills the Sentinels' links to the promoted replica."""
    n = 0
    for r in replicas:
        if r.get("is_sdown") or r.get("is_odown"):
            continue
        role = r.get("role-reported")
        last_master = (str(r.get("master-host")), _int(r.get("master-port")))
        if role == "slave" and r.get("master-link-status") == "ok":
            n += 1
        elif "promoted" in str(r.get("flags", "")) or (role == "master" and last_master == primary):
            n += 1
    return n


def _int(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return -1


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


class _Primary:
    """For a Sentinel client: where the primary is now (``addr``) and how many replicas a write to
    it must reach (``replicas``), both from the manager's cache."""

    def __init__(self, pool: SentinelConnectionPool):
        self.pool, self.manager, self.service = pool, pool.sentinel_manager, pool.service_name

    def addr(self, fresh: bool = False) -> tuple[str, int]:
        if isinstance(self.manager, _Sentinels):
            addr = self.manager.discover_master(self.service, fresh=fresh)
        else:
            addr = self.manager.discover_master(self.service)
        self.pool.get_master_address()  # let the pool drop its idle connections to an old primary too
        return addr

    def replicas(self) -> int:
        if isinstance(self.manager, _Sentinels):
            return self.manager.replicas_to_wait_for(self.service)
        return 0


def primary_of(client: redis.Redis) -> _Primary | None:
    """The client's ``_Primary`` when it is a Sentinel client, else None."""
    pool = getattr(client, "connection_pool", None)  # a cluster client has none
    return _Primary(pool) if isinstance(pool, SentinelConnectionPool) else None


def replicas_needed(primary: _Primary | None, replicas: int) -> int:
    """``replicas`` (the config's floor) or, through Sentinel, every replica it could promote if
    that is more; 0 stays 0 (no WAIT at all)."""
    if replicas <= 0 or primary is None:
        return max(replicas, 0)
    return max(replicas, primary.replicas())


def _check_acked(acked: Any, wanted: int, timeout_ms: int, result: Any) -> None:
    if int(acked) < wanted:
        raise NotReplicated(int(acked), wanted, timeout_ms, result)


def wait_replicated(
    client: redis.Redis, replicas: int, timeout_ms: int, write: Callable[[Any], Any]
) -> list[Any]:
    """The redis-py path: ``write(pipe)`` queues the write(s) on a pipeline (e.g. a registered
    Script called with ``client=pipe``), ``WAIT n timeout_ms`` follows on the same connection
    (WAIT counts the replicas that have this connection's last write), one round trip; ``n`` is
    ``replicas_needed``. Returns the writes' replies; raises ``NotReplicated`` (carrying them)
    when too few replicas acknowledged."""
    if isinstance(client, RedisCluster):
        return _wait_replicated_cluster(client, replicas, timeout_ms, write)
    need = replicas_needed(primary_of(client), replicas)
    with client.pipeline(transaction=False) as pipe:
        write(pipe)
        if need <= 0:
            return pipe.execute()
        pipe.execute_command("WAIT", need, timeout_ms)
        *results, acked = pipe.execute()
    _check_acked(acked, need, timeout_ms, results)
    return results


def _wait_replicated_cluster(
    client: RedisCluster, replicas: int, timeout_ms: int, write: Callable[[Any], Any]
) -> list[Any]:
    """``wait_replicated`` on a cluster: the write(s) and WAIT go on one pipeline of a plain client to
    the master owning the write's slot (learned by queueing it once on a ``_Recorder``), so WAIT
    counts that master's replicas and scripts are loaded as a plain pipeline loads them. A MOVED
    updates the slot map and, like a lost connection, is raised as a ``ConnectionError``: the
    callers' retries (idempotent writes) go to the new owner."""
    probe = _Recorder()
    write(probe)
    try:
        node = client.nodes_manager.get_node_from_slot(client.determine_slot(*probe.commands[0]))
    except _CLUSTER_TRANSIENT as e:
        raise ClusterMoving(f"{type(e).__name__}: {e}") from None
    try:
        with client.get_redis_connection(node).pipeline(transaction=False) as pipe:
            write(pipe)
            if replicas <= 0:
                return pipe.execute()
            pipe.execute_command("WAIT", replicas, timeout_ms)
            *results, acked = pipe.execute()
    except AskError as e:  # MOVED (a failover) or ASK (a slot migrating): nothing ran
        if isinstance(e, MovedError):
            client.nodes_manager.move_slot(e)
        raise ClusterMoving(f"{type(e).__name__}: {e}") from None
    except (ClusterError, TryAgainError) as e:
        raise ClusterMoving(f"{type(e).__name__}: {e}") from None
    except (redis.ConnectionError, redis.TimeoutError):
        _refresh_slots(client)
        raise
    _check_acked(acked, replicas, timeout_ms, results)
    return results


class _Recorder(CoreCommands):
    """Stands in for a pipeline to learn the commands a ``write`` queues (redis-py's cluster pipeline
    refuses EVALSHA), without sending anything."""

    def __init__(self) -> None:
        self.commands: list[tuple[Any, ...]] = []

    def execute_command(self, *args: Any, **options: Any) -> None:
        self.commands.append(args)


def _refresh_slots(client: RedisCluster) -> None:
    """Re-read the slot map (a master stopped answering: a failover may be under way); a cluster
    that cannot be asked now is left for the next call."""
    try:
        client.nodes_manager.initialize()
    except (RedisClusterException, redis.RedisError):
        pass


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
    ``RESOLVE_EVERY_S``; ``switches`` counts the times the lane moved to another primary (a caller
    re-checks what it holds, e.g. running attempts' tokens, when it changes).
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
        """Connected, and (Sentinel) to the primary as of at most ``RESOLVE_EVERY_S`` ago. When no
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
            _refresh_slots(cluster)
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
        _check_acked(acked, need, timeout_ms, result)

