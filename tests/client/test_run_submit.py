"""A run's submission: job ids ``<run>/<n>`` that no plain job can take,
chunks with a cursor, the seal, expiry of an unsealed run, idempotent retries, chunked queuing that
anyone can resume, and skipped jobs in every history index with ``skipped_from`` shown."""

from __future__ import annotations

import json
import time

import msgspec
import pytest
import redis

from tender_pool.client import BadInput, NotFound, Unavailable
from tender_pool.client import records, run_submit as rs
from tender_pool.client.items import input_hash
from tender_pool.store.replication import wait_replicated as real_wait

pytestmark = pytest.mark.timeout(60)


def items(n: int, tag: str = "") -> list[dict]:
    return [{"key": f"s{i + 1}", "payload": {"i": i, "tag": tag}} for i in range(n)]


def queued_ids(client) -> list[str]:
    """Every id a slot could claim: ready lists and every backlog (of both classes)."""
    k, out = client.k, []
    backlogs = [*client.r.scan_iter(match=k.backlog("*")), *client.r.scan_iter(match=k.hibacklog("*"))]
    for key in [k.ready_hi, k.ready_lo, *backlogs]:
        out += [x.decode() for x in client.r.lrange(key, 0, -1) if x != b"~wake"]
    return out


def job_keys(client) -> list[str]:
    return sorted(x.decode() for x in client.r.scan_iter(match=client.k.job("*")))


class Cut:
    """Breaks the client's script calls: after ``after`` good calls, each call runs on Redis and
    then its reply is lost (a socket timeout), ``lost`` times in all; later calls go through."""

    def __init__(self, monkeypatch, after: int, lost: int = 10**9, before_send: bool = False):
        self.after, self.lost, self.before_send, self.calls = after, lost, before_send, 0
        real = rs.wait_replicated

        def cut(r, replicas, wait_ms, write):
            self.calls += 1
            if self.calls > self.after and self.lost > 0:
                self.lost -= 1
                if not self.before_send:
                    real(r, replicas, wait_ms, write)  # it ran; the reply never came back
                raise redis.TimeoutError("Timeout reading from socket")
            return real(r, replicas, wait_ms, write)

        monkeypatch.setattr(rs, "wait_replicated", cut)
        monkeypatch.setattr(rs, "RETRY_PAUSE_S", (0.0,))


# --- item 1: run job ids cannot collide with plain jobs --------------------------------------------


def test_a_run_never_takes_a_plain_job_with_a_lookalike_id(client):
    # Given alice's plain jobs batch7.1 (completed) and batch7.2 (queued, her fair entry)
    a1 = client.submit("alice", "k", {"mine": 1}, job_id="batch7.1")
    client.r.hset(client.k.job(a1.id), mapping={"state": "completed", "result": json.dumps({"value": 1})})
    client.submit("alice", "k", {"mine": 2}, job_id="batch7.2")
    fair = client.r.hget(client.k.inready, "alice")
    # When bob submits a run with run id batch7
    run = client.submit_run("bob", "k", items(2), run_id="batch7")
    # Then its jobs are batch7/1, batch7/2 and alice's are as they were
    assert [j.id for j in run.jobs] == ["batch7/1", "batch7/2"]
    assert [(j.user, j.state, j.payload) for j in (client.job("batch7.1"), client.job("batch7.2"))] == [
        ("alice", "completed", {"mine": 1}), ("alice", "queued", {"mine": 2})]
    assert client.r.hget(client.k.inready, "alice") == fair
    # job and cancel take run job ids
    assert client.job("batch7/1").user == "bob"
    assert str(client.cancel("batch7/2")) == "cancelled" and client.job("batch7/2").state == "cancelled"


def test_a_plain_job_id_with_a_slash_is_refused(client):
    for jid in ("batch7/1", "a/b", "x/"):
        with pytest.raises(BadInput, match="no '/'"):
            client.submit("u1", "k", {}, job_id=jid)
    assert not job_keys(client)
    # --after may name a run's job
    run = client.submit_run("u1", "k", items(1), run_id="r1")
    assert client.submit("u1", "k", {}, after=[run.jobs[0].id]).after == ["r1/1"]
    with pytest.raises(BadInput):
        client.submit_run("u1", "k", items(1), run_id="..")


