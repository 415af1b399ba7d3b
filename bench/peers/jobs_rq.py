"""RQ's side of bench/compare: the job bodies (plain functions; the work horse forked per job runs
them) and, for ``BENCH_RECOVERY=best``, a worker class that looks for abandoned jobs every second
(``maintenance_interval=1``, default 600 s) and extends a running job's registry entry every second
(``job_monitoring_interval=1``, default 30 s; RQ adds 60 s to it). The producer adds ``Retry(max=3)``
in that mode (peerctl), without which an abandoned job is moved to the failed registry, not re-run.
"""

import time

from rq import Worker

from mark import LONG_S, mark, started


def noop(t_enq):
    mark(t_enq, time.time())


def sleep10(t_enq):
    t0 = time.time()
    time.sleep(0.01)
    mark(t_enq, t0)


def long(t_enq):
    t0 = time.time()
    started(t_enq, t0)
    time.sleep(LONG_S)
    mark(t_enq, t0)


class QuickRecoveryWorker(Worker):
    def __init__(self, *a, **kw):
        kw["maintenance_interval"] = 1
        kw["job_monitoring_interval"] = 1
        super().__init__(*a, **kw)
