"""Retries, final errors, bad payloads, dead letters, input roots, priorities, cancel, timeouts."""

import json
import os
import time


from conftest import wait_until
from tender_pool.slots import groups


def test_retries_then_success_and_then_failure(h):
    h.daemon(workers=2)
    ok = h.submit(payload={"fail_until": 3})
    job = h.wait_state(ok, timeout=20)
    assert job.attempts == 3 and job.tries == 2
    bad = h.submit(payload={"exit": 1})
    job = h.wait_state(bad, states=("failed",), timeout=20)
    assert job.error.kind == "handler_failed" and job.tries == 3 and job.attempts == 3
    garbage = h.submit(payload={"stdout": "not json"})
    job = h.wait_state(garbage, states=("failed",), timeout=20)
    assert job.error.kind == "bad_output" and job.tries == 3
    final = h.submit(payload={"final_error": "encrypted"})
    job = h.wait_state(final, states=("failed",), timeout=20)
    assert job.error.kind == "encrypted" and job.attempts == 1


def test_timeout_kills_group_and_escaped_descendants_and_is_final(h):
    h.daemon(workers=1)
    j = h.submit(kind="slow", payload={"record": str(h.records), "escape": True, "ignore_term": True, "sleep": 60})
    wait_until(lambda: (h.records / f"{j}.escaped").exists(), 15, what="escapees")
    marker = json.loads((h.records / f"{j}.1.start").read_text())["attempt_env"]
    assert len(groups.find_marked("TENDER_POOL_ATTEMPT", marker)) >= 3  # handler, setsid child, double-fork
    job = h.wait_state(j, states=("failed",), timeout=20)
    assert job.error.kind == "timeout" and job.attempts == 1
    wait_until(lambda: not groups.find_marked("TENDER_POOL_ATTEMPT", marker), 5, what="no marked process left")


def test_clean_exit_leaves_no_descendants(h):
    h.daemon(workers=1)
    j = h.submit(payload={"record": str(h.records), "escape": True})
    h.wait_state(j, timeout=20)
    marker = json.loads((h.records / f"{j}.1.start").read_text())["attempt_env"]
    wait_until(lambda: not groups.find_marked("TENDER_POOL_ATTEMPT", marker), 5, what="no marked process left")


def test_undecodable_entries_go_to_dead_letter_and_raw_json_is_adopted(h):
    h.daemon(workers=1)
    ready = h.k.ready_lo
    h.r.lpush(ready, b"\xff\xfe not json")
    h.r.lpush(ready, b'{"kind": "behave", "user": 5}')
    h.r.lpush(ready, json.dumps({"kind": "behave", "user": "raw", "payload": {"echo": "r"}, "id": "rawjob"}))
    dead = h.k.dead
    wait_until(lambda: h.r.llen(dead) == 2, 10, what="2 dead letters")
    reasons = [json.loads(x)["reason"] for x in h.r.lrange(dead, 0, -1)]
    assert all("not a job id and not a valid job message" in r for r in reasons)
    job = h.wait_state("rawjob", timeout=10)
    assert job.result["value"]["echo"] == "r"
    # the slot survived: a normal job still runs
    h.wait_state(h.submit(), timeout=10)


def test_input_roots(h, tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    (root / "a.txt").write_text("x")
    outside = tmp_path / "secret.txt"
    outside.write_text("s")
    os.symlink(outside, root / "link.txt")
    h.daemon(workers=1, input_roots=[str(root)])
    ok = h.wait_state(h.submit(payload={"file": str(root / "a.txt")}), timeout=10)
    assert ok.state.value == "completed"
    for path, kind in ((root / "link.txt", "outside_roots"), (root / ".." / "secret.txt", "outside_roots"),
                       (root / "missing.txt", "file_not_found")):
        job = h.wait_state(h.submit(payload={"file": str(path)}), states=("failed",), timeout=10)
        assert job.error.kind == kind and job.tries == 0, (path, job.error)


def test_interactive_goes_ahead_of_bulk(h):
    h.daemon(workers=1)
    first = h.submit(user="a", payload={"sleep": 1, "record": str(h.records)})
    wait_until(lambda: (h.records / f"{first}.1.start").exists(), 10, what="first start")
    bulk = [h.submit(user=f"b{i}", payload={"record": str(h.records)}) for i in range(3)]
    inter = h.submit(user="c", payload={"record": str(h.records)}, priority="interactive")
    for j in [*bulk, inter]:
        h.wait_state(j, timeout=15)
    t = {j: json.loads((h.records / f"{j}.1.start").read_text())["t"] for j in [*bulk, inter]}
    assert t[inter] < min(t[b] for b in bulk)


def test_interactive_wakes_an_idle_slot_at_once(h):
    h.daemon(workers=1)
    h.wait_state(h.submit(kind="noop"), timeout=10)
    time.sleep(1.2)  # the slot is now blocked on ready:lo
    t0 = time.monotonic()
    j = h.submit(kind="noop", priority="interactive")
    h.wait_state(j, timeout=5)
    assert time.monotonic() - t0 < 0.4


def test_cancel_queued_and_running(h):
    h.daemon(workers=1)
    running = h.submit(user="a", payload={"sleep": 30, "record": str(h.records)})
    wait_until(lambda: (h.records / f"{running}.1.start").exists(), 10, what="start")
    queued = h.submit(user="b")
    out = h.cli("cancel", queued)
    assert out.returncode == 0 and out.stdout.strip() == "cancelled"
    assert h.job(queued).state.value == "cancelled"
    out = h.cli("cancel", running)
    assert out.stdout.strip() == "signalled"
    job = h.wait_state(running, states=("cancelled",), timeout=10)
    assert job.error.kind == "cancelled"


def test_result_files_expire_with_retention(h, tmp_path):
    results = tmp_path / "results"
    old = results / "oldjob"
    old.mkdir(parents=True)
    (old / "attempt-1.md").write_text("x")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    fresh = results / "freshjob"
    fresh.mkdir()
    h.daemon(workers=1, extra=f'results_dir = "{results}"\nresult_retention = 600')
    wait_until(lambda: not old.exists(), 15, what="the expired result directory removed")
    assert fresh.exists()
