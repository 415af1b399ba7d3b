"""Redis Cluster (``redis+cluster://`` URLs): redis-py's ``RedisCluster``, made to serve one queue.

Every key of a queue carries the hash tag ``{<queue>}``, so all of a queue's commands, scripts and
pipelines belong to the one master owning that slot. What redis-py does not do for us: send the
keyless server commands our readers use (INFO, CONFIG GET, PING, SCAN, TIME) to that master rather
than to its default node or to every master (``_Home``); report the cluster's transient answers
(CLUSTERDOWN during a failover, TRYAGAIN, a MOVED it gave up following, a slot not covered yet) as
``ClusterMoving``, a ``ConnectionError``, since the command did not run and every retry path already
treats that as "reconnect". The hazards and measurements: ``docs/redis-connections.md``.
"""

from __future__ import annotations

from typing import Any

import redis
from redis.cluster import ClusterNode, ClusterPipeline, RedisCluster
from redis.exceptions import AskError, ClusterError, RedisClusterException, SlotNotCoveredError, TryAgainError

from tender_pool.store.config import parse_cluster_url


class ClusterMoving(redis.ConnectionError):
    """The cluster could not run the command now (CLUSTERDOWN during a failover, TRYAGAIN, MOVED past
    redis-py's retries, the slot served by no node yet): it did not run; retry after a back-off."""


# ClusterDownError and MasterDownError are ClusterErrors; MovedError is an AskError.
CLUSTER_TRANSIENT = (ClusterError, TryAgainError, AskError, SlotNotCoveredError)


def client(url: str, socket_timeout: float, driver: dict[str, Any]) -> "_Cluster":
    """A cluster client for the queue whose keys ``url`` (``redis+cluster://``) serves."""
    return _Cluster(
        startup_nodes=[ClusterNode(h, p) for h, p in parse_cluster_url(url)],
        decode_responses=False,
        socket_timeout=socket_timeout,
        socket_connect_timeout=socket_timeout,
        socket_keepalive=True,
        health_check_interval=30,
        **driver,
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
        except CLUSTER_TRANSIENT as e:
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
        except CLUSTER_TRANSIENT as e:
            raise ClusterMoving(f"{type(e).__name__}: {e}") from None


def refresh_slots(client: RedisCluster) -> None:
    """Re-read the slot map (a master stopped answering: a failover may be under way); a cluster
    that cannot be asked now is left for the next call."""
    try:
        client.nodes_manager.initialize()
    except (RedisClusterException, redis.RedisError):
        pass
