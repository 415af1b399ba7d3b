"""The three protocol defects the Spin model found (model/README.md, "Findings"), each closed in Lua
and checked here against a real Redis at the exact interleaving the counterexample used:

1. requeue.lua ``deadline`` re-checks the claim stamp the reaper judged: an entry started since
   (start_job re-stamps it) is left alone, so the young attempt is not run a second time.
2. take.lua / settle_take.lua start nothing while the caller's host lease (its host key's PTTL) is
   shorter than ``min_lease_ms``: a slot whose supervisor stopped renewing starts no attempt that
   another host's reaper would then reclaim and re-run.
3. take.lua with an entry a BLMOVE gave, start only an entry still in the caller's
   own list (the reaper may have taken it back in between).

And the three the model found next on the retry paths (after a lost reply; model/README.md findings 4-6): a
retried take checks LPOS and the lease too (only adopting its own first start is exempt), and a
retried settle_take whose first call re-took the very job it settled adopts that attempt.

And a known two-fault corner: requeue.lua given a duplicate entry of a running job whose attempt is
owned by another list drops only the entry; before, it requeued the job under the live attempt (a
second attempt at once). The attempt names its processing list (``proc``, written by start_job):
another list that still holds the entry owns the job, whichever worker it belongs to (the same
worker's respawned slot included, which busy-state evidence alone could not tell apart); a job
started before ``proc`` existed is judged by that evidence (its worker is not the list's and that
worker's busy state names the job at its current attempt).
"""

import msgspec
import pytest

from support.requeue_ref import requeue_one_by_one
from tender_pool.slots.queue import Empty, NoLease, Parked, Started, TakeArgs, Taken


def args(**kw) -> TakeArgs:
    return TakeArgs(worker="w-slot1", pid=4242, lock_ttl_ms=60_000, retention_s=3600, max_waits=100,
                    busy_ttl_ms=60_000, limits=msgspec.json.encode({"*": [10_000, 1]}), **kw)


@pytest.fixture
def q(h):
    h.config()
    return h.queue()


def submit(h, user="u") -> str:
    return h.submit("noop", user)


REQ = dict(crash_cap=5, lock_ttl_ms=60_000, retention_s=3600)


@pytest.mark.timeout(30)
def test_a_deadline_requeue_leaves_an_entry_started_since_it_was_judged(h, q):
    # Given an entry a slot claimed and the reaper stamped (the slot sat between BLMOVE and its take)
    jid = submit(h)
    assert q.claim("proc:1", 0.1) == jid.encode()
    _, [(entry, judged)] = q.stamp("proc:1")
    # When the slot's take starts it (a new stamp) before the reaper's requeue lands
    h.r.hset(q.k.started, jid, judged - 1)  # an older stamp: any other value means "started since"
    t = q.take("proc:1", args(), "abc", entry=entry)
    assert isinstance(t, Taken) and isinstance(t.started, Started)
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
    jid = submit(h)
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
    assert isinstance(t, Taken) and isinstance(t.started, Started)


@pytest.mark.timeout(30)
def test_settle_take_settles_but_takes_nothing_on_a_lapsing_lease(h, q):
    host = q.k.host("ha")
    h.r.set(host, "holder", px=10_000)
    a = args(host_key=host, min_lease_ms=2_000)
    jobs = {submit(h, "u1"), submit(h, "u2")}
    t = q.take("proc:1", a, "abc")
    assert isinstance(t, Taken) and isinstance(t.started, Started)
    first = t.entry.decode()
    (second,) = jobs - {first}
    h.r.pexpire(host, 500)
    job = q.get(first)
    reply, nxt = q.settle_take("proc:1", job, t.started.token, "completed", a, "def", result={})
    assert reply and isinstance(nxt, NoLease)
    assert q.get(first).state.value == "completed"
    assert q.get(second).state.value == "queued" and h.r.llen("proc:1") == 0


