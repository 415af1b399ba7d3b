"""Redis connections: the client every process builds for itself after fork (``connect``), and
the slot's hot-path lane (``FastLane``).

A client is never inherited across ``fork``; each process calls ``connect`` once for each thread
that needs Redis. ``redis+sentinel://`` URLs resolve the primary through Sentinel.
"""

from __future__ import annotations

from typing import Any

import redis


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
    """``redis+sentinel://host:port[,host:port]/service_name[/db]``: the master is re-resolved on
    every reconnect by redis-py's SentinelConnectionPool."""
    from redis.sentinel import Sentinel

    rest = url[len("redis+sentinel://") :]
    hosts, _, path = rest.partition("/")
    service, _, db = path.partition("/")
    nodes = [(h.rsplit(":", 1)[0], int(h.rsplit(":", 1)[1]) if ":" in h else 26379) for h in hosts.split(",")]
    sentinel = Sentinel(nodes, socket_timeout=socket_timeout)
    return sentinel.master_for(service or "mymaster", socket_timeout=socket_timeout, db=int(db or 0))


class FastLane:
    """One dedicated connection for a slot's per-job commands (claim, job read, start, settle),
    skipping redis-py's per-command layers (retry wrapper, pool checkout, observability hooks): they
    cost ~80 µs of CPU per command, about half a no-op job's CPU in the slot. Errors are the same
    redis exceptions; a broken connection is dropped and reopened on the next call. One thread only.
    """

    def __init__(self, client: redis.Redis):
        self.pool = client.connection_pool
        self.conn = None
        self.shas: dict[str, bytes] = {}

    def call(self, *args: Any) -> Any:
        if self.conn is None:
            self.conn = self.pool.make_connection()
        try:
            self.conn.send_command(*args)
            return self.conn.read_response()
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            self.conn.disconnect()
            self.conn = None
            raise

    def script(self, text: str, keys: list[str], args: list[Any]) -> Any:
        sha = self.shas.get(text)
        if sha is None:
            sha = self.shas[text] = self.call("SCRIPT", "LOAD", text)
        try:
            return self.call("EVALSHA", sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:  # the server restarted without the script
            self.shas.pop(text, None)
            return self.script(text, keys, args)
