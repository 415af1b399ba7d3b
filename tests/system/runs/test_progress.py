"""Progress from handlers (fd 3): job_progress events in order, coalesced to at most 10 a second,
chunks capped and drops counted; a handler flooding the pipe is neither slowed nor killed."""

from __future__ import annotations

import pytest

from conftest import wait_until
from .runhelp import events, handlers
from tender_pool.slots.progress import CHUNK_CAP, ProgressFeed


@pytest.mark.timeout(90)
def test_progress_lines_arrive_in_order_and_coalesced(h):
    h.daemon(workers=1, handlers=handlers(per_user_par=0))
    c = h.client()
    lines = [{"progress": i / 40, "message": f"step {i}"} for i in range(40)]
    lines += [{"chunk": f"<{i}>"} for i in range(100)]
    run = c.submit_run("p", "par", [{"key": "sec", "payload": {"progress": lines, "progress_gap": 0.01}}])
    k = h.k
    wait_until(lambda: h.r.hget(k.run(run.id), "state") == b"completed", 30, what="run done")
    evs = events(h, k.run_events(run.id))
    prog = [e for e in evs if e["type"] == "job_progress"]
    types = [e["type"] for e in evs]
    # every progress event sits between the job's start and its completion
    assert types.index("job_started") < types.index("job_progress")
    assert max(i for i, t in enumerate(types) if t == "job_progress") < types.index("job_completed")
    # coalesced: 140 lines over ~1.4 s became at most ~10 events a second (plus the final flush)
    assert 2 <= len(prog) <= 20, len(prog)
    ms = [int(e["id"].split("-")[0]) for e in prog]
    assert all(sum(1 for t in ms if a <= t < a + 1000) <= 11 for a in ms), ms  # <= 10/s (+ the final flush)
    # progress values never go back; the last is the handler's last; chunks concatenate in order
    values = [e["progress"] for e in prog if e["progress"] is not None]
    assert values == sorted(values) and values[-1] == 39 / 40
    assert "".join(e["chunk"] or "" for e in prog) == "".join(f"<{i}>" for i in range(100))
    assert all(e["job_state"] == "running" and e["key"] == "sec" for e in prog)
    # a plain job's progress goes to the queue stream
    j = h.submit(kind="par", user="p2", payload={"progress": [{"progress": 1.0}]})
    h.wait_state(j)
    assert any(e["type"] == "job_progress" and e["job_id"] == j for e in events(h, k.events))


@pytest.mark.timeout(90)
def test_a_handler_flooding_fd3_is_not_slowed_or_killed(h):
    h.daemon(workers=1, handlers=handlers(per_user_par=0))
    j = h.submit(kind="par", user="f", payload={"progress_flood": 20_000_000, "record": str(h.records)})
    rec = h.wait_state(j, timeout=60)
    assert rec.attempts == 1 and rec.error is None
    took = float((h.records / f"{j}.flood").read_text())
    assert took < 5.0, f"writing 20 MB of progress took {took:.1f} s"
    k = h.k
    chunks = sum(len(e["chunk"] or "") for e in events(h, k.events) if e["job_id"] == j and e["type"] == "job_progress")
    assert 0 < chunks <= CHUNK_CAP


def test_feed_coalesces_caps_and_counts_drops():
    sent, now = [], [0.0]
    feed = ProgressFeed(lambda ev: sent.append(ev) or True, clock=lambda: now[0])
    feed.feed(b'{"progress": 0.1}\n{"progress": 0.2, "message": "m"}\n{"chunk": "a"}\nnot json\n[1]\n{"chu')
    assert feed.due()
    feed.flush()
    assert sent == [{"progress": 0.2, "message": "m", "chunk": "a"}] and feed.dropped == 2
    feed.feed(b'nk": "b"}\n')
    assert not feed.due()  # within 100 ms of the last event
    now[0] = 0.1
    feed.flush()
    assert sent[-1]["chunk"] == "b"
    feed.feed(b'{"chunk": "' + b"x" * (CHUNK_CAP + 1) + b'"}\n')
    feed.feed(b"y" * (300 * 1024))  # a line longer than the line cap, then its end
    feed.feed(b'"}\n{"progress": 1}\n')
    assert feed.dropped == 4
    feed.flush(force=True)
    assert sent[-1] == {"progress": 1, "message": "m", "chunk": None} and feed.events == 3