@pytest.mark.timeout(30)
def test_take_refuses_an_entry_no_longer_in_the_callers_list(h, q):
    jid = submit(h)
    assert q.claim("proc:1", 0.1) == jid.encode()
    # the reaper took it back (requeue.lua) before our take ran
    assert q.requeue("proc:1", jid.encode(), "deadline", list_dead=False, **REQ) == "requeued"
    assert isinstance(q.take("proc:1", args(), "abc", entry=jid.encode()), Empty)
    assert q.get(jid).state.value == "queued" and h.r.get(q.k.lock("u")) is None
    # and so does a retry of that take (the call made again after a lost reply)
    assert isinstance(q.take("proc:1", args(), "abc", entry=jid.encode(), retry=True), Empty)
    assert q.get(jid).state.value == "queued" and h.r.get(q.k.lock("u")) is None
    assert h.r.lrange(q.k.ready_lo, 0, -1) == [jid.encode()]


# --- the retry paths (a reply lost, the call made again with the same suffix): Spin's findings 4-6 ---


@pytest.mark.timeout(30)
def test_a_retried_take_does_not_start_an_entry_its_first_call_parked_and_a_release_promoted(h, q):
    # Given the user's lock held by another attempt, and X claimed by our BLMOVE
    h.r.set(q.k.lock("u"), "9.other")
    x = submit(h)
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
    x, y = submit(h, "u1"), submit(h, "u2")
    # a first call that never ran (lost on the way), then the lease lapses: the retry starts nothing
    h.r.set(host, "holder", px=500)
    first = q.claim("proc:1", 0.1)
    again = q.take("proc:1", a, "abc", entry=first, retry=True)
    assert again == NoLease(first) and q.get(first.decode()).state.value == "queued"
    # a first call that did start its job, its reply lost, the lease lapsing since: the retry adopts
    # that attempt (nothing new starts; the slot's poll stops it if the lease runs out)
    h.r.set(host, "holder", px=10_000)
    t = q.take("proc:1", a, "def", entry=first)
    assert isinstance(t, Taken) and isinstance(t.started, Started)
    h.r.pexpire(host, 500)
    again = q.take("proc:1", a, "def", entry=first, retry=True)
    assert isinstance(again, Taken) and again.started == t.started
    assert q.get(first.decode()).attempts == 1 and first.decode() in {x, y}


@pytest.mark.timeout(30)
def test_a_retried_settle_take_adopts_the_attempt_its_first_call_started_of_the_same_job(h, q):
    # Given X running (the only job), settled back to ready (an interruption) by a settle_take whose
    # take part started X again at once, and whose reply was lost
    x = submit(h)
    t = q.take("proc:1", args(), "abc")
    assert isinstance(t, Taken) and isinstance(t.started, Started)
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


# --- a duplicate entry of a job running live under another worker (requeue.lua live_elsewhere) ---
# Slot B runs X (started by take.lua: job.worker = B, busy:B names X at its attempt); a copy of X's
# entry sits in slot A's list (a failover left it there). Before the fix requeue.lua, given that copy
# ('unclaim' by A's reconcile or NoLease, 'crash' for A's dead list, requeue_many.lua for a dead
# host's), released B's lock, set X queued with token '' and pushed it to ready: a second attempt
# could start while B's ran on until its next poll (~1 s) plus kill_grace.

A_PROC = ("ha", "inca", 1, 0)  # <host>:<incarnation>:<slot>.<n>: worker ha-slot1
B_PROC = ("hb", "incb", 2, 0)  # worker hb-slot2
B_WORKER = "hb-slot2"


def running_on_b(h, q):
    """X started by B through take.lua, and a duplicate entry of X in A's list."""
    pa, pb = q.k.proc(*A_PROC), q.k.proc(*B_PROC)
    x = submit(h)
    t = q.take(pb, msgspec.structs.replace(args(), worker=B_WORKER), "bbb")
    assert isinstance(t, Taken) and t.entry == x.encode() and t.started.token == "1.bbb"
    assert msgspec.json.decode(h.r.get(q.k.busy(B_WORKER)))["job_id"] == x
    h.r.rpush(pa, x)
    return x, pa, pb, t.started