def test_a_job_id_in_the_way_refuses_the_whole_run_and_leaves_nothing(client, monkeypatch):
    # Given a leftover hash at the 5th job's id, and chunks of 2 items (so 2 chunks land first)
    monkeypatch.setattr(rs, "STAGE_ITEMS", 2)
    client.r.hset(client.k.job("r9/5"), mapping={"id": "r9/5", "user": "x", "kind": "k", "payload": "{}"})
    before = job_keys(client)
    # When the run is submitted, then Then it is refused and nothing of it is left
    with pytest.raises(BadInput, match="job r9/5 exists already; nothing written"):
        client.submit_run("u1", "k", items(6), run_id="r9")
    assert job_keys(client) == before and client.r.hget(client.k.job("r9/5"), "user") == b"x"
    assert not client.r.exists(client.k.run("r9"), client.k.runjobs("r9"), client.k.runs)
    assert queued_ids(client) == []


# --- item 2: chunks, seal, expiry, idempotent retries ----------------------------------------------


def test_items_are_written_in_bounded_chunks_and_nothing_is_claimable_before_the_seal(client, monkeypatch):
    # Given chunks of 3 items, and a submitter whose connection dies after the 2nd chunk
    monkeypatch.setattr(rs, "STAGE_ITEMS", 3)
    Cut(monkeypatch, after=2, before_send=True)
    with pytest.raises(Unavailable):
        client.submit_run("u1", "k", items(8), run_id="big")
    # Then 6 jobs are staged, none claimable, the run invisible, and all of it expiring together
    k = client.k
    assert client.r.llen(k.runjobs("big")) == 6 and queued_ids(client) == []
    assert not client.r.zscore(k.runs, "big") and not client.r.zscore(k.userruns("u1"), "big")
    with pytest.raises(NotFound):
        client.run("big")
    with pytest.raises(NotFound):
        client.job("big/1")
    with pytest.raises(NotFound):
        client.cancel("big/1")
    until = int(client.r.hget(k.run("big"), "stage_until"))
    for key in (k.run("big"), k.runjobs("big"), *(k.job(f"big/{i}") for i in range(1, 7))):
        assert client.r.pexpiretime(key) == until
    assert not client.r.xlen(k.events)  # no event of an unsealed run


def test_a_retry_after_a_timeout_resumes_the_same_run(client, monkeypatch):
    # Given a submission that timed out half way (the 3rd chunk ran, its reply was lost, then more)
    monkeypatch.setattr(rs, "STAGE_ITEMS", 3)
    cut = Cut(monkeypatch, after=2)
    with pytest.raises(Unavailable):
        client.submit_run("u1", "k", items(10), run_id="again")
    # When the same submission is sent again (the connection is back)
    cut.lost = 0
    run = client.submit_run("u1", "k", items(10), run_id="again")
    # Then there is one run of 10 jobs, each queued once
    assert [j.id for j in run.jobs] == [f"again/{i}" for i in range(1, 11)]
    assert (run.counts.total, run.counts.queued) == (10, 10)
    assert sorted(queued_ids(client)) == sorted(j.id for j in run.jobs)
    assert [r.id for r in client.runs()] == ["again"]
    assert client.r.pttl(client.k.job("again/1")) == -1 and client.r.pttl(client.k.run("again")) == -1
    # And a third time returns the sealed run, writing nothing
    n_events = client.r.xlen(client.k.events)
    assert client.submit_run("u1", "k", items(10), run_id="again").id == "again"
    assert client.r.xlen(client.k.events) == n_events and len(queued_ids(client)) == 10


def test_lost_replies_are_retried_by_the_client_without_a_second_run(client, monkeypatch):
    # The first 3 calls' replies are lost (each ran): the client sends each again by itself
    monkeypatch.setattr(rs, "STAGE_ITEMS", 2)
    monkeypatch.setattr(rs, "QUEUE_JOBS", 2)
    Cut(monkeypatch, after=0, lost=3)
    run = client.submit_run("u1", "k", items(7))  # a generated run id
    assert run.counts.total == 7 and len(client.runs()) == 1
    assert sorted(queued_ids(client)) == sorted(j.id for j in run.jobs)
    assert len(job_keys(client)) == 7


