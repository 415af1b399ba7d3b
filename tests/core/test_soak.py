"""A randomised soak with an invariant checker over the jobs' own start/end records (lesson 31).

Random users, durations, business failures and slot SIGKILLs; afterwards every job must have reached
exactly one terminal state, no user may have had two attempts running at once, no job two attempts at
once, and the job records must agree with what the handlers saw.
"""

import json
import os
import random
import signal
import time

import pytest

from conftest import wait_until


@pytest.mark.timeout(120)
def test_random_soak_keeps_every_invariant(h):
    rnd = random.Random(int(os.environ.get("TENDER_POOL_SOAK_SEED", "20261129")))
    d = h.daemon(workers=4)
    d.wait_slots(4)
    jobs = {}
    for i in range(80):
        payload = {"record": str(h.records), "sleep": rnd.choice([0, 0.02, 0.05, 0.2])}
        if rnd.random() < 0.2:
            payload["fail_until"] = rnd.choice([2, 5])  # succeeds on attempt 2, or fails for good
        jobs[h.submit(user=f"user{rnd.randrange(6)}", payload=payload)] = payload
        if i % 20 == 10:  # kill a random busy slot now and then
            pids = d.slot_pids()
            if pids:
                os.kill(rnd.choice(pids), signal.SIGKILL)
        time.sleep(rnd.random() * 0.03)
    done = {j: h.wait_state(j, states=("completed", "failed"), timeout=90) for j in jobs}

    # exactly one terminal state, and the one the payload asked for
    for j, job in done.items():
        want_fail = jobs[j].get("fail_until", 0) > 3  # max_tries is 3
        assert job.state.value == ("failed" if want_fail else "completed"), (j, job)
        if job.state.value == "completed":
            assert job.result["value"]["attempt"] == job.attempts
    # handler records: (job, attempt) → (user, start, end)
    spans = []
    for f in h.records.glob("*.start"):
        jid, attempt, _ = f.name.rsplit(".", 2)
        s = json.loads(f.read_text())
        end = h.records / f"{jid}.{attempt}.end"
        if end.exists():
            spans.append((s["user"], jid, int(attempt), s["t"], json.loads(end.read_text())["t"]))
    # attempts of one job never overlap; attempt numbers strictly increase with time
    by_job = {}
    for user, jid, attempt, start, end in spans:
        by_job.setdefault(jid, []).append((attempt, start, end))
    for jid, att in by_job.items():
        att.sort()
        assert [a for a, _, _ in att] == sorted({a for a, _, _ in att})
        for (_, s1, e1), (_, s2, _) in zip(att, att[1:]):
            assert s2 >= e1, f"job {jid}: two attempts at once"
    # no user ever ran two jobs at once
    by_user = {}
    for user, jid, attempt, start, end in spans:
        by_user.setdefault(user, []).append((start, end, jid))
    for user, ss in by_user.items():
        ss.sort()
        for (s1, e1, j1), (s2, _, j2) in zip(ss, ss[1:]):
            assert s2 >= e1, f"{user}: {j1} and {j2} overlapped"
    # nothing left behind in Redis: no processing entry, no lock, no parked job
    base = f"{h.prefix}:{{tender_parse}}"
    wait_until(lambda: not any(h.r.llen(k) for k in h.r.scan_iter(match=f"{base}:proc:*")), 10,
               what="empty processing lists")
    assert not list(h.r.scan_iter(match=f"{base}:lock:*"))
    assert not list(h.r.scan_iter(match=f"{base}:wait:*"))
    assert h.r.llen(f"{base}:ready:lo") == 0 and h.r.zcard(f"{base}:delayed") == 0
