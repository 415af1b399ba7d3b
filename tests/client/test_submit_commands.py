"""Client.submit in one round trip of two commands: EVALSHA of enqueue.lua and the HGETALL that
reads the job back; no SCRIPT EXISTS before each submit (the Script on a pipeline sends one). A
server that does not know the script (restarted, failed over, SCRIPT FLUSH) still gets the job."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.timeout(30)


def calls(r) -> dict[str, int]:
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in r.info("commandstats").items()}


def test_a_submit_sends_no_script_exists(client):
    client.submit("u1", "k", {})  # the first may load the script
    c0 = calls(client.r)
    for i in range(5):
        client.submit(f"u{i}", "k", {"i": i})
    c1 = calls(client.r)
    assert c1.get("script|exists", 0) == c0.get("script|exists", 0)
    assert c1.get("script|load", 0) == c0.get("script|load", 0)
    assert c1["evalsha"] - c0["evalsha"] == 5
    assert c1["hgetall"] - c0["hgetall"] == 5


def test_a_submit_after_script_flush_loads_the_script_and_queues_once(client):
    client.submit("u1", "k", {})
    client.r.script_flush()
    job = client.submit("u2", "k", {"a": 1}, job_id="after-flush")
    assert (job.id, job.state, job.payload) == ("after-flush", "queued", {"a": 1})
    assert client.r.lrange(client.k.ready_lo, 0, -1).count(b"after-flush") == 1
    assert client.submit("u2", "k", {"a": 2}, job_id="after-flush").payload == {"a": 1}


def test_the_record_a_submit_answers_is_the_hash(client):
    from tender_pool.client.models import JobView
    from tender_pool.client import records

    for kw in ({}, {"priority": "interactive"}, {"job_id": "given"}):
        job = client.submit("u1", "k", {"a": [1, "é"]}, **kw)
        h = client.r.hgetall(client.k.job(job.id))
        assert job == JobView.of(records.decode_job(records.as_dict(h)))
        assert h[b"event_id"] and h[b"created_at"]
    again = client.submit("u1", "k", {}, job_id="given")  # the existing job, as it is now
    assert again == JobView.of(records.decode_job(records.as_dict(client.r.hgetall(client.k.job("given")))))
