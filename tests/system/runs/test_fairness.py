"""Fair scheduling across users, submit order within a user, per-kind concurrency, max_parallel,
interactive retries."""

from __future__ import annotations

import json
import time

import msgspec
import pytest

from conftest import wait_until
from .runhelp import handlers
from tender_pool.slots.answers import TakeArgs


def starts(h) -> dict[str, tuple[float, float | None, str]]:
    """job id → (start, end or None, user) of attempt 1, from behave.py's record files."""
    out = {}
    for f in h.records.rglob("*.1.start"):  # a run job <run>/<n> records in <record>/<run>/
        jid = str(f.relative_to(h.records))[: -len(".1.start")]
        e = h.records / f"{jid}.1.end"
        try:  # a file being written right now reads empty: taken on the next look
            s = json.loads(f.read_text())
            out[jid] = (s["t"], json.loads(e.read_text())["t"] if e.exists() else None, s["user"])
        except ValueError:
            continue
    return out


def max_overlap(spans: list[tuple[float, float]]) -> int:
    pts = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    cur = best = 0
    for _, d in pts:
        cur += d
        best = max(best, cur)
    return best


@pytest.mark.timeout(120)
@pytest.mark.parametrize("priority", ["bulk", "interactive"])
def test_a_100_job_bulk_run_does_not_delay_another_users_job_by_more_than_one_job(h, priority):
    # Given user A's 100-job bulk run using all 4 slots (per_user = 0), each job 0.4 s
    h.daemon(workers=4, handlers=handlers(per_user_par=0))
    c = h.client()
    dur = 0.4
    run = c.submit_run("A", "par", [{"key": str(i), "payload": {"sleep": dur, "record": str(h.records)}}
                                    for i in range(100)])
    wait_until(lambda: sum(1 for _, _, u in starts(h).values() if u == "A") >= 8, 20, what="A's run flowing")
    over = max_overlap([(s, e or time.time()) for s, e, _ in starts(h).values()])
    assert over == 4  # per_user = 0: the run uses every slot
    # When user B submits one job
    b = h.submit(kind="par", user="B", payload={"record": str(h.records)}, priority=priority)
    # Then it starts on the next slot that frees: no more than one of A's jobs starts in between
    # (the fair entry a slot may already hold), so B waits at most one job's duration
    wait_until(lambda: h.job(b).started_at, 30, what="B's job to start")
    k = h.k
    bj = h.job(b)
    ids = [j.decode() for j in h.r.lrange(k.runjobs(run.id), 0, -1)]
    p = h.r.pipeline(transaction=False)
    for j in ids:
        p.hget(k.job(j), "started_at")
    a_starts = [int(x) for x in p.execute() if x]
    overtook = [x for x in a_starts if bj.created_at < x < bj.started_at]
    assert len(overtook) <= 1, f"{len(overtook)} of A's jobs started while B waited"
    waited = (bj.started_at - bj.created_at) / 1000
    assert waited < 3 * dur, f"B waited {waited:.2f} s behind A's run (job duration {dur} s)"
    assert h.r.hget(k.run(run.id), "state") == b"running"  # A's run was still going


@pytest.mark.timeout(120)
def test_one_users_jobs_start_in_submit_order_under_concurrent_claims(h):
    # Given 20 jobs of one user (per_user = 1) queued before the daemon starts
    h.config(workers=4, handlers=handlers())
    jobs = [h.submit(kind="behave", user="u", payload={"record": str(h.records)}) for _ in range(20)]
    # When four slots start claiming at once
    h.daemon()
    for j in jobs:
        h.wait_state(j, timeout=60)
    # Then they started in the order submitted, one at a time
    st = starts(h)
    order = sorted(jobs, key=lambda j: st[j][0])
    assert order == jobs
    assert max_overlap([(s, e) for s, e, _ in st.values()]) == 1


@pytest.mark.timeout(120)
def test_max_parallel_caps_a_runs_concurrent_jobs(h):
    h.daemon(workers=4, handlers=handlers(per_user_par=0))
    c = h.client()
    run = c.submit_run("M", "par", [{"key": str(i), "payload": {"sleep": 0.3, "record": str(h.records)}}
                                    for i in range(12)], max_parallel=2)
    wait_until(lambda: h.r.hget(h.k.run(run.id), "state") == b"completed", 60, what="run done")
    spans = [(s, e) for s, e, _ in starts(h).values()]
    assert len(spans) == 12 and max_overlap(spans) == 2


@pytest.mark.timeout(120)
def test_per_user_n_is_a_semaphore_of_n(h):
    h.daemon(workers=4, handlers=handlers(per_user_par=2))
    jobs = [h.submit(kind="par", user="S", payload={"sleep": 0.3, "record": str(h.records)}) for _ in range(8)]
    for j in jobs:
        h.wait_state(j, timeout=60)
    assert max_overlap([(s, e) for s, e, _ in starts(h).values()]) == 2
    assert h.r.zcard(h.k.sem("par", "S")) == 0


@pytest.mark.timeout(60)
def test_an_interactive_retry_goes_back_to_ready_hi_not_behind_the_bulk_backlog(h):
    # Given a bulk backlog in ready:lo and an interactive job whose first attempt failed (retry)
    h.config(handlers=handlers())
    q = h.queue()
    k = q.k
    bulk = [h.submit(kind="behave", user=f"b{i}") for i in range(50)]
    inter = h.submit(kind="behave", user="i", priority="interactive")
    proc = k.proc("h", "inc", 1, 0)
    assert q.claim(proc, 0.1) == inter.encode()
    job = q.get(inter)
    limits = msgspec.json.encode({"*": [10_000, 1]})
    st = q.take(proc, TakeArgs("w1", 1, 60_000, 3600, 100, 60_000, limits), "s1", entry=inter.encode()).started
    assert st.token
    q.settle(proc, job, st.token, "retry", lock_ttl_ms=60_000, retention_s=3600, backoff_ms=0, counts_try=True,
             error=None)
    # When its backoff has passed
    time.sleep(0.01)
    assert q.promote_due() == 1
    # Then it is the next claim, ahead of all 50 bulk jobs
    assert h.r.lrange(k.ready_hi, 0, -1) == [inter.encode()]
    entry = q.claim(proc, 0.1)
    assert entry == inter.encode()
    assert h.r.llen(k.ready_lo) >= 1 and len(bulk) == 50
