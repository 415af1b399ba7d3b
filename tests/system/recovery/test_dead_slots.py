"""The supervisor's two rules for a slot that is alive but no longer doing its job: an entry of its
list far past the job's deadline (the housekeeper's stuck rule), and 3 heartbeats without a report
(a stopped or wedged slot). Either way the slot is SIGKILLed, its job tree killed, and the job runs
again elsewhere, never at the same time as the old attempt.

(tests/supervisor/test_supervisor_loop.py has the stuck rule for an entry with no job behind it;
tests/supervisor/test_loop.py both rules with fake processes.)"""

from __future__ import annotations

import os
import signal
import time

import pytest

from ..chaos.spans import by_job, overlaps, read_trails
from conftest import wait_until

from .trail import attempts, handlers, wait_ticking


@pytest.mark.timeout(60)
def test_a_live_slots_entry_past_its_deadline_gets_the_slot_killed_and_the_job_rerun(h):
    d = h.daemon(workers=1, handlers=handlers())
    [slot] = d.wait_slots(1)
    jid = h.submit(kind="tick", user="u", payload={"record": str(h.records), "sleep": 3})
    wait_ticking(h.records, jid)
    # Given the running job's claim stamp is far in the past (a clock or a stamp gone wrong: the
    # slot holds an entry beyond its timeout + kill_grace + the stuck margin)
    h.r.hset(h.k.started, jid, 1)
    # Then the housekeeper finds it, the main loop kills the slot, and the job runs again
    wait_until(lambda: (lambda p: p and slot not in p)(d.slot_pids()), 15, what="the stuck slot killed")
    job = h.wait_state(jid, timeout=30)
    assert "slot_stuck_killing" in d.logs()
    assert job.attempts == 2 and job.interruptions == 1 and job.tries == 0, job
    first, second = attempts(h.records, jid)
    assert not first.ended and second.ended
    assert not overlaps(read_trails(h.records), by_job)


@pytest.mark.timeout(60)
def test_a_slot_silent_for_3_heartbeats_is_killed_and_its_job_rerun(h):
    d = h.daemon(workers=1, handlers=handlers())  # heartbeat 0.5: silent after 1.5 s
    [slot] = d.wait_slots(1)
    jid = h.submit(kind="tick", user="u", payload={"record": str(h.records), "sleep": 3})
    wait_ticking(h.records, jid)
    # When the busy slot is stopped (its job child runs on: it is in its own session)
    os.kill(slot, signal.SIGSTOP)
    t0 = time.monotonic()
    wait_until(lambda: (lambda p: p and slot not in p)(d.slot_pids()), 15, interval=0.05, what="the silent slot killed")
    killed_after = time.monotonic() - t0
    # Then it is killed after 3 heartbeats of silence (counted from its last beat, up to one beat
    # interval, 0.2 s, before the stop), its job's tree with it, and the job runs again
    assert 1.5 - 0.25 <= killed_after < 8, killed_after
    assert "slot_unresponsive_killing" in d.logs()
    job = h.wait_state(jid, timeout=30)
    assert job.attempts == 2 and job.interruptions == 1 and job.tries == 0, job
    first, second = attempts(h.records, jid)
    assert not first.ended and second.ended
    assert not overlaps(read_trails(h.records), by_job)
