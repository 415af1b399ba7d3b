"""The three protocol defects the Spin model found (model/README.md, "Findings"), each closed in Lua
and checked here against a real Redis at the exact interleaving the counterexample used:

1. requeue.lua ``deadline`` re-checks the claim stamp the reaper judged: an entry started since
   (start_job re-stamps it) is left alone, so the young attempt is not run a second time.
2. take.lua / settle_take.lua start nothing while the caller's host lease (its host key's PTTL) is
   shorter than ``min_lease_ms``: a slot whose supervisor stopped renewing starts no attempt that
   another host's reaper would then reclaim and re-run.
3. start.lua, and take.lua with an entry a BLMOVE gave, start only an entry still in the caller's
   own list (the reaper may have taken it back in between).

And the three the model found next on the retry paths (after a lost reply), closed in a9993b1: a
retried take checks LPOS and the lease too (only adopting its own first start is exempt), and a
retried settle_take whose first call re-took the very job it settled adopts that attempt.
"""

import msgspec
import pytest

from tender_pool.slots.queue import Empty, NoLease, Parked, Run, Stale, TakeArgs, Taken
from tender_pool.supervisor.types import SubmitRequest


def args(**kw) -> TakeArgs:
    return TakeArgs(worker="w-slot1", pid=4242, lock_ttl_ms=60_000, retention_s=3600, max_waits=100,
                    busy_ttl_ms=60_000, limits=msgspec.json.encode({"*": [10_000, 1]}), **kw)


@pytest.fixture
def q(h):
    h.config()
    return h.queue()


def submit(q, user="u") -> str:
    return q.enqueue(SubmitRequest(kind="noop", user=user, payload={}))[1]


REQ = dict(crash_cap=5, lock_ttl_ms=60_000, retention_s=3600)


@pytest.mark.timeout(30)
def test_a_deadline_requeue_leaves_an_entry_started_since_it_was_judged(h, q):
    # Given an entry a slot claimed and the reaper stamped (the slot sat between BLMOVE and its take)
    jid = submit(q)
    assert q.claim("proc:1", 0.1) == jid.encode()
    _, [(entry, judged)] = q.stamp("proc:1")
    # When the slot's take starts it (a new stamp) before the reaper's requeue lands
    h.r.hset(q.k.started, jid, judged - 1)  # an older stamp: any other value means "started since"
    t = q.take("proc:1", args(), "abc", entry=entry)
    assert isinstance(t, Taken) and isinstance(t.started, Run)
    # Then the requeue of the judged stamp is refused: the attempt runs once, its entry stays
    assert q.requeue("proc:1", entry, "deadline", list_dead=False, stamp=judged, **REQ) == "alive"
    assert h.r.lrange("proc:1", 0, -1) == [jid.encode()]
    assert q.get(jid).state.value == "running" and h.r.llen(q.k.ready_lo) == 0
    # ...while a requeue of the stamp it has now goes through
    now_stamp = int(h.r.hget(q.k.started, jid))
    assert q.requeue("proc:1", entry, "deadline", list_dead=False, stamp=now_stamp, **REQ) == "requeued"


@pytest.mark.timeout(30)
def test_take_starts_nothing_on_a_lapsing_lease_and_leaves_a_given_entry_in_the_list(h, q):
    host = q.k.host("ha")
    a = args(host_key=host, min_lease_ms=2_000)
    jid = submit(q)
    # no host key at all (expired): nothing claimed, nothing started
    assert isinstance(q.take("proc:1", a, "abc"), NoLease)
    assert h.r.llen("proc:1") == 0 and q.get(jid).state.value == "queued"
    # a key with 1 s left, 2 s required: an entry a BLMOVE gave stays in the list, not started
    h.r.set(host, "holder", px=1_000)
    assert q.claim("proc:1", 0.1) == jid.encode()
    t = q.take("proc:1", a, "abc", entry=jid.encode())
    assert t == NoLease(jid.encode())
    assert h.r.lrange("proc:1", 0, -1) == [jid.encode()] and q.get(jid).state.value == "queued"
    assert h.r.get(q.k.lock("u")) is None
    # renewed: it starts
    h.r.set(host, "holder", px=10_000)
    t = q.take("proc:1", a, "abc", entry=jid.encode())
    assert isinstance(t, Taken) and isinstance(t.started, Run)


@pytest.mark.timeout(30)
def test_settle_take_settles_but_takes_nothing_on_a_lapsing_lease(h, q):
    host = q.k.host("ha")
    h.r.set(host, "holder", px=10_000)
    a = args(host_key=host, min_lease_ms=2_000)
    jobs = {submit(q, "u1"), submit(q, "u2")}
    t = q.take("proc:1", a, "abc")
    assert isinstance(t, Taken) and isinstance(t.started, Run)
    first = t.entry.decode()
    (second,) = jobs - {first}
    h.r.pexpire(host, 500)
    job = q.get(first)
    reply, nxt = q.settle_take("proc:1", job, t.started.token, "completed", a, "def", result={})
    assert reply and isinstance(nxt, NoLease)
    assert q.get(first).state.value == "completed"
    assert q.get(second).state.value == "queued" and h.r.llen("proc:1") == 0


