"""Runs on a real daemon: counts and state against a recount after a random mix, events, skip,
cancel (queued, running, racing a claim), retry."""

from __future__ import annotations

import os
import random
import signal

import pytest

from conftest import wait_until
from .runhelp import events, handlers, recount, run_state

FINAL = ("completed", "partial_success", "failed", "cancelled")


def wait_final(h, run_id: str, timeout: float = 60) -> str:
    try:
        return wait_until(lambda: (lambda s: s if s in FINAL else None)(run_state(h, run_id)), timeout,
                          what=f"run {run_id} to finish")
    except AssertionError:
        raise AssertionError(f"run {run_id}: {recount(h, run_id)}\n" + h.daemons[0].logs()[-4000:]) from None


def expected_final(c: dict, cancelled: bool) -> str:
    if cancelled:
        return "cancelled"
    if c["failed"] == 0 and c["cancelled"] == 0:
        return "completed"
    if c["completed"] + c["skipped"] == 0:
        return "failed"
    return "partial_success"


def assert_consistent(h, run_id: str) -> dict:
    stored, counted = recount(h, run_id)
    assert stored == counted, f"run hash {stored} != recount {counted}"
    assert sum(v for k, v in counted.items() if k != "total") == counted["total"]
    return counted


def assert_idle_books(h, user: str) -> None:
    """Once nothing runs: no running attempt counted, no fair entry, no backlog left behind."""
    k = h.k
    active = {a.decode(): int(b) for a, b in h.r.hgetall(k.active).items()}
    assert all(v == 0 for v in active.values()), active
    assert h.r.hget(k.inready, user) is None
    assert h.r.llen(k.backlog(user)) == 0


@pytest.mark.timeout(240)
def test_counts_and_state_match_a_recount_after_outcomes_cancels_retries_and_slot_kills(h):
    # Given a run of 36 jobs: quick, slow, retried then fine, always failing, a final error, slot
    # SIGKILLs (crash_cap), and long ones we cancel one by one
    h.daemon(workers=4, handlers=handlers(per_user_par=0), extra="crash_cap = 2")
    c = h.client()
    rnd = random.Random(10)
    kinds = [{}, {"sleep": 0.2}, {"fail_until": 2}, {"exit": 1}, {"final_error": "corrupt"}, {"sleep": 30}]
    items = [{"key": f"s{i}", "payload": dict(rnd.choice(kinds), n=i)} for i in range(34)]
    items += [{"key": "crash1", "payload": {"crash_slot": True}}, {"key": "crash2", "payload": {"crash_slot": True}}]
    run = c.submit_run("alice", "par", items)
    ids = [j.decode() for j in h.r.lrange(h.k.runjobs(run.id), 0, -1)]
    long_ones = [i for i, it in zip(ids, items) if it["payload"].get("sleep") == 30]
    # When: we recount while it runs, cancel the long ones (running or still queued)
    for jid in long_ones:
        assert_consistent(h, run.id)
        c.cancel(jid)
    assert wait_final(h, run.id, 150) in FINAL
    # Then the run's counts are its jobs' states, and its final state follows the rule
    counted = assert_consistent(h, run.id)
    assert run_state(h, run.id) == expected_final(counted, False)
    assert counted["cancelled"] == len(long_ones) and counted["failed"] >= 2 and counted["completed"] > 0
    # When the failed and cancelled jobs are retried with fast payloads, the run reopens and ends again
    k = h.k
    for jid in ids:
        h.r.hset(k.job(jid), "payload", '{"n": 0}')
    res = c.retry_run(run.id, cancelled=True)
    assert res.outcome == "retried" and res.retried == counted["failed"] + counted["cancelled"]
    assert wait_final(h, run.id, 60) == "completed"
    counted = assert_consistent(h, run.id)
    assert counted["completed"] == counted["total"]
    evs = events(h, k.run_events(run.id))
    assert [e["type"] for e in evs].count("run_started") == 2
    assert [e["type"] for e in evs].count("run_finished") == 2
    assert_idle_books(h, "alice")


