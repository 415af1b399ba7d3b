"""Producer side of a peer in bench/compare (runs in the peers' venv): queue jobs with each peer's
own client, stamping every job with the time just before its enqueue call (its first argument).

    peerctl.py enqueue SYSTEM KIND N          # as fast as the client goes (before the workers start)
    peerctl.py paced SYSTEM KIND N RATE       # one at a time at RATE/s, to a deadline (pick-up runs)

SYSTEM: rq | arq | dramatiq | celery; KIND: noop | sleep10 | long. Environment: BENCH_REDIS_SOCK,
BENCH_RECOVERY (``best``: RQ jobs get ``Retry(max=3)``). Prints the number queued.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

QUEUE = os.environ.get("BENCH_ARQ_QUEUE", "arq:queue")


def producer(system: str, kind: str):
    """A function (t_enq) -> None that queues one job, and a flush callable."""
    sock = os.environ["BENCH_REDIS_SOCK"]
    if system == "dramatiq":
        import jobs_dramatiq

        actor = getattr(jobs_dramatiq, kind)
        return (lambda t: actor.send(t)), (lambda: None)
    if system == "celery":
        import jobs_celery

        task = getattr(jobs_celery, kind)
        return (lambda t: task.apply_async((t,))), (lambda: None)
    if system == "rq":
        from redis import Redis
        from rq import Queue, Retry

        q = Queue("default", connection=Redis(unix_socket_path=sock))
        kw = {"retry": Retry(max=3)} if os.environ.get("BENCH_RECOVERY") == "best" else {}
        return (lambda t: q.enqueue(f"jobs_rq.{kind}", t, **kw)), (lambda: None)
    if system == "arq":
        from arq import create_pool
        from arq.connections import RedisSettings

        loop = asyncio.new_event_loop()
        pool = loop.run_until_complete(create_pool(RedisSettings(unix_socket_path=sock)))
        return (lambda t: loop.run_until_complete(pool.enqueue_job(kind, t, _queue_name=QUEUE))), (lambda: loop.run_until_complete(pool.aclose()))
    raise SystemExit(f"unknown system {system}")


def bulk_rq(kind: str, n: int) -> None:
    from redis import Redis
    from rq import Queue, Retry

    q = Queue("default", connection=Redis(unix_socket_path=os.environ["BENCH_REDIS_SOCK"]))
    kw = {"retry": Retry(max=3)} if os.environ.get("BENCH_RECOVERY") == "best" else {}
    for i in range(0, n, 500):
        q.enqueue_many([Queue.prepare_data(f"jobs_rq.{kind}", (time.time(),), **kw) for _ in range(min(500, n - i))])


def bulk_arq(kind: str, n: int) -> None:
    from arq import create_pool
    from arq.connections import RedisSettings

    async def go():
        pool = await create_pool(RedisSettings(unix_socket_path=os.environ["BENCH_REDIS_SOCK"]))
        for i in range(0, n, 200):
            await asyncio.gather(*(pool.enqueue_job(kind, time.time(), _queue_name=QUEUE) for _ in range(min(200, n - i))))
        await pool.aclose()

    asyncio.run(go())


def main() -> None:
    op, system, kind, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    if op == "enqueue" and system == "rq":
        bulk_rq(kind, n)
    elif op == "enqueue" and system == "arq":
        bulk_arq(kind, n)
    elif op == "enqueue":
        send, flush = producer(system, kind)
        for _ in range(n):
            send(time.time())
        flush()
    elif op == "paced":
        rate = float(sys.argv[5])
        send, flush = producer(system, kind)
        t0 = time.monotonic()
        for i in range(n):
            due = t0 + i / rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            send(time.time())
        flush()
    else:
        raise SystemExit(__doc__)
    print(n)


if __name__ == "__main__":
    main()
