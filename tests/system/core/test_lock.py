"""Per-user lock: never two running jobs of one user, waiting without spinning, order kept."""

import json
import time

import pytest

from conftest import wait_until
from tender_pool.client import BadInput


def records(h):
    out = {}
    for f in h.records.glob("*.start"):
        jid, attempt, _ = f.name.rsplit(".", 2)
        end = h.records / f"{jid}.{attempt}.end"
        s = json.loads(f.read_text())
        out[(jid, attempt)] = (s["user"], s["t"], json.loads(end.read_text())["t"] if end.exists() else None)
    return out


def test_many_users_never_overlap(h):
    h.daemon(workers=4)
    jobs = [h.submit(user=f"user{i % 5}", payload={"record": str(h.records), "sleep": 0.05 + (i % 3) * 0.03})
            for i in range(40)]
    for j in jobs:
        h.wait_state(j, timeout=60)
    by_user = {}
    for (_, _), (user, start, end) in records(h).items():
        by_user.setdefault(user, []).append((start, end))
    assert sum(len(v) for v in by_user.values()) == 40
    for user, spans in by_user.items():
        spans.sort()
        for (s1, e1), (s2, _) in zip(spans, spans[1:]):
            assert s2 >= e1, f"{user}: a job started at {s2} while another ran until {e1}"
    # and the pool did run users in parallel
    all_spans = sorted((s, e) for v in by_user.values() for s, e in v)
    assert any(s2 < e1 for (s1, e1), (s2, _) in zip(all_spans, all_spans[1:]))


def commands(h):
    return int(h.r.info("stats")["total_commands_processed"])


@pytest.mark.timeout(180)
def test_waiting_jobs_do_not_spin_and_others_flow(h):
    h.daemon(workers=2)
    blocker = h.submit(kind="long", user="busy", payload={"record": str(h.records), "sleep": 55})
    wait_until(lambda: (h.records / f"{blocker}.1.start").exists(), 15, what="blocker start")
    idle = []
    for _ in range(2):  # the pool's own rate with the user busy; the first window can still be settling
        c0, t0 = commands(h), time.monotonic()
        time.sleep(10.0)
        idle.append((commands(h) - c0 - 1) / (time.monotonic() - t0))
    idle_rate = max(idle)
    waiting = [h.submit(user="busy", payload={"record": str(h.records)}) for _ in range(20)]
    # the user's fair entry parks behind its lock; the other 19 stay in the user's backlog (fairness)
    wait_until(lambda: h.job(waiting[0]).state.value == "waiting", 10, what="the first parked")
    assert all(h.job(j).state.value == "queued" for j in waiting[1:])
    time.sleep(0.3)
    rates = []
    for _ in range(2):  # a spin shows in every window; timing jitter of periodic work only in some
        c1, t1 = commands(h), time.monotonic()
        time.sleep(10.0)
        rates.append((commands(h) - c1 - 1) / (time.monotonic() - t1))
        if rates[-1] - idle_rate < 2:
            break
    busy_rate = min(rates)
    assert busy_rate - idle_rate < 2, f"idle {idle}/s, with 20 waiting {rates}/s"
    # (windows of 10 s: the housekeeper's 5 s sweep and the status sampler make shorter ones noisy)
    # another user's job flows past the busy user
    other = h.submit(user="other", payload={"record": str(h.records)})
    h.wait_state(other, timeout=5)
    assert h.job(blocker).state.value == "running"
    # the busy user's jobs then run in their own order, one at a time, once the blocker ends
    assert h.cli("cancel", blocker).stdout.strip() == "signalled"
    for j in waiting:
        h.wait_state(j, timeout=60)
    starts = [json.loads((h.records / f"{j}.1.start").read_text())["t"] for j in waiting]
    assert starts == sorted(starts)
    assert all(h.job(j).attempts == 1 and h.job(j).tries == 0 for j in waiting)


def test_dependencies_wait_and_fail_clearly(h):
    h.daemon(workers=2)
    a = h.submit(user="x", payload={"sleep": 1})
    b = h.submit(user="y", payload={"record": str(h.records)}, after=[a])
    wait_until(lambda: h.job(b).state.value == "waiting", 10, what="dependent parked")
    assert h.job(a).state.value in ("queued", "running")
    h.wait_state(b, timeout=15)
    assert h.job(a).finished_at <= h.job(b).started_at
    bad = h.submit(user="z", payload={"final_error": "corrupt"})
    dep = h.submit(user="w", payload={}, after=[bad])
    job = h.wait_state(dep, states=("failed",), timeout=15)
    assert job.error.kind == "dependency_failed" and bad in job.error.message
    with pytest.raises(BadInput, match="no-such-job"):  # submit refuses an `after` id that does not exist
        h.submit(user="w", payload={}, after=["no-such-job"])
    # one that is gone by the job's start (a raw producer's entry, or a dependency expired since) fails it
    h.r.lpush(h.k.ready_lo, json.dumps({"kind": "behave", "user": "w", "id": "unknown", "after": ["no-such-job"]}))
    assert h.wait_state("unknown", states=("failed",)).error.kind == "dependency_failed"


def test_lock_value_is_the_attempt_token_and_ttl_covers_longest_timeout(h):
    h.daemon(workers=1)
    j = h.submit(user="t", payload={"sleep": 2, "record": str(h.records)})
    wait_until(lambda: (h.records / f"{j}.1.start").exists(), 15, what="start")
    key = h.k.lock("t")
    assert h.r.get(key).decode() == h.job(j).token
    # longest handler 60 s < extract's default 600 s: TTL = 600 + 0.5 + 60 s
    assert 600_000 < h.r.pttl(key) <= 660_500
    h.wait_state(j, timeout=15)
    assert h.r.get(key) is None


def test_two_supervisors_share_queue_and_locks(h):
    # Given two hosts' supervisors on one Redis (different host_ids, same prefix)
    h.daemon("a", workers=2)
    h.daemon("b", workers=2)
    # When many users' jobs arrive
    jobs = [h.submit(user=f"user{i % 4}", payload={"record": str(h.records), "sleep": 0.05}) for i in range(40)]
    workers = {h.wait_state(j, timeout=60).worker.rsplit("-slot", 1)[0] for j in jobs}
    # Then both hosts ran jobs, every job ran once, and no user ever had two jobs running at once
    assert workers == {f"ha-{h.prefix}", f"hb-{h.prefix}"}
    recs = records(h)
    assert len(recs) == 40 and all(h.job(j).attempts == 1 for j in jobs)
    by_user = {}
    for (_, _), (user, start, end) in recs.items():
        by_user.setdefault(user, []).append((start, end))
    for user, spans in by_user.items():
        spans.sort()
        for (s1, e1), (s2, _) in zip(spans, spans[1:]):
            assert s2 >= e1, f"{user}: overlap across hosts"
