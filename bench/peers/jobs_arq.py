"""ARQ's side of bench/compare: async job bodies and ``WorkerSettings``.

``BENCH_ARQ_MAX_JOBS`` is the concurrency of one process (1 as the platform runs it, 4 processes of
it; or 4 in one process). ``BENCH_RECOVERY=best`` sets ``job_timeout=5`` s (default 300): a job's
in-progress key lives job_timeout + 10 s, and only once it expires may another worker run the job
again. Defaults otherwise (``poll_delay`` 0.5 s among them).
"""

import asyncio
import os
import time

from arq.connections import RedisSettings

from mark import LONG_S, MARKS, STARTS


async def _mark(ctx, t_enq, t0):
    await ctx["redis"].rpush(MARKS, f"{t_enq} {t0} {time.time()} {os.getpid()}")


async def noop(ctx, t_enq):
    await _mark(ctx, t_enq, time.time())


async def sleep10(ctx, t_enq):
    t0 = time.time()
    await asyncio.sleep(0.01)
    await _mark(ctx, t_enq, t0)


async def long(ctx, t_enq):
    t0 = time.time()
    await ctx["redis"].rpush(STARTS, f"{t_enq} {t0} {os.getpid()}")
    await asyncio.sleep(LONG_S)
    await _mark(ctx, t_enq, t0)


class WorkerSettings:
    functions = [noop, sleep10, long]
    redis_settings = RedisSettings(unix_socket_path=os.environ["BENCH_REDIS_SOCK"])
    queue_name = os.environ.get("BENCH_ARQ_QUEUE", "arq:queue")
    max_jobs = int(os.environ.get("BENCH_ARQ_MAX_JOBS", "1"))
    if os.environ.get("BENCH_RECOVERY") == "best":
        job_timeout = 5
