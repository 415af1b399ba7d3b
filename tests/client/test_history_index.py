"""History off its indexes (lib/terminal.lua ``on_terminal`` writes them, ``client/history.py`` reads them,
``store/history_index.py`` trims them): every page and total a filter gives is what the old walk of
every finished job hash gives, over a few hundred jobs that ended by every terminal path (settle,
retry then settle, cancel queued and running, crash cap, dead letter, dependency failed, runs
cancelled, run jobs finishing twice after a run retry); the indexes are trimmed with the retention,
visiting only what is due; the status probe's failed count is a recount; an older history is indexed
by the catch-up."""

from __future__ import annotations

import itertools
import math
import random
import time

import msgspec
import pytest
from conftest import wait_until

from support.keyspace import QUEUE
from tender_pool.client import Client
from tender_pool.client.history import HistoryFilter, query
from tender_pool.store import history_index as history_mod
from tender_pool.store.history_index import HistoryKeys, catch_up, trim
from tender_pool.client.records import decode_job
from tender_pool.client.errors import Undecodable
from tender_pool.slots.queue import Taken, TakeArgs
from tender_pool.client.status_probe import QueueProbe
from tender_pool.store.records import JobError

RET = 3600
USERS = ["alice", "bob", "carol", "we:ird é"]
KINDS = ["noop", "convert", "write_section"]
TA = TakeArgs(worker="w-hist", pid=1, lock_ttl_ms=60_000, retention_s=RET, max_waits=100, busy_ttl_ms=60_000,
              limits=msgspec.json.encode({"*": [60_000, 0]}))
FINAL = ("completed", "failed", "cancelled", "skipped", "dead")


class World:
    """Jobs driven through the real scripts by hand (no daemon): each job's payload lists what
    happens at each of its takes (``fates``), so the same id can end twice (a run retry)."""

    def __init__(self, h, seed: int = 7):
        h.config()
        self.h, self.q, self.r = h, h.queue(), h.r
        self.k = self.q.k
        self.proc = self.k.proc("hist", "i", 1, 1)  # the processing list the hand-driven takes claim into
        self.c = Client(h.redis.url, h.prefix, QUEUE, retention_s=RET)
        self.rnd = random.Random(seed)
        self.taken: dict[str, int] = {}
        self.n = 0

    def submit(self, fates: list[str], user: str | None = None, kind: str | None = None, **kw) -> str:
        self.n += 1
        user = user or self.rnd.choice(USERS)
        kind = kind or self.rnd.choice(KINDS)
        payload = {"fates": fates, "file": f"/in/{self.rnd.choice(['Lot', 'lot', 'annex'])}-{self.n}.{self.rnd.choice(['pdf', 'DOCX'])}"}
        return self.c.submit(user, kind, payload, **kw).id

    def run(self, user: str, kind: str, fates: list[list[str]]):
        return self.c.submit_run(user, kind, [{"key": f"k{i}", "payload": {"fates": f}} for i, f in enumerate(fates)])

    def drain(self) -> None:
        """Take and settle until nothing is queued (retries promoted at once)."""
        while True:
            t = self.q.take(self.proc, TA, f"s{self.rnd.randrange(1 << 30)}")
            if not isinstance(t, Taken):
                if self.q.promote_due(1000):
                    continue
                if self.r.zcard(self.k.delayed):
                    time.sleep(0.01)
                    continue
                return
            self.apply(t)

    def apply(self, t: Taken) -> None:
        jid = t.entry.decode()
        rec = decode_job(t.record)
        n = self.taken.get(jid, 0)
        self.taken[jid] = n + 1
        if not hasattr(t.started, "token"):
            return  # ended at its start (dependency failed, cancelled before it started) or parked
        fates = rec.payload.get("fates") or ["completed"]
        fate = fates[min(n, len(fates) - 1)]
        tok = t.started.token
        common = dict(lock_ttl_ms=60_000, retention_s=RET, worker=TA.worker)
        if fate == "completed":
            self.q.settle(self.proc, rec, tok, "completed", result={"value": {"n": n}}, **common)
        elif fate == "failed":
            self.q.settle(self.proc, rec, tok, "failed", error=JobError("corrupt", "bad"), counts_try=True, **common)
        elif fate == "retry":
            self.q.settle(self.proc, rec, tok, "retry", error=JobError("handler_failed", "again"), backoff_ms=0,
                          counts_try=True, **common)
        elif fate == "requeue":
            self.q.settle(self.proc, rec, tok, "requeue", **common)
        elif fate == "cancelled":
            self.q.settle(self.proc, rec, tok, "cancelled", error=JobError("cancelled", "cancelled"), **common)
        elif fate == "crash":
            assert self.q.requeue(self.proc, t.entry, "crash", crash_cap=1, lock_ttl_ms=60_000, retention_s=RET) == "failed"
        elif fate == "dead":
            assert self.q.deadletter(self.proc, t.entry, "undecodable payload (test)", RET)
        else:
            raise AssertionError(fate)


