"""The batched requeue of a whole processing list (``Queue.requeue_list_many``, requeue_many.lua:
requeue.lua's own text run per entry, the job's keys built in Lua from the queue's base) against the
per-entry calls it replaced (``support.requeue_ref``: requeue.lua, one call per entry), at a real Redis.

- The same world (a lock holder with a waiter parked behind it, a semaphore holder, a run's job, a
  job at its crash cap with a dependent parked on it, a claimed-only entry, a finished job's leftover
  copy, a raw producer entry; a user name with colons, spaces and a non-ASCII letter) requeued both
  ways leaves Redis byte for byte the same, times aside, with the same verdicts: every key name
  the batch builds is the one keys.py spells (each misspelt in turn fails here, except
  backlog:<user>: it is in requeue.lua's state block, but none of requeue.lua's paths touches it).
- The reaper requeues exactly the dead host's lists and leaves a live owner's alone; an owner seen
  dead when the pass read its host key but back when the requeue runs keeps its entries (the
  owner re-check inside the script, per entry); an entry another reaper requeued between our read
  of the list and our call is not requeued twice.
- Lists longer than one call, and than one round trip of calls, are done whole; many lists share
  round trips, each keeping its own verdicts and owner re-check.
"""

from __future__ import annotations

import re
import time

import msgspec
import pytest

from support.requeue_ref import requeue_one_by_one
from tender_pool.slots.queue import Parked, Queue, Started, TakeArgs, Taken
from tender_pool.store.config import load
from tender_pool.store.keys import Owner
from tender_pool.supervisor.housekeeper import Housekeeper

USER = "we:ird user é"
CAP = dict(crash_cap=3, lock_ttl_ms=60_000, retention_s=3600)
DEAD = Owner("deadhost", "inc1", "boot", 4242)
LIMITS = {"*": [60_000, 1], "semkind": [60_000, 2]}


def take_args(worker: str = "w-dead") -> TakeArgs:
    return TakeArgs(worker=worker, pid=4242, lock_ttl_ms=60_000, retention_s=3600, max_waits=100,
                    busy_ttl_ms=60_000, limits=msgspec.json.encode(LIMITS))


@pytest.fixture
def q(h):
    h.config()
    q = h.queue()
    assert q.k.base == h.k.base
    return q


def claim(h, q, proc: str, jid: str):
    """As the dead host's slot did: BLMOVE that entry into its list, then take.lua on it."""
    assert h.r.lrem(q.k.ready_hi, 1, jid) == 1
    h.r.lpush(proc, jid)
    # the worker that owns ``proc`` (<host>-slot<N>, as the pool names them): requeue.lua tells a
    # duplicate entry of an attempt running under another worker by that
    m = re.search(r":proc:([^:]+):[^:]+:(\d+)\.\d+$", proc)
    return q.take(proc, take_args(f"{m[1]}-slot{m[2]}" if m else "w-dead"), f"s-{jid}", entry=jid.encode())


def world(h, q) -> str:
    """A dead host's list holding one entry of every kind requeue.lua tells apart, each touching the
    keys of its kind when requeued; returns the list."""
    k = q.k
    proc = k.proc(DEAD.host, DEAD.incarnation, 1, 1)
    h.r.hset(k.proclists, proc, DEAD.encode())
    client = h.client()

    def sub(jid, user, kind="noop", **kw):
        h.submit(kind, user, id=jid, priority="interactive", **kw)

    sub("a1", USER)
    sub("a2", USER)  # parks behind a1's lock: wait:<user>, handed the lock when a1 is requeued
    for jid in ("s1", "s2", "s3"):
        sub(jid, "sam", kind="semkind")  # per_user 2: s3 parks in semwait:<kind>:<user>
    sub("e1", "eve")  # at its crash cap: failed, on_terminal
    sub("d1", "dan", after=["e1"])  # parked on e1 (deps:e1), released by its failure
    sub("c1", "cat")  # claimed, never started
    sub("g1", "gus")  # a finished job's leftover copy
    # R1: max_parallel 1, R1/2 parks in runwait:R1 until R1/1 stops running; R2: its one job at its
    # crash cap, so the run finishes (events:run:R2, the run's keys expire)
    client.submit_run("rita", "noop", [{"key": "i1", "payload": {}}, {"key": "i2", "payload": {}}],
                      priority="interactive", max_parallel=1, run_id="R1")
    client.submit_run("rob", "noop", [{"key": "i1", "payload": {}}], priority="interactive", run_id="R2")
    for jid in ("a1", "s1", "s2", "e1", "R1/1", "R2/1", "g1"):
        t = claim(h, q, proc, jid)
        assert isinstance(t, Taken) and isinstance(t.started, Started), (jid, t)
    assert claim(h, q, proc, "a2").started == Parked("user", USER)
    assert isinstance(claim(h, q, proc, "s3").started, Parked)
    assert h.r.lrange(k.semwait("semkind", "sam"), 0, -1) == [b"!s3"]  # an interactive park: '!' + id
    assert isinstance(claim(h, q, proc, "R1/2").started, Parked)
    assert h.r.lrange(k.runwait("R1"), 0, -1) == [b"!R1/2"]
    assert claim(h, q, proc, "d1").started == Parked("dependency", "e1")
    h.r.lrem(k.ready_hi, 1, "c1")
    h.r.lpush(proc, "c1")
    for jid in ("e1", "R2/1"):
        h.r.hset(k.job(jid), "crashes", 2)  # the next interruption reaches the crash cap (3)
    h.r.hset(k.job("g1"), "state", "completed")
    h.r.lpush(proc, "not a job {")  # a raw producer entry
    assert h.r.get(k.lock(USER)) == b"1.s-a1" and h.r.zcard(k.sem("semkind", "sam")) == 2
    return proc


