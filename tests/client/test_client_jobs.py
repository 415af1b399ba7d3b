"""Client: plain jobs, run submission checks, the input hash and skip, owns, markdown, errors."""

from __future__ import annotations

import json
import signal

import msgspec
import pytest

from tender_pool.client import BadInput, Client, NotFound, Unavailable
from tender_pool.client.items import input_hash, read_jsonl
from tender_pool.client.models import JobView

pytestmark = pytest.mark.timeout(30)


def test_submit_returns_the_job_and_the_same_id_queues_one(client):
    job = client.submit("u1", "k", {"a": 1}, job_id="j-1", priority="interactive")
    assert isinstance(job, JobView) and (job.id, job.state, job.priority, job.payload) == ("j-1", "queued", "interactive", {"a": 1})
    again = client.submit("u1", "k", {"a": 2}, job_id="j-1")
    assert again.payload == {"a": 1}  # nothing queued the second time
    assert client.r.llen(client.k.ready_hi) == 1
    assert set(msgspec.to_builtins(job)) == set(JobView.__struct_fields__)


def test_submit_refuses_what_can_never_run(client):
    kinds = Client(client.url, prefix="x", kinds=["parse_markdown", "k"])
    for kw, says in (({"job_id": "a b"}, "letters"), ({"after": ["nosuch"]}, "--after nosuch: no such job"),
                     ({"priority": "urgent"}, "priority")):
        with pytest.raises(BadInput, match=says):
            client.submit("u1", "k", {}, **kw)
    with pytest.raises(BadInput, match="user"):
        client.submit("a{b}", "k")
    with pytest.raises(BadInput, match="unknown kind"):
        kinds.submit("u1", "nokind")
    assert not list(client.r.scan_iter(match=client.k.job("*")))


def test_job_cancel_wait_owns(client):
    with pytest.raises(NotFound):
        client.job("nosuch")
    with pytest.raises(NotFound):
        client.cancel("nosuch")
    j = client.submit("u1", "k")
    assert str(client.cancel(j.id)) == "cancelled"
    assert str(client.cancel(j.id)) == "already cancelled"
    done = client.wait(j.id, timeout=1)
    assert done.state == "cancelled" and done.error.kind == "cancelled"
    queued = client.submit("u1", "k")
    assert client.wait(queued.id, timeout=0.05).state == "queued"  # past the timeout: as it is now
    client.r.hset(client.k.job(queued.id), "token", "1.abc")
    assert client.owns(queued.id, "1.abc") and not client.owns(queued.id, "2.def") and not client.owns(queued.id, "")


def test_markdown_inline_or_from_the_file(client, tmp_path):
    md = tmp_path / "out.md"
    md.write_text("# Title\n")
    j = client.submit("u1", "parse_markdown", {})
    with pytest.raises(BadInput, match="no result"):
        client.markdown(j.id)
    client.r.hset(client.k.job(j.id), mapping={"state": "completed", "result": json.dumps({"markdown_path": str(md)})})
    assert client.markdown(j.id) == "# Title\n"
    client.r.hset(client.k.job(j.id), "result", json.dumps({"markdown_path": str(tmp_path / "gone.md")}))
    with pytest.raises(Unavailable, match="not reachable"):
        client.markdown(j.id)
    # kept in Redis beside the job by the slot (attempt 1 completed): read from there, not the file
    client.r.hset(client.k.job(j.id), mapping={"attempts": 1, "result": json.dumps({"markdown_path": "/nowhere"})})
    client.r.set(client.k.markdown(j.id, 1), "inline")
    assert client.markdown(j.id) == "inline"


def test_redis_down_is_unavailable(redis_server):
    c = Client(redis_server.url, prefix="d", socket_timeout=1)
    redis_server.stop(signal.SIGKILL)
    for call in (lambda: c.job("x"), lambda: c.submit("u1", "k"), lambda: c.run("r1"), lambda: next(c.events("r1")),
                 lambda: c.runs(), lambda: c.history(), lambda: c.status()):
        with pytest.raises(Unavailable):
            call()


def test_input_hash_is_canonical_and_follows_the_file_bytes(tmp_path):
    f = tmp_path / "a.doc"
    f.write_bytes(b"one")
    h1 = input_hash("parse_markdown", {"file": str(f), "opts": {"b": 1, "a": 2}})
    assert h1 == input_hash("parse_markdown", {"opts": {"a": 2, "b": 1}, "file": str(f)})  # key order
    assert h1 != input_hash("other", {"file": str(f), "opts": {"b": 1, "a": 2}})  # the kind
    link = tmp_path / "b.doc"
    link.symlink_to(f)
    f.write_bytes(b"two")
    h2 = input_hash("parse_markdown", {"file": str(f), "opts": {"a": 2, "b": 1}})
    assert h2 != h1  # the bytes, not the name
    assert input_hash("parse_markdown", {"file": str(tmp_path / "none"), "opts": {}}) == ""  # unreadable: no skip


