"""An interactive job keeps its class on every path that puts it back or takes it out:
requeues, a settle's requeue, cancel and run cancel of its fair entry or of a parked
copy, a run's retry. Script-level, on a real Redis (no daemon): the lists are read directly."""

from __future__ import annotations

import msgspec
import pytest

from tender_pool.slots.queue import Parked, Started, TakeArgs

REQ = dict(crash_cap=5, lock_ttl_ms=60_000, retention_s=3600)


def args() -> TakeArgs:
    return TakeArgs(worker="w-slot1", pid=4242, lock_ttl_ms=60_000, retention_s=3600, max_waits=100,
                    busy_ttl_ms=60_000, limits=msgspec.json.encode({"*": [10_000, 1]}))


@pytest.fixture
def q(h):
    h.config()
    return h.queue()


def submit(h, user="u", priority="interactive") -> str:
    return h.submit("noop", user, priority=priority)


def ids(h, key) -> list[str]:
    return [x.decode() for x in h.r.lrange(key, 0, -1)]


@pytest.mark.timeout(30)
def test_a_running_interactive_job_requeued_after_a_crash_goes_back_to_the_front_of_ready_hi(h, q):
    k = q.k
    a = submit(h)
    t = q.take("proc:1", args(), "s1")
    assert isinstance(t.started, Started)
    other = submit(h, user="v")  # another user's interactive turn, queued meanwhile
    assert q.requeue("proc:1", a.encode(), "crash", list_dead=False, **REQ) == "requeued"
    assert ids(h, k.ready_hi)[-1] == a and other in ids(h, k.ready_hi)  # its class, at the pop end
    assert a.encode() not in h.r.lrange(k.ready_lo, 0, -1)
    assert q.get(a).state.value == "queued"
    # the batched requeue (a dead slot's whole list) does the same
    q.take("proc:2", args(), "s2")  # takes a again (the front)
    assert q.get(a).state.value == "running"
    assert dict(q.requeue_list_many("proc:2", "crash", **REQ)) == {a: "requeued"}
    assert ids(h, k.ready_hi)[-1] == a


@pytest.mark.timeout(30)
def test_a_settles_requeue_puts_an_interactive_job_back_on_ready_hi(h, q):
    k = q.k
    a = submit(h)
    t = q.take("proc:1", args(), "s1")
    submit(h, user="v")  # another user's interactive turn, queued meanwhile
    reply, nxt = q.settle_take("proc:1", q.get(a), t.started.token, "requeue", args(), "s2")
    # back at the front of its own class (not behind every interactive job, as on ready:lo), so
    # the same step's take starts it again at once
    assert isinstance(nxt.started, Started) and nxt.entry.decode() == a
    assert a.encode() not in h.r.lrange(k.ready_lo, 0, -1)


@pytest.mark.timeout(30)
def test_cancelling_a_users_interactive_fair_entry_passes_its_turn_to_its_next_interactive_job(h, q):
    k = q.k
    a, b = submit(h), submit(h)
    assert ids(h, k.ready_hi) == [a] and ids(h, k.hibacklog("u")) == [b]
    c = h.client()
    assert c.cancel(a).outcome == "cancelled"
    assert q.get(a).state.value == "cancelled"
    assert ids(h, k.ready_hi) == [b] and h.r.hget(k.inready_hi, "u").decode() == b
    assert h.r.llen(k.hibacklog("u")) == 0
    assert q.take("proc:1", args(), "s1").entry.decode() == b


@pytest.mark.timeout(30)
def test_run_cancel_takes_a_parked_interactive_job_out_of_the_users_wait_list(h, q):
    k = q.k
    c = h.client()
    run = c.submit_run("u", "noop", [{"key": "1", "payload": {}}, {"key": "2", "payload": {}}],
                       priority="interactive")
    first, second = ids(h, k.runjobs(run.id))
    assert isinstance(q.take("proc:1", args(), "s1").started, Started)
    assert q.take("proc:2", args(), "s2").started == Parked("user", "u")
    assert ids(h, k.wait("u")) == ["!" + second]
    res = c.cancel_run(run.id)
    assert res.cancelled == 1  # the parked one at once; the running one is signalled
    assert q.get(second).state.value == "cancelled"
    assert h.r.llen(k.wait("u")) == 0 and not h.r.sismember(k.waitusers, "u")


@pytest.mark.timeout(30)
def test_a_retried_interactive_run_queues_through_the_users_interactive_turn(h, q):
    k = q.k
    c = h.client()
    run = c.submit_run("u", "noop", [{"key": str(i), "payload": {}} for i in range(3)], priority="interactive")
    jobs = ids(h, k.runjobs(run.id))
    assert ids(h, k.ready_hi) == [jobs[0]] and ids(h, k.hibacklog("u")) == jobs[1:]
    c.cancel_run(run.id)
    assert h.r.llen(k.ready_hi) == 0 and h.r.llen(k.hibacklog("u")) == 0 and not h.r.hexists(k.inready_hi, "u")
    c.retry_run(run.id, cancelled=True)
    assert ids(h, k.ready_hi) == [jobs[0]] and ids(h, k.hibacklog("u")) == jobs[1:]
    assert h.r.llen(k.ready_lo) == 1 and h.r.lindex(k.ready_lo, 0) == b"~wake"  # bulk: only the wake token


@pytest.mark.timeout(30)
def test_an_interactive_job_queued_while_a_bulk_waiter_is_promoted_still_starts_before_it(h, q):
    # Given per_user = 1: the user's bulk b1 runs, b2 is parked behind the lock, and then its
    # interactive i1 is queued while every slot is busy (not parked: nobody claimed it yet)
    k = q.k
    b1, b2 = submit(h, priority="bulk"), submit(h, priority="bulk")
    t1 = q.take("proc:1", args(), "s1")
    assert t1.entry.decode() == b1 and isinstance(t1.started, Started)
    assert q.take("proc:2", args(), "s2").started == Parked("user", "u")
    i1 = submit(h)
    # When b1 settles: its release promotes b2 (the only waiter), and the same step's take claims i1
    _, nxt = q.settle_take("proc:1", q.get(b1), t1.started.token, "completed", args(), "s3")
    # Then i1 runs first, and b2 is back at the head of the user's bulk waiters, out of ready:lo
    assert nxt.entry.decode() == i1 and isinstance(nxt.started, Started)
    assert ids(h, k.wait("u")) == [b2] and b2 not in ids(h, k.ready_lo)
    assert h.r.sismember(k.waitusers, "u")
    # and b2 follows once i1 ends
    _, nxt = q.settle_take("proc:1", q.get(i1), nxt.started.token, "completed", args(), "s4")
    assert nxt.entry.decode() == b2 and isinstance(nxt.started, Started)