def test_the_same_run_id_with_other_items_is_refused(client, monkeypatch):
    monkeypatch.setattr(rs, "STAGE_ITEMS", 2)
    Cut(monkeypatch, after=1, before_send=True)
    with pytest.raises(Unavailable):
        client.submit_run("u1", "k", items(5), run_id="r")
    monkeypatch.setattr(rs, "wait_replicated", real_wait)
    for other, kw in ((items(5, "x"), {}), (items(4), {}), (items(5), {"priority": "interactive"})):
        with pytest.raises(BadInput, match="exists with other items"):
            client.submit_run("u1", "k", other, run_id="r", **kw)
    run = client.submit_run("u1", "k", items(5), run_id="r")
    with pytest.raises(BadInput, match="exists with other items"):
        client.submit_run("u1", "k", items(5, "x"), run_id="r")
    assert run.counts.total == 5 and len(job_keys(client)) == 5


def test_an_unsealed_run_expires_whole(client, monkeypatch):
    monkeypatch.setattr(rs, "STAGE_ITEMS", 2)
    client.writer.stage_ttl_ms = 300
    cut = Cut(monkeypatch, after=1, before_send=True)
    with pytest.raises(Unavailable):
        client.submit_run("u1", "k", items(5), run_id="gone")
    assert job_keys(client)
    time.sleep(0.4)
    assert not job_keys(client) and not client.r.exists(client.k.run("gone"), client.k.runjobs("gone"))
    # and the same id can then be submitted afresh
    cut.lost = 0
    client.writer.stage_ttl_ms = rs.STAGE_TTL_MS
    assert client.submit_run("u1", "k", items(5), run_id="gone").counts.total == 5


def test_queuing_is_chunked_and_anyone_resumes_it(client, monkeypatch):
    # Given a sealed run whose queuing stopped after its first chunk (the submitter died)
    monkeypatch.setattr(rs, "QUEUE_JOBS", 3)
    stage_calls = 1  # 8 items: one staging chunk that seals
    Cut(monkeypatch, after=stage_calls + 1, before_send=True)
    with pytest.raises(Unavailable):
        client.submit_run("u1", "k", items(8), run_id="q", priority="interactive")
    monkeypatch.setattr(rs, "wait_replicated", real_wait)
    # Then the run is visible, 3 of its jobs claimable (the user's interactive turn and its
    # backlog), the rest waiting for the cursor
    assert client.run("q").counts.queued == 8
    assert queued_ids(client) == ["q/1", "q/2", "q/3"]
    assert client.r.hget(client.k.run("q"), "queued_to") == b"3" and client.r.zscore(client.k.runqueue, "q")
    # When the housekeeper's share runs (a pass of at most 2 chunks)
    now = int(client.r.time()[0]) * 1000 + 1000
    assert rs.queue_pending(client.writer, client.retention_s, 0, now, max_calls=1) == 1
    assert queued_ids(client) == [f"q/{i}" for i in range(1, 7)]
    # and the submitter retries: the rest, once each, in item order
    client.submit_run("u1", "k", items(8), run_id="q", priority="interactive")
    assert queued_ids(client) == [f"q/{i}" for i in range(1, 9)]
    assert not client.r.zscore(client.k.runqueue, "q")
    assert all(client.r.pttl(client.k.job(f"q/{i}")) == -1 for i in range(1, 9))


