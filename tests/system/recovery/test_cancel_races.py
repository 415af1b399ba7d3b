"""Cancel where it races the pool: between a slot's claim and its start (the ``after_claim``
checkpoint), during a business retry's backoff (the job sits in ``delayed``), and while the job waits
on a dependency. Each time the job ends ``cancelled`` without a handler ever starting again, and
nothing of it is left in a list.

(tests/system/core/test_jobs.py cancels a queued and a running job; tests/client the client's answers.)"""

from __future__ import annotations

import os
import signal
import time

import pytest

from conftest import wait_until

from .trail import attempts, handlers, wait_ticking


@pytest.mark.timeout(60)
@pytest.mark.parametrize("then", ["continue", "kill"])
def test_cancel_between_claim_and_start(h, then):
    # heartbeat 2: the slot stopped at the checkpoint is not judged silent during the test (6 s)
    d = h.daemon(workers=1, heartbeat=2.0, handlers=handlers(), faults="after_claim")
    d.wait_slots(1)
    jid = h.submit(kind="tick", user="u", payload={"record": str(h.records), "sleep": 0})
    # Given the slot has claimed the job (BLMOVE into its list) and stopped before take.lua
    pid = h.fault_pid("after_claim")
    [proc] = [p.decode() for p in h.r.hkeys(h.k.proclists)]
    assert h.r.lrange(proc, 0, -1) == [jid.encode()] and h.job(jid).state.value == "queued"
    # When the job is cancelled in that gap (it is in no list cancel.lua can take it from: flagged)
    assert h.client().cancel(jid).outcome in ("signalled", "cancelled")
    # and the slot goes on (or dies there and its list is requeued)
    if then == "continue":
        os.kill(pid, signal.SIGCONT)
    else:
        os.kill(pid, signal.SIGKILL)
        os.kill(pid, signal.SIGCONT)
    # Then take.lua sees the flag: cancelled, never run, nothing left in a list or a lock
    job = h.wait_state(jid, states=("cancelled",), timeout=20)
    assert job.attempts == 0 and job.error.kind == "cancelled", job
    time.sleep(0.5)
    assert not attempts(h.records, jid)
    assert not any(h.r.llen(k) for k in h.r.scan_iter(match=h.k.proc_pattern))
    assert not h.r.exists(h.k.lock("u"))
    assert h.r.lrange(h.k.ready_lo, 0, -1) in ([], [b"~wake"])


@pytest.mark.timeout(60)
def test_cancel_during_retry_backoff(h):
    cfg = h.config(workers=1, handlers=handlers())
    cfg.write_text(cfg.read_text().replace("retry_backoff = 0.05", "retry_backoff = 30"))
    h.daemon()
    jid = h.submit(kind="tick", user="u", payload={"record": str(h.records), "sleep": 0, "fail_until": 3})
    # Given attempt 1 failed (exit 1) and the retry waits 30 s in `delayed`
    wait_until(lambda: h.r.zscore(h.k.delayed, jid) is not None, 20, what="the retry in delayed")
    assert h.job(jid).state.value == "queued" and h.job(jid).tries == 1
    # When it is cancelled
    assert h.client().cancel(jid).outcome == "cancelled"
    # Then it is cancelled at once, out of `delayed`, and never promoted or run again
    job = h.job(jid)
    assert job.state.value == "cancelled" and job.error.kind == "cancelled", job
    assert h.r.zcard(h.k.delayed) == 0
    time.sleep(2)  # several reaper turns (promote_due)
    assert [a.n for a in attempts(h.records, jid)] == [1]
    assert h.job(jid).state.value == "cancelled" and h.job(jid).attempts == 1


@pytest.mark.timeout(60)
def test_cancel_while_waiting_on_a_dependency(h):
    h.daemon(workers=2, handlers=handlers())
    first = h.submit(kind="tick", user="a", payload={"record": str(h.records), "sleep": 2})
    wait_ticking(h.records, first)
    # Given a job parked until `first` ends
    dep = h.submit(kind="tick", user="b", payload={"record": str(h.records), "sleep": 0}, after=[first])
    h.wait_state(dep, states=("waiting",), timeout=10)
    assert h.r.lrange(h.k.deps(first), 0, -1) == [dep.encode()]
    # When it is cancelled
    assert h.client().cancel(dep).outcome == "cancelled"
    # Then it ends at once, out of the dependency's list; `first` ending later does not start it
    job = h.job(dep)
    assert job.state.value == "cancelled" and job.error.kind == "cancelled" and job.attempts == 0, job
    assert h.r.llen(h.k.deps(first)) == 0
    h.wait_state(first, timeout=20)
    time.sleep(1)
    assert h.job(dep).state.value == "cancelled" and h.job(dep).attempts == 0
    assert not attempts(h.records, dep)
