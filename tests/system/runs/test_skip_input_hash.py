"""Skip trusts the input hash the completed attempt took of what it read, not the
one taken at submit time (CONTRACT.md, Runs). A file changed between submit and run stores the
hash of its new bytes; a file changed during the attempt fails it (``handler_failed``, retried).
Also noted there: a submission hashes each distinct file once, however many items name it."""

from __future__ import annotations

import os
import textwrap
import time

import msgspec
import pytest

from conftest import PYTHON, wait_until

from tender_pool.client import items as client_items
from tender_pool.slots import inputs
from tender_pool.store import digest

FINAL = ("completed", "partial_success", "failed", "cancelled")

# A command handler that returns the bytes of its payload's file; with ``append_on`` = N it appends
# "+" to the file after reading it in attempt N (a writer racing the attempt).
CAT = """\
import json, sys
job = json.load(sys.stdin)
p = job["payload"]
with open(p["file"]) as f:
    text = f.read()
if p.get("append_on") == job["attempt"]:
    with open(p["file"], "a") as f:
        f.write("+")
print(json.dumps({"text": text}))
"""


def cat_handlers(tmp_path) -> str:
    script = tmp_path / "cat_handler.py"
    script.write_text(CAT)
    return textwrap.dedent(f"""
        [handlers.cat]
        command = ["{PYTHON}", "{script}"]
        timeout = 10
        per_user = 0
        """)


def run_jobs(h, c, run_id: str, timeout: float = 40):
    """The run once final, and its job records in item order."""
    k = h.k
    wait_until(lambda: (h.r.hget(k.run(run_id), "state") or b"").decode() in FINAL, timeout,
               what=f"run {run_id} final")
    return c.run(run_id), [h.job(j.decode()) for j in h.r.lrange(k.runjobs(run_id), 0, -1)]


def text_of(rec) -> str:
    return rec.result["value"]["text"]


@pytest.mark.timeout(120)
def test_a_file_changed_before_its_job_ran_is_never_skipped_back_to_its_old_bytes(h, tmp_path):
    docs = tmp_path / "in"
    docs.mkdir()
    f = docs / "a.txt"
    f.write_text("X")
    h.config(workers=1, handlers=cat_handlers(tmp_path), input_roots=[str(docs)])
    c = h.client()
    items = [{"key": "1", "payload": {"file": str(f)}}]
    first = c.submit_run("u1", "cat", items)  # hashed "X" at submit; no daemon yet: nothing runs
    f.write_text("Y")  # changed before the job runs
    h.daemon()
    run, (rec,) = run_jobs(h, c, first.id)
    assert run.state == "completed" and text_of(rec) == "Y"
    hash_y = client_items.input_hash("cat", items[0]["payload"])
    assert rec.input_hash == hash_y  # what the attempt read, not what was submitted
    k = h.k
    assert h.r.get(k.done("cat", "u1", hash_y)) == rec.id.encode()
    # The step: back to "X" and submit again. Before the fix the item was skipped with Y's result.
    f.write_text("X")
    hash_x = client_items.input_hash("cat", items[0]["payload"])
    assert h.r.get(k.done("cat", "u1", hash_x)) is None
    second = c.submit_run("u1", "cat", items)
    assert second.counts.skipped == 0
    run, (rec2,) = run_jobs(h, c, second.id)
    assert run.state == "completed" and text_of(rec2) == "X" and rec2.input_hash == hash_x
    # Unchanged since: skip still works, with the result of the job that read these bytes
    third = c.submit_run("u1", "cat", items)
    skipped = h.job(third.jobs[0].id)
    assert third.counts.skipped == 1 and skipped.skipped_from == rec2.id and text_of(skipped) == "X"


@pytest.mark.timeout(120)
def test_a_file_changed_during_the_attempt_fails_it_retried_and_stores_what_the_retry_read(h, tmp_path):
    docs = tmp_path / "in"
    docs.mkdir()
    f = docs / "a.txt"
    f.write_text("X")
    h.daemon(workers=1, handlers=cat_handlers(tmp_path), input_roots=[str(docs)])
    c = h.client()
    payload = {"file": str(f), "append_on": 1}  # attempt 1 reads "X", then the file becomes "X+"
    run, (rec,) = run_jobs(h, c, c.submit_run("u1", "cat", [{"key": "1", "payload": payload}]).id)
    assert run.state == "completed", rec
    assert (rec.attempts, rec.tries) == (2, 1) and text_of(rec) == "X+", rec
    assert rec.input_hash == client_items.input_hash("cat", payload)  # of "X+", the bytes attempt 2 read
    changed = h.daemons[0].log_events("input_changed", job_id=rec.id)
    assert len(changed) == 1 and str(f) in changed[0]["message"], changed
    retried = [e for e in h.daemons[0].log_events("settled", job_id=rec.id)]
    assert [e["verdict"] for e in retried] == ["retry", "completed"], retried
    # Nothing is stored under the hash of the bytes attempt 1 saw
    f.write_text("X")
    assert h.r.get(h.k.done("cat", "u1", client_items.input_hash("cat", payload))) is None


