"""Fairness inside the interactive class, and interactive before bulk within one user,
with real daemons: the start order is read from the `events` stream (job_started
in the order Redis wrote them), not from clocks."""

from __future__ import annotations

import json

import pytest

from conftest import wait_until
from .runhelp import handlers


def events(h) -> list[dict]:
    """Every event of the queue's `events` stream, in stream order."""
    return [json.loads(f[b"e"]) for _, f in h.r.xrange(h.k.events)]


def started_order(h) -> list[str]:
    """Job ids in the order their attempts started (first attempt of each)."""
    out: list[str] = []
    for ev in events(h):
        if ev["type"] == "job_started" and ev["job_id"] not in out:
            out.append(ev["job_id"])
    return out


def state(h, jid: str) -> str:
    j = h.job(jid)
    return j.state.value if j else ""


@pytest.mark.timeout(120)
def test_an_interactive_run_does_not_starve_another_users_interactive_job(h):
    # Given user A's 60-job interactive run keeping both slots busy (per_user = 0)
    h.daemon(workers=2, handlers=handlers(per_user_par=0))
    c = h.client()
    run = c.submit_run("A", "par", [{"key": str(i), "payload": {"sleep": 0.1}} for i in range(60)],
                       priority="interactive")
    a_ids = set(x.decode() for x in h.r.lrange(h.k.runjobs(run.id), 0, -1))
    wait_until(lambda: len([j for j in started_order(h) if j in a_ids]) >= 4, 30, what="A's run flowing")
    # When user C submits a bulk job and then user B one interactive job
    bulk = h.submit(kind="par", user="C", payload={}, priority="bulk")
    b = h.submit(kind="par", user="B", payload={}, priority="interactive")
    h.wait_state(b, timeout=30)
    h.wait_state(bulk, timeout=60)
    # Then at most one of A's jobs (the entry a slot may already hold) started between B's submit
    # and its start: B's turn comes next, not after A's whole run
    evs = events(h)
    queued_at = next(i for i, e in enumerate(evs) if e["type"] == "job_queued" and e["job_id"] == b)
    started_at = next(i for i, e in enumerate(evs) if e["type"] == "job_started" and e["job_id"] == b)
    overtook = [e["job_id"] for e in evs[queued_at:started_at] if e["type"] == "job_started" and e["job_id"] in a_ids]
    assert len(overtook) <= 1, f"{len(overtook)} of A's interactive jobs started while B's waited"
    # And interactive stays strictly before bulk: C's bulk job started after every interactive job
    order = started_order(h)
    assert set(order) >= a_ids | {b, bulk}
    assert order.index(bulk) > max(order.index(j) for j in a_ids | {b})


@pytest.mark.timeout(120)
def test_a_users_interactive_job_parked_behind_its_lock_starts_before_its_parked_bulk_job(h):
    # Given one user's bulk jobs B1..B4 (per_user = 1): B1 runs, B2 is claimed and parked behind the lock
    h.daemon(workers=3, handlers=handlers())
    b1 = h.submit(user="U", payload={"sleep": 1.0})
    rest = [h.submit(user="U", payload={}) for _ in range(3)]
    wait_until(lambda: state(h, b1) == "running" and state(h, rest[0]) == "waiting", 20, what="B1 running, B2 parked")
    # When the user submits an interactive job, which an idle slot claims and parks as well
    i1 = h.submit(user="U", payload={}, priority="interactive")
    wait_until(lambda: state(h, i1) in ("waiting", "running", "completed"), 20, what="I1 claimed")
    for j in [b1, *rest, i1]:
        h.wait_state(j, timeout=30)
    # Then it is promoted first: interactive before bulk, each in submit order
    assert started_order(h) == [b1, i1, *rest]


@pytest.mark.timeout(120)
def test_a_users_interactive_job_parked_on_its_semaphore_is_woken_before_its_bulk_one(h):
    # Given per_user = 2: S1 and S2 run, S3 is claimed and parked on the semaphore
    h.daemon(workers=4, handlers=handlers(per_user_par=2))
    s1 = h.submit(kind="par", user="U", payload={"sleep": 1.0})
    s2 = h.submit(kind="par", user="U", payload={"sleep": 1.6})
    s3, s4 = h.submit(kind="par", user="U", payload={}), h.submit(kind="par", user="U", payload={})
    wait_until(lambda: state(h, s2) == "running" and state(h, s3) == "waiting", 20, what="S3 parked")
    # When an interactive job of the same user parks there too
    i1 = h.submit(kind="par", user="U", payload={}, priority="interactive")
    wait_until(lambda: state(h, i1) == "waiting", 20, what="I1 parked")
    for j in (s1, s2, s3, s4, i1):
        h.wait_state(j, timeout=30)
    # Then the first place freed goes to it, then to the bulk jobs in submit order
    order = started_order(h)
    assert order[2:] == [i1, s3, s4], order
