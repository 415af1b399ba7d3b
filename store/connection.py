"""Redis connections: the client every process builds for itself after fork (``connect``).

A client is never inherited across ``fork``; each process calls ``connect`` once for each thread that
needs Redis. The URL's scheme picks the client: a plain one, one that follows the primary through
Sentinel (``sentinel``), or a cluster client for one queue (``cluster``). What an acknowledged write
waits for is ``replication``'s; the slot's per-job commands go through ``fastlane``. Why each of
those is built as it is, with the measurements: ``docs/redis-connections.md``.
"""

from __future__ import annotations

from typing import Any

import redis

from tender_pool.store import cluster, sentinel

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
        return sentinel.client(url, socket_timeout, _DRIVER)
    if url.startswith("redis+cluster://"):
        return cluster.client(url, socket_timeout, _DRIVER)  # type: ignore[return-value]
    kw: dict[str, Any] = dict(
        socket_timeout=socket_timeout, socket_connect_timeout=socket_timeout, health_check_interval=30
    )
    if not url.startswith("unix://"):
        kw["socket_keepalive"] = True  # TCP only; the Unix-socket connection class rejects it
    return redis.Redis.from_url(url, decode_responses=False, **_DRIVER, **kw)
