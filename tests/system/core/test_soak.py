"""A randomised soak with an invariant checker over the jobs' own trails.

Random users, durations, business failures and slot SIGKILLs; afterwards every job must have reached
exactly one terminal state, no user may have had two attempts running at once, no job two attempts at
once, and the job records must agree with what the handlers saw.

The trails are ``tests/jobs/tickjob.py``'s: a tick every 50 ms, so an attempt SIGKILLed before it could
write its end line still shows when it ran (first tick .. last tick + 50 ms, ``tests/system/chaos/spans.py``).
Start/end records alone miss exactly those attempts: an overlap followed by a kill was invisible.
"""

import os
import random
import signal
import time

import pytest

from ..chaos.spans import by_job, by_user, describe, overlaps, proven_ends, read_trails
from conftest import JOBS, PYTHON, wait_until

HANDLERS = f"""
[handlers.tick]
command = ["{PYTHON}", "{JOBS / "tickjob.py"}"]
timeout = 10
"""


@pytest.mark.timeout(120)
def test_random_soak_keeps_every_invariant(h):
    rnd = random.Random(int(os.environ.get("TENDER_POOL_SOAK_SEED", "20261129")))
    d = h.daemon(workers=4, handlers=HANDLERS)
    d.wait_slots(4)
    jobs = {}
    for i in range(80):
        payload = {"record": str(h.records), "sleep": rnd.choice([0, 0.02, 0.05, 0.2, 0.5])}
        if rnd.random() < 0.2:
            payload["fail_until"] = rnd.choice([2, 5])  # succeeds on attempt 2, or fails for good
        jobs[h.submit(kind="tick", user=f"user{rnd.randrange(6)}", payload=payload)] = payload
        if i % 20 == 10:  # kill a random busy slot now and then
            pids = d.slot_pids()
            if pids:
                os.kill(rnd.choice(pids), signal.SIGKILL)
        time.sleep(rnd.random() * 0.03)
    done = {j: h.wait_state(j, states=("completed", "failed"), timeout=90) for j in jobs}

    # exactly one terminal state, and the one the payload asked for: the handler fails while its
    # attempt < fail_until, and max_tries is 3; an attempt killed with its slot is a crash, not a try,
    # so a job killed twice may reach attempt 5 with 2 tries spent (a fixed "fail_until > 3 fails" was
    # wrong for it)
    for j, job in done.items():
        fail_until = jobs[j].get("fail_until", 0)
        if job.state.value == "completed":
            assert job.attempts >= fail_until and job.result["value"]["attempt"] == job.attempts, (j, job)
        else:
            assert job.tries == 3 and job.attempts < fail_until, (j, job)
    # every attempt, killed ones included (no end line): their spans from the ticks
    # (an attempt of a SIGKILLed slot ends by the supervisor's slot_exited line: its group was killed
    # before the job could be requeued; spans.proven_ends)
    attempts = read_trails(h.records, killed=proven_ends([d.logs()], read_trails(h.records)))
    assert {a.job for a in attempts} == set(jobs)
    killed = [a for a in attempts if not a.ended]
    # attempts of one job never overlap; attempt numbers increase with time
    assert not overlaps(attempts, by_job), [describe(o) for o in overlaps(attempts, by_job)]
    for jid in jobs:
        mine = sorted((a.start, a.n) for a in attempts if a.job == jid)
        assert [n for _, n in mine] == sorted(n for _, n in mine), f"job {jid}: attempt numbers out of order"
    # no user ever ran two jobs at once
    assert not overlaps(attempts, by_user), [describe(o) for o in overlaps(attempts, by_user)]
    print(f"soak: {len(attempts)} attempts, {len(killed)} killed mid-run")
    # nothing left behind in Redis: no processing entry, no lock, no parked job
    wait_until(lambda: not any(h.r.llen(p) for p in h.r.scan_iter(match=h.k.proc_pattern)), 10,
               what="empty processing lists")
    assert not list(h.r.scan_iter(match=h.k.lock("*")))
    assert not list(h.r.scan_iter(match=h.k.wait("*")))
    assert h.r.llen(h.k.ready_lo) == 0 and h.r.zcard(h.k.delayed) == 0