def test_chunk_calls_carry_at_most_the_bounds(client, monkeypatch):
    # Every script call is bounded: at most STAGE_ITEMS items (and STAGE_BYTES of payload) staged,
    # at most QUEUE_JOBS jobs queued (SLOWLOG records every call's arguments)
    monkeypatch.setattr(rs, "STAGE_ITEMS", 250)
    client.r.config_set("slowlog-log-slower-than", 0)
    client.r.config_set("slowlog-max-len", 10000)
    client.r.slowlog_reset()
    big = "x" * (rs.STAGE_BYTES // 3)
    its = items(600) + [{"key": f"b{i}", "payload": {"blob": big}} for i in range(4)]
    client.submit_run("u1", "k", its)
    calls = [e["command"].split() for e in client.r.slowlog_get(10000) if e["command"].startswith(b"EVALSHA")]
    client.r.config_set("slowlog-log-slower-than", 10000)
    sha = {name: client._scripts[name].sha.encode() for name in ("run_submit", "run_queue")}
    stage = [int(c[2]) - 7 for c in calls if c[1] == sha["run_submit"]]
    queue = [c for c in calls if c[1] == sha["run_queue"]]
    # 250, 250, then 100 small + 2 blobs (a third would pass STAGE_BYTES), then the last 2 blobs
    assert stage == [rs.STAGE_ITEMS, rs.STAGE_ITEMS, 102, 2][::-1] or stage == [rs.STAGE_ITEMS, rs.STAGE_ITEMS, 102, 2]
    assert len(queue) == -(-604 // rs.QUEUE_JOBS)


def test_chunks_split_by_payload_bytes():
    enc = [b"x" * 100] * 5 + [b"y" * (rs.STAGE_BYTES + 1)] + [b"z"] * 3
    assert list(rs.chunks(enc, 0)) == [(0, 5), (5, 6), (6, 9)]
    assert list(rs.chunks([b"x"] * (rs.STAGE_ITEMS + 1), 1)) == [(1, rs.STAGE_ITEMS + 1)]


# --- items 6 and 7: skipped jobs in history, skipped_from shown -----------------------------------


def _completed_source(client, user: str, kind: str, payload: dict, jid: str = "old") -> None:
    client.r.hset(client.k.job(jid), mapping={"id": jid, "kind": kind, "user": user, "payload": json.dumps(payload),
                                             "state": "completed", "result": json.dumps({"value": {"text": "done"}})})
    client.r.set(client.k.done(kind, user, input_hash(kind, payload)), jid)


def test_skipped_jobs_are_in_every_history_index_and_name_their_source(client):
    # Given a completed job, and a run of 3 items: 2 unchanged (one of them is the same work), 1 new
    payload = {"section": "1.1"}
    _completed_source(client, "u1", "k", payload)
    its = [{"key": "a", "payload": payload}, {"key": "b", "payload": {"other": 1}}, {"key": "c", "payload": payload}]
    run = client.submit_run("u1", "k", its)
    # Then the skipped ones are in the history under skipped, the user and the kind
    skipped = {run.jobs[0].id, run.jobs[2].id}
    assert {j.id for j in client.history(status=["skipped"]).items} == skipped
    assert client.history(status=["skipped"]).total == 2
    assert skipped <= {j.id for j in client.history(user="u1").items}
    assert skipped <= {j.id for j in client.history(kind="k").items}
    # And skipped_from is in Client.job, job --json's shape, runs show and the job_skipped event
    job = client.job(run.jobs[0].id)
    assert job.state == "skipped" and job.skipped_from == "old" and job.result == {"value": {"text": "done"}}
    assert msgspec.to_builtins(job)["skipped_from"] == "old"
    assert [(j.state, j.skipped_from) for j in client.run(run.id).jobs] == [
        ("skipped", "old"), ("queued", None), ("skipped", "old")]
    assert client.job(run.jobs[1].id).skipped_from is None
    stream = client.r.xrange(client.k.run_events(run.id))  # the run goes on (b is queued): read, not follow
    evs = [e for e in (records.event(i, f) for i, f in stream) if e.type == "job_skipped"]
    assert [(e.job_id, e.skipped_from) for e in evs] == [(run.jobs[0].id, "old"), (run.jobs[2].id, "old")]
    assert all(e.counts.skipped + e.counts.queued == 3 for e in evs)
    # the queue-wide stream carries it too
    bodies = [json.loads(f[b"e"]) for _, f in client.r.xrange(client.k.events)]
    assert [b.get("skipped_from") for b in bodies if b["type"] == "job_skipped"] == ["old", "old"]


def test_a_run_all_skipped_finishes_after_its_skips_and_its_history(client):
    payload = {"section": "2"}
    _completed_source(client, "u1", "k", payload)
    run = client.submit_run("u1", "k", [{"key": "a", "payload": payload}])
    assert run.state == "completed" and run.jobs[0].skipped_from == "old"
    types = [e.type for e in client.events(run.id, since="0")]
    assert types == ["run_started", "job_skipped", "run_finished"]
    assert client.history(status=["skipped"], user="u1").total == 1
