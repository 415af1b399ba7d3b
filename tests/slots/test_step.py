"""The slot's loop, one ``Slot.step(now)`` at a time, in this process: a real redis-server, the real
scripts, and a fake runner in place of the processes (nothing is forked). Each test names the step
it drives: claim nothing, take and run, park, settle taking the next job, a lost settle reply, a
lapsing lease."""

from __future__ import annotations

import os
import time

import msgspec
import pytest
import redis

from tender_pool.client.client import Client
from tender_pool.slots import slot as slot_mod
from tender_pool.slots.reports import ReportReader
from tender_pool.slots.intake import Next
from tender_pool.slots.runner import RunResult
from tender_pool.store.config import load
from tender_pool.store.keys import Keys
from tender_pool.slots.reports import AttemptEnd, Beat, Busy, Finished, Idle


class FakeChild:
    def __init__(self, pid: int):
        self.pid = pid


class FakeRunner:
    """The process seam (the runner's ``spawn``, ``fork_call``, ``run``; ``reap_orphans``): records each attempt's
    stdin and answers what its handler would have printed. ``during`` runs while the attempt
    "runs" (another slot's step, a Redis change)."""

    def __init__(self, stdout: bytes = b'{"pages": 1}', during=None):
        self.stdout = stdout
        self.during = during
        self.stdins: list[dict] = []

    def spawn(self, argv, env, cwd=None):
        return FakeChild(os.getpid())

    def fork_call(self, fn, env):  # pragma: no cover - only function kinds fork; these tests use commands
        raise AssertionError("a command kind's attempt must not fork a function")

    def run(self, proc, stdin, **kw):
        self.stdins.append(msgspec.json.decode(stdin))
        if self.during is not None:
            self.during()
        return RunResult(0, self.stdout, b"")

    def reap_orphans(self, keep=frozenset()):
        return []


class World:
    """A config on the test's redis-server, a client to submit with, and slots built in-process."""

    def __init__(self, h, **config):
        self.cfg = load(str(h.config(**config)), {})
        self.k = Keys(self.cfg.redis.prefix, self.cfg.pool.queue)
        self.r = h.redis.client()
        self.client = Client.for_config(self.cfg)
        self.slots: list[tuple[slot_mod.Slot, int, ReportReader]] = []

    def slot(self, runner: FakeRunner, n: int = 1) -> slot_mod.Slot:
        rfd, wfd = os.pipe()
        os.set_blocking(rfd, False)
        proc = self.k.proc(self.cfg.pool.host_id, "inc", n, 1)
        s = slot_mod.Slot(self.cfg, n, f"{self.cfg.pool.host_id}-slot{n}", proc, f"test:{n}", wfd,
                          list_owner="test-owner", runner_=runner,
                          reap_orphans=runner.reap_orphans)
        self.slots.append((s, rfd, ReportReader()))
        return s

    def reports(self, s: slot_mod.Slot) -> list:
        s.reporter.flush()
        for slot, rfd, reader in self.slots:
            if slot is s:
                out = []
                while True:
                    try:
                        data = os.read(rfd, 65536)
                    except BlockingIOError:
                        return out
                    out += reader.feed(data)
        raise AssertionError("not a slot of this world")

    def submit(self, user: str = "u1", kind: str = "noop", **kw) -> str:
        return self.client.submit(user, kind, {"n": 1}, **kw).id

    def state(self, jid: str) -> str:
        return (self.r.hget(self.k.job(jid), "state") or b"").decode()

    def close(self) -> None:
        for s, rfd, _ in self.slots:
            s.q.r.close()
            os.close(rfd)
            os.close(s.reporter.fd)
        self.client.close()


@pytest.fixture
def world(h):
    made: list[World] = []

    def make(**config) -> World:
        made.append(World(h, **config))
        return made[-1]

    yield make
    for w in made:
        w.close()


def finished(reports: list) -> list[Finished]:
    return [r for r in reports if isinstance(r, Finished)]


@pytest.mark.timeout(30)
def test_claiming_nothing_beats_and_runs_nothing(world):
    w = world()
    runner = FakeRunner()
    s = w.slot(runner)
    s.step(time.monotonic())
    assert runner.stdins == [] and s.next is None
    assert w.r.llen(s.proc) == 0
    assert w.r.hget(w.k.proclists, s.proc) == b"test-owner"  # registered before its first claim
    reports = w.reports(s)
    assert any(isinstance(r, Beat) for r in reports) and not finished(reports)


@pytest.mark.timeout(30)
def test_a_step_claims_locks_runs_settles_and_releases_one_job(world):
    w = world()
    jid = w.submit(user="ann")
    held = []
    runner = FakeRunner(during=lambda: held.append(w.r.get(w.k.lock("ann"))))
    s = w.slot(runner)
    s.step(time.monotonic())
    assert [i["id"] for i in runner.stdins] == [jid] and runner.stdins[0]["attempt"] == 1
    assert held and held[0], "the user's lock is held while the attempt runs"
    assert w.state(jid) == "completed"
    assert msgspec.json.decode(w.r.hget(w.k.job(jid), "result")) == {"value": {"pages": 1}}
    assert w.r.get(w.k.lock("ann")) is None, "the settle released the user's lock"
    assert w.r.llen(s.proc) == 0 and s.next is None
    reports = w.reports(s)
    busy = [r for r in reports if isinstance(r, Busy)]
    assert [b.job_id for b in busy] == [jid]
    assert [f.outcome for f in finished(reports)] == [AttemptEnd.COMPLETED]
    assert isinstance(reports[-1], Idle), reports  # the Finished went out with the Idle, in one write


