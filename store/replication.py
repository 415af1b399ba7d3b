"""Acknowledged means replicated: a write we acknowledge (an enqueue, a start, a settle) is followed
by ``WAIT`` on the same connection, in the same round trip, and fewer replicas than needed within the
timeout raise ``NotReplicated`` (the write ran on the primary but a failover now may lose it; its
``result`` is what it returned there). Callers retry such writes, which are idempotent
(``retry_delay``).

How many replicas: with Sentinel, every replica it could promote, at least ``replicas``
(``replicas_needed``). ``replicas`` alone lost 73-130 of ~160 acknowledged jobs per planned failover;
why, and what waiting for every promotable replica costs, is measured in
``docs/redis-connections.md``.
"""

from __future__ import annotations

from typing import Any, Callable

import redis
from redis.cluster import RedisCluster
from redis.commands.core import CoreCommands
from redis.exceptions import AskError, ClusterError, MovedError, TryAgainError

from tender_pool.store.cluster import CLUSTER_TRANSIENT, ClusterMoving, refresh_slots
from tender_pool.store.sentinel import Primary, primary_of


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


def replicas_needed(primary: Primary | None, replicas: int) -> int:
    """``replicas`` (the config's floor) or, through Sentinel, every replica it could promote if
    that is more; 0 stays 0 (no WAIT at all)."""
    if replicas <= 0 or primary is None:
        return max(replicas, 0)
    return max(replicas, primary.replicas())


def check_acked(acked: Any, wanted: int, timeout_ms: int, result: Any) -> None:
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
    check_acked(acked, need, timeout_ms, results)
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
    except CLUSTER_TRANSIENT as e:
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
        refresh_slots(client)
        raise
    check_acked(acked, replicas, timeout_ms, results)
    return results


class _Recorder(CoreCommands):
    """Stands in for a pipeline to learn the commands a ``write`` queues (redis-py's cluster pipeline
    refuses EVALSHA), without sending anything."""

    def __init__(self) -> None:
        self.commands: list[tuple[Any, ...]] = []

    def execute_command(self, *args: Any, **options: Any) -> None:
        self.commands.append(args)