@pytest.mark.timeout(30)
def test_start_and_take_refuse_an_entry_no_longer_in_the_callers_list(h, q):
    jid = submit(q)
    assert q.claim("proc:1", 0.1) == jid.encode()
    # the reaper took it back (requeue.lua) before our take ran
    assert q.requeue("proc:1", jid.encode(), "deadline", list_dead=False, **REQ) == "requeued"
    assert isinstance(q.take("proc:1", args(), "abc", entry=jid.encode()), Empty)
    assert q.get(jid).state.value == "queued" and h.r.get(q.k.lock("u")) is None
    # start.lua (the slot's path for a record take.lua could not decode) refuses it the same way
    st = q.start("proc:1", q.get(jid), "w-slot1", 10_000, 60_000, 3600, 100)
    assert isinstance(st, Stale)
    assert q.get(jid).state.value == "queued" and h.r.get(q.k.lock("u")) is None
    assert h.r.lrange(q.k.ready_lo, 0, -1) == [jid.encode()]


# --- the retry paths (a reply lost, the call made again with the same suffix): Spin's findings 4-6 ---


@pytest.mark.timeout(30)
def test_a_retried_take_does_not_start_an_entry_its_first_call_parked_and_a_release_promoted(h, q):
    # Given the user's lock held by another attempt, and X claimed by our BLMOVE
    h.r.set(q.k.lock("u"), "9.other")
    x = submit(q)
    assert q.claim("proc:1", 0.1) == x.encode()
    # When our take parks X behind the lock, its reply is lost, and the lock's release promotes X
    # (reserved for it, back in ready) before our retry runs
    t = q.take("proc:1", args(), "abc", entry=x.encode())
    assert isinstance(t, Taken) and isinstance(t.started, Parked) and h.r.llen("proc:1") == 0
    assert h.r.lpop(q.k.wait("u")) == x.encode()
    h.r.set(q.k.lock("u"), f"r:{x}")
    h.r.rpush(q.k.ready_lo, x)
    again = q.take("proc:1", args(), "abc", entry=x.encode(), retry=True)
    # Then the retry starts nothing (before: it started X, running in no processing list)
    assert isinstance(again, Empty)
    assert q.get(x).state.value == "waiting" and h.r.lrange(q.k.ready_lo, 0, -1) == [x.encode()]


@pytest.mark.timeout(30)
def test_a_retried_take_checks_the_lease_unless_it_adopts_its_own_first_start(h, q):
    host = q.k.host("ha")
    a = args(host_key=host, min_lease_ms=2_000)
    x, y = submit(q, "u1"), submit(q, "u2")
    # a first call that never ran (lost on the way), then the lease lapses: the retry starts nothing
    h.r.set(host, "holder", px=500)
    first = q.claim("proc:1", 0.1)
    again = q.take("proc:1", a, "abc", entry=first, retry=True)
    assert again == NoLease(first) and q.get(first.decode()).state.value == "queued"
    # a first call that did start its job, its reply lost, the lease lapsing since: the retry adopts
    # that attempt (nothing new starts; the slot's poll stops it if the lease runs out)
    h.r.set(host, "holder", px=10_000)
    t = q.take("proc:1", a, "def", entry=first)
    assert isinstance(t, Taken) and isinstance(t.started, Run)
    h.r.pexpire(host, 500)
    again = q.take("proc:1", a, "def", entry=first, retry=True)
    assert isinstance(again, Taken) and again.started == t.started
    assert q.get(first.decode()).attempts == 1 and first.decode() in {x, y}


@pytest.mark.timeout(30)
def test_a_retried_settle_take_adopts_the_attempt_its_first_call_started_of_the_same_job(h, q):
    # Given X running (the only job), settled back to ready (an interruption) by a settle_take whose
    # take part started X again at once, and whose reply was lost
    x = submit(q)
    t = q.take("proc:1", args(), "abc")
    assert isinstance(t, Taken) and isinstance(t.started, Run)
    job = q.get(x)
    reply, nxt = q.settle_take("proc:1", job, t.started.token, "requeue", args(), "def")
    assert reply and isinstance(nxt, Taken) and nxt.started.token == "2.def"
    # When the slot retries that call (same token, same next suffix)
    reply2, nxt2 = q.settle_take("proc:1", job, t.started.token, "requeue", args(), "def", retry=True)
    # Then it adopts attempt 2 (before: the settle was fenced, removed attempt 2's entry from our
    # list and the take skipped X: a running job no slot runs, its lock held until the TTL)
    assert reply2 and isinstance(nxt2, Taken) and nxt2.started == nxt.started
    assert h.r.lrange("proc:1", 0, -1) == [x.encode()]
    got = q.get(x)
    assert got.state.value == "running" and got.attempts == 2 and got.interruptions == 1
    assert h.r.get(q.k.lock("u")).decode() == "2.def"