@pytest.mark.timeout(120)
def test_parse_markdown_stores_the_hash_of_what_it_extracted(h, tmp_path):
    docs = tmp_path / "in"
    docs.mkdir()
    f = docs / "a.html"
    f.write_text("<p>first text</p>")
    h.config(workers=1, input_roots=[str(docs)])
    c = h.client()
    items = [{"key": "1", "payload": {"file": str(f)}}]
    first = c.submit_run("u1", "parse_markdown", items)
    f.write_text("<p>second text</p>")
    h.daemon()
    run, (rec,) = run_jobs(h, c, first.id, timeout=60)
    assert run.state == "completed" and "second text" in c.markdown(rec.id)
    assert rec.input_hash == client_items.input_hash("parse_markdown", items[0]["payload"])
    f.write_text("<p>first text</p>")
    second = c.submit_run("u1", "parse_markdown", items)
    assert second.counts.skipped == 0
    run, (rec2,) = run_jobs(h, c, second.id, timeout=60)
    assert "first text" in c.markdown(rec2.id)


# --- the attempt's record of its input, on a real file system ----------------------------------------


def test_the_attempt_hash_is_the_clients_and_sees_every_kind_of_change(tmp_path):
    f = tmp_path / "a.bin"
    f.write_bytes(b"one")
    payload = {"file": str(f), "opts": {"b": 1.5, "a": "é"}}
    rec = inputs.record("k", payload, str(f))
    assert rec.hash == client_items.input_hash("k", payload) and rec.changed() is None
    stored = msgspec.json.decode(msgspec.json.encode(payload))  # the payload as the slot reads it from Redis
    assert inputs.record("k", stored, str(f)).hash == rec.hash
    with open(f, "ab") as w:  # appended to
        w.write(b"!")
    assert "changed during the attempt" in rec.changed() and str(f) in rec.changed()
    rec = inputs.record("k", payload, str(f))
    tmp = tmp_path / "new"
    tmp.write_bytes(b"one!")  # same bytes, renamed over the path: a new inode
    os.replace(tmp, f)
    assert "inode" in rec.changed()
    rec = inputs.record("k", payload, str(f))
    f.write_bytes(b"two!")  # same size, rewritten in place
    assert rec.changed() is not None
    assert inputs.record("k", {"x": 1}, None).hash == client_items.input_hash("k", {"x": 1})


def test_a_freshly_written_file_is_checked_by_its_bytes_not_its_timestamps(tmp_path):
    f = tmp_path / "a.bin"
    f.write_bytes(b"one")
    rec = inputs.record("k", {"file": str(f)}, str(f))
    assert rec.racy  # written just now: a later write could share the timestamp tick
    f.write_bytes(b"two")
    # As if the rewrite had landed in the same tick: the fingerprint alone would call it unchanged
    same_tick = inputs.Recorded(rec.hash, rec.path, rec.named, inputs.fingerprint(str(f)), rec.file_hash, True)
    assert "bytes differ" in same_tick.changed()
    time.sleep(inputs.RACY_NS / 1e9 + 0.1)  # past the window: the fingerprint is enough
    assert not inputs.record("k", {"file": str(f)}, str(f)).racy


def test_a_file_that_changes_during_every_read_fails_before_the_attempt(tmp_path):
    f = tmp_path / "a.bin"
    f.write_bytes(b"x" * (3 << 20))

    def writer():
        with open(f, "ab") as w:
            w.write(b"y")

    with pytest.raises(inputs.InputChanging, match=str(f)):
        inputs.record("k", {"file": str(f)}, str(f), each_chunk=writer)


# --- the submitter reads each distinct file once -------------------------------------------------------


def test_a_submission_hashes_each_distinct_file_once(h, tmp_path, monkeypatch):
    big, other = tmp_path / "big.bin", tmp_path / "other.bin"
    big.write_bytes(b"b" * (2 << 20))
    other.write_bytes(b"o")
    link = tmp_path / "link.bin"
    link.symlink_to(big)
    expected = {str(p): client_items.input_hash("k", {"file": str(p)}) for p in (big, other, link)}
    reads: list[str] = []
    real = digest.file_sha256

    def counting(path, *a, **kw):
        reads.append(path)
        return real(path, *a, **kw)

    monkeypatch.setattr(digest, "file_sha256", counting)
    h.config()
    c = h.client()
    items = [{"key": f"b{i}", "payload": {"file": str(big)}} for i in range(20)]
    items += [{"key": "l", "payload": {"file": str(link)}}, {"key": "o", "payload": {"file": str(other)}},
              {"key": "n", "payload": {"n": 1}}]
    run = c.submit_run("u1", "k", items)
    assert sorted(reads) == sorted([str(big), str(other)])  # 22 items naming a file, 2 files: 2 reads
    recs = {j.key: h.job(j.id) for j in run.jobs}
    assert all(recs[f"b{i}"].input_hash == expected[str(big)] for i in range(20))
    assert recs["l"].input_hash == expected[str(link)] and recs["o"].input_hash == expected[str(other)]
    assert recs["n"].input_hash == client_items.input_hash("k", {"n": 1})
