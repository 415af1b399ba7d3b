"""State another process should have cleaned up and never will: a user's lock whose holder is gone
(parked jobs must be promoted by the waiter sweep), and a finished job's id left in a processing
list (it must be dropped, not run again).

(Reaching ``max_waits`` is tests/slots/test_slot_jobs.py::test_reaching_max_waits_is_waited_too_long_not_timeout.)"""

from __future__ import annotations

import time

import pytest

from ..chaos.spans import by_user, overlaps, read_trails
from conftest import wait_until

from .trail import attempts, handlers, wait_ticking


@pytest.mark.timeout(60)
def test_parked_jobs_are_promoted_once_their_lock_holder_is_gone(h):
    # Given user u's lock held by an attempt nobody runs any more (its host died, the release with it)
    lock = h.k.lock("u")
    h.r.set(lock, "7.deadbeefdead", px=120_000)
    d = h.daemon(workers=2, handlers=handlers())
    d.wait_slots(2)
    first = h.submit(kind="tick", user="u", payload={"record": str(h.records), "sleep": 0.2})
    second = h.submit(kind="tick", user="u", payload={"record": str(h.records), "sleep": 0.2})
    h.wait_state(first, states=("waiting",), timeout=10)
    assert h.r.lrange(h.k.wait("u"), 0, -1) == [first.encode()]
    time.sleep(1)
    assert h.job(first).state.value == "waiting" and not attempts(h.records, first)
    # When the lock expires (its TTL ran out)
    h.r.pexpire(lock, 1)
    # Then the sweep promotes the head waiter, and the user's jobs run in order, one at a time
    a, b = h.wait_state(first, timeout=20), h.wait_state(second, timeout=20)
    assert "lost_promotion_fixed" in d.logs()
    assert a.attempts == 1 and b.attempts == 1
    assert attempts(h.records, first)[0].start < attempts(h.records, second)[0].start
    assert not overlaps(read_trails(h.records), by_user)
    assert not h.r.exists(lock) and not h.r.exists(h.k.wait("u"))


@pytest.mark.timeout(60)
def test_a_finished_jobs_entry_in_a_dead_hosts_list_is_dropped_not_rerun(h):
    h.daemon(workers=1, handlers=handlers())
    jid = h.submit(kind="tick", user="u", payload={"record": str(h.records), "sleep": 0})
    h.wait_state(jid, timeout=20)
    # Given its id in a processing list of a host that is gone (registered, no host key)
    dead = h.k.proc("gone-host", "dead0001", 1, 1)
    h.r.hset(h.k.proclists, dead, "gone-host\tdead0001|no-boot|999999")
    h.r.rpush(dead, jid)
    # Then the reaper empties and forgets that list, and the job is not run again
    wait_until(lambda: not h.r.exists(dead) and not h.r.hexists(h.k.proclists, dead), 20,
               what="the dead list reaped")
    time.sleep(1)
    job = h.job(jid)
    assert job.state.value == "completed" and job.attempts == 1 and job.interruptions == 0, job
    assert [a.n for a in attempts(h.records, jid)] == [1]
    assert h.r.lrange(h.k.ready_lo, 0, -1) in ([], [b"~wake"])


@pytest.mark.timeout(60)
def test_a_finished_jobs_entry_left_in_a_live_slots_list_is_dropped_not_rerun(h):
    d = h.daemon(workers=1, handlers=handlers())
    d.wait_slots(1)
    jid = h.submit(kind="tick", user="u", payload={"record": str(h.records), "sleep": 0})
    h.wait_state(jid, timeout=20)
    [proc] = [p.decode() for p in h.r.hkeys(h.k.proclists)]
    # Given its id back in the live, idle slot's own list, claimed long ago
    h.r.rpush(proc, jid)
    h.r.hset(h.k.started, jid, 1)
    # Then it leaves the list and is not run again
    wait_until(lambda: h.r.llen(proc) == 0 or not h.r.exists(proc), 20, what="the entry dropped")
    time.sleep(1)
    job = h.job(jid)
    assert job.state.value == "completed" and job.attempts == 1 and job.interruptions == 0, job
    assert [a.n for a in attempts(h.records, jid)] == [1]


@pytest.mark.timeout(60)
def test_a_finished_jobs_leftover_entry_does_not_interrupt_the_job_its_slot_runs(h):
    d = h.daemon(workers=1, handlers=handlers())
    d.wait_slots(1)
    done = h.submit(kind="tick", user="u", payload={"record": str(h.records), "sleep": 0})
    h.wait_state(done, timeout=20)
    busy = h.submit(kind="tick", user="v", payload={"record": str(h.records), "sleep": 4})
    wait_ticking(h.records, busy)
    [proc] = [p.decode() for p in h.r.hkeys(h.k.proclists)]
    # Given the finished job's id back in the slot's list while the slot runs another job
    h.r.rpush(proc, done)
    h.r.hset(h.k.started, done, 1)
    # Then the running job is not disturbed by it
    job = h.wait_state(busy, timeout=30)
    assert job.attempts == 1 and job.interruptions == 0, job
    assert "slot_stuck_killing" not in d.logs()
