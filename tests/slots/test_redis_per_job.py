"""A start (take.lua, settle_take.lua's take) and enqueue.lua write each state change and its event
in one HSET without reading the row back (lib/events row_values); a settle tells on_terminal the
state, user and kind it knows. What the event says must still be what the hash holds, and the
hash's ``event_id`` the event's stream id, on every path a start or a settle takes. And the number of
Redis commands each script runs for one no-op job stays at what it was cut to (bench/bench_pool.py
``--redis-only`` prints where the rest go)."""

import json

import msgspec
import pytest

from tender_pool.slots.queue import Ended, Parked, Started, TakeArgs, Taken

ROW = ("attempts", "tries", "worker", "error", "created_at", "started_at", "finished_at", "user", "kind")


def args(limits=None, max_waits=100) -> TakeArgs:
    return TakeArgs(worker="w-slot1", pid=4242, lock_ttl_ms=60_000, retention_s=3600, max_waits=max_waits,
                    busy_ttl_ms=60_000, limits=msgspec.json.encode(limits or {"*": [10_000, 1]}))


@pytest.fixture
def q(h):
    h.config()
    return h.queue()


def last_event(h, jid):
    """The newest queue-wide event of ``jid``: (stream id, body)."""
    for sid, fields in h.r.xrevrange(h.k.events, count=200):
        ev = json.loads(fields[b"e"])
        if ev.get("job_id") == jid:
            return sid.decode(), ev
    raise AssertionError(f"no event of {jid}")


def assert_row_is_the_hash(h, jid, state):
    """The last event of ``jid`` carries the hash's row fields as they are now, and the hash its id."""
    sid, ev = last_event(h, jid)
    hv = {k.decode(): v.decode() for k, v in h.r.hgetall(h.k.job(jid)).items()}
    assert hv["state"] == state and ev["job_state"] == state
    assert hv["event_id"] == sid
    for name in ROW:
        x = hv.get(name)
        if name == "error":
            want = json.loads(x) if x else None
            want = want if isinstance(want, dict) else None
        elif name in ("worker", "user", "kind"):
            want = x
        elif name in ("attempts", "tries"):
            want = int(x or 0)
        else:
            want = int(x) if x else None
        assert ev[name] == want, (name, ev, hv)


@pytest.mark.timeout(60)
def test_every_hot_path_change_writes_the_row_the_hash_holds(h, q):
    a = h.submit("noop", "ann", {})
    assert_row_is_the_hash(h, a, "queued")  # enqueue.lua: a new hash, no read-back
    t = q.take("p", args(), "s1")
    assert isinstance(t.started, Started)
    assert_row_is_the_hash(h, a, "running")
    # a failure that counts as a try, then settled as a retry: tries come from the HINCRBY
    r = q.settle("p", q.get(a), t.started.token, "retry", error=None, lock_ttl_ms=60_000, retention_s=3600,
                 backoff_ms=0, counts_try=True, worker="w-slot1")
    assert r.answer
    assert_row_is_the_hash(h, a, "queued")
    assert h.job(a).tries == 1
    q.promote_due()
    t = q.take("p", args(), "s2")
    assert isinstance(t.started, Started) and t.started.attempt == 2
    assert_row_is_the_hash(h, a, "running")
    # no handler started (a rejected input): the start is taken back out of attempts, then requeued
    q.settle("p", q.get(a), t.started.token, "requeue", lock_ttl_ms=60_000, retention_s=3600, launched=False)
    assert_row_is_the_hash(h, a, "queued")
    assert h.job(a).attempts == 1
    t = q.take("p", args(), "s3")
    assert isinstance(t.started, Started)
    # settle_take: the failure (an error row) and the next job's start in one script
    b = h.submit("noop", "bob", {})
    from tender_pool.store.records import JobError
    reply, nxt = q.settle_take("p", q.get(a), t.started.token, "failed", args(), "s4",
                               error=JobError("handler_failed", "boom"), counts_try=True)
    assert reply.answer and isinstance(nxt, Taken) and isinstance(nxt.started, Started)
    assert_row_is_the_hash(h, a, "failed")
    assert h.job(a).tries == 2
    assert_row_is_the_hash(h, b, "running")
    # its history indexes, from the state, user and kind the settle knew
    k = h.k
    assert h.r.zscore(k.finished_index("state:failed"), a) is not None
    assert h.r.zscore(k.finished_index("user:ann"), a) is not None
    assert h.r.zscore(k.finished_index("kind:noop"), a) is not None
    reply, nxt = q.settle_take("p", q.get(b), nxt.started.token, "completed", args(), "s5", result={"ok": 1})
    assert_row_is_the_hash(h, b, "completed")
    assert h.r.zscore(k.finished_index("state:completed"), b) is not None
    # the start's own ends and parks: behind the user's lock, cancelled, waited too long
    c1, c2 = h.submit("noop", "cy", {}), h.submit("noop", "cy", {})
    t1 = q.take("p", args(), "s6")
    assert t1.entry.decode() == c1 and isinstance(t1.started, Started)
    h.r.lpush(k.ready_lo, c2)  # a second entry of the same user while the first runs
    t2 = q.take("p", args(), "s7")
    assert t2.entry.decode() == c2 and t2.started == Parked("user", "cy")
    assert_row_is_the_hash(h, c2, "waiting")
    d = h.submit("noop", "dee", {})
    h.r.hset(k.job(d), "cancel", "1")
    t = q.take("p", args(), "s8")
    assert t.entry.decode() == d and isinstance(t.started, Ended) and t.started.state == "cancelled"
    assert_row_is_the_hash(h, d, "cancelled")
    assert h.r.zscore(k.finished_index("state:cancelled"), d) is not None
    e = h.submit("noop", "eve", {})
    t = q.take("p", args(max_waits=0), "s9")
    assert t.entry.decode() == e and isinstance(t.started, Ended) and t.started.state == "failed"
    assert_row_is_the_hash(h, e, "failed")