TIME = re.compile(rb"\d{12,14}(-\d+)?")  # ms times and stream ids (event_id) differ between the two runs; of a TTL, only whether there is one


def dump(r) -> dict:
    out = {}
    for key in sorted(r.keys("*")):
        t = r.type(key)
        if t == b"string":
            v = r.get(key)
        elif t == b"hash":
            v = sorted(r.hgetall(key).items())
        elif t == b"list":
            v = r.lrange(key, 0, -1)
        elif t == b"set":
            v = sorted(r.smembers(key))
        elif t == b"zset":
            v = sorted(r.zrange(key, 0, -1))
        elif t == b"stream":
            v = [sorted(f.items()) for _, f in r.xrange(key)]
        else:
            raise AssertionError(f"{key!r}: type {t!r}")
        out[key] = (TIME.sub(b"T", repr(v).encode()), r.pttl(key) > 0)
    return out


@pytest.mark.timeout(60)
@pytest.mark.parametrize("owner", ["dead host", "own dead slot"])
def test_the_batch_leaves_redis_as_the_per_entry_calls_do(h, q, owner):
    # Given a dead host's list with one entry of every kind, requeued entry by entry (the old path)
    kw = dict(owner_host=DEAD.host, owner_incarnation=DEAD.holder) if owner == "dead host" else {}
    proc = world(h, q)
    one_by_one = requeue_one_by_one(q, proc, "crash", **CAP, **kw)
    expected = dump(h.r)
    # When the same world is requeued through requeue_many.lua
    h.r.flushdb()
    proc = world(h, q)
    batch = q.requeue_list_many(proc, "crash", **CAP, **kw)
    # Then the verdicts and every key are the same
    assert batch == one_by_one
    assert dict(batch) == {"a1": "requeued", "s1": "requeued", "s2": "requeued", "e1": "failed", "R1/1": "requeued",
                           "R2/1": "failed", "g1": "gone", "c1": "requeued", "not a job {": "raw"}
    assert dump(h.r) == expected
    # (and that world is the requeued one: the lock passed to the waiter, the semaphore freed and
    # its waiter let go, the dependent released by the failure, R1's held
    # job let go, R2 finished, the dead list gone)
    k = q.k
    assert h.r.get(k.lock(USER)) == b"r:a2" and h.r.zcard(k.sem("semkind", "sam")) == 0
    assert queued(h, q) == sorted([b"a1", b"a2", b"s1", b"s2", b"s3", b"R1/1", b"R1/2", b"c1", b"d1",
                                   b"not a job {"])
    assert h.r.hget(k.job("e1"), "state") == b"failed" and h.r.hget(k.job("a1"), "state") == b"queued"
    assert h.r.hget(k.run("R1"), "running") == b"0" and h.r.llen(k.runwait("R1")) == 0
    assert h.r.hget(k.run("R2"), "state") == b"failed" and h.r.xlen(k.run_events("R2")) > 0
    assert not h.r.exists(proc) and not h.r.hexists(k.proclists, proc)


def housekeeper(h, q) -> tuple[Housekeeper, list]:
    logged: list = []

    class Log:
        def __getattr__(self, level):
            return lambda event, **kw: logged.append((event, kw))

    cfg = load(str(h.tmp / "a.toml"), {})
    hk = Housekeeper(cfg, q, Owner(cfg.pool.host_id, "live", "boot", 1), Log())
    hk.quiet_enough = lambda now: True  # a fresh server: the outage guard would wait out its uptime
    return hk, logged


