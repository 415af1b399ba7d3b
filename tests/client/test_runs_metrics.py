"""Run metrics at scrape time (the probe's RunTracker tails the queue's events stream) and the
Finished-fed ones (failures by error kind, fd-3 progress lines)."""

from __future__ import annotations

import uuid

import pytest

from .fakeslot import FakeSlot
from support.keyspace import keys
from tender_pool.client import Client
from tender_pool.supervisor.metrics import PoolCollector, PoolMetrics
from tender_pool.client.status_probe import QueueProbe
from tender_pool.client.status_protocol import CountersView
from tender_pool.slots.reports import AttemptEnd, Finished

pytestmark = pytest.mark.timeout(30)


def scrape(collector) -> dict:
    out = {}
    for fam in collector.collect():
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_runs_by_final_state_jobs_per_run_and_time_to_finish(redis_server):
    prefix = "m" + uuid.uuid4().hex[:6]
    c = Client(redis_server.url, prefix=prefix)
    probe = QueueProbe(c.r, keys(prefix), 3600)
    m = PoolMetrics(["k"])
    col = PoolCollector(m, lambda: [], CountersView(), probe, lambda: None, lambda: 0)
    old = c.submit_run("u1", "k", [{"key": "x"}])
    c.cancel_run(old.id)  # ended before the supervisor looked: not counted
    a = c.submit_run("u1", "k", [{"key": "a1"}, {"key": "a2"}, {"key": "a3"}])
    b = c.submit_run("u2", "k", [{"key": "b1"}])
    first = scrape(col)
    assert first[("tender_pool_runs_active", ())] == 2
    assert first[("tender_pool_runs_finished_total", (("state", "cancelled"),))] == 0
    slot = FakeSlot(c, a.id)
    for j in a.jobs:
        slot.move(j.id, "running")
        slot.move(j.id, "completed")
    c.cancel_run(b.id)
    later = c.submit_run("u3", "k", [{"key": "c"}])
    m2 = scrape(col)
    assert m2[("tender_pool_runs_active", ())] == 1 and [r.id for r in probe.runs] == [later.id]
    assert m2[("tender_pool_runs_finished_total", (("state", "completed"),))] == 1
    assert m2[("tender_pool_runs_finished_total", (("state", "cancelled"),))] == 1
    assert m2[("tender_pool_run_jobs_count", ())] == 2 and m2[("tender_pool_run_jobs_sum", ())] == 4
    assert m2[("tender_pool_run_jobs_bucket", (("le", "1.0"),))] == 1  # b: one job
    assert m2[("tender_pool_run_duration_seconds_count", ())] == 2
    assert m2[("tender_pool_run_duration_seconds_bucket", (("le", "5.0"),))] == 2  # a: 1.5 s (FakeSlot)
    written = int(c.r.xinfo_stream(c.k.events)["entries-added"])
    assert m2[("tender_pool_events_written_total", ())] == written > 0


def test_failures_by_error_kind_and_progress_lines():
    m = PoolMetrics(["k"])
    m.on_finished(Finished(kind="k", outcome=AttemptEnd.FAILED, error_kind="timeout"))
    m.on_finished(Finished(kind="k", outcome=AttemptEnd.RETRIED, error_kind="handler_failed"))  # not final
    m.on_finished(Finished(kind="k", outcome=AttemptEnd.COMPLETED, progress_events=7, progress_dropped=3))
    assert m.failures.labels("k", "timeout")._value.get() == 1
    assert m.failures.labels("k", "handler_failed")._value.get() == 0
    assert m.progress_events.labels("k")._value.get() == 7
    assert m.progress_dropped.labels("k")._value.get() == 3