def calls(r):
    return {k: int(v["calls"]) for k, v in r.info("commandstats").items() if k != "cmdstat_info"}


def counted(r, fn):
    """(fn's result, the commands Redis ran for it, Lua-internal ones included)."""
    c0 = calls(r)
    out = fn()
    c1 = calls(r)
    return out, sum(v - c0.get(k, 0) for k, v in c1.items())


@pytest.mark.timeout(60)
def test_a_no_op_jobs_scripts_run_the_commands_they_were_cut_to(h, q):
    """The steady state of a busy slot: enqueue.lua for a new job (of a user with nothing running),
    then settle_take.lua settling the last job and starting it (per_user 1, no waiters, no
    dependents, a plain job). Before the cut: 12 for the submit (SCRIPT EXISTS, EVALSHA and 9
    inside, HGETALL), 36 for settle_take (XADD included); after it 9 and 33."""
    first = h.submit("noop", "u0", {})
    t = q.take("p", args(), "s0")
    assert isinstance(t.started, Started)
    nxt = t
    prev = first
    for i in range(1, 4):
        _, n_enqueue = counted(h.r, lambda: h.submit("noop", f"u{i}", {}))
        job, token = q.get(prev), nxt.started.token
        (reply, nxt), n_settle_take = counted(
            h.r, lambda: q.settle_take("p", job, token, "completed", args(), f"s{i}", result={}))
        assert reply.answer and isinstance(nxt.started, Started)
        prev = nxt.entry.decode()
        assert n_enqueue <= 1 + 8, n_enqueue  # Client.submit: EVALSHA and 7 inside, the HGETALL read-back
        assert n_settle_take <= 33, (i, n_settle_take)
    _, n_take = counted(h.r, lambda: q.take("p", args(), "x"))  # nothing queued: the cheap answer
    assert n_take <= 6


@pytest.mark.timeout(60)
def test_the_markdown_is_kept_by_the_settle_that_completes_the_job_and_by_no_other(h, q):
    """A parse_markdown attempt's Markdown (``Keys.markdown``) travels with its settle and is written
    by the same script, only when that settle completes the job: one round trip and one command
    fewer than the SET the slot sent before its settle (EVALSHA + 1 inside, where it was SET +
    EVALSHA); a fenced or failed attempt's copy is never written."""
    def started(user):
        jid = h.submit("noop", user, {})
        t = q.take("p", args(), "s-" + user)
        assert t.entry.decode() == jid and isinstance(t.started, Started)
        return jid, q.get(jid), t.started.token

    a, job, token = started("ann")
    # a fenced settle (another attempt owns the job now) keeps nothing
    assert not q.settle("p", job, token + "x", "completed", result={}, lock_ttl_ms=60_000, retention_s=3600,
                        markdown=(1, "# stale")).answer
    assert h.r.get(h.k.markdown(a, 1)) is None
    # the completing settle: the Markdown with it, under the attempt's number, with the retention
    reply = q.settle("p", job, token, "completed", result={}, lock_ttl_ms=60_000, retention_s=3600,
                     markdown=(1, "# 标题\n"))
    assert reply.answer and h.r.get(h.k.markdown(a, 1)).decode() == "# 标题\n"
    assert 3_500_000 < h.r.pttl(h.k.markdown(a, 1)) <= 3_600_000
    # settle_take too; a failure keeps none
    b, job, token = started("bob")
    reply, _ = q.settle_take("p", job, token, "failed", args(), "t1", markdown=(1, "# failed"))
    assert reply.answer and h.r.get(h.k.markdown(b, 1)) is None
    # the same settle of two jobs alike, without and with the Markdown
    c, job, token = started("cy")
    _, n_without = counted(h.r, lambda: q.settle_take("p", job, token, "completed", args(), "t2", result={}))
    d, job, token = started("dee")
    _, n_with = counted(h.r, lambda: q.settle_take("p", job, token, "completed", args(), "t3", result={},
                                                   markdown=(1, "# d")))
    assert h.r.get(h.k.markdown(c, 1)) is None and h.r.get(h.k.markdown(d, 1)) == b"# d"
    assert n_with == n_without + 1, (n_with, n_without)  # the SET inside the script, no call of its own
