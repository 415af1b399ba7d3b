"""Client.events / aevents against the documented stream shape (FakeSlot writes what set_state
writes): snapshot first, exactly-once resume, gap snapshots, ends."""

from __future__ import annotations

import asyncio
import threading
import time

import msgspec
import pytest

from tender_pool.client import BadInput, NotFound
from tender_pool.client.models import FINAL_RUN_STATES

pytestmark = pytest.mark.timeout(60)


def play(slot, run, pause: float = 0.0) -> None:
    """Each job: started, two progress lines, completed (the last one failed)."""
    for i, job in enumerate(run.jobs):
        slot.move(job.id, "running")
        slot.progress(job.id, progress=0.5, message="half")
        slot.progress(job.id, chunk="text")
        slot.move(job.id, "failed" if i == len(run.jobs) - 1 else "completed")
        time.sleep(pause)


def stream_ids(client, run_id, after: str) -> list[str]:
    return [sid.decode() for sid, _ in client.r.xrange(client.k.run_events(run_id), f"({after}", "+")]


def test_snapshot_first_then_every_event_ending_after_run_finished(client, make_run):
    run, slot = make_run(3)
    gen = client.events(run.id, block_ms=100)
    snap = next(gen)
    assert snap.type == "snapshot" and snap.run_id == run.id and snap.state == "pending" and snap.gap is False
    assert [(j.key, j.state) for j in snap.jobs] == [("s1", "queued"), ("s2", "queued"), ("s3", "queued")]
    assert snap.counts.total == 3 and snap.counts.queued == 3
    play(slot, run)
    rest = list(gen)
    assert [e.id for e in rest] == stream_ids(client, run.id, snap.id)
    assert rest[0].type == "job_started" and rest[0].key == "s1" and rest[0].state == "running"
    assert rest[-1].type == "run_finished" and rest[-1].state == "partial_success"
    assert rest[-1].counts.completed == 2 and rest[-1].counts.failed == 1


def test_event_json_carries_exactly_the_fields_of_its_type(client, make_run):
    run, slot = make_run(1)
    play(slot, run)
    evs = [msgspec.to_builtins(e) for e in client.events(run.id, since="0")]
    base = {"id", "type", "run_id", "state", "counts"}
    job = base | {"job_id", "key", "job_state", "skipped_from"}  # CONTRACT: null but on job_skipped
    by_type: dict = {}
    for e in evs:
        by_type.setdefault(e["type"], e)  # the first of each type
    assert set(by_type["run_started"]) == base
    assert set(by_type["job_started"]) == job
    assert set(by_type["job_progress"]) == job | {"progress", "message", "chunk"}
    assert by_type["job_progress"]["chunk"] is None  # the first progress line had none
    assert set(by_type["run_finished"]) == base and by_type["run_finished"]["state"] == "failed"
    snap = msgspec.to_builtins(next(iter(client.events(run.id))))
    assert set(snap) == base | {"user", "kind", "created_at", "finished_at", "jobs", "gap"}


def _watch_with_disconnects(client, run_id: str, every: int, on_snapshot) -> tuple[str, list[str]]:
    """Read ``every`` events, disconnect, reconnect with the last id, until the end."""
    since, seen, snap_id = None, [], None
    while True:
        gen = client.events(run_id, since=since, block_ms=100)
        n = 0
        for ev in gen:
            if ev.type == "snapshot":
                assert snap_id is None, "a resume must not snapshot again"
                snap_id = ev.id
                on_snapshot()
            else:
                seen.append(ev.id)
            since = ev.id
            n += 1
            if ev.type == "run_finished":
                return snap_id, seen
            if n == every:
                break
        gen.close()


def test_watcher_that_reconnects_with_its_last_id_sees_every_event_exactly_once(client, make_run):
    run, slot = make_run(8)
    writer = threading.Thread(target=play, args=(slot, run, 0.01))
    snap_id, seen = _watch_with_disconnects(client, run.id, 3, writer.start)  # the run moves while we read
    writer.join()
    assert seen == stream_ids(client, run.id, snap_id)  # all of them, in order, none twice
    assert len(seen) == len(set(seen)) and len(seen) == 8 * 4 + 1