def build(h, jobs: int = 240) -> World:
    """A few hundred jobs, every terminal path, two runs retried (their failed, dead and cancelled
    jobs end a second time) and one run cancelled while queued."""
    w = World(h)
    paths = [["completed"], ["completed"], ["failed"], ["retry", "completed"], ["retry", "failed"],
             ["requeue", "completed"], ["cancelled"], ["crash"], ["dead"]]
    ids = []
    for i in range(jobs):
        prio = "interactive" if i % 11 == 0 else "bulk"
        ids.append(w.submit(w.rnd.choice(paths), priority=prio))
        if i % 40 == 39 and i < jobs - 1:
            w.drain()  # finish times spread over several batches (and many ties within one ms)
    for jid in w.rnd.sample(ids[-30:], 5):  # cancelled while queued
        assert w.c.cancel(jid).outcome == "cancelled"
    failing = w.submit(["failed"], user="alice", kind="noop")
    w.drain()
    w.submit(["completed"], user="bob", kind="noop", after=[failing])  # dependency_failed at its start
    w.submit(["completed"], user="alice", kind="convert", after=[ids[0]])
    r1 = w.run("carol", "write_section", [["failed", "completed"], ["dead", "failed"], ["completed"],
                                          ["cancelled", "completed"], ["failed", "failed"]] * 4)
    r2 = w.run("alice", "write_section", [["failed", "completed"], ["completed"]] * 5)
    r3 = w.run("bob", "convert", [["completed"]] * 6)
    w.c.cancel_run(r3.id)  # its jobs end cancelled while queued (run_cancel.lua)
    w.drain()
    w.c.retry_run(r1.id, cancelled=True)
    w.c.retry_run(r2.id)
    w.drain()
    return w


# --- the reference: the old walk of every finished job hash, written out independently ------------


def everything(w: World) -> list:
    """(id, finish score, record or None) for every member of ``finished``, newest first (ties as
    ZREVRANGEBYSCORE gives them)."""
    rows = w.r.zrevrangebyscore(w.k.finished, "+inf", "-inf", withscores=True)
    p = w.r.pipeline(transaction=False)
    for jid, _ in rows:
        p.hgetall(w.k.job(jid.decode()))
    out = []
    for (jid, score), raw in zip(rows, p.execute()):
        rec = None
        if raw:
            try:
                rec = decode_job(raw)
            except Undecodable:
                rec = None
        out.append((jid.decode(), score, rec))
    return out


def expected(world: list, flt: dict) -> list[str]:
    out = []
    for jid, score, rec in world:
        if rec is None or rec.state.value not in FINAL:
            continue
        if flt.get("status") and rec.state.value not in flt["status"]:
            continue
        if flt.get("user") is not None and rec.user != flt["user"]:
            continue
        if flt.get("kind") is not None and rec.kind != flt["kind"]:
            continue
        if flt.get("job_id") is not None and jid != flt["job_id"]:
            continue
        if flt.get("ended_after") is not None and score < flt["ended_after"]:
            continue
        if flt.get("ended_before") is not None and score >= flt["ended_before"]:
            continue
        if flt.get("file") is not None:
            f = rec.payload.get("file")
            if not isinstance(f, str) or flt["file"].lower() not in f.lower():
                continue
        sa, sb = flt.get("started_after"), flt.get("started_before")
        if sa is not None and (rec.started_at is None or rec.started_at < sa):
            continue
        if sb is not None and (rec.started_at is None or rec.started_at >= sb):
            continue
        out.append(jid)
    return out