@pytest.mark.timeout(30)
def test_a_job_behind_its_users_running_job_is_parked_then_run_after_it(world):
    w = world()
    first, second = w.submit(user="ann"), w.submit(user="ann")
    other_runner = FakeRunner()
    other = w.slot(other_runner, n=2)
    runner = FakeRunner(during=lambda: other.step(time.monotonic()))  # slot 2 claims while slot 1 runs
    s = w.slot(runner)
    s.step(time.monotonic())
    assert other_runner.stdins == [], "a job ran while its user's lock was held"
    parked = finished(w.reports(other))
    assert [(f.outcome, f.park_reason) for f in parked] == [(AttemptEnd.PARKED, "user")]
    # The settle handed the lock to the parked job and, taking the next job, started it at once
    assert isinstance(s.next, Next) and s.next.job.id == second
    assert w.state(first) == "completed" and w.state(second) == "running"
    s.step(time.monotonic())
    assert [i["id"] for i in runner.stdins] == [first, second]
    assert w.state(second) == "completed" and s.next is None


@pytest.mark.timeout(30)
def test_a_settle_takes_the_next_queued_job_without_a_claim(world):
    w = world()
    a, b = w.submit(user="ann"), w.submit(user="bob")
    runner = FakeRunner()
    s = w.slot(runner)
    s.step(time.monotonic())
    assert len(runner.stdins) == 1
    first = runner.stdins[0]["id"]
    (second,) = {a, b} - {first}  # which user goes first is the fairness rule's business
    assert isinstance(s.next, Next) and s.next.job.id == second and s.next.started.attempt == 1
    claims = []
    real_claim = s.q.claim
    s.q.claim = lambda *a, **kw: claims.append(1) or real_claim(*a, **kw)  # type: ignore[method-assign]
    s.step(time.monotonic())
    assert claims == [], "the job the settle started was claimed again"
    assert [i["id"] for i in runner.stdins] == [first, second] and w.state(second) == "completed"
    assert [f.outcome for f in finished(w.reports(s))] == [AttemptEnd.COMPLETED] * 2


@pytest.mark.timeout(30)
def test_a_settle_whose_reply_was_lost_is_not_taken_for_fenced(world):
    w = world()
    jid = w.submit(user="ann")
    runner = FakeRunner()
    s = w.slot(runner)
    real = s.q.settle_take
    calls = []

    def lost_once(*a, **kw):
        out = real(*a, **kw)  # the script ran and its effect is in Redis …
        calls.append(kw.get("retry"))
        if len(calls) == 1:
            raise redis.ConnectionError("reply lost")  # … but its answer never came back
        return out

    s.q.settle_take = lost_once  # type: ignore[method-assign]
    discarded = []
    s.kinds["noop"].discard = lambda *a: discarded.append(a)  # type: ignore[method-assign]
    s.step(time.monotonic())
    assert calls == [False, True], "the settle was not retried as a retry"
    assert w.state(jid) == "completed"
    assert discarded == [], "a landed attempt's result was discarded as fenced"
    assert [f.outcome for f in finished(w.reports(s))] == [AttemptEnd.COMPLETED]
    assert s.redis_errors == 1


@pytest.mark.timeout(30)
def test_a_lapsing_lease_starts_nothing_until_it_is_renewed(world):
    w = world(heartbeat=1.0, fence="default")
    jid = w.submit(user="ann")
    runner = FakeRunner()
    s = w.slot(runner)
    assert s.lock.args.min_lease_ms > 0
    s.step(time.monotonic())  # no host key: our supervisor is not renewing the lease
    assert runner.stdins == [] and s.lock.lapsed
    assert w.state(jid) == "queued" and w.r.llen(s.proc) == 0, "the claimed entry was not put back"
    s.step(time.monotonic())  # still lapsed: no claim at all
    assert runner.stdins == [] and w.r.llen(w.k.ready_lo) == 1
    w.r.set(w.k.host(w.cfg.pool.host_id), "renewed", px=3000)
    s.step(time.monotonic())
    assert not s.lock.lapsed and [i["id"] for i in runner.stdins] == [jid]
    assert w.state(jid) == "completed"


@pytest.mark.timeout(30)
def test_hand_edited_hashes_take_starts_or_dead_letters_with_the_reason(world):
    """take.lua is the one script that starts a job: an ``after`` of JSON null (what the decoder
    reads as none) starts like any job; a hash it cannot start (no state; an ``after`` that is no
    list of ids) is dead-lettered with its reason, and nothing of it runs."""
    w = world()
    nulled, stateless, bad_after = w.submit(user="a"), w.submit(user="b"), w.submit(user="c")
    w.r.hset(w.k.job(nulled), "after", "null")
    w.r.hdel(w.k.job(stateless), "state")
    w.r.hset(w.k.job(bad_after), "after", "[1, 2]")
    runner = FakeRunner()
    s = w.slot(runner)
    for _ in range(6):
        s.step(time.monotonic())
    assert [i["id"] for i in runner.stdins] == [nulled] and w.state(nulled) == "completed"
    dead = {d["raw"]: d["reason"] for d in map(msgspec.json.decode, w.r.lrange(w.k.dead, 0, -1))}
    assert set(dead) == {stateless, bad_after}, dead
    assert "without a state" in dead[stateless] and "does not validate" in dead[bad_after]
    assert w.r.llen(s.proc) == 0 and w.r.get(w.k.lock("b")) is None and w.r.get(w.k.lock("c")) is None
    reasons = [f.error_kind for f in finished(w.reports(s)) if f.outcome == AttemptEnd.DEAD]
    assert reasons == ["undecodable", "undecodable"]
