"""Following the primary through Sentinel (``redis+sentinel://`` URLs): the client's connections,
and the FastLane's, always reach the server the Sentinels name now, and a demoted primary's answer
becomes ``PrimaryMoved`` (the command did not run: reconnect and send it again).

Why this is more than redis-py's ``Sentinel.master_for``: redis-py asks Sentinel only when a
connection (re)connects, trusts the first Sentinel to answer (the failover leader names the old
primary for ~1 s after the others name the new one), retries a dead Sentinel for ~4 s, and sends a
lazily made connection to localhost:6379. Each of those hazards, and what was measured, is in
``docs/redis-connections.md``.
"""

from __future__ import annotations

import time
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.sentinel import MasterNotFoundError, Sentinel, SentinelConnectionPool, SentinelManagedConnection

from tender_pool.store.config import parse_sentinel_url

RESOLVE_EVERY_S = 0.5  # how stale the primary's address may be: the bound on following a switch
SENTINEL_TIMEOUT_S = 0.5  # per Sentinel query; a dead Sentinel must not stall the hot path for long


class PrimaryMoved(redis.ConnectionError):
    """The server we reached is no longer the primary (``READONLY``, ``UNBLOCKED``): the command did
    not run; reconnect to the current primary and send it again."""


def client(url: str, socket_timeout: float, driver: dict[str, Any]) -> redis.Redis:
    """A client of the primary that ``url`` (``redis+sentinel://``) names, followed across failovers."""
    nodes, service, db = parse_sentinel_url(url)
    t = min(socket_timeout, SENTINEL_TIMEOUT_S)
    # No retries on a Sentinel query (redis-py retries a refused connection 10 times with back-off,
    # ~4 s): a dead Sentinel must cost one refused connection per resolution, not stall it.
    sentinels = _Sentinels(
        nodes, sentinel_kwargs={"socket_timeout": t, "socket_connect_timeout": t, "retry": Retry(NoBackoff(), 0),
                                **driver}
    )
    return sentinels.master_for(
        service,
        connection_pool_class=_PrimaryPool,
        connection_class=_PrimaryConnection,
        socket_timeout=socket_timeout,
        socket_connect_timeout=socket_timeout,
        socket_keepalive=True,
        db=db,
        **driver,
    )


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


class Primary:
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


def primary_of(client: redis.Redis) -> Primary | None:
    """The client's ``Primary`` when it is a Sentinel client, else None."""
    pool = getattr(client, "connection_pool", None)  # a cluster client has none
    return Primary(pool) if isinstance(pool, SentinelConnectionPool) else None
