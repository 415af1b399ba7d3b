"""The one marker write of a peer's job, shared by the peers' job modules (runs in the peers' venv).

Every job records ``<enqueue time> <start> <end> <pid>`` (time.time(), s) with one RPUSH to
``bench:marks:<tag>``: the harness derives throughput (first start → last end), pick-up latency
(start − enqueue) and which process ran a job from these lines. The long job of the crash test also
pushes ``bench:starts:<tag>`` when it begins, so the harness knows whom to kill and sees a re-run.
The client is built per process, never inherited across a fork (RQ forks a work horse per job).
"""

from __future__ import annotations

import os
import time

import redis

TAG = os.environ.get("BENCH_TAG", "")
MARKS = f"bench:marks:{TAG}"  # one pair of lists per system: crash tests of several run at once
STARTS = f"bench:starts:{TAG}"
_client: tuple[int, redis.Redis] | None = None


def client() -> redis.Redis:
    global _client
    if _client is None or _client[0] != os.getpid():
        _client = (os.getpid(), redis.Redis(unix_socket_path=os.environ["BENCH_REDIS_SOCK"]))
    return _client[1]


def mark(t_enq: float, t0: float) -> None:
    client().rpush(MARKS, f"{t_enq} {t0} {time.time()} {os.getpid()}")


def started(t_enq: float, t0: float) -> None:
    client().rpush(STARTS, f"{t_enq} {t0} {os.getpid()}")


LONG_S = 3.0  # the crash test's job: long enough to be killed mid-way
