"""The replica of the platform's current architecture, for bench/docs (runs in ARQ's venv,
``bench/.venv-peers/arq``): ARQ workers (4 processes, ``max_jobs=1``), a per-user lock that sends a
colliding job back with ``Retry(defer)``, and per job a new Python runner process in its own session
(``replica_runner.py``, in our venv: it imports our readers and, for .doc/.xls, starts a cold JVM).

One job: ``parse(ctx, user, path, t_enq)``. It takes ``replica:lock:<user>`` (SET NX PX), or raises
``Retry(defer=BENCH_REPLICA_DEFER_S)``, counted in ``bench:docs:replica:deferred`` (ARQ adds the
defer to the job's score; the job is polled again after it). With the lock: the runner writes
``<out>/<job id>.md``; the lock is released; one RPUSH to ``bench:docs:replica`` records ``{id, user,
file, t_enq, t0, t1, ok, err, pid}`` (time.time()): t0 just after the lock, t1 after the runner exited
and the lock was released. Every Retry consumes
one of ARQ's tries (``run_job`` INCRs ``arq:retry:<id>`` at each start), so ``max_tries`` is raised
far above ARQ's default of 5, as a platform running this lock has to.

Environment: BENCH_REDIS_SOCK, BENCH_ARQ_QUEUE, BENCH_REPLICA_OUT (the Markdown directory),
BENCH_REPLICA_PY (our venv's python), BENCH_REPLICA_DEFER_S (default 0.5).
"""

import asyncio
import json
import os
import time
from pathlib import Path

from arq import Retry
from arq.connections import RedisSettings

RUNNER = str(Path(__file__).resolve().with_name("replica_runner.py"))
RECORDS = "bench:docs:replica"
DEFERRED = "bench:docs:replica:deferred"  # how many times a job found its user's lock taken
LOCK_MS = 610_000  # the longest job (the extraction timeout, 600 s) + 10 s, as a lock's TTL
DEFER_S = float(os.environ.get("BENCH_REPLICA_DEFER_S", "0.5"))


async def parse(ctx, user: str, path: str, t_enq: float):
    r, jid = ctx["redis"], ctx["job_id"]
    lock = f"replica:lock:{user}"
    if not await r.set(lock, jid, nx=True, px=LOCK_MS):
        await r.incr(DEFERRED)
        raise Retry(defer=DEFER_S)
    t0 = time.time()
    out = os.path.join(os.environ["BENCH_REPLICA_OUT"], f"{jid}.md")
    try:
        proc = await asyncio.create_subprocess_exec(
            os.environ["BENCH_REPLICA_PY"], RUNNER, path, out,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        _, err = await proc.communicate()
        ok = proc.returncode == 0
    finally:
        if await r.get(lock) == jid.encode():
            await r.delete(lock)
    t1 = time.time()
    await r.rpush(RECORDS, json.dumps({"id": jid, "user": user, "file": path, "t_enq": t_enq, "t0": t0, "t1": t1,
                                       "ok": ok, "err": err.decode("utf-8", "replace")[-300:], "pid": os.getpid()}))
    return {"markdown_path": out, "ok": ok}


class WorkerSettings:
    functions = [parse]
    redis_settings = RedisSettings(unix_socket_path=os.environ["BENCH_REDIS_SOCK"])
    queue_name = os.environ.get("BENCH_ARQ_QUEUE", "arq:queue")
    max_jobs = 1
    job_timeout = 600
    max_tries = 10_000
