"""The replica's producer for bench/docs (runs in ARQ's venv): queue ``parse`` jobs with ARQ's own
client, each stamped with ``time.time()`` just before its enqueue call.

    replica_ctl.py JOBS.json     # a JSON list of [user, path]; prints one job id a line, in order

Environment: BENCH_REDIS_SOCK, BENCH_ARQ_QUEUE.
"""

import asyncio
import json
import os
import sys
import time

from arq import create_pool
from arq.connections import RedisSettings


async def go(jobs: list) -> list[str]:
    pool = await create_pool(RedisSettings(unix_socket_path=os.environ["BENCH_REDIS_SOCK"]))
    q = os.environ.get("BENCH_ARQ_QUEUE", "arq:queue")
    ids = []
    for user, path in jobs:  # one at a time: the queue's order is the submission order
        job = await pool.enqueue_job("parse", user, path, time.time(), _queue_name=q)
        ids.append(job.job_id)
    await pool.aclose()
    return ids


def main() -> None:
    with open(sys.argv[1]) as f:
        jobs = json.load(f)
    print("\n".join(asyncio.run(go(jobs))))


if __name__ == "__main__":
    main()
