"""take.lua builds a job's own key names in Lua from the queue's base (the job is only known once
the script has moved it into the processing list). These tests check that every name it touches is
spelled as store/keys.py spells it, and that the start it runs keeps the start's rules: the
user's lock, parking behind it, dependencies, the fairness backlog, the semaphore, the busy state."""

import json

import msgspec
import pytest

from tender_pool.slots.queue import Empty, Parked, RawEntry, Started, TakeArgs, Taken

USER = "we:ird user é"  # colons and spaces are allowed in users; the names must still match Keys


def args(limits=None) -> TakeArgs:
    return TakeArgs(worker="w-slot1", pid=4242, lock_ttl_ms=60_000, retention_s=3600, max_waits=100,
                    busy_ttl_ms=60_000, limits=msgspec.json.encode(limits or {"*": [10_000, 1]}))


def submit(h, user=USER, kind="noop", **kw) -> str:
    return h.submit(kind, user, {"file": "/x/y.doc"}, **kw)


@pytest.fixture
def q(h):
    h.config()
    return h.queue()


@pytest.mark.timeout(30)
def test_take_starts_the_job_under_the_keys_keys_py_names(h, q):
    k = q.k
    jid = submit(h)
    t = q.take("proc:1", args({"noop": [12_000, 1], "*": [1, 1]}), "abc")
    assert isinstance(t, Taken) and isinstance(t.started, Started)
    assert t.entry.decode() == jid and t.record[b"user"].decode() == USER  # the record, as read
    st = t.started
    assert st.token == "1.abc" and st.attempt == 1
    assert h.r.get(k.lock(USER)).decode() == st.token
    assert h.r.lrange("proc:1", 0, -1) == [jid.encode()]
    assert h.r.hget(k.started, jid) is not None
    assert h.r.hget(k.active, USER) == b"1"
    job = q.get(jid)
    assert job.state.value == "running" and job.attempts == 1 and job.timeout_ms == 12_000 and job.worker == "w-slot1"
    busy = json.loads(h.r.get(k.busy("w-slot1")))
    assert busy == {"worker": "w-slot1", "pid": 4242, "kind": "noop", "job_id": jid, "user": USER,
                    "file": "/x/y.doc", "attempt": 1, "started_at": st.started_ms}
    # a retry with the same suffix (its reply was lost) gets the same attempt back, nothing new
    again = q.take("proc:1", args(), "abc", retry=True)
    assert isinstance(again, Taken) and again.started == st
    assert q.get(jid).attempts == 1
    assert isinstance(q.take("proc:1", args(), "def"), Empty)


@pytest.mark.timeout(30)
def test_take_parks_behind_the_users_lock_and_a_dependency_under_keys_names(h, q):
    k = q.k
    first = submit(h, priority="interactive")
    second = submit(h, priority="interactive")
    assert isinstance(q.take("p", args(), "s1").started, Started)
    # bob runs nothing: his interactive turn goes ahead of the user's next one (round robin)
    other = submit(h, user="bob", after=[first], priority="interactive")
    t = q.take("p", args(), "s2")
    assert t.started == Parked("dependency", first)
    assert h.r.lrange(k.deps(first), 0, -1) == [b"!" + other.encode()]  # an interactive park: '!' + id
    t = q.take("p", args(), "s3")
    assert t.started == Parked("user", USER)
    assert h.r.lrange(k.wait(USER), 0, -1) == [b"!" + second.encode()]
    assert h.r.sismember(k.waitusers, USER)
    assert h.r.lrange("p", 0, -1) == [first.encode()]  # parked entries left the processing list


@pytest.mark.timeout(30)
def test_take_tops_up_the_users_fair_entry_from_its_backlog(h, q):
    k = q.k
    a, b = submit(h), submit(h)
    assert h.r.hget(k.inready, USER).decode() == a and h.r.lrange(k.backlog(USER), 0, -1) == [b.encode()]
    assert isinstance(q.take("p", args(), "s1").started, Started)
    assert h.r.hget(k.inready, USER).decode() == b and h.r.llen(k.backlog(USER)) == 0
    assert h.r.lrange(k.ready_lo, 0, -1) == [b.encode()]


@pytest.mark.timeout(30)
def test_take_uses_the_kinds_semaphore_under_keys_names(h, q):
    k = q.k
    jid = submit(h, kind="multi")
    st = q.take("p", args({"multi": [10_000, 2], "*": [10_000, 1]}), "s1").started
    assert isinstance(st, Started)
    assert h.r.zrange(k.sem("multi", USER), 0, -1) == [st.token.encode()]
    assert h.r.get(k.lock(USER)) is None and q.get(jid).conc == "sem"


@pytest.mark.timeout(30)
def test_take_leaves_raw_entries_and_drops_wake_tokens(h, q):
    k = q.k
    h.r.lpush(k.ready_lo, b'{"kind": "noop", "user": "x"}')
    h.r.rpush(k.ready_lo, k.WAKE)  # at the pop end
    t = q.take("p", args(), "s1")
    assert t == RawEntry(b'{"kind": "noop", "user": "x"}')
    assert h.r.lrange("p", 0, -1) == [t.entry] and h.r.llen(k.ready_lo) == 0


@pytest.mark.timeout(30)
def test_take_tops_up_the_users_interactive_fair_entry_from_its_own_backlog(h, q):
    k = q.k
    a, b = submit(h, priority="interactive"), submit(h, priority="interactive")
    assert h.r.hget(k.inready_hi, USER).decode() == a and h.r.lrange(k.hibacklog(USER), 0, -1) == [b.encode()]
    assert h.r.lrange(k.ready_hi, 0, -1) == [a.encode()] and h.r.llen(k.backlog(USER)) == 0
    assert isinstance(q.take("p", args(), "s1").started, Started)
    assert h.r.hget(k.inready_hi, USER).decode() == b and h.r.llen(k.hibacklog(USER)) == 0
    assert h.r.lrange(k.ready_hi, 0, -1) == [b.encode()]