def check(w: World, world: list, flt: dict, sizes=(1, 7, 50)) -> int:
    want = expected(world, flt)
    for size in sizes:
        last = max(1, math.ceil(len(want) / size))
        pages = sorted({1, 2, last, last + 1} if size < 50 else set(range(1, last + 2)))
        for page in pages:
            got = query(w.r, w.k, HistoryFilter(**flt), page=page, page_size=size)
            assert got.total == len(want), (flt, page, size)
            assert [j.id for j in got.items] == want[(page - 1) * size: page * size], (flt, page, size)
    return len(want)


def filters(world: list) -> list[dict]:
    scores = sorted(s for _, s, _ in world)
    starts = sorted(r.started_at for _, _, r in world if r is not None and r.started_at)
    mid, q1 = int(scores[len(scores) // 2]), int(scores[len(scores) // 4])
    statuses = [[], ["completed"], ["failed"], ["cancelled"], ["dead"], ["skipped"], ["failed", "dead"],
                ["completed", "failed", "cancelled", "dead"]]  # "running" is refused now: test_bad_input
    out = []
    for st, user, kind in itertools.product(statuses, [None, *USERS, "nobody"], [None, *KINDS]):
        f = {"status": st, "user": user, "kind": kind}
        out.append({k: v for k, v in f.items() if v})
    some = world[len(world) // 3][0]
    out += [
        {"status": ["failed"], "ended_after": q1}, {"status": ["failed"], "ended_before": mid},
        {"user": "alice", "ended_after": q1, "ended_before": mid}, {"ended_after": mid},
        {"ended_before": q1}, {"ended_after": mid, "ended_before": mid + 1},
        {"kind": "convert", "status": ["completed", "cancelled"], "ended_after": q1},
        {"file": "lot"}, {"file": ".docx", "status": ["failed"]}, {"file": "annex", "user": "bob"},
        {"started_after": starts[len(starts) // 2]}, {"started_before": starts[len(starts) // 3], "kind": "noop"},
        {"job_id": some}, {"job_id": some, "status": ["dead"]}, {"job_id": "no-such-job"},
    ]
    return out


@pytest.mark.timeout(240)
def test_every_filter_and_page_is_what_the_walk_of_every_hash_gives(h):
    w = build(h)
    world = everything(w)
    recs = [r for _, _, r in world if r is not None]
    # the world has what the test claims to cover: every end, errors of each path, twice-finished jobs
    ends = {r.state.value for r in recs}
    assert {"completed", "failed", "cancelled", "dead"} <= ends, ends
    kinds = {r.error.kind for r in recs if r.error}
    assert {"corrupt", "crash_cap", "cancelled", "undecodable", "dependency_failed"} <= kinds, kinds
    assert sum(1 for r in recs if r.run and r.attempts >= 2) >= 10  # run jobs that ended twice
    assert sum(1 for r in recs if r.tries >= 1 and r.state.value == "completed" and not r.run) >= 5  # retried
    assert len(world) >= 270
    seen = 0
    for flt in filters(world):
        seen += check(w, world, flt)
    assert seen > 3000  # the filters matched something (not all empty pages)


@pytest.mark.timeout(120)
def test_an_index_entry_the_hash_disagrees_with_is_never_shown(h):
    # Given run jobs that failed, then a run retry reopening them (queued again, not finished yet)
    w = World(h)
    for _ in range(30):
        w.submit(["failed"], user="alice", kind="noop")
    run = w.run("alice", "noop", [["failed", "completed"]] * 3)
    w.drain()
    w.c.retry_run(run.id)
    world = everything(w)
    # Then a page that holds a reopened job is read from the hashes: the reopened jobs are not on it
    for flt in ({"status": ["failed"]}, {"user": "alice"}, {"kind": "noop"}):
        got = query(w.r, w.k, HistoryFilter(**flt), page=1, page_size=50)
        assert [j.id for j in got.items] == expected(world, flt)[:50]
        assert all(j.state in FINAL for j in got.items)


@pytest.mark.timeout(120)
def test_a_reopened_job_leaves_the_totals_at_once(h):
    w = World(h)
    run = w.run("alice", "noop", [["failed", "completed"]] * 3)
    w.drain()
    for _ in range(30):  # newer failures: the reopened ones are not on page 1
        w.submit(["failed"], user="alice", kind="noop")
    w.drain()
    w.c.retry_run(run.id)
    world = everything(w)
    for flt in ({"status": ["failed"]}, {"user": "alice"}):
        assert query(w.r, w.k, HistoryFilter(**flt), page=1, page_size=5).total == len(expected(world, flt))


def index_keys(w: World) -> list[str]:
    hk = HistoryKeys(w.k)
    return sorted(k.decode() for k in w.r.scan_iter(match=f"{w.k.finished}:*", count=1000)
                  if k.decode() not in (hk.trim, hk.catch_up))


def zcalls(r, cmd: str) -> int:
    return int(r.info("commandstats").get(f"cmdstat_{cmd}", {}).get("calls", 0))


@pytest.mark.timeout(120)
def test_trim_drops_the_retention_from_finished_and_every_index_and_visits_only_what_is_due(h):
    # Given jobs that finished in two batches, far enough apart to cut between them
    w = World(h)
    first = [w.submit(["completed"]) for _ in range(40)] + [w.submit(["failed"], user="solo") for _ in range(5)]
    w.drain()
    cutoff = int(max(w.r.zmscore(w.k.finished, first)))
    time.sleep(0.05)
    later = [w.submit(w.rnd.choice([["completed"], ["failed"], ["cancelled"]])) for _ in range(40)]
    w.drain()
    hk = HistoryKeys(w.k)
    assert w.r.exists(hk.user("solo"))
    # When the sweep's trim runs with that cutoff
    removed = trim(w.r, w.k, cutoff)
    # Then finished and every index hold exactly the later batch; the user with only old jobs is gone
    assert removed == len(first)
    assert {m.decode() for m in w.r.zrange(w.k.finished, 0, -1)} == set(later)
    assert not w.r.exists(hk.user("solo"))
    members = set()
    for key in index_keys(w):
        rows = w.r.zrange(key, 0, -1, withscores=True)
        assert rows and all(s > cutoff for _, s in rows), key
        assert {m.decode() for m, _ in rows} <= set(later)
        member = key.removeprefix(w.k.finished + ":")
        members.add(member)
        # the trim registry's score never passes the index's oldest entry (else it would trim late)
        assert w.r.zscore(hk.trim, member) <= rows[0][1]
    assert {m.decode() for m in w.r.zrange(hk.trim, 0, -1)} == members
    # and history pages still agree with the walk
    world = everything(w)
    for flt in ({}, {"status": ["failed"]}, {"user": "alice"}, {"kind": "noop"}):
        check(w, world, flt, sizes=(7,))

    # When it runs again with nothing new past the retention: only `finished` is trimmed
    before = zcalls(w.r, "zremrangebyscore")
    trim(w.r, w.k, cutoff)
    assert zcalls(w.r, "zremrangebyscore") - before == 1

    # When everything is past the retention: nothing of history is left
    trim(w.r, w.k, int(w.r.zrange(w.k.finished, -1, -1, withscores=True)[0][1]))
    assert w.r.zcard(w.k.finished) == 0 and index_keys(w) == [] and not w.r.exists(hk.trim)


@pytest.mark.timeout(120)
def test_a_trim_backlog_goes_in_bounded_steps(h, monkeypatch):
    # Given 40 jobs that finished a few ms apart, all past the retention
    w = World(h)
    for i in range(40):
        w.submit(["failed" if i % 3 else "completed"], user=USERS[i % 2])
        w.drain()
        time.sleep(0.003)
    cutoff = int(w.r.zrange(w.k.finished, -1, -1, withscores=True)[0][1])
    monkeypatch.setattr(history_mod, "TRIM_STEP", 10)
    # When one sweep may take two steps of 10
    removed = trim(w.r, w.k, cutoff, steps=2)
    # Then it removed the 22 oldest (each step: up to and including the 11th oldest's ms), from
    # finished and from every index alike, and the next sweeps finish the job
    assert removed == 22
    left = dict(w.r.zrange(w.k.finished, 0, -1, withscores=True))
    for key in index_keys(w):
        rows = w.r.zrange(key, 0, -1, withscores=True)
        assert all(m in left for m, _ in rows), key
    assert sum(w.r.zcard(k) for k in index_keys(w) if ":state:" in k) == len(left) == 18
    while trim(w.r, w.k, cutoff, steps=2):
        pass
    assert w.r.zcard(w.k.finished) == 0 and index_keys(w) == []


@pytest.mark.timeout(120)
def test_a_page_leaves_out_hashes_expired_before_the_sweep(h):
    # Given finished jobs whose oldest hashes are gone (expired; the sweep has not trimmed them yet)
    w = World(h)
    old = [w.submit(["failed"], user="alice", kind="noop") for _ in range(37)]
    w.drain()
    new = [w.submit(["failed"], user="alice", kind="noop") for _ in range(9)]
    w.drain()
    w.r.delete(*(w.k.job(j) for j in old))
    world = everything(w)
    # Then totals and pages count only the jobs whose hashes are there, as the walk does
    for flt in ({"status": ["failed"]}, {"user": "alice"}, {"kind": "noop"}, {"status": ["failed", "dead"]}, {},
                {"user": "alice", "status": ["failed"]}, {"kind": "noop", "status": ["failed", "dead"], "user": "alice"}):
        assert check(w, world, flt, sizes=(4, 50)) == len(new)


@pytest.mark.timeout(120)
def test_status_failed_count_is_a_recount_within_the_retention(h):
    w = build(h, jobs=120)
    t_mid = time.time()
    time.sleep(0.3)
    for _ in range(7):
        w.submit(["failed"], user="dave")
    w.drain()
    world = everything(w)

    def recount(since_ms: float) -> int:
        return sum(1 for _, s, r in world if r is not None and r.state.value == "failed" and s >= since_ms)

    assert QueueProbe(w.r, w.k, RET).read().failed == recount(0) > 20
    # a retention that ends in the 0.3 s gap: only the last 7 failures are within it
    probe = QueueProbe(w.r, w.k, time.time() - t_mid - 0.15)
    assert probe.read().failed == recount((t_mid + 0.15) * 1000) == 7


@pytest.mark.timeout(60)
def test_status_counts_the_users_backlogs_and_not_the_wake_tokens(h):
    w = World(h)
    for _ in range(5):
        w.submit(["completed"], user="alice")  # one fair entry in ready:lo, four in alice's backlog
    w.submit(["completed"], user="bob")
    w.submit(["completed"], user="carol", priority="interactive")  # ready:hi, and a wake token in ready:lo
    assert w.r.lrange(w.k.ready_lo, -1, -1) == [b"~wake"]
    st = QueueProbe(w.r, w.k, RET).read()
    assert (st.ready_hi, st.ready_lo, st.queued, st.depth) == (1, 6, 7, 7)


@pytest.mark.timeout(120)
def test_catch_up_indexes_a_history_written_before_the_indexes(h):
    # Given a history whose indexes are what on_terminal wrote
    w = build(h, jobs=120)
    hk = HistoryKeys(w.k)
    made = {k: w.r.zrange(k, 0, -1, withscores=True) for k in index_keys(w)}
    registry = dict(w.r.zrange(hk.trim, 0, -1, withscores=True))
    # When they are lost (an older version wrote only `finished`) and the sweep catches up in batches
    w.r.delete(*made, hk.trim)
    rounds = 0
    while not catch_up(w.r, w.k, batch=25):
        rounds += 1
    # Then every index is rebuilt as on_terminal had written it, and the catch-up remembers it is done
    assert rounds >= 5
    assert {k: w.r.zrange(k, 0, -1, withscores=True) for k in index_keys(w)} == made
    rebuilt = dict(w.r.zrange(hk.trim, 0, -1, withscores=True))
    assert rebuilt.keys() == registry.keys() and all(rebuilt[m] <= made[hk.of(m)][0][1] for m in rebuilt)
    assert w.r.get(hk.catch_up) == b"done" and catch_up(w.r, w.k)


@pytest.mark.timeout(120)
def test_the_daemons_sweep_trims_the_indexes_with_the_retention(h):
    # Given a daemon keeping finished jobs 4 s
    h.daemon(workers=1, extra="result_retention = 4")
    ids = [h.submit(kind="noop", user=u) for u in ("alice", "bob", "alice")]
    ids.append(h.submit(kind="behave", user="bob", payload={"final_error": "corrupt"}))
    for j in ids:
        h.wait_state(j, states=("completed", "failed"))
    w = World.__new__(World)
    w.r, w.k = h.r, h.k
    hk = HistoryKeys(w.k)
    assert w.r.zcard(hk.state("failed")) == 1 and w.r.zcard(hk.user("alice")) == 2
    assert query(w.r, w.k, HistoryFilter(user="bob")).total == 2
    # Then within the retention and a sweep or two, history is empty, indexes included
    wait_until(lambda: not index_keys(w) and not w.r.exists(w.k.finished, hk.trim), 30, 0.2, "indexes trimmed")
    assert w.r.get(hk.catch_up) == b"done"