def queued(h, q) -> list[bytes]:
    """The ready lists' job entries, sorted (without the ~wake tokens interactive pushes leave): a
    requeued interactive job goes back to ready:hi, a raw entry to ready:lo."""
    ready = h.r.lrange(q.k.ready_hi, 0, -1) + h.r.lrange(q.k.ready_lo, 0, -1)
    return sorted(e for e in ready if e != b"~wake")


def running_list(h, q, owner: Owner, jobs: list[str]) -> str:
    proc = q.k.proc(owner.host, owner.incarnation, 1, 1)
    h.r.hset(q.k.proclists, proc, owner.encode())
    for jid in jobs:
        h.submit("noop", f"u-{jid}", id=jid, priority="interactive")
        assert isinstance(claim(h, q, proc, jid).started, Started)
    return proc


@pytest.mark.timeout(60)
def test_the_reaper_requeues_exactly_the_dead_hosts_entries(h, q):
    # Given a dead host's list and a live host's, each with running jobs
    live = Owner("livehost", "inc9", "boot", 99)
    h.r.set(q.k.host(live.host), live.holder, px=60_000)
    dead_proc = running_list(h, q, DEAD, ["d1", "d2", "d3"])
    live_proc = running_list(h, q, live, ["l1", "l2"])
    hk, logged = housekeeper(h, q)
    empty = q.k.proc(DEAD.host, DEAD.incarnation, 2, 1)  # an idle slot's registered, empty list
    h.r.hset(q.k.proclists, empty, DEAD.encode())
    # When the reaper passes
    hk.reap(time.monotonic())
    # Then the dead host's jobs are queued once each, its list gone; the live host's untouched
    k = q.k
    assert queued(h, q) == [b"d1", b"d2", b"d3"]
    assert not h.r.exists(dead_proc) and not h.r.hexists(k.proclists, dead_proc)
    assert not h.r.hexists(k.proclists, empty)
    assert sorted(h.r.lrange(live_proc, 0, -1)) == [b"l1", b"l2"]
    assert {h.r.hget(k.job(j), "state") for j in ("l1", "l2")} == {b"running"}
    assert hk.reclaimed == 3
    assert sorted(kw["job_id"] for e, kw in logged if e == "reclaimed") == ["d1", "d2", "d3"]
    for j in ("d1", "d2", "d3"):
        assert h.r.hmget(k.job(j), "state", "token", "interruptions", "crashes") == [b"queued", b"", b"1", b"1"]


@pytest.mark.timeout(60)
def test_an_owner_back_by_the_time_of_the_requeue_keeps_its_entries(h, q):
    # Given a list whose host key was missing when the pass read the host keys ...
    proc = running_list(h, q, DEAD, ["j1", "j2"])
    hk, logged = housekeeper(h, q)
    # ... but holds the list's owner again when the requeue runs (the key had lapsed, not the host)
    h.r.set(q.k.host(DEAD.host), DEAD.holder, px=60_000)
    # When the reaper judges the list with what it read
    hk.check_list(proc, DEAD, time.monotonic(), {DEAD.host: None})
    # Then the script's own re-check of the owner leaves every entry where it was
    assert sorted(h.r.lrange(proc, 0, -1)) == [b"j1", b"j2"]
    assert queued(h, q) == [] and hk.reclaimed == 0
    assert {h.r.hget(q.k.job(j), "state") for j in ("j1", "j2")} == {b"running"}
    assert h.r.hexists(q.k.proclists, proc)
    # And once the owner is really gone, the same call takes them back
    h.r.delete(q.k.host(DEAD.host))
    hk.check_list(proc, DEAD, time.monotonic(), {DEAD.host: None})
    assert queued(h, q) == [b"j1", b"j2"] and hk.reclaimed == 2


@pytest.mark.timeout(60)
def test_an_entry_requeued_by_another_reaper_after_our_read_is_not_requeued_twice(h, q, monkeypatch):
    # Given a dead host's list, and another reaper that requeues its first entry right after our
    # read of the list (entry by entry, requeue.lua)
    proc = running_list(h, q, DEAD, ["j1", "j2", "j3"])
    pipeline = q.r.pipeline

    def pipeline_then_race(*a, **kw):
        p = pipeline(*a, **kw)
        execute = p.execute

        def execute_then_race():
            reads = [args[1] for args, _ in p.command_stack if args[0] == "LRANGE"]
            res = execute()
            if reads == [proc]:
                assert q.requeue(proc, res[0][0], "crash", **CAP, owner_host=DEAD.host,
                                 owner_incarnation=DEAD.holder) == "requeued"
            return res

        p.execute = execute_then_race
        return p

    monkeypatch.setattr(q.r, "pipeline", pipeline_then_race)
    # When our batch requeues the list as we read it
    verdicts = dict(q.requeue_list_many(proc, "crash", **CAP, owner_host=DEAD.host, owner_incarnation=DEAD.holder))
    # Then the raced entry is 'gone' for us: queued once, interrupted once
    first = next(j for j, v in verdicts.items() if v == "gone")
    assert sorted(verdicts.values()) == ["gone", "requeued", "requeued"]
    assert queued(h, q) == [b"j1", b"j2", b"j3"]
    assert h.r.hmget(q.k.job(first), "interruptions", "crashes") == [b"1", b"1"]
    assert not h.r.exists(proc) and not h.r.hexists(q.k.proclists, proc)