def assert_still_bs(h, q, x, pa, pb, run, stamp):
    """X untouched: B's attempt, B's lock, B's entry and claim stamp; nothing in ready, A's copy gone."""
    got = q.get(x)
    assert got.state.value == "running" and got.token == run.token and got.attempts == 1
    assert got.interruptions == 0 and got.crashes == 0
    assert h.r.get(q.k.lock("u")) == run.token.encode()
    assert h.r.llen(q.k.ready_lo) == 0 and h.r.llen(q.k.ready_hi) == 0
    assert h.r.llen(pa) == 0 and h.r.lrange(pb, 0, -1) == [x.encode()]
    assert h.r.hget(q.k.started, x) == stamp


def settles_on_b(h, q, x, pb, run, worker=B_WORKER):
    reply = q.settle(pb, q.get(x), run.token, "completed", result={}, lock_ttl_ms=60_000, retention_s=3600,
                     worker=worker)
    assert reply.answer.value == "ok"
    assert q.get(x).state.value == "completed" and h.r.get(q.k.lock("u")) is None
    assert h.r.llen(pb) == 0 and h.r.get(q.k.busy(worker)) is None


@pytest.mark.timeout(30)
def test_requeue_of_a_duplicate_entry_leaves_the_attempt_running_live_under_another_worker(h, q):
    x, pa, pb, run = running_on_b(h, q)
    stamp = h.r.hget(q.k.started, x)
    # A's reconcile (or a NoLease put-back): 'unclaim'
    assert q.requeue(pa, x.encode(), "unclaim", list_dead=False, **REQ) == "gone"
    assert_still_bs(h, q, x, pa, pb, run, stamp)
    # A's dead list, requeued by its supervisor: 'crash' (no crash counted, the list dropped)
    h.r.rpush(pa, x)
    h.r.hset(q.k.proclists, pa, "ha\tinca|boot|1")
    assert q.requeue(pa, x.encode(), "crash", **REQ) == "gone"
    assert_still_bs(h, q, x, pa, pb, run, stamp)
    assert not h.r.hexists(q.k.proclists, pa)
    settles_on_b(h, q, x, pb, run)


@pytest.mark.timeout(30)
def test_requeue_many_of_a_dead_list_leaves_a_duplicate_of_an_attempt_live_elsewhere(h, q):
    x, pa, pb, run = running_on_b(h, q)
    stamp = h.r.hget(q.k.started, x)
    # beside it in A's dead list, an entry of a queued job: requeued as ever
    y = submit(h, "u2")
    assert h.r.lmove(q.k.ready_lo, pa, "RIGHT", "LEFT") == y.encode()
    out = dict(q.requeue_list_many(pa, "crash", **REQ))
    assert out == {x: "gone", y: "requeued"}
    assert h.r.lrange(q.k.ready_lo, 0, -1) == [y.encode()]
    h.r.lpop(q.k.ready_lo)
    assert_still_bs(h, q, x, pa, pb, run, stamp)
    # the per-entry path (requeue.lua itself, one call an entry) agrees
    h.r.rpush(pa, x)
    assert requeue_one_by_one(q, pa, "unclaim", list_dead=False, **REQ) == [(x, "gone")]
    assert_still_bs(h, q, x, pa, pb, run, stamp)
    settles_on_b(h, q, x, pb, run)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("evidence", ["no busy state", "busy names another job", "busy names an older attempt"])
def test_a_duplicate_entry_is_requeued_without_the_other_workers_busy_evidence(h, q, evidence):
    x, pa, pb, run = running_on_b(h, q)
    # a job started before start_job wrote `proc`: only the busy evidence tells its attempt is live
    assert h.r.hdel(q.k.job(x), "proc") == 1
    # with the evidence, the copy goes and B's attempt is left alone ...
    assert q.requeue(pa, x.encode(), "unclaim", list_dead=False, **REQ) == "gone"
    assert q.get(x).state.value == "running"
    # ... without it (B's busy state gone, naming another job, or an older attempt of X), the entry
    # is requeued as before the fix: a job whose worker may be gone is never stranded
    busy = q.k.busy(B_WORKER)
    st = msgspec.json.decode(h.r.get(busy))
    if evidence == "no busy state":
        h.r.delete(busy)
    elif evidence == "busy names another job":
        h.r.set(busy, msgspec.json.encode({**st, "job_id": "another"}))
    else:
        h.r.set(busy, msgspec.json.encode({**st, "attempt": st["attempt"] - 1}))
    h.r.rpush(pa, x)
    assert q.requeue(pa, x.encode(), "unclaim", list_dead=False, **REQ) == "requeued"
    got = q.get(x)
    assert got.state.value == "queued" and not got.token and got.interruptions == 1
    assert h.r.lrange(q.k.ready_lo, 0, -1) == [x.encode()] and h.r.get(q.k.lock("u")) is None
    # B's attempt is fenced now (its poll sees the token change): its settle changes nothing
    reply = q.settle(pb, q.get(x), run.token, "completed", result={}, lock_ttl_ms=60_000, retention_s=3600,
                     worker=B_WORKER)
    assert reply.answer.value == "fenced" and q.get(x).state.value == "queued"