def test_items_from_jsonl_name_the_line(tmp_path):
    good = [b'{"key": "1.1", "payload": {"a": 1}}\n', b"\n", b'{"key": "1.2"}\n']
    items = read_jsonl(good)
    assert [(i.key, i.payload) for i in items] == [("1.1", {"a": 1}), ("1.2", {})]
    for lines, says in (
        ([b'{"key": "1"}', b'{"key": "2"}', b'{"key": "1"}'], "line 3: key '1' repeats line 1"),
        ([b'{"key": "1"}', b"not json"], "line 2: not a JSON object"),
        ([b'{"key": "1", "payload": [1]}'], "line 1"),
        ([b'{"payload": {}}'], "line 1"),
        ([b'{"key": "a{b}"}'], "line 1: key"),
        ([b'{"key": "1", "extra": 2}'], "line 1"),
        ([], "no items"),
        ([b"\n", b"  \n"], "no items"),
    ):
        with pytest.raises(BadInput, match=says):
            read_jsonl(lines)


def test_submit_run_checks_items_before_any_write(client):
    for items, says in (([], "no items"), ([{"key": "a"}, {"key": "a"}], "item 2: key 'a' repeats item 1"),
                        ([{"key": "a", "payload": "x"}], "item 1"), ([{"key": ""}], "item 1: key")):
        with pytest.raises(BadInput, match=says):
            client.submit_run("u1", "k", items)
    with pytest.raises(BadInput, match="max_parallel"):
        client.submit_run("u1", "k", [{"key": "a"}], max_parallel=-1)
    assert not client.r.exists(client.k.runs)


def test_submit_run_shape_and_skip_of_unchanged_input(client):
    # Given a completed job whose input hash is recorded as done
    payload = {"section": "1.1", "opts": {"x": 1}}
    h = input_hash("k", payload)
    client.r.hset(client.k.job("old"), mapping={"id": "old", "kind": "k", "user": "u1", "payload": json.dumps(payload),
                                                 "state": "completed", "result": json.dumps({"value": {"text": "done"}})})
    client.r.set(client.k.done("k", "u1", h), "old")
    # When a run has that item again, and a new one
    run = client.submit_run("u1", "k", [{"key": "1.1", "payload": payload}, {"key": "1.2", "payload": {"s": 2}}])
    # Then the first is skipped with the old result, the second queued
    assert msgspec.to_builtins(run).keys() == {"id", "user", "kind", "state", "created_at", "finished_at", "counts", "jobs"}
    assert [(j.key, j.state) for j in run.jobs] == [("1.1", "skipped"), ("1.2", "queued")]
    assert (run.counts.total, run.counts.skipped, run.counts.queued) == (2, 1, 1)
    skipped = client.record(run.jobs[0].id)
    assert skipped.skipped_from == "old" and skipped.result == {"value": {"text": "done"}}
    assert skipped.input_hash == h
    # With overwrite nothing is skipped; another user never skips on u1's work
    again = client.submit_run("u1", "k", [{"key": "1.1", "payload": payload}], overwrite=True)
    assert again.jobs[0].state == "queued"
    other = client.submit_run("u2", "k", [{"key": "1.1", "payload": payload}])
    assert other.jobs[0].state == "queued"


def test_runs_list_newest_first_by_user_and_state(client):
    a = client.submit_run("u1", "k", [{"key": "a"}])
    b = client.submit_run("u2", "k", [{"key": "b"}])
    c = client.submit_run("u1", "k", [{"key": "c"}])
    client.cancel_run(c.id)
    assert [r.id for r in client.runs()] == [c.id, b.id, a.id]
    assert [r.id for r in client.runs(user="u1")] == [c.id, a.id]
    assert [r.id for r in client.runs(state="cancelled")] == [c.id]
    assert [r.id for r in client.runs(limit=1)] == [c.id]


def test_cancel_and_retry_a_run(client):
    run = client.submit_run("u1", "k", [{"key": "a"}, {"key": "b"}])
    with pytest.raises(NotFound):
        client.cancel_run("nosuch")
    res = client.cancel_run(run.id)
    assert (res.outcome, res.cancelled, res.signalled) == ("cancelled", 2, 0)
    assert client.cancel_run(run.id).outcome == "already"
    assert client.run(run.id).state == "cancelled"
    assert client.retry_run(run.id).outcome == "nothing"  # failed ones only by default
    res = client.retry_run(run.id, cancelled=True)
    assert (res.outcome, res.retried, res.state) == ("retried", 2, "running")
    assert [j.state for j in client.run(run.id).jobs] == ["queued", "queued"]


def test_runs_made_in_the_same_millisecond_stay_newest_first(client):
    # several runs a millisecond (a tight loop): the index keeps their order (before: ties by random id)
    made = [client.submit_run("u1", "k", [{"key": "a"}]).id for _ in range(40)]
    assert [r.id for r in client.runs(limit=40)] == made[::-1]
    assert [r.id for r in client.runs(user="u1", limit=40)] == made[::-1]