def test_asyncio_watcher_reconnecting_sees_every_event_exactly_once(client, make_run):
    run, slot = make_run(8)
    writer = threading.Thread(target=play, args=(slot, run, 0.01))

    async def watch() -> tuple[str, list[str]]:
        since, seen, snap_id = None, [], None
        try:
            while True:
                agen = client.aevents(run.id, since=since, block_ms=100)
                n = 0
                async for ev in agen:
                    if ev.type == "snapshot":
                        assert snap_id is None
                        snap_id = ev.id
                        writer.start()
                    else:
                        seen.append(ev.id)
                    since, n = ev.id, n + 1
                    if ev.type == "run_finished":
                        return snap_id, seen
                    if n == 3:
                        break
                await agen.aclose()
        finally:
            await client.aclose()

    writer = threading.Thread(target=play, args=(slot, run, 0.01))
    snap_id, seen = asyncio.run(watch())
    writer.join()
    assert seen == stream_ids(client, run.id, snap_id)
    assert len(seen) == 8 * 4 + 1


def test_finished_run_ends_after_the_snapshot(client, make_run):
    run, _ = make_run(2)
    client.cancel_run(run.id)
    t0 = time.monotonic()
    evs = list(client.events(run.id, block_ms=1000))
    assert [e.type for e in evs] == ["snapshot"] and evs[0].state == "cancelled"
    assert [j.state for j in evs[0].jobs] == ["cancelled", "cancelled"]
    assert evs[0].final and time.monotonic() - t0 < 0.5  # no blocking read after a final snapshot


def test_resuming_after_the_end_delivers_nothing_and_returns(client, make_run):
    run, slot = make_run(1)
    play(slot, run)
    last = client.r.xrevrange(client.k.run_events(run.id), "+", "-", count=1)[0][0].decode()
    t0 = time.monotonic()
    assert list(client.events(run.id, since=last, block_ms=1000)) == []
    assert time.monotonic() - t0 < 0.5


def test_since_older_than_the_trimmed_head_gives_a_gap_snapshot(client, make_run):
    run, slot = make_run(2)
    first = client.r.xrange(client.k.run_events(run.id))[0][0].decode()  # run_started
    slot.move(run.jobs[0].id, "running")
    for i in range(20):
        slot.progress(run.jobs[0].id, progress=i / 20, maxlen=5)  # exact trim: run_started is gone
    gen = client.events(run.id, since=first, block_ms=100)
    snap = next(gen)
    assert snap.type == "snapshot" and snap.gap is True and snap.state == "running"
    assert snap.id == client.r.xrevrange(client.k.run_events(run.id), "+", "-", count=1)[0][0].decode()
    slot.move(run.jobs[0].id, "completed")
    nxt = next(gen)
    assert nxt.type == "job_completed" and nxt.key == "s1"


def test_since_still_in_the_stream_gives_no_snapshot(client, make_run):
    run, slot = make_run(2)
    first = client.r.xrange(client.k.run_events(run.id))[0][0].decode()
    slot.move(run.jobs[0].id, "running")
    ev = next(client.events(run.id, since=first, block_ms=100))
    assert ev.type == "job_started"


def test_unknown_run_and_bad_since(client, make_run):
    with pytest.raises(NotFound):
        next(client.events("nosuchrun"))
    with pytest.raises(NotFound):
        client.run("nosuchrun")
    run, _ = make_run(1)
    with pytest.raises(BadInput):
        next(client.events(run.id, since="yesterday"))
    with pytest.raises(BadInput):
        client.run("a{b}")


def test_run_snapshot_is_read_at_one_instant(client, make_run):
    run, slot = make_run(50)
    stop = threading.Event()

    def churn():
        i = 0
        while not stop.is_set() and i < 50:
            slot.move(run.jobs[i].id, "running")
            i += 1

    t = threading.Thread(target=churn)
    t.start()
    try:
        for _ in range(20):
            r = client.run(run.id)
            running = sum(j.state == "running" for j in r.jobs)
            assert running == r.counts.running  # the counts and the job rows agree
            assert sum(getattr(r.counts, f) for f in ("queued", "waiting", "running", "completed", "failed",
                                                      "cancelled", "skipped")) == r.counts.total
    finally:
        stop.set()
        t.join()
    assert r.state in ("pending", "running") and r.state not in FINAL_RUN_STATES


def test_a_watcher_overtaken_by_trimming_gets_a_gap_snapshot(client, make_run, monkeypatch):
    from tender_pool.client import follow

    monkeypatch.setattr(follow, "READ_COUNT", 2)  # a full read: the watcher is lagging
    run, slot = make_run(2)
    gen = client.events(run.id, block_ms=100)
    assert next(gen).type == "snapshot"
    slot.move(run.jobs[0].id, "running")
    for i in range(20):
        slot.progress(run.jobs[0].id, progress=i / 20, maxlen=5)  # job_started is trimmed unseen
    ev = next(gen)
    assert ev.type == "snapshot" and ev.gap is True and ev.counts.running == 1