@pytest.mark.timeout(60)
def test_a_list_longer_than_a_call_and_a_round_trip_is_done_whole(h, q, monkeypatch):
    # Given calls of 7 entries, 3 calls a round trip (21 entries): 53 claimed entries = 8 calls in 3
    # round trips, the first on a Redis that has not loaded the script yet (NOSCRIPT: made again)
    monkeypatch.setattr(Queue, "REQUEUE_MANY_CALL", 7)
    monkeypatch.setattr(Queue, "REQUEUE_MANY_TRIP", 21)
    h.r.script_flush()
    k = q.k
    proc = k.proc(DEAD.host, DEAD.incarnation, 1, 1)
    h.r.hset(k.proclists, proc, DEAD.encode())
    ids = [f"j{i:02}" for i in range(53)]
    for jid in ids:
        h.submit("noop", f"u{jid}", id=jid)
    for _ in ids:
        h.r.lmove(k.ready_lo, proc, "RIGHT", "LEFT")
    listed = [e.decode() for e in h.r.lrange(proc, 0, -1)]
    assert sorted(listed) == ids and h.r.llen(k.ready_lo) == 0
    # When the list is requeued
    out = q.requeue_list_many(proc, "crash", **CAP, owner_host=DEAD.host, owner_incarnation=DEAD.holder)
    # Then every entry came back once, with its verdict in the list's order
    assert [e for e, _ in out] == listed
    assert {v for _, v in out} == {"requeued"}
    assert sorted(h.r.lrange(k.ready_lo, 0, -1)) == [i.encode() for i in ids]
    assert not h.r.exists(proc) and not h.r.hexists(k.proclists, proc)
    # and an empty dead list left registered is dropped
    h.r.hset(k.proclists, proc, DEAD.encode())
    assert q.requeue_list_many(proc, "crash", **CAP, owner_host=DEAD.host, owner_incarnation=DEAD.holder) == []
    assert not h.r.hexists(k.proclists, proc)


@pytest.mark.timeout(60)
def test_many_lists_of_dead_and_live_owners_in_shared_round_trips(h, q, monkeypatch):
    # Given calls of 4 entries, 10 a round trip, and lists of 0, 1, 9 and 3 entries of three dead
    # hosts (the last two of one host), and a live host's list of 2 passed along with them as if
    # judged dead (the owner re-check keeps it)
    monkeypatch.setattr(Queue, "REQUEUE_MANY_CALL", 4)
    monkeypatch.setattr(Queue, "REQUEUE_MANY_TRIP", 10)
    k = q.k
    owners = [Owner(f"dead{n}", "i", "b", n) for n in range(3)] + [Owner("live", "i", "b", 9)]
    h.r.set(k.host("live"), owners[3].holder, px=60_000)
    sizes = [0, 1, 9, 3, 2]
    lists, n = [], 0
    for x, size in enumerate(sizes):
        owner = owners[(0, 1, 2, 2, 3)[x]]
        proc = k.proc(owner.host, owner.incarnation, x, 1)
        h.r.hset(k.proclists, proc, owner.encode())
        for _ in range(size):
            h.submit("noop", f"u{n}", id=f"j{n}")
            h.r.lmove(k.ready_lo, proc, "RIGHT", "LEFT")
            n += 1
        lists.append((proc, owner.host, owner.holder))
    listed = [[e.decode() for e in h.r.lrange(p, 0, -1)] for p, _, _ in lists]
    # When they are requeued together
    out = q.requeue_lists_many(lists, "crash", **CAP)
    # Then each list's verdicts come back in its own order; the dead ones are emptied and dropped
    assert [[e for e, _ in pairs] for pairs in out] == listed
    assert [{v for _, v in pairs} for pairs in out] == [set(), {"requeued"}, {"requeued"}, {"requeued"}, {"alive"}]
    assert queued(h, q) == sorted(e.encode() for pairs in out[:4] for e, _ in pairs)
    for proc, _, _ in lists[:4]:
        assert not h.r.exists(proc) and not h.r.hexists(k.proclists, proc)
    assert h.r.llen(lists[4][0]) == 2 and h.r.hexists(k.proclists, lists[4][0])
