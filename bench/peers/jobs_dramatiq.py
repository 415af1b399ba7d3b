"""Dramatiq's side of bench/compare: a Redis broker on the bench's socket and the three job bodies.

``BENCH_RECOVERY=best`` sets the broker's recovery knobs: ``heartbeat_timeout=5000`` ms (a worker
unseen that long is dead; its un-acked messages go back) and ``maintenance_chance=1000000`` (that
check on every dispatch instead of 1 in 1000). Defaults otherwise: 60 000 ms and 1000.
"""

import os
import time

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from mark import LONG_S, mark, started

_kw = {}
if os.environ.get("BENCH_RECOVERY") == "best":
    _kw = {"heartbeat_timeout": 5000, "maintenance_chance": 1_000_000}
dramatiq.set_broker(RedisBroker(unix_socket_path=os.environ["BENCH_REDIS_SOCK"], **_kw))


@dramatiq.actor(max_retries=0)
def noop(t_enq):
    mark(t_enq, time.time())


@dramatiq.actor(max_retries=0)
def sleep10(t_enq):
    t0 = time.time()
    time.sleep(0.01)
    mark(t_enq, t0)


@dramatiq.actor(max_retries=3, time_limit=600_000)
def long(t_enq):
    t0 = time.time()
    started(t_enq, t0)
    time.sleep(LONG_S)
    mark(t_enq, t0)
