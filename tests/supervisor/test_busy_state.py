"""The slot's busy state in Redis: written once the lock is held, guarded clean-up, TTL."""

import json

from conftest import wait_until

from tender_pool.slots.busy import BusyTracker, busy_ttl_ms
from tender_pool.slots.lock import take_args
from tender_pool.store.config import load
from support.keyspace import keys as keyspace
from tender_pool.store.records import JobRecord


class _Log:
    def warning(self, *a, **k):
        raise AssertionError(f"unexpected warning {a} {k}")


def test_late_cleanup_of_an_old_job_keeps_the_newer_state(h):
    cfg = load(str(h.config()), {})
    keys = keyspace(cfg.redis.prefix, cfg.pool.queue)
    q = h.queue()
    tracker = BusyTracker(h.r, keys, "w-slot1", cfg, _Log())
    h.submit("behave", "u", {"file": "/in/a.pdf"}, id="old")
    h.submit("behave", "v", id="new")
    old, new = q.get("old"), q.get("new")
    for jid in ("old", "new"):  # claimed into the slot's list, as BLMOVE would (a take starts only those)
        h.r.lrem(keys.ready_lo, 0, jid)
        h.r.lrem(keys.ready_hi, 0, jid)
        h.r.lpush("p", jid)
    ta = take_args(cfg, "w-slot1", busy_ttl_ms(cfg))
    st_old = q.take("p", ta, "s1", entry=b"old").started
    state = json.loads(h.r.get(keys.busy("w-slot1")))
    assert state["job_id"] == "old" and state["attempt"] == 1 and state["started_at"] == q.get("old").started_at
    st_new = q.take("p", ta, "s2", entry=b"new").started  # the slot moved on to a newer job
    # When the old attempt's settle (or clean-up) arrives late, it must not erase the new job's state
    ok, _ = q.settle("p", old, st_old.token, "completed", result={}, lock_ttl_ms=60_000, retention_s=60,
                     worker="w-slot1")
    assert ok and json.loads(h.r.get(keys.busy("w-slot1")))["job_id"] == "new"
    assert tracker.clear("old") is False
    state = json.loads(h.r.get(keys.busy("w-slot1")))
    assert state == {"worker": "w-slot1", "pid": state["pid"], "kind": "behave", "job_id": "new", "user": "v",
                     "file": None, "attempt": 1, "started_at": q.get("new").started_at}
    # and the TTL is the longest job timeout (extract's 600 s here) + 120 s
    assert busy_ttl_ms(cfg) == 720_000 and 719_000 < h.r.pttl(keys.busy("w-slot1")) <= 720_000
    tracker.started(2, st_new.started_ms, st_new.created_ms)
    assert "queue_wait_s" not in tracker.finished_fields(new, _outcome())  # attempt 2: no queue wait
    # The new job's own settle does clear it
    ok, _ = q.settle("p", new, st_new.token, "completed", result={}, lock_ttl_ms=60_000, retention_s=60,
                     worker="w-slot1")
    assert ok and h.r.get(keys.busy("w-slot1")) is None
    assert tracker.clear("new") is False


def test_finished_fields_carry_queue_wait_and_extraction_figures(h, tmp_path):
    cfg = load(str(h.config()), {})
    keys = keyspace(cfg.redis.prefix, cfg.pool.queue)
    tracker = BusyTracker(h.r, keys, "w-slot2", cfg, _Log())
    doc = tmp_path / "a.pdf"
    doc.write_bytes(b"%PDF" + b"x" * 96)
    job = JobRecord(id="pm", kind="parse_markdown", user="u", payload={"file": str(doc)})
    tracker.started(1, 1_700_000_002_500, 1_700_000_000_000)
    f = tracker.finished_fields(job, _outcome())
    assert f["queue_wait_s"] == 2.5 and f["pages"] == 7 and f["format"] == "pdf" and f["input_bytes"] == 100
    assert f["duration_s"] >= 0


def _outcome():
    from tender_pool.store.handler_io import Outcome
    return Outcome("completed", result={"pages": 7, "format": "pdf"})


def test_busy_state_lives_exactly_while_the_job_runs(h):
    h.daemon(workers=2)
    blocker = h.submit(kind="long", user="u", payload={"sleep": 2, "record": str(h.records)})
    wait_until(lambda: (h.records / f"{blocker}.1.start").exists(), 10, what="blocker start")
    keys = [h.k.busy(f"ha-{h.prefix}-slot{i}") for i in (1, 2)]
    states = [json.loads(v) for v in h.r.mget(keys) if v]
    assert [(s["job_id"], s["user"], s["attempt"]) for s in states] == [(blocker, "u", 1)]
    assert states[0]["started_at"] == h.job(blocker).started_at  # Redis TIME, the job's own start
    # the other slot claims the same user's job and parks it: it must never show as busy meanwhile
    parked = h.submit(user="u", payload={"record": str(h.records)})
    seen_while_blocked = set()
    def blocker_done():
        states = h.r.mget(keys)
        ended = (h.records / f"{blocker}.1.end").exists()  # read after: if not yet, the states were read while it ran
        if not ended:
            seen_while_blocked.update(json.loads(v)["job_id"] for v in states if v)
        return ended
    wait_until(blocker_done, 10, interval=0.01, what="blocker end")
    assert h.job(parked).waits >= 1 and seen_while_blocked == {blocker}
    # and every state is gone once both ended
    h.wait_state(parked)
    wait_until(lambda: h.r.mget(keys) == [None, None], 5, what="states cleared")
