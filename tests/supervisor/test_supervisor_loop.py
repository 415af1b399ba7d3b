"""The supervisor's main loop under real failures: a frozen Redis, a stopped supervisor, a stuck entry.

Real processes throughout (a redis-server, the daemon, its slots, behave.py jobs). Each test states
the defect it guards against (no network I/O in the loop, among them).
"""

from __future__ import annotations

import json
import os
import signal
import time

import psutil
import pytest

from conftest import wait_until


def slot_of(h, jid: str, attempt: int = 1) -> int:
    """The slot process running attempt ``attempt`` of ``jid`` (the parent of the handler)."""
    rec = h.records / f"{jid}.{attempt}.start"
    wait_until(lambda: rec.exists() and rec.read_text().endswith("}"), 15, what=f"{jid} attempt {attempt} start")
    return psutil.Process(json.loads(rec.read_text())["pid"]).ppid()


@pytest.mark.timeout(120)
def test_slot_killed_while_redis_is_frozen_is_respawned_at_once_and_its_job_requeued_after(h):
    # Given two busy slots (heartbeat 2: a slot is judged silent after 6 s)
    d = h.daemon(workers=2, heartbeat=2.0, fence=0)  # the fence would (rightly) stop the job: not this test's subject
    d.wait_slots(2)
    victim_job = h.submit(kind="long", user="a", payload={"sleep": 30, "sleep_once": True, "record": str(h.records)})
    other_job = h.submit(kind="long", user="b", payload={"sleep": 14, "record": str(h.records)})
    victim, other = slot_of(h, victim_job), slot_of(h, other_job)
    # When Redis freezes (every call hangs until redis.socket_timeout) and a slot is SIGKILLed meanwhile
    h.redis.proc.send_signal(signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        # Then the supervisor reaps it and forks a new slot at once: its loop waits for no Redis call
        wait_until(lambda: len(d.slot_pids()) == 2 and victim not in d.slot_pids(), 5, interval=0.01,
                   what="respawn while Redis is frozen")
        respawned_after = time.monotonic() - t0
        time.sleep(max(0.0, 10 - (time.monotonic() - t0)))
        # and the other, busy slot is not killed as silent
        assert other in d.slot_pids()
    finally:
        h.redis.proc.send_signal(signal.SIGCONT)
    assert respawned_after < 1.0, f"respawned {respawned_after:.2f} s after the kill"
    # Once Redis is back, the dead slot's job is requeued and runs again; the other finishes untouched
    job = h.wait_state(victim_job, timeout=40)
    assert job.attempts == 2 and job.interruptions == 1
    assert h.wait_state(other_job, timeout=30).attempts == 1
    assert "slot_unresponsive_killing" not in d.logs()
    assert d.proc.poll() is None


@pytest.mark.timeout(60)
def test_a_stopped_supervisor_kills_no_healthy_slot_when_it_resumes(h):
    # Given a busy and an idle slot (heartbeat 0.5: silent after 1.5 s); without a
    # fence, which would stop the job after a stall this long (tests/system/reliability/test_fence.py)
    d = h.daemon(workers=2, fence=0)
    d.wait_slots(2)
    before = sorted(d.slot_pids())
    jid = h.submit(kind="long", payload={"sleep": 8, "record": str(h.records)})
    slot_of(h, jid)
    # When the supervisor itself is stopped for 5 s and continued
    os.kill(d.pid, signal.SIGSTOP)
    time.sleep(5)
    os.kill(d.pid, signal.SIGCONT)
    time.sleep(3 * 0.5 + 1)
    # Then it read what its slots sent meanwhile and killed none of them
    assert sorted(d.slot_pids()) == before
    assert "slot_unresponsive_killing" not in d.logs()
    job = h.wait_state(jid, timeout=20)
    assert job.attempts == 1 and job.interruptions == 0


@pytest.mark.timeout(60)
def test_an_entry_stuck_past_its_deadline_gets_its_slot_killed_and_requeued(h):
    # Given a live, beating slot whose processing list holds an entry far past any
    # deadline (what a start lost in a failover leaves behind)
    d = h.daemon(workers=1)
    [slot] = d.wait_slots(1)
    proc = wait_until(lambda: next((p.decode() for p in h.r.hkeys(h.k.proclists)), None), 10,
                      what="the slot's list registered")
    h.r.lpush(proc, "ghost")
    h.r.hset(h.k.started, "ghost", 1)  # claimed at the epoch: past every deadline
    # Then the housekeeper's finding reaches the main loop, which kills the slot; its death path
    # requeues the entry and a new slot takes over
    new = wait_until(lambda: (lambda p: p if p and p != [slot] else None)(d.slot_pids()), 10,
                     what="the stuck slot killed and respawned")
    assert slot not in new
    assert "slot_stuck_killing" in d.logs()
    wait_until(lambda: h.r.llen(proc) == 0, 5, what="the stuck entry requeued")