@pytest.mark.timeout(120)
def test_events_shape_skip_by_hash_and_overwrite(h):
    h.daemon(workers=2, handlers=handlers(per_user_par=0))
    c = h.client()
    items = [{"key": f"1.{i}", "payload": {"echo": i}} for i in range(4)]
    run = c.submit_run("bob", "par", items)
    assert wait_final(h, run.id) == "completed"
    k = h.k
    evs = events(h, k.run_events(run.id))
    types = [e["type"] for e in evs]
    assert types[0] == "run_started" and types[-1] == "run_finished"
    assert types.count("job_started") == 4 and types.count("job_completed") == 4
    assert "job_queued" not in types  # queue stream only
    for e in evs:
        assert set(e) >= {"id", "type", "run_id", "state", "counts", "job_id", "key", "job_state"}
        assert e["run_id"] == run.id and sum(v for n, v in e["counts"].items() if n != "total") == 4
    done = [e for e in evs if e["type"] == "job_completed"]
    assert sorted(e["key"] for e in done) == [f"1.{i}" for i in range(4)]
    assert evs[-1]["state"] == "completed" and evs[-1]["counts"]["completed"] == 4
    # the queue stream has every transition of every job, run jobs included
    qtypes = [e["type"] for e in events(h, k.events) if e["run_id"] == run.id]
    assert qtypes.count("job_queued") == 4 and qtypes.count("job_completed") == 4
    # Same items again: every job skipped (no slot time), result and skipped_from point at the first run
    first = {j.decode(): h.job(j.decode()) for j in h.r.lrange(k.runjobs(run.id), 0, -1)}
    again = c.submit_run("bob", "par", items)
    assert again.state == "completed" and again.counts.skipped == 4
    for j in h.r.lrange(k.runjobs(again.id), 0, -1):
        rec = h.job(j.decode())
        assert rec.state.value == "skipped" and rec.attempts == 0
        assert rec.skipped_from in first and rec.result == first[rec.skipped_from].result
    # One changed payload: only that one runs; --overwrite runs them all
    changed = [dict(it) for it in items]
    changed[2] = {"key": "1.2", "payload": {"echo": "new"}}
    third = c.submit_run("bob", "par", changed)
    assert third.counts.skipped == 3 and wait_final(h, third.id) == "completed"
    forced = c.submit_run("bob", "par", items, overwrite=True)
    assert forced.counts.skipped == 0 and wait_final(h, forced.id) == "completed"
    assert_consistent(h, forced.id)


@pytest.mark.timeout(120)
def test_cancel_run_ends_queued_at_once_and_kills_running_groups(h):
    h.daemon(workers=2, handlers=handlers(per_user_par=0))
    c = h.client()
    items = [{"key": str(i), "payload": {"sleep": 30, "record": str(h.records)}} for i in range(6)]
    run = c.submit_run("carol", "par", items)
    k = h.k
    ids = [j.decode() for j in h.r.lrange(k.runjobs(run.id), 0, -1)]
    wait_until(lambda: sum(1 for j in ids if (h.records / f"{j}.1.start").exists()) == 2, 15, what="2 running")
    res = c.cancel_run(run.id)
    assert res.outcome == "cancelled" and res.cancelled == 4 and res.signalled == 2
    assert wait_final(h, run.id, 20) == "cancelled"
    counted = assert_consistent(h, run.id)
    assert counted["cancelled"] == 6
    for j in ids:  # the two running ones were killed (their group), not left to finish
        assert not (h.records / f"{j}.1.end").exists()
    assert c.cancel_run(run.id).outcome == "already"
    assert_idle_books(h, "carol")


@pytest.mark.timeout(120)
def test_cancel_racing_a_claim_ends_cancelled_without_running(h):
    # Given a slot stopped right after its BLMOVE of a run job (before take.lua)
    d = h.daemon(workers=1, handlers=handlers(per_user_par=0), faults="after_claim")
    c = h.client()
    run = c.submit_run("dave", "par", [{"key": "a", "payload": {"record": str(h.records)}},
                                        {"key": "b", "payload": {"record": str(h.records)}}])
    pid = h.fault_pid("after_claim")
    k = h.k
    ids = [j.decode() for j in h.r.lrange(k.runjobs(run.id), 0, -1)]
    # When the run is cancelled at that instant
    res = c.cancel_run(run.id)
    assert res.cancelled == 1 and res.signalled == 1  # one queued, one in the slot's hands
    os.kill(pid, signal.SIGCONT)
    # Then the claimed one ends cancelled at start, never having run
    assert wait_final(h, run.id, 20) == "cancelled"
    assert all(h.job(j).state.value == "cancelled" for j in ids)
    assert not any(h.records.glob("*.start"))
    assert_consistent(h, run.id)
    assert d.proc.poll() is None
