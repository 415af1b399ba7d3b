"""A sealed run whose submitter died while queuing its jobs: the daemon's housekeeper queues the
rest, each job once."""

from __future__ import annotations

import pytest
import redis

from conftest import wait_until
from .runhelp import handlers, recount, run_state


@pytest.mark.timeout(120)
def test_the_housekeeper_finishes_queuing_a_run_whose_submitter_died(h, monkeypatch):
    from tender_pool.client import Unavailable
    from tender_pool.client import run_submit as rs

    # Given a run sealed and queued only up to its first chunk of 3 (the submitter then lost Redis)
    monkeypatch.setattr(rs, "QUEUE_JOBS", 3)
    monkeypatch.setattr(rs, "RETRY_PAUSE_S", (0.0,))
    real, calls = rs.wait_replicated, []

    def dies_after_two(*a):
        calls.append(1)
        if len(calls) > 2:
            raise redis.ConnectionError("gone")
        return real(*a)

    monkeypatch.setattr(rs, "wait_replicated", dies_after_two)
    h.config(handlers=handlers(per_user_par=0))
    c = h.client()
    with pytest.raises(Unavailable):
        c.submit_run("ann", "par", [{"key": str(i), "payload": {"echo": i}} for i in range(10)], run_id="half")
    k = h.k
    assert h.r.hget(k.run("half"), "queued_to") == b"3"
    # When a daemon runs, Then every job runs once and the run completes
    h.daemon(workers=2, handlers=handlers(per_user_par=0))
    wait_until(lambda: run_state(h, "half") == "completed", 60, what="the run to complete")
    stored, counted = recount(h, "half")
    assert stored == counted and counted["completed"] == 10
    assert all(h.job(f"half/{i}").attempts == 1 for i in range(1, 11))
    assert not h.r.zscore(k.runqueue, "half")