@pytest.mark.timeout(30)
def test_a_duplicate_entry_is_requeued_when_the_attempts_own_list_no_longer_holds_it(h, q):
    # B runs X (busy:B names it) but B's list lost X's entry (a failover's rollback): A's copy is the
    # only entry of a running job left, so it is requeued as before (never strand it), busy or not
    x, pa, pb, run = running_on_b(h, q)
    assert h.r.lrem(pb, 0, x) == 1
    assert q.requeue(pa, x.encode(), "unclaim", list_dead=False, **REQ) == "requeued"
    got = q.get(x)
    assert got.state.value == "queued" and not got.token and got.interruptions == 1
    assert h.r.lrange(q.k.ready_lo, 0, -1) == [x.encode()] and h.r.get(q.k.lock("u")) is None


# --- the same worker's respawned slot (the gap the model found in busy evidence alone) ---
# Worker W's slot died after its take; its supervisor respawned it (same worker id, a new incarnation,
# a new list L2) before it requeued the dead incarnation's list L1. X, requeued meanwhile, was started
# by W again from L2, and a copy of X's entry is still in L1. requeue.lua on busy evidence alone, given L1's copy,
# saw X's worker equal L1's and requeued X under W's live attempt: a second attempt. Now X's `proc`
# (L2, which holds the entry) names the list that owns it.

W_DEAD = ("hw", "inc1", 3, 0)  # worker hw-slot3, the incarnation that died
W_NEW = ("hw", "inc2", 3, 0)   # the same worker, respawned
W_WORKER = "hw-slot3"


def running_on_the_respawned_slot(h, q):
    l1, l2 = q.k.proc(*W_DEAD), q.k.proc(*W_NEW)
    x = submit(h)
    t = q.take(l2, msgspec.structs.replace(args(), worker=W_WORKER), "www")
    assert isinstance(t, Taken) and t.entry == x.encode() and isinstance(t.started, Started)
    assert h.r.hget(q.k.job(x), "proc") == l2.encode() and q.get(x).worker == W_WORKER
    assert msgspec.json.decode(h.r.get(q.k.busy(W_WORKER)))["job_id"] == x
    h.r.rpush(l1, x)
    h.r.hset(q.k.proclists, l1, "hw\tinc1|boot|1")
    return x, l1, l2, t.started


@pytest.mark.timeout(30)
@pytest.mark.parametrize("path", ["requeue.lua", "requeue_many.lua"])
def test_requeue_of_a_dead_incarnations_list_leaves_the_same_workers_attempt_from_its_new_list(h, q, path):
    x, l1, l2, run = running_on_the_respawned_slot(h, q)
    stamp = h.r.hget(q.k.started, x)
    # the supervisor's requeue of the dead incarnation's list: 'crash', owner '' (it saw the death)
    if path == "requeue.lua":
        assert q.requeue(l1, x.encode(), "crash", **REQ) == "gone"
    else:
        assert q.requeue_list_many(l1, "crash", **REQ) == [(x, "gone")]
    # X still W's attempt from L2: its token and lock, L2's entry and stamp; nothing in ready, no
    # crash counted, L1 empty and dropped from proclists
    assert_still_bs(h, q, x, l1, l2, run, stamp)
    assert not h.r.hexists(q.k.proclists, l1)
    settles_on_b(h, q, x, l2, run, worker=W_WORKER)
