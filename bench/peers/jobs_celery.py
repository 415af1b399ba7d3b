"""Celery's side of bench/compare: the Redis broker on the bench's socket, no result backend.

``BENCH_RECOVERY=best`` sets ``task_acks_late=True`` and ``task_reject_on_worker_lost=True``: a task
whose pool process died is put back at once. Defaults: acknowledged before it runs, so it is lost.
"""

import os
import time

from celery import Celery

from mark import LONG_S, mark, started

app = Celery("bench", broker=f"redis+socket://{os.environ['BENCH_REDIS_SOCK']}")
app.conf.task_ignore_result = True
app.conf.broker_connection_retry_on_startup = True
app.conf.worker_hijack_root_logger = False
if os.environ.get("BENCH_RECOVERY") == "best":
    app.conf.task_acks_late = True
    app.conf.task_reject_on_worker_lost = True


@app.task
def noop(t_enq):
    mark(t_enq, time.time())


@app.task
def sleep10(t_enq):
    t0 = time.time()
    time.sleep(0.01)
    mark(t_enq, t0)


@app.task
def long(t_enq):
    t0 = time.time()
    started(t_enq, t0)
    time.sleep(LONG_S)
    mark(t_enq, t0)
