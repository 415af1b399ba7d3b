"""A job that kills its slot is the job's fault (its crash cap), not the slot's.

Before: each such death counted as one of the slot's "fast deaths", the count never reset after
good work, and a few poison jobs left every slot crash-looping, respawned once a minute.
"""

from __future__ import annotations

import time

import pytest


@pytest.mark.timeout(90)
def test_poison_jobs_fail_their_crash_cap_and_do_not_stop_the_pool(h):
    # Given a pool of two slots, and 5 jobs that each SIGKILL their slot mixed into 20 good ones
    d = h.daemon(workers=2)
    d.wait_slots(2)
    poison, good = [], []
    t0 = time.monotonic()
    for i in range(25):
        if i % 5 == 2:
            poison.append(h.submit(user=f"p{i}", payload={"crash_slot": True}))
        else:
            good.append(h.submit(user=f"g{i}"))
    # Then every good job completes promptly, each poison job fails on its own crash cap
    for jid in good:
        h.wait_state(jid, timeout=max(1.0, 40 - (time.monotonic() - t0)))
    elapsed = time.monotonic() - t0
    for jid in poison:
        job = h.wait_state(jid, states=("failed",), timeout=20)
        assert job.error.kind == "crash_cap" and job.attempts == 3
    assert elapsed < 30, f"20 good jobs took {elapsed:.1f} s"
    logs = d.logs()
    assert "slot_crash_looping" not in logs
    # and the pool is still whole and quick afterwards
    d.wait_slots(2)
    t1 = time.monotonic()
    h.wait_state(h.submit(user="after"), timeout=10)
    assert time.monotonic() - t1 < 3
